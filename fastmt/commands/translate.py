r"""fastmt-translate (and decode.py): translates a file or stdin with a trained model, in input order.

    fastmt-translate --workdir runs/quickstart < src.en > hyp.de
    python decode.py --workdir runs/quickstart --input src.en --output hyp.de --reference ref.de \
        --algorithm pgj --block_size 3 --metrics_json metrics.json
    python decode.py --workdir runs/quickstart --input src.en --output - --speed_sentences 100   # + batch-1 timing

One pass over the input, streamed a chunk at a time; translations are written as soon as every earlier line
is done; a progress bar (or, when stderr is not a terminal, a log line every 30 s) on stderr. Scores with
--reference; times batch-1 decoding only with --speed_sentences N.
"""

import dataclasses
import logging as std_logging
import os
import sys

from absl import flags, logging

from fastmt import cli
from fastmt.errors import FastmtError

DTYPES = ['float32', 'bfloat16', 'int8', 'int8_layers', 'bfloat16_int8', 'bfloat16_int8_layers']
# fastmt.decode_lib.BLEU_TOKENIZERS (a literal, as DTYPES: a test keeps them equal).
BLEU_TOKENIZERS = ['13a', 'intl', 'zh', 'char', 'none', 'ja-mecab', 'ko-mecab']

FLAGS = flags.FLAGS


