"""Where parallel text comes from: the built-in Bible corpus, a user's own aligned files, or any tfds builder.

Every source yields a `ParallelText` per split: two lists of strings of equal length, in corpus order.
The config block that selects one (see configs/quickstart.py):

    dataset.name = 'bible/en_de'                       # the default, offline
    dataset.name = 'text'                              # aligned files, one sentence per line
    dataset.train_files = ('train.en', 'train.de')     # (source, target) per split
    dataset.name = 'tfds:wmt14_translate/de-en'        # needs internet and a prepared array_record copy
    dataset.name = 'bible/en_de+en_fr+en_es+en_ru'     # multilingual: one model, a target-language tag

A multilingual dataset concatenates its pairs' splits (pair by pair, each in corpus order) and starts every
source with the tag of its target language, `<2de> In the beginning ...`; the tags are single SentencePiece
pieces (user-defined symbols), and `ParallelText.directions` says which pair each line belongs to.
"""

import dataclasses
import itertools
import logging
import os

import tensorflow_datasets as tfds

from fastmt.data import bible
from fastmt.data.tokenizer import has_visible_text
from fastmt.errors import FastmtError, MissingError

logger = logging.getLogger(__name__)  # named 'fastmt.<module>': users set its level or handlers by name

SPLITS = ('train', 'validation', 'test')
UTF8_BOM = b'\xef\xbb\xbf'


@dataclasses.dataclass(frozen=True)
class ParallelText:
  sources: list[str]
  targets: list[str]
  directions: list[str] | None = None  # per line, e.g. 'en_de' (multilingual datasets); None = one direction

  def __post_init__(self):
    if len(self.sources) != len(self.targets):
      raise FastmtError(f'{len(self.sources)} source lines but {len(self.targets)} target lines')
    if self.directions is not None and len(self.directions) != len(self.sources):
      raise FastmtError(f'{len(self.sources)} lines but {len(self.directions)} directions')

  def __len__(self):
    return len(self.sources)

  def select(self, direction: str) -> 'ParallelText':
    """The lines of one direction of a multilingual dataset; a one-direction dataset (no directions recorded)
    is an error: --direction is for multilingual sets."""
    if self.directions is None:
      raise FastmtError(f'this dataset has one direction; --direction {direction!r} selects nothing')
    keep = [i for i, d in enumerate(self.directions) if d == direction]
    if not keep:
      raise FastmtError(f'no {direction!r} lines; the dataset has {sorted(set(self.directions))}')
    return ParallelText([self.sources[i] for i in keep], [self.targets[i] for i in keep], [direction] * len(keep))


  def head(self, count: int) -> 'ParallelText':
    """The first `count` lines; of a multilingual dataset, taken from each direction in turn (its split is one
    direction after another: the first lines alone were all of its first direction)."""
    if self.directions is None:
      return ParallelText(self.sources[:count], self.targets[:count])
    by_direction = {}
    for i, direction in enumerate(self.directions):
      by_direction.setdefault(direction, []).append(i)
    in_turn = [i for row in itertools.zip_longest(*by_direction.values()) for i in row if i is not None]
    keep = sorted(in_turn[:count])  # in the split's order
    return ParallelText([self.sources[i] for i in keep], [self.targets[i] for i in keep],
                        [self.directions[i] for i in keep])


def language_tag(direction: str) -> str:
  """'en_de' -> '<2de>': the token that tells a multilingual model which language to produce."""
  return f'<2{direction.split("_")[-1]}>'


def bible_directions(dataset_config) -> list[str]:
  """['en_de', 'en_fr'] for 'bible/en_de+en_fr'; [] for datasets that are not multilingual Bible sets."""
  name = dataset_config.name
  if not name.startswith('bible/') or '+' not in name:
    return []
  return name.split('/', 1)[1].split('+')


def language_tags(dataset_config) -> list[str]:
  """The tags a multilingual dataset's tokenizer must keep as single pieces ([] otherwise)."""
  return [language_tag(d) for d in bible_directions(dataset_config)]


