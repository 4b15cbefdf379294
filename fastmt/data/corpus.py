"""Where parallel text comes from: the built-in Bible corpus, a user's own aligned files, or any tfds builder.

Every source yields a `ParallelText` per split: two lists of strings of equal length, in corpus order.
The config block that selects one (see configs/quickstart.py):

    dataset.name = 'bible/en_de'                       # the default, offline
    dataset.name = 'text'                              # aligned files, one sentence per line
    dataset.train_files = ('train.en', 'train.de')     # (source, target) per split
    dataset.name = 'tfds:wmt14_translate/de-en'        # needs internet and a prepared array_record copy
"""

import dataclasses
import logging
import os

import tensorflow_datasets as tfds

from fastmt.data import bible


@dataclasses.dataclass(frozen=True)
class ParallelText:
  sources: list[str]
  targets: list[str]

  def __post_init__(self):
    if len(self.sources) != len(self.targets):
      raise ValueError(f'{len(self.sources)} source lines but {len(self.targets)} target lines')

  def __len__(self):
    return len(self.sources)


def read_lines(path: str, errors: str = 'strict') -> list[str]:
  """Reads a UTF-8 text file, one sentence per line, keeping empty lines (they are sentences too).

  With errors='strict' an invalid byte raises a ValueError that names the file and line; errors='replace'
  substitutes U+FFFD (documented, for messy user data).
  """
  with open(path, 'rb') as f:
    return decode_lines(f.read(), path, errors)


def decode_lines(data: bytes, name: str, errors: str = 'strict') -> list[str]:
  """Splits UTF-8 bytes into lines as read_lines does; `name` labels errors ('stdin', a path)."""
  raw_lines = data.split(b'\n')
  if raw_lines and raw_lines[-1] == b'':
    raw_lines.pop()  # the newline that ends the last line does not start another sentence
  lines = []
  for number, raw in enumerate(raw_lines, start=1):
    try:
      lines.append(raw.decode('utf-8', errors=errors).rstrip('\r'))
    except UnicodeDecodeError as e:
      raise ValueError(f'{name}:{number}: invalid UTF-8 ({e.reason} at byte {e.start}); '
                       'fix the file or pass --input_errors=replace') from None
  return lines


def load_split(dataset_config, split: str) -> ParallelText:
  """Loads one split ('train', 'validation' or 'test') of the dataset the config names."""
  name = dataset_config.name
  if name.startswith('bible/'):
    return _load_tfds(bible.Bible(config=name.split('/', 1)[1], data_dir=_data_dir(dataset_config)),
                      split, 'source', 'target')
  if name == 'text':
    files = dataset_config.get(f'{split}_files')
    if not files:
      raise ValueError(f"dataset.name='text' needs dataset.{split}_files = (source_path, target_path)")
    return ParallelText(read_lines(files[0]), read_lines(files[1]))
  if name.startswith('tfds:'):
    builder = tfds.builder(name[len('tfds:'):], data_dir=_data_dir(dataset_config))
    keys = builder.info.supervised_keys
    if not keys:
      raise ValueError(f'{name} has no supervised (source, target) keys; use dataset.name="text"')
    source_key, target_key = keys
    if dataset_config.get('reverse', False):
      source_key, target_key = target_key, source_key
    return _load_tfds(builder, split, source_key, target_key)
  raise ValueError(f"Unknown dataset.name {name!r}: expected 'bible/<pair>', 'text' or 'tfds:<builder>'")


def _data_dir(dataset_config):
  return os.path.expanduser(dataset_config.get('data_dir') or os.path.join(bible.cache_dir(), 'tfds'))


def _load_tfds(builder, split, source_key, target_key) -> ParallelText:
  builder.download_and_prepare(file_format='array_record')
  source = builder.as_data_source(split=split)
  sources, targets = [], []
  for i in range(len(source)):
    example = source[i]
    sources.append(_text(example[source_key]))
    targets.append(_text(example[target_key]))
  logging.info('Loaded %s/%s: %d pairs', builder.name, split, len(sources))
  return ParallelText(sources, targets)


def _text(value) -> str:
  return value.decode('utf-8') if isinstance(value, bytes) else str(value)
