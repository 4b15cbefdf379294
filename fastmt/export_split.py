r"""Writes one split of a work directory's dataset as plain text files, for decode.py and other tools.

    python -m fastmt.export_split --workdir runs/quickstart --split test --output_prefix runs/test
    # -> runs/test.src and runs/test.ref, one sentence per line, in corpus order

Multilingual datasets: `--direction en_fr` keeps that direction's lines; their sources carry the
target-language tag already, so translate them without `decode.py --tag_inputs`.
A sentence holding a line break is written on one line, the break a space (warned, with the count): line i of
the .src file stays line i of the .ref file.
Books 40-43 are in no split, so no export can reach them.
"""

import os

from absl import flags, logging

from fastmt import cli, files, workdir as workdir_lib
from fastmt.data import corpus
from fastmt.decode_lib import one_line
from fastmt.errors import FastmtError, MissingError

FLAGS = flags.FLAGS


def export_split(dataset_config, split: str, output_prefix: str, direction: str = '') -> int:
  """Writes <output_prefix>.src and .ref; returns the number of lines."""
  outputs = [f'{output_prefix}.{suffix}' for suffix in ('src', 'ref')]
  directory = os.path.dirname(os.path.abspath(output_prefix))
  if not os.path.isdir(directory):
    raise MissingError(f'--output_prefix {output_prefix}: no directory {directory}')
  inputs = {os.path.realpath(p) for name in corpus.SPLITS for p in dataset_config.get(f'{name}_files', None) or ()
            if p and isinstance(p, str)}  # any split's own files, not only this one's
  for path in outputs:
    if os.path.isdir(path):
      raise FastmtError(f'{path} is a directory')
    if os.path.realpath(path) in inputs:
      raise FastmtError(f'{path} is one of the dataset\'s own files: writing it would erase it')
  data = corpus.load_split(dataset_config, split)
  if direction:
    data = data.select(direction)
  contents = {}
  for path, lines in zip(outputs, (data.sources, data.targets)):
    # A sentence holding a line break (a tfds dataset's may) would be two lines of one file and one of the other:
    # every later source would meet another sentence's reference. Written on one line, with spaces, and counted.
    flattened = [one_line(line) for line in lines]
    broken = sum(a != b for a, b in zip(lines, flattened))
    if broken:
      logging.warning('%s: %d sentence%s held line breaks, written with spaces in their place', path, broken,
                      's' * (broken > 1))
    contents[path] = ''.join(line + '\n' for line in flattened)
  files.write_all_whole(contents)  # both or neither: a new .src beside an old .ref pairs other sentences
  return len(data.sources)


def define_flags():
  flags.DEFINE_string('workdir', None, 'A train.py work directory (its config names the dataset).')
  flags.DEFINE_string('split', 'test', 'train, validation or test.')
  flags.DEFINE_string('output_prefix', None, 'Writes <prefix>.src and <prefix>.ref.')
  flags.DEFINE_string('direction', '', 'Multilingual datasets: only this direction\'s lines (e.g. en_fr).')


def main(argv):
  del argv  # cli.run refuses positional arguments
  logging.set_verbosity(logging.WARNING)
  config = workdir_lib.load_train_config(FLAGS.workdir)
  count = export_split(config.dataset, FLAGS.split, FLAGS.output_prefix, FLAGS.direction)
  print(f'{count} lines -> {FLAGS.output_prefix}.src, {FLAGS.output_prefix}.ref')


def run():
  cli.run(main, define_flags, required=('workdir', 'output_prefix'))


if __name__ == '__main__':
  run()
