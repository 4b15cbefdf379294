r"""Translates a file (or stdin) with a trained fastmt model, in input order; scores and times it.

    python decode.py --workdir runs/quickstart --input src.txt --output hyp.txt --reference ref.txt \
        --algorithm pgj --block_size 3 --metrics_json metrics.json
    echo "In the beginning God created the heavens and the earth." | \
        python decode.py --workdir runs/quickstart --input - --output - --speed_sentences 0
"""

import dataclasses
import os
import sys

from absl import app, flags, logging

from fastmt import cli, decode_lib
from fastmt.data import corpus
from fastmt.translate import DecodeSettings

FLAGS = flags.FLAGS
flags.DEFINE_string('workdir', None, 'A train.py work directory (checkpoints, spm.model, model_config.json).')
flags.DEFINE_string('input', '-', 'Source file, one sentence per line; - for stdin.')
flags.DEFINE_string('output', '-', 'Hypothesis file; - for stdout.')
flags.DEFINE_string('reference', None, 'Reference file: prints sacreBLEU BLEU and chrF with signatures.')
flags.DEFINE_enum('algorithm', 'greedy', ['greedy', 'beam', 'pj', 'pgj', 'hgj'], 'Decoding algorithm.')
flags.DEFINE_integer('beam_size', 4, 'Beam size for --algorithm=beam.')
flags.DEFINE_float('alpha', 0.6, 'Beam search length penalty.')
flags.DEFINE_integer('block_size', 3, 'Jacobi block size b (pgj, hgj).')
flags.DEFINE_integer('parallel_length', 0, 'HGJ parallel length l (0 = the output cap).')
flags.DEFINE_enum('jacobi_init', 'pad', ['pad', 'bigram'], 'Jacobi guesses for new positions: pad (the paper\'s) '
                  'or bigram (the most frequent successor in the training targets; exact either way).')
flags.DEFINE_enum('projection', 'dense', ['dense', 'clustered'], 'Output projection.')
flags.DEFINE_string('clusters', None, 'Clusters directory for --projection=clustered '
                    '(made by python -m fastmt.clusters_lib; default <workdir>/clusters/<direction>).')
flags.DEFINE_string('direction', 'en_de', 'Language direction: the default --clusters path, and the tag of '
                    '--tag_inputs.')
flags.DEFINE_bool('tag_inputs', False, 'Multilingual models: prefix every input line with the target-language '
                  'tag of --direction (<2de> for en_de).')
flags.DEFINE_enum('dtype', 'float32', ['float32', 'bfloat16'],
                  'Inference precision: bfloat16 weights/activations, float32 softmax and logits.')
flags.DEFINE_integer('batch_size', 32, 'Sentences per batch.')
flags.DEFINE_integer('speed_sentences', 100, 'Sentences timed one by one for ms/sentence (0 = skip).')
flags.DEFINE_enum('input_errors', 'strict', ['strict', 'replace'],
                  'Invalid UTF-8 in the input: strict = error naming the line; replace = U+FFFD.')
flags.DEFINE_string('metrics_json', None, 'Write every printed figure to this JSON file.')
flags.DEFINE_string('ddgviz', None, 'Directory for DDGviz traces (PNG + HTML) of the first sentences.')
flags.DEFINE_integer('ddgviz_sentences', 3, 'How many sentences --ddgviz draws.')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  logging.set_verbosity(logging.WARNING)
  settings = DecodeSettings(FLAGS.algorithm, beam_size=FLAGS.beam_size, alpha=FLAGS.alpha,
                            block_size=FLAGS.block_size, parallel_length=FLAGS.parallel_length,
                            jacobi_init=FLAGS.jacobi_init)
  sources = decode_lib.read_input(FLAGS.input, FLAGS.input_errors)
  if FLAGS.tag_inputs:
    sources = corpus.tag_sources(sources, FLAGS.direction)
  references = decode_lib.read_input(FLAGS.reference, 'replace') if FLAGS.reference else None
  clusters_dir = None
  if FLAGS.projection == 'clustered':
    clusters_dir = FLAGS.clusters or os.path.join(FLAGS.workdir, 'clusters', FLAGS.direction)
  translator = decode_lib.load_translator(FLAGS.workdir, settings, clusters_dir, FLAGS.dtype)
  hypotheses, report = decode_lib.translate_and_measure(translator, sources, references, FLAGS.batch_size,
                                                        FLAGS.speed_sentences)
  decode_lib.write_lines(FLAGS.output, hypotheses)
  print(decode_lib.format_report(report), file=sys.stderr)
  if FLAGS.metrics_json:
    decode_lib.write_metrics_json(FLAGS.metrics_json, report,
                                  {'settings': dataclasses.asdict(settings), 'dtype': FLAGS.dtype})
  if FLAGS.ddgviz:
    from fastmt import ddgviz  # pylint: disable=g-import-not-at-top
    ddgviz.draw_sentences(translator, sources[:FLAGS.ddgviz_sentences], settings, FLAGS.ddgviz)


if __name__ == '__main__':
  flags.mark_flags_as_required(['workdir'])
  app.run(cli.exit_on_user_error(main), flags_parser=cli.parse_flags_or_exit)