def tag_sources(sources: list[str], direction: str, tokenizer=None) -> list[str]:
  """Prefixes the sources that have something to translate (has_visible_text) with the direction's tag; a
  blank line, or one of only invisible characters, stays as it is (a tag alone would be translated into an
  invented sentence). How to translate with a multilingual model from Python:
  model.translate(corpus.tag_sources(lines, 'en_de', model.tokenizer)). With the model's tokenizer, a direction
  whose tag its vocabulary lacks (a typo, a direction it was not trained on) is an error, as decode.py
  --tag_inputs' is: spelled as ordinary pieces, the tag was translated as text, without a word."""
  tag = language_tag(direction)
  check_tag(tag, direction, tokenizer)
  return [f'{tag} {s}' if has_visible_text(s) else s for s in sources]


def check_tag(tag: str, direction: str, tokenizer, flag: str = 'tag_sources') -> None:
  """A FastmtError when `tokenizer` (None: not checked) has no single piece for a direction's tag."""
  if tokenizer is not None and not tokenizer.has_piece(tag):
    raise FastmtError(f'{flag}: the vocabulary has no {tag} symbol, so this model was not trained to translate '
                      f'{direction} (a multilingual model keeps one tag per direction)')


def read_lines(path: str, errors: str = 'strict') -> list[str]:
  """Reads a UTF-8 text file, one sentence per line, keeping empty lines (they are sentences too).

  With errors='strict' an invalid byte raises a FastmtError that names the file and line; errors='replace'
  substitutes U+FFFD (documented, for messy user data). A missing file is a MissingError naming it.
  """
  if not os.path.exists(path):
    raise MissingError(f'{path}: no such file')
  if os.path.isdir(path):
    raise FastmtError(f'{path} is a directory, not a text file')  # streams (a FIFO, <(zcat x.gz)) are read
  with open(path, 'rb') as f:
    return decode_lines(f.read(), path, errors)


# Files that are not text at all, by their first bytes: invalid UTF-8, but dropping the invalid bytes (iconv -c)
# would leave garbage, so the error says what they are instead.
_NOT_TEXT = ((b'\x1f\x8b', 'gzip-compressed: decompress it first (zcat FILE > FILE.txt)'),
             (b'BZh', 'bzip2-compressed: decompress it first (bzcat FILE > FILE.txt)'),
             (b'\xfd7zXZ\x00', 'xz-compressed: decompress it first (xzcat FILE > FILE.txt)'),
             (b'PK\x03\x04', 'a zip archive: extract the text file from it'),
             (b'\xff\xfe', 'UTF-16 (little-endian, by its byte order mark): convert it (iconv -f utf-16 -t utf-8)'),
             (b'\xfe\xff', 'UTF-16 (big-endian, by its byte order mark): convert it (iconv -f utf-16 -t utf-8)'))


def not_text_hint(head: bytes) -> str | None:
  """What a file whose first bytes are `head` is, when it is a compressed file, an archive or UTF-16, and how to
  get its text; None for anything else."""
  for magic, what in _NOT_TEXT:
    if head.startswith(magic):
      return f'the file is {what}'
  return None


def check_line(text: str, name: str, number: int) -> str:
  """text (line `number` of `name`, its line break removed) when it can be text; a FastmtError for NUL
  characters, which valid UTF-8 allows but text never holds: a UTF-16 file without a byte order mark (every
  other byte 0) read as NUL-interleaved garbage."""
  if '\x00' in text:
    raise FastmtError(f'{name}:{number}: holds NUL characters: the file is likely UTF-16 without a byte order '
                      'mark (convert it: iconv -f utf-16le -t utf-8) or not text at all')
  return text


def check_not_cr_only(line: str, name: str) -> None:
  """A FastmtError when the one line of a whole input holds a carriage return: old Mac line endings (CR alone).
  Only '\\n' ends a line, so such a file reads as one line, cut to the model's length, and every sentence after
  the first few was lost with a warning that said "truncated". A stray '\\r' inside one line of many is text,
  kept as before."""
  if '\r' in line:
    raise FastmtError(f"{name}: one line holding carriage returns (\\r): the file's lines end in CR only (old Mac "
                      "line endings), and only \\n (or \\r\\n) ends a line; convert it: tr '\\r' '\\n' < FILE > "
                      'FILE.txt')