def define_flags():
  from fastmt.decoding import interleaved, registry  # pylint: disable=g-import-not-at-top
  flags.DEFINE_string('workdir', None, 'A train.py work directory (checkpoints, spm.model, model_config.json).')
  cli.define_checkpoint_flag()
  flags.DEFINE_string('input', '-', 'Source file, one sentence per line; - for stdin.')
  flags.DEFINE_string('output', '-', 'Hypothesis file; - for stdout.')
  flags.DEFINE_string('reference', None, 'Reference file: prints sacreBLEU BLEU and chrF with signatures, and the '
                      'hypothesis / reference length ratio behind BLEU\'s brevity penalty.')
  flags.DEFINE_enum('bleu_tokenize', '13a', BLEU_TOKENIZERS, '--reference: sacreBLEU\'s tokenizer for BLEU: 13a '
                    '(its default) for languages that separate words by spaces; zh for Chinese (13a scores a '
                    'Chinese output about 0 however good); ja-mecab / ko-mecab need sacrebleu[ja] / sacrebleu[ko].')
  flags.DEFINE_string('algorithm', None, f'Decoding algorithm: {", ".join(sorted(registry.ALGORITHMS))}, or one '
                      'registered by --plugins (default: the model\'s own, as validation during training decodes it: '
                      'greedy; ib for an interleaved model, hrt for an HRT one).')
  cli.define_plugins_flag()
  flags.DEFINE_integer('beam_size', None, 'Beam size: --algorithm beam (default 4), ib (default 1 = greedy; '
                       'K > 1 = the multi-word beam search of Algorithm 1) or hrt (b_at, default 1).')
  flags.DEFINE_float('alpha', 0.6, 'Beam search length penalty.')
  flags.DEFINE_integer('chunk_size', 0, '--algorithm hrt: chunk size k (0 = the model\'s own).')
  flags.DEFINE_integer('nat_beam_size', 1, '--algorithm hrt: Skip-AT hypotheses (of --beam_size) that stage II fills.')
  flags.DEFINE_integer('dedup_ngram', 0, '--algorithm ib: remove immediately repeated n-grams up to this n '
                       '(the interleaved paper\'s optional deduplication; 0 = off).')
  flags.DEFINE_integer('max_repeats', 0, '--algorithm greedy or hrt: the repetition guard: a row ends at this many '
                       'identical tokens in a row, keeping one (0 = off; 8 was best on the built-in corpus\'s '
                       'validation split, where smaller values also end stutters a model recovers from; hrt counts '
                       'stage I\'s tokens, every k-th word; it changes the output, so the exact decoders do not '
                       'take it).')
  flags.DEFINE_enum('end_rule', 'any', list(interleaved.END_RULES), '--algorithm ib: which steps end a '
                    'hypothesis. any = Algorithm 1\'s (an EOS in any slot); layout = only the combinations a '
                    'training target ends with (words in the first slots, then EOS in every other; the paper '
                    'leaves alternatives open).')
  flags.DEFINE_string('block_size', '3', 'Window width: Jacobi block size b (pgj, hgj); W of --algorithm spec, or '
                      'auto (spec: the fastest here of greedy and W = 2, 3, 4, or 2, 4, 6, 8 with --drafter int8, '
                      'each timed on the work directory\'s validation sentences at --batch_size; the output is '
                      'greedy\'s either way).')
  flags.DEFINE_enum('drafter', 'self', list(registry.DRAFTERS), '--algorithm spec: who guesses the next window: '
                    'self (the model\'s own <mask> slots, in the verifying call; a selfdraft model), model (a '
                    'separate small selfdraft model with the same vocabulary: --drafter_workdir), ngram (what '
                    'followed the last two tokens earlier in the output or the source; any model), int8 (the '
                    'model\'s own int8 copy drafts W - 1 tokens one by one; any float model, no training), bigram '
                    'or pad. '
                    'The output equals greedy\'s whatever the drafter.')
  flags.DEFINE_integer('ngram_memory', 0, '--drafter ngram: also draft from the last N tokens of the outputs of '
                       'the input\'s earlier sentences (names and phrases a text repeats; 0 = the sentence\'s own '
                       'output and source only). --ddgviz draws and --speed_sentences times each sentence on '
                       'its own, without the memory.')
  flags.DEFINE_integer('ngram_pool', 0, '--algorithm spec (--drafter ngram, bigram or pad): also draft from the '
                       'trajectory pool, what the window predicted after each token it was fed, verified or a guess '
                       '(lookahead decoding\'s n-gram pool), keyed on 1 or 2 tokens; 0 = off.')
  flags.DEFINE_string('drafter_workdir', None, '--drafter model: the drafter\'s work directory (a selfdraft model '
                      'sharing this model\'s vocabulary, e.g. configs/selfdraft.py:w4,drafter).')
  flags.DEFINE_integer('parallel_length', 0, 'HGJ parallel length l (0 = the output cap).')
  flags.DEFINE_enum('jacobi_init', 'pad', ['pad', 'bigram'], 'Jacobi guesses for new positions: pad (the '
                    'paper\'s) or bigram (the most frequent successor in the training targets; exact either way).')
  flags.DEFINE_enum('projection', 'dense', ['dense', 'clustered'], 'Output projection.')
  flags.DEFINE_string('clusters', None, 'Clusters directory for --projection=clustered '
                      '(made by fastmt-clusters; default <workdir>/clusters/<direction>).')
  flags.DEFINE_string('direction', 'en_de', 'Language direction: the default --clusters path, and the tag of '
                      '--tag_inputs.')
  flags.DEFINE_bool('tag_inputs', False, 'Multilingual models: prefix every input line with the target-language '
                    'tag of --direction (<2de> for en_de).')
  # fastmt.precision.DTYPES (a literal here: this module does not import jax before --help; a test keeps them equal).
  flags.DEFINE_enum('dtype', 'float32', DTYPES,
                    'Inference precision: bfloat16 weights/activations, float32 sums, softmax and logits (on a CPU '
                    'with AMX faster than float32 for batches, beams and windows); int8 = 8-bit '
                    'weights (per output channel) and activations (per row) in every matrix product, the tied '
                    'embedding too; int8_layers = the same with the embedding/output projection float; '
                    'bfloat16_int8[_layers] = those with bfloat16 activations between the int8 products, for '
                    'GPUs/TPUs (fastmt.quantize, fastmt.precision; any algorithm).')
  flags.DEFINE_bool('float32_kernel', False, 'float32 only: run products of at most 8 rows (a step or window of '
                    'positions at batch 1: greedy, beam, spec, pgj, ib; a batch of up to 8) through fastmt\'s own '
                    'CPU kernel instead of XLA\'s (x86 with AVX-512; elsewhere XLA\'s, said once). The same output up to float '
                    'near ties; measured in docs/BENCHMARKS.md section 8.')
  flags.DEFINE_integer('batch_size', 32, 'Sentences per batch (a short input uses a smaller one).')
  flags.DEFINE_integer('speed_sentences', 0, 'Also time this many sentences one by one at batch 1 '
                       '(ms/sentence, compile excluded; 0 = no timing).')
  flags.DEFINE_enum('input_errors', 'strict', ['strict', 'replace'],
                    'Invalid UTF-8 in the input and the reference: strict = an error naming the line (the '
                    'reference is checked before decoding); replace = U+FFFD, counted in the report.')
  flags.DEFINE_string('metrics_json', None, 'Write every printed figure to this JSON file (\'-\': stdout, when --output is a file).')
  flags.DEFINE_string('ddgviz', None, 'Directory for DDGviz traces (PNG + HTML) of the first sentences: Jacobi '
                      'decoding (pj, pgj, hgj, spec); greedy is drawn as pgj, its exact equal.')
  flags.DEFINE_integer('ddgviz_sentences', 3, 'How many sentences --ddgviz draws.')
  flags.DEFINE_bool('progress', True, 'Show progress on stderr (a bar on a terminal, log lines otherwise).')