def decode_lines(data: bytes, name: str, errors: str = 'strict') -> list[str]:
  """Splits UTF-8 bytes into lines as read_lines does; `name` labels errors ('stdin', a path).

  A UTF-8 byte order mark at the start (Windows editors write one) is not text and is dropped: kept, it would
  glue itself to the first word of line 1 (a reference's first word would then never match in BLEU).
  """
  if data.startswith(UTF8_BOM):
    data = data[len(UTF8_BOM):]
  raw_lines = data.split(b'\n')
  if raw_lines and raw_lines[-1] == b'':
    raw_lines.pop()  # the newline that ends the last line does not start another sentence
  lines = []
  for number, raw in enumerate(raw_lines, start=1):
    try:
      text = raw.decode('utf-8', errors=errors)
    except UnicodeDecodeError as e:
      fix = not_text_hint(data) or 'fix the file (e.g. iconv -f utf-8 -t utf-8 -c drops invalid bytes)'
      raise FastmtError(f'{name}:{number}: invalid UTF-8 ({e.reason} at byte {e.start}); {fix}') from None
    lines.append(check_line(text.rstrip('\r'), name, number))
  if len(lines) == 1:
    check_not_cr_only(lines[0], name)
  return lines


def load_split(dataset_config, split: str) -> ParallelText:
  """Loads one split ('train', 'validation' or 'test') of the dataset the config names."""
  name = dataset_config.name
  # tfds datasets (the Bible's too) also take its split strings, 'test[:200]' or 'train+validation'.
  parts = [split] if name == 'text' else [part.split('[')[0] for part in split.split('+')]
  if not all(part in SPLITS for part in parts):
    raise FastmtError(f'unknown split {split!r}: expected one of {", ".join(SPLITS)}'
                      + ('' if name == 'text' else " (or a tfds split string such as 'test[:200]')"))
  check_dataset_name(dataset_config)
  directions = bible_directions(dataset_config)
  if directions:
    parts = [_load_tfds(bible.Bible(config=d, data_dir=_data_dir(dataset_config)), split, 'source', 'target')
             for d in directions]
    return ParallelText([s for d, p in zip(directions, parts) for s in tag_sources(p.sources, d)],
                        [t for p in parts for t in p.targets],
                        [d for d, p in zip(directions, parts) for _ in range(len(p))])
  reverse = dataset_config.get('reverse', False)
  if name.startswith('bible/'):
    text = _load_tfds(bible.Bible(config=name.split('/', 1)[1], data_dir=_data_dir(dataset_config)),
                      split, 'source', 'target')
    return ParallelText(text.targets, text.sources) if reverse else text
  if name == 'text':
    text = _load_text_files(dataset_config, split)
    return ParallelText(text.targets, text.sources) if reverse else text
  if name.startswith('tfds:'):
    builder = tfds.builder(name[len('tfds:'):], data_dir=_data_dir(dataset_config))
    keys = builder.info.supervised_keys
    if not keys:
      raise FastmtError(f'{name} has no supervised (source, target) keys; use dataset.name="text"')
    source_key, target_key = keys
    if reverse:
      source_key, target_key = target_key, source_key
    return _load_tfds(builder, split, source_key, target_key)
  raise AssertionError(name)  # check_dataset_name refused it


def check_dataset_name(dataset_config) -> None:
  """An unknown kind of dataset.name or Bible pair is an error here, before anything is loaded or written."""
  name = dataset_config.name
  if not isinstance(name, str) or not (name == 'text' or name.startswith(('bible/', 'tfds:'))):
    raise FastmtError(f"Unknown dataset.name {name!r}: expected 'bible/<pair>', 'text' or 'tfds:<builder>'")
  for direction in bible_directions(dataset_config) or ([name.split('/', 1)[1]] if name.startswith('bible/') else []):
    if direction not in bible.PAIRS:
      raise FastmtError(f'unknown Bible pair {direction!r} in dataset.name {name!r}: the built-in pairs are '
                        f'{", ".join(bible.PAIRS)}')
  reverse = dataset_config.get('reverse', False)
  if not isinstance(reverse, bool):
    raise FastmtError(f'dataset.reverse must be True or False, got {reverse!r}')
  if reverse and bible_directions(dataset_config):
    raise FastmtError(f'dataset.reverse swaps the two sides of one pair; {name!r} is several directions, each '
                      'with its language tag on the source (train the reverse pairs as their own dataset)')


def training_split(dataset_config) -> str:
  """The split a model trains on: config.dataset.train_split, 'train' or a tfds slice of it ('train[:8000]',
  'train[:10%]') for a quicker run on part of the data. Its vocabulary, bigram drafts and clusters come from the
  same part. Anything that reaches into validation or test is refused: those are what the model is scored on."""
  check_dataset_name(dataset_config)
  return check_training_split(dataset_config.get('train_split', 'train') or 'train', dataset_config.name)


def check_training_split(split: str, dataset_name: str, what: str = 'dataset.train_split') -> str:
  """split if it is 'train' or a slice of it (what training, distillation and the tables built from training
  data may read), else a FastmtError naming `what`."""
  slices = split.split('+')
  if not all(part.split('[')[0].strip() == 'train' for part in slices):
    raise FastmtError(f'{what} must be the training split or a slice of it, e.g. \'train\' or '
                      f"'train[:8000]'; got {split!r}")
  if split != 'train' and dataset_name == 'text':
    raise FastmtError(f"{what} {split!r}: name='text' reads whole files; slices are for the Bible "
                      "and tfds datasets (cut the files instead)")
  return split


def _load_text_files(dataset_config, split: str) -> ParallelText:
  """A split of dataset.name='text': dataset.<split>_files = (source_path, target_path), aligned line by line."""
  files = dataset_config.get(f'{split}_files')
  if not files or isinstance(files, str) or len(files) != 2 or not all(files):
    raise FastmtError(f"dataset.name='text' needs dataset.{split}_files = (source_path, target_path), got "
                      f'{tuple(files) if files and not isinstance(files, str) else files!r}')
  sources, targets = read_lines(files[0]), read_lines(files[1])
  if len(sources) != len(targets):
    raise FastmtError(f'the {split} files are not aligned: {files[0]} has {len(sources)} lines, {files[1]} '
                      f'{len(targets)}')
  return ParallelText(sources, targets)


def absolute_path(name):
  """A file or directory name (str or os.PathLike) as an absolute str, read from here; '' stays '' (unset)."""
  if not isinstance(name, (str, os.PathLike)) or not os.fspath(name):
    return name
  return os.path.abspath(os.path.expanduser(os.fspath(name)))


def with_absolute_paths(dataset: dict) -> dict:
  """A dataset block (a dict: config.json's, or a config's to_dict()) with its file and directory names
  absolute, as read from the current directory (train.py records them so; records written before it did
  compare equal to today's). Lists and tuples of files keep their type."""
  dataset = dict(dataset)
  for key, value in dataset.items():
    if key in ('data_dir', 'distilled_dir'):
      dataset[key] = absolute_path(value)
    elif key.endswith('_files') and isinstance(value, (list, tuple)):
      dataset[key] = type(value)(absolute_path(name) for name in value)
  return dataset


def _data_dir(dataset_config):
  return os.path.expanduser(dataset_config.get('data_dir') or os.path.join(bible.cache_dir(), 'tfds'))


def _load_tfds(builder, split, source_key, target_key) -> ParallelText:
  builder.download_and_prepare(file_format='array_record')
  try:
    source = builder.as_data_source(split=split)
  except ValueError as e:  # a slice past the split's end ('test[99999:]') or malformed ('test[:5'): tfds's words
    raise FastmtError(f'split {split!r}: {str(e).splitlines()[0] if str(e) else type(e).__name__}') from None
  sources, targets = [], []
  for i in range(len(source)):
    example = source[i]
    sources.append(_text(example[source_key]))
    targets.append(_text(example[target_key]))
  logger.info('Loaded %s/%s: %d pairs', builder.name, split, len(sources))
  return ParallelText(sources, targets)


def _text(value) -> str:
  return value.decode('utf-8') if isinstance(value, bytes) else str(value)