def _algorithm() -> str:
  """--algorithm, or the model's own where it is not given: decode.py translates an interleaved or HRT model the
  way the library's TranslationModel.translate and validation do, not with greedy, which such a model refuses."""
  if FLAGS.algorithm is not None:
    return FLAGS.algorithm
  from fastmt import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  from fastmt.decoding import registry  # pylint: disable=g-import-not-at-top
  return registry.default_algorithm(workdir_lib.load_objective(FLAGS.workdir))


def _check_clusters_direction(clusters_dir: str) -> None:
  """A multilingual model's clusters are fitted on one direction's decoder states. Lines tagged beforehand
  (fastmt-export-split --direction en_fr) need no --tag_inputs, and so no --direction: the default's (en_de)
  clusters then projected French outputs, a translation unlike the dense one, without a word. Refused: clusters
  recorded for another of the dataset's directions than the one named, or, with none named, clusters of the
  dataset's other directions beside the default's. (Clusters under other names, notebook 04's C250_K5, and
  the clusters of one-direction models are the user's to choose.)"""
  from fastmt import clusters_lib, workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  from fastmt.data import corpus  # pylint: disable=g-import-not-at-top
  directions = set(corpus.bible_directions(workdir_lib.load_train_config(FLAGS.workdir).dataset))
  if not directions:
    return
  if FLAGS['direction'].present or FLAGS.tag_inputs:  # the direction is named (--tag_inputs tags with it)
    built_for = clusters_lib.built_direction(clusters_dir)
    if built_for in directions and built_for != FLAGS.direction:
      raise FastmtError(f'--clusters {clusters_dir} were built for direction {built_for}, not --direction '
                        f'{FLAGS.direction}')
    return
  if FLAGS.clusters:
    return
  root = os.path.join(FLAGS.workdir, 'clusters')
  built = {clusters_lib.built_direction(os.path.join(root, d)) for d in (os.listdir(root) if os.path.isdir(root)
                                                                       else [])}
  if (built & directions) - {FLAGS.direction}:
    raise FastmtError(f'--projection clustered: {root} holds clusters for {", ".join(sorted(built & directions))}; '
                      'name the direction of the inputs with --direction (its clusters project the outputs)')


def _warn_of_unused_flags(settings) -> None:
  """A warning for each decoding flag given on the command line that these settings do not use."""
  from fastmt.decoding import registry  # pylint: disable=g-import-not-at-top
  given = [name for name in registry.SETTING_ALGORITHMS if FLAGS[name].present]
  for message in registry.ignored_settings(settings, given, flag_prefix='--'):
    logging.warning(message)
  if FLAGS['clusters'].present and FLAGS.projection != 'clustered':
    logging.warning('--clusters has no effect without --projection clustered')
  if FLAGS['direction'].present and not FLAGS.tag_inputs and FLAGS.projection != 'clustered':
    logging.warning('--direction has no effect without --tag_inputs or --projection clustered (it names the tag '
                    'and the clusters)')
  if FLAGS['bleu_tokenize'].present and not FLAGS.reference:
    logging.warning('--bleu_tokenize has no effect without --reference (nothing is scored)')
  if FLAGS['ddgviz_sentences'].present and not FLAGS.ddgviz:
    logging.warning('--ddgviz_sentences has no effect without --ddgviz')


def _check_drafter_workdir(algorithm: str) -> None:
  """--drafter_workdir goes with --algorithm spec --drafter model and nothing else: a mismatch is an error before
  either model loads (a drafter given to greedy would be loaded only to be refused)."""
  wants_drafter = algorithm == 'spec' and FLAGS.drafter == 'model'
  if FLAGS.drafter_workdir and not wants_drafter:
    raise FastmtError(f'--drafter_workdir is the drafter of --algorithm spec --drafter model; here --algorithm is '
                      f'{algorithm}' + (f' with --drafter {FLAGS.drafter}' if algorithm == 'spec' else ''))
  if wants_drafter and not FLAGS.drafter_workdir:
    raise FastmtError('--drafter model needs --drafter_workdir: the work directory of a small selfdraft model with '
                      'this model\'s vocabulary (configs/drafter.py)')
  if FLAGS.drafter_workdir:
    from fastmt import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
    try:  # a path that is not a work directory: said before the model loads, and said to be the drafter's
      workdir_lib.load_model_config(FLAGS.drafter_workdir)
    except FastmtError as e:
      raise FastmtError(f'--drafter_workdir: {e}') from None


def _interleaving_record(settings) -> dict | None:
  """The factorisation an interleaved model decoded with, as --metrics_json records it (its start ids, resolved
  from the vocabulary, are not part of it); None for the other models."""
  if settings.interleaving is None:
    return None
  return {k: v for k, v in dataclasses.asdict(settings.interleaving).items() if k != 'start_ids'}


def main(argv):
  from fastmt import decode_lib  # pylint: disable=g-import-not-at-top
  from fastmt.translate import DecodeSettings  # pylint: disable=g-import-not-at-top
  del argv  # cli.run refuses positional arguments
  logging.set_verbosity(logging.WARNING)
  std_logging.getLogger().setLevel(std_logging.WARNING)
  cli.import_plugins(FLAGS.plugins)  # algorithms and objectives of the user's own, before any name is checked
  from fastmt.decoding import registry  # pylint: disable=g-import-not-at-top
  if FLAGS.algorithm is not None:
    registry.get(FLAGS.algorithm)  # an unknown name: the list of known ones, before the model loads
  from fastmt import width  # pylint: disable=g-import-not-at-top
  auto_width = FLAGS.block_size.strip() == 'auto'
  try:
    block_size = max(width.widths_for(FLAGS.drafter)) if auto_width else int(FLAGS.block_size)
  except ValueError:
    raise FastmtError(f'--block_size must be a whole number or auto, got {FLAGS.block_size!r}') from None
  algorithm = _algorithm()
  settings = DecodeSettings(algorithm, beam_size=FLAGS.beam_size, alpha=FLAGS.alpha,
                            block_size=block_size,
                            parallel_length=FLAGS.parallel_length,
                            jacobi_init=FLAGS.jacobi_init, dedup_ngram=FLAGS.dedup_ngram, end_rule=FLAGS.end_rule,
                            chunk_size=FLAGS.chunk_size, nat_beam_size=FLAGS.nat_beam_size,
                            drafter=FLAGS.drafter, ngram_memory=FLAGS.ngram_memory, ngram_pool=FLAGS.ngram_pool,
                            max_repeats=FLAGS.max_repeats)
  if auto_width:  # refused before the warnings: they said --block_size did nothing, then this refused it
    width.candidate_settings(settings)
  _warn_of_unused_flags(settings)
  # What a warning said does nothing is left out of what decodes: greedy with --beam_size 400 was warned of, then
  # refused for that beam (larger than the vocabulary); --metrics_json records the settings that decoded.
  settings = registry.without_ignored_settings(settings)
  _check_drafter_workdir(algorithm)
  if FLAGS.float32_kernel and FLAGS.dtype != 'float32':
    raise FastmtError(f'--float32_kernel runs float32 products; --dtype is {FLAGS.dtype}')
  # Before the model loads: a mistyped path or setting costs nothing.
  decode_lib.check_paths(FLAGS.input, FLAGS.output, FLAGS.reference, FLAGS.metrics_json, FLAGS.input_errors)
  if FLAGS.projection == 'clustered' and FLAGS.clusters:  # a path the user names must hold clusters (only the
    # default per-direction path falls back to the dense projection: a multilingual model's other directions)
    from fastmt import clusters_lib  # pylint: disable=g-import-not-at-top
    if not os.path.isfile(os.path.join(FLAGS.clusters, clusters_lib.METADATA)):
      raise FastmtError(f'--clusters {FLAGS.clusters}: no clusters there (no {clusters_lib.METADATA}; make them with '
                        'fastmt-clusters)')
  if FLAGS.ddgviz:
    if not os.path.isfile(FLAGS.input):
      raise FastmtError('--ddgviz reads its sentences from --input again after translating: give a file, not '
                        'stdin or a stream')
    if FLAGS.ddgviz_sentences < 0:
      raise FastmtError(f'--ddgviz_sentences must be >= 0, got {FLAGS.ddgviz_sentences}')
    cli.check_output_directory(FLAGS.ddgviz, '--ddgviz')
    for path, flag in ((FLAGS.output, '--output'), (FLAGS.metrics_json, '--metrics_json')):
      if path and path != '-' and os.path.realpath(path) == os.path.realpath(FLAGS.ddgviz):
        raise FastmtError(f'--ddgviz {FLAGS.ddgviz!r} is also {flag}: a directory of drawings cannot be that file; '
                          'choose another directory')
    from fastmt import ddgviz  # pylint: disable=g-import-not-at-top
    if ddgviz.drawn_settings(settings).algorithm != settings.algorithm:
      logging.warning('--ddgviz: --algorithm %s is drawn as %s with --block_size %d (the same output)',
                      settings.algorithm, ddgviz.drawn_settings(settings).algorithm, settings.block_size)
  if FLAGS.batch_size < 1:
    raise FastmtError(f'--batch_size must be >= 1, got {FLAGS.batch_size}')
  if FLAGS.speed_sentences < 0:
    raise FastmtError(f'--speed_sentences must be >= 0 (0 = no batch-1 timing), got {FLAGS.speed_sentences}')
  clusters_dir = None
  if FLAGS.projection == 'clustered':
    clusters_dir = FLAGS.clusters or os.path.join(FLAGS.workdir, 'clusters', FLAGS.direction)
    _check_clusters_direction(clusters_dir)
  chosen = {}  # what --block_size auto chose, for --metrics_json
  if auto_width:  # greedy (width 1) or spec at the width that times fastest here
    choice = decode_lib.load_fastest_spec_translator(
        FLAGS.workdir, settings, FLAGS.batch_size, clusters_dir, FLAGS.dtype, FLAGS.checkpoint, FLAGS.drafter_workdir,
        FLAGS.float32_kernel)
    chosen = {'auto_width': {'width': choice.width, 'batch_size': FLAGS.batch_size,
                             'median_s': {str(w): t for w, t in choice.median_s.items()}}}
    translator = choice.translator
    settings = choice.settings  # what decodes, and what --metrics_json records: greedy's at width 1
    if choice.width == 1 and FLAGS.ddgviz:
      logging.warning('--ddgviz: --block_size auto chose greedy (width 1), which has no parallel calls to draw; '
                      'give a width to draw spec\'s')
  else:
    translator = decode_lib.load_translator(FLAGS.workdir, settings, clusters_dir, FLAGS.dtype, FLAGS.checkpoint,
                                            FLAGS.drafter_workdir, FLAGS.float32_kernel)
  report = decode_lib.translate_file(translator, FLAGS.input, FLAGS.output, FLAGS.reference, FLAGS.batch_size,
                                     FLAGS.speed_sentences, FLAGS.input_errors,
                                     FLAGS.direction if FLAGS.tag_inputs else None, FLAGS.progress,
                                     bleu_tokenize=FLAGS.bleu_tokenize)
  print(decode_lib.format_report(report), file=sys.stderr)
  if FLAGS.metrics_json:
    decode_lib.write_metrics_json(FLAGS.metrics_json, report,
                                  {'settings': {**dataclasses.asdict(settings),  # chunk_size 0: the model's, k
                                                'chunk_size': translator.settings.chunk_size,
                                                # the model's own (h, c), read from its work directory: an IB
                                                # and an IB+SA run were both recorded as interleaving null
                                                'interleaving': _interleaving_record(translator.settings)},
                                   'dtype': FLAGS.dtype, 'float32_kernel': translator.float32_kernel,
                                   'checkpoint': FLAGS.checkpoint, 'step': translator.checkpoint_step,
                                   'drafter_workdir': FLAGS.drafter_workdir,
                                   **chosen})
  if FLAGS.ddgviz and not (auto_width and chosen['auto_width']['width'] == 1):
    from fastmt import ddgviz  # pylint: disable=g-import-not-at-top
    sources = _first_decodable_lines(translator, FLAGS.ddgviz_sentences)
    ddgviz.draw_sentences(translator, sources, settings, FLAGS.ddgviz, FLAGS.ddgviz_sentences)
    lines = [i + 1 for i in translator.decodable(sources)[:FLAGS.ddgviz_sentences]]
    print(f'DDGviz: input line{"s" * (len(lines) != 1)} {", ".join(map(str, lines)) or "(none)"} drawn into '
          f'{FLAGS.ddgviz} (ddgviz_<line>.png and .html)', file=sys.stderr)


def _first_decodable_lines(translator, wanted: int) -> list[str]:
  """The input's lines up to its `wanted`-th that decodes (blank and unreadable ones translate to empty lines
  and have nothing to draw), tagged as they were translated."""
  from fastmt import decode_lib  # pylint: disable=g-import-not-at-top
  from fastmt.data import corpus  # pylint: disable=g-import-not-at-top
  sources, decodable = [], 0
  if wanted < 1:
    return sources
  for line in decode_lib.iter_lines(FLAGS.input, FLAGS.input_errors):
    sources.append(corpus.tag_sources([line], FLAGS.direction)[0] if FLAGS.tag_inputs else line)
    decodable += bool(translator.decodable(sources[-1:]))  # one line at a time: a file of blanks stays linear
    if decodable == wanted:
      break
  return sources


def run():
  cli.run(main, define_flags, required=('workdir',))


if __name__ == '__main__':
  run()
