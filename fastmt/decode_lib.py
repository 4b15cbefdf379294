"""What decode.py does: translate a file (or stdin) in input order, streaming; score it; optionally time it.

One pass by default: lines are read a chunk at a time, translated in length-sorted batches, and written in
input order as soon as every earlier line is done, so memory stays bounded on a file of any size and the
first lines appear before the last are read. Scoring is automatic with a reference; timing at batch 1
(`speed_sentences`) is opt-in, since it decodes those sentences again.
"""

import contextlib
import dataclasses
import errno
import functools
import io
import json
import logging
import os
import stat
import statistics
import sys
import tempfile
import time
from typing import Iterator

import numpy as np
import sacrebleu

from fastmt import few_rows, files, precision, progress, width, workdir as workdir_lib
from fastmt.config import ModelConfig
from fastmt.data import corpus
from fastmt.data.tokenizer import Tokenizer
from fastmt.decoding import drafts, registry
from fastmt.errors import FastmtError, MissingError
from fastmt import translate as translate_lib
from fastmt.translate import DecodeSettings, TranslationStats, Translator, has_visible_text

logger = logging.getLogger(__name__)  # named 'fastmt.<module>': users set its level or handlers by name

@dataclasses.dataclass
class DecodeReport:
  sentences: int
  bleu: float | None
  chrf: float | None
  bleu_signature: str | None
  chrf_signature: str | None
  ms_per_sentence: float | None  # median over speed_sentences sentences at batch 1 (None: not timed)
  sentences_per_s: float  # the translation pass at batch_size, compile time excluded
  words_per_s: float  # source words per second, likewise
  decoder_calls_per_sentence: float
  compile_s: float  # compiling every (batch rows, bucket) shape the pass used
  empty_inputs: int
  truncated_inputs: int
  outputs_at_cap: int
  unreadable_inputs: int = 0  # of the empty inputs, lines in characters the vocabulary lacks only
  empty_outputs: int = 0  # non-empty inputs translated to no text (first token EOS, or pieces of no text)
  outputs_with_unknown: int = 0  # outputs holding <unk>, shown as ' ⁇ ' (TranslationStats')
  wall_s: float = 0.0  # the whole translation pass, reading and writing included, compile time included
  padding_rows: int = 0  # rows that only padded a batch to its static shape (done from the start)
  replaced_input_lines: int = 0  # input lines whose invalid UTF-8 became U+FFFD (--input_errors=replace)
  replaced_reference_lines: int = 0  # the same in the reference file
  # Hypothesis words / reference words (BLEU's tokens: 13a unless --bleu_tokenize) and BLEU's brevity penalty:
  # a decoder that stops early (or runs on) shows it here before it shows in BLEU.
  length_ratio: float | None = None
  brevity_penalty: float | None = None
  tokens_per_call: float = 0.0  # output tokens (EOS included) per decoder call: a parallel decoder's acceptance
  drafter_calls_per_sentence: float = 0.0  # a separate drafter model's calls (spec's drafter 'model' / 'int8')
  # reference lines in a Unicode form the vocabulary rewrites (warn_of_unreachable_references): no output
  # matches them as written
  references_not_in_output_form: int = 0
  timed_sentences: int = 0  # the sentences ms_per_sentence is the median of: the first speed_sentences decodable


@dataclasses.dataclass
class InputCounts:
  """What iter_lines met on the way: lines whose invalid UTF-8 it replaced (errors='replace')."""
  replaced_lines: int = 0


REPLACED_LINES_LOGGED = 5  # warnings naming a replaced line; the rest are counted only


def count_lines(path: str) -> int | None:
  """Lines in a file (a last line without newline counts), for the progress bar's total and the check that
  every line came out; None for stdin and other streams (a pipe, /dev/stdin), which counting would consume."""
  if path == '-' or not os.path.isfile(path):
    return None
  count, last, first = 0, b'\n', None
  with open(path, 'rb') as f:
    while block := f.read(1 << 20):
      first = block if first is None else first
      count += block.count(b'\n')
      last = block[-1:]
  if first == corpus.UTF8_BOM:  # a BOM alone: an empty file, as iter_lines reads it
    return 0
  return count + (last != b'\n')


def check_input_path(path: str, what: str = 'input file') -> None:
  """A readable input: '-' (stdin), a file, or a stream such as /dev/stdin or a shell's <(zcat x.gz)."""
  if path != '-' and not os.path.exists(path):
    raise MissingError(f'No {what} {path!r}')
  if path != '-' and os.path.isdir(path):
    raise FastmtError(f'{what} {path!r} is a directory: give a file')


def check_output_path(path: str, what: str = '--output') -> None:
  """An output that can be written: '-' (stdout), or a path that is not a directory, in a directory that
  exists. Checked before decoding, so that a typo costs nothing."""
  if path == '-':
    return
  if os.path.isdir(path):
    raise FastmtError(f'{what} {path!r} is a directory: give a file')
  parent = os.path.dirname(os.path.abspath(path))
  if not os.path.isdir(parent):
    raise FastmtError(f'{what} {path!r}: there is no directory {parent!r}')
  if os.path.isfile(path) and not os.access(path, os.W_OK):
    raise FastmtError(f'{what} {path!r} cannot be written (permission denied)')


def _file_stat(path: str, dash):
  """os.stat of a regular file ('-': of the stream `dash` stands for, stdin for a reader and stdout for a
  writer, when it is one, as in `decode.py --output x < x`), else None: devices and pipes (/dev/null, a
  terminal) may be both read and written."""
  try:
    result = os.fstat(dash.fileno()) if path == '-' else os.stat(path)
  except (OSError, ValueError, AttributeError, io.UnsupportedOperation):  # no such file; a stream without a descriptor
    return None
  return result if stat.S_ISREG(result.st_mode) else None


def _same_file(written: str, other: str, other_dash) -> bool:
  """Whether a file to write and another (read or written; '-' is other_dash) are one regular file, existing
  (hard links too) or still to be written. The written file's '-' is stdout: `decode.py < x > y` reads x, writes y."""
  if written != '-' and other != '-' and os.path.realpath(written) == os.path.realpath(other):
    return not os.path.exists(written) or os.path.isfile(written)
  first, second = _file_stat(written, sys.stdout), _file_stat(other, other_dash)
  return first is not None and second is not None and os.path.samestat(first, second)


def check_paths(input_path: str, output_path: str, reference_path: str | None = None,
                metrics_path: str | None = None, errors: str = 'strict') -> int | None:
  """Everything decode.py can check about its files before it loads a model: inputs exist, outputs can be
  written, no output is an input or another output (opening it for writing would erase what it holds), an
  input file (not a stream) has valid UTF-8 with errors='strict', and a reference file has as many lines as
  the input and, with errors='strict', valid UTF-8.

  Returns the input file's lines (count_lines; None for a stream), counted in the same pass as the UTF-8
  check, so that a caller need not read the file once more for them.
  """
  check_input_path(input_path)
  check_output_path(output_path)
  inputs = None
  if errors == 'strict' and os.path.isfile(input_path):
    # invalid UTF-8 now, naming the line, not after hours of decoding; the same pass counts the lines
    inputs = sum(1 for _ in iter_lines(input_path, 'strict'))
  elif os.path.isfile(input_path):
    inputs = count_lines(input_path)
  if input_path == '-' and reference_path == '-':
    raise FastmtError('--input and --reference both read stdin (-): give the reference as a file')
  if sys.stdin is None and '-' in (input_path, reference_path):  # started with `<&-`
    raise FastmtError('stdin is closed: give the input (and reference) as files')
  if sys.stdout is None and '-' in (output_path, metrics_path):  # `>&-`
    raise FastmtError('stdout is closed: give --output (and --metrics_json) as files')
  if metrics_path == '-' and output_path == '-':
    raise FastmtError('--metrics_json and --output both write to stdout (-): give one of them a file')
  readers = [(input_path, 'input file', sys.stdin)]
  if reference_path is not None:
    readers.append((reference_path, 'reference file', sys.stdin))
  writers = [(output_path, '--output')]
  if metrics_path and metrics_path != '-':  # '-': stdout, free when the translations go to a file
    check_output_path(metrics_path, '--metrics_json')
    writers.append((metrics_path, '--metrics_json'))
  for i, (path, flag) in enumerate(writers):
    for other, what, dash in readers + [(p, f'{f} file', sys.stdout) for p, f in writers[:i]]:
      if _same_file(path, other, dash):
        raise FastmtError(f'{flag} {path!r} is the {what}: writing there would erase it; choose another file')
  if reference_path is not None:
    check_input_path(reference_path, 'reference file')
    if reference_path == '-' or not os.path.isfile(reference_path):
      return inputs  # a stream can be read only once: translate_file reads and checks it before any work
    # One pass over the reference: its lines, and (strict) its UTF-8, which would otherwise fail after decoding.
    references = (sum(1 for _ in iter_lines(reference_path, 'strict')) if errors == 'strict'
                  else count_lines(reference_path))
    if inputs is not None and inputs != references:
      raise FastmtError(f'{input_path} has {inputs} lines but the reference {reference_path} has {references}')
  return inputs


def iter_lines(path: str, errors: str = 'strict', counts: InputCounts | None = None) -> Iterator[str]:
  """Lines of a file, or of stdin for '-', one at a time; invalid UTF-8 is an error naming the line (or, with
  errors='replace', U+FFFD, counted in `counts` and logged for the first lines). Only '\n' ends a line (a '\r'
  before it is dropped), as in corpus.read_lines."""
  if errors not in ('strict', 'replace'):
    raise FastmtError(f"input errors must be 'strict' or 'replace', got {errors!r}")
  check_input_path(path)  # now, not when the first line is wanted
  return _lines_of(path, errors, InputCounts() if counts is None else counts)


def _lines_of(path: str, errors: str, counts: InputCounts) -> Iterator[str]:
  stream = sys.stdin.buffer if path == '-' else open(path, 'rb')  # pylint: disable=consider-using-with
  name = _stream_name(path)
  head = b''  # the first line's first bytes: a gzip or UTF-16 file is named as one
  # A first line holding '\r' is held back until a second line comes: if none does, the input is one line of
  # CR-ended lines (corpus.check_not_cr_only), an error before anything of it is translated.
  held = None
  try:
    for number, raw in enumerate(stream, start=1):
      if number == 1 and raw == corpus.UTF8_BOM:  # the whole input is a BOM (an editor's empty UTF-8 file): no line
        return
      raw = raw[:-1] if raw.endswith(b'\n') else raw
      if number == 1:
        head = raw[:8]
      if number == 1 and raw.startswith(corpus.UTF8_BOM):  # not text: dropped, as corpus.decode_lines does
        raw = raw[len(corpus.UTF8_BOM):]
      try:
        text = raw.decode('utf-8')
      except UnicodeDecodeError as e:
        if errors == 'strict':
          raise FastmtError(f'{name}:{number}: invalid UTF-8 ({e.reason} at byte {e.start}); ' +
                            (corpus.not_text_hint(head) or 'fix the file or pass --input_errors=replace')) from None
        text = raw.decode('utf-8', errors='replace')
        counts.replaced_lines += 1
        if counts.replaced_lines <= REPLACED_LINES_LOGGED:
          logger.warning('%s:%d: invalid UTF-8 (%s at byte %d) replaced by U+FFFD%s', name, number, e.reason,
                         e.start, '; further lines are only counted' if counts.replaced_lines ==
                         REPLACED_LINES_LOGGED else '')
      line = corpus.check_line(text.rstrip('\r'), name, number)
      if number == 1 and '\r' in line:
        held = line
        continue
      if held is not None:
        yield held
        held = None
      yield line
    if held is not None:
      corpus.check_not_cr_only(held, name)
  finally:
    if path != '-':
      stream.close()


def utf8_stdout():
  """sys.stdout writing UTF-8, as --output FILE does, whatever PYTHONIOENCODING or the locale say (a
  translation with an umlaut was a UnicodeEncodeError under PYTHONIOENCODING=ascii)."""
  if (sys.stdout.encoding or '').lower().replace('-', '') != 'utf8' and hasattr(sys.stdout, 'reconfigure'):
    sys.stdout.flush()
    sys.stdout.reconfigure(encoding='utf-8')
  return sys.stdout


def _stream_name(path: str) -> str:
  return 'stdin' if path == '-' else path


def read_input(path: str, errors: str, counts: InputCounts | None = None) -> list[str]:
  """All lines of a file or stdin (iter_lines as a list)."""
  return list(iter_lines(path, errors, counts))


# Every character str.splitlines() breaks a line at (\n, \r, \v, \f, \x1c-\x1e, NEL, U+2028, U+2029): a vocabulary
# trained on text holding them can output them, and a reader that splits with splitlines() (or another tool
# that honours them) would then see more lines than inputs.
_LINE_BREAKS = {ord(c): ' ' for c in '\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029'}


def one_line(text: str) -> str:
  """A translation never spans lines, whatever the detokeniser returns: output line i stays input line i's."""
  return text.translate(_LINE_BREAKS)


DRAFT_TABLE_FILE = 'bigram_draft.npy'


def load_draft_table(workdir: str) -> np.ndarray:
  """The bigram draft table of a workdir's training targets (decoding/drafts.py), built once and cached there.

  Only the training split is read: the table is part of the model's training data, never of its test. A
  training split that cannot be read (a model copied without its corpus) is the corpus loader's FastmtError.
  """
  path = os.path.join(workdir, DRAFT_TABLE_FILE)
  if os.path.exists(path):
    try:
      return np.load(path)
    except (OSError, ValueError) as e:  # unreadable here (another user's 0600 file) or cut short: rebuilt
      logger.warning('The cached bigram draft table %s does not load (%s): built again', path, e)
  config = workdir_lib.load_train_config(workdir)
  tokenizer = workdir_lib.load_tokenizer(workdir)
  try:
    targets = corpus.load_split(config.dataset, corpus.training_split(config.dataset)).targets
  except FastmtError as e:  # the error names a file the user may never have given here (/dev/fd/63 of a <(zcat))
    raise type(e)(f'the bigram draft table is built from the training targets recorded in {workdir}/'
                  f'{workdir_lib.TRAIN_CONFIG_FILE}, which cannot be read now: {e}') from e
  logger.info('Building the bigram draft table of %d training targets for %s', len(targets), workdir)
  table = drafts.bigram_table(tokenizer.encode(targets), tokenizer.vocab_size)
  # A cache only: a work directory that cannot be written (read-only, shared) decodes all the same.
  # files.write_whole's temporary name is its own, so two processes building it at once never write one file.
  buffer = io.BytesIO()
  np.save(buffer, table)
  try:
    files.write_whole(path, buffer.getvalue())
  except OSError as e:
    logger.warning('The bigram draft table is not cached in %s (%s): the next decode builds it again', workdir,
                   e.strerror or e)
  return table


def draft_table_for(workdir: str | None, settings) -> np.ndarray | None:
  """The bigram draft table these decode settings read, or None.

  Decoders that follow the table (jacobi_init='bigram', --drafter bigram) need it: no work directory, or one
  whose training split cannot be read, is an error. --drafter ngram only uses it for the positions entering its
  window where no lookup matches, and is meant for any model with no training data at hand: without a table
  (no work directory, or a model copied without its corpus) it guesses PAD there, which changes its speed a
  little and its output not at all (the commit rule keeps greedy's tokens), with a warning that says why.
  """
  if not registry.uses_draft_table(settings):
    return None
  if registry.needs_draft_table(settings):
    if workdir is None:
      raise FastmtError("the bigram draft table needs the model's work directory (its training targets)")
    return load_draft_table(workdir)
  if workdir is None:
    return None
  try:
    return load_draft_table(workdir)
  except FastmtError as e:
    logger.warning('--drafter ngram: no bigram draft table for %s (%s); positions without a lookup match are '
                   'guessed as PAD (the output is the same)', workdir, e)
    return None


@dataclasses.dataclass
class LoadedModel:
  """What every Translator of one work directory's checkpoint shares: loaded once, however many decoders."""
  workdir: str
  config: ModelConfig  # in the inference precision
  params: dict
  tokenizer: Tokenizer
  clusters: object  # clusters_lib's, or None: the dense projection
  objective: str
  objective_options: dict
  step: int | None = None  # the checkpoint's training step
  float32_kernel: bool = False  # Translator's float32_kernel: products of at most 8 rows through fastmt's kernel

  def __post_init__(self):
    self.int8_copy = translate_lib.SharedInt8Copy(self.config, self.params)  # --drafter int8's: made on first use
    # float32_kernel's packed weights, made once for every Translator of this model (spec:auto's candidates).
    self.translator_params = few_rows.with_layout(self.params) if self.float32_kernel else self.params

  def translator(self, settings: DecodeSettings, draft_model=None) -> Translator:
    draft_table = draft_table_for(self.workdir, settings)
    return Translator(self.config, self.translator_params, self.tokenizer, settings, self.clusters, draft_table,
                      self.objective,
                      objective_options=self.objective_options, draft_model=draft_model, checkpoint_step=self.step,
                      int8_copy=self.int8_copy.for_settings(settings), float32_kernel=self.float32_kernel)


def load_model(workdir: str, algorithms=(), clusters_dir: str | None = None, dtype: str = 'float32',
               checkpoint='latest', float32_kernel: bool = False) -> LoadedModel:
  """A workdir's checkpoint ('latest', 'best' or a step) in `dtype`, with its clusters from clusters_dir (a
  direction without clusters falls back to the dense projection with a warning). An algorithm of `algorithms`
  that cannot decode the workdir's objective is an error before the weights load. float32_kernel: Translator's."""
  model_config = workdir_lib.load_model_config(workdir)
  objective = workdir_lib.load_objective(workdir)
  for algorithm in algorithms:
    registry.check_objective(algorithm, objective)
  params, step = workdir_lib.restore_params(workdir, model_config, checkpoint)
  logger.info('Loaded %s step %d', workdir, step)
  tokenizer = workdir_lib.load_tokenizer(workdir)
  clusters = None
  if clusters_dir:
    from fastmt import clusters_lib  # pylint: disable=g-import-not-at-top
    try:
      clusters = clusters_lib.load_clusters(clusters_dir, model_config, tokenizer, params)
    except FileNotFoundError as e:
      logger.warning('%s: using the dense projection for this direction', e)
  model_config, params = precision.for_inference(model_config, params, dtype)
  return LoadedModel(workdir, model_config, params, tokenizer, clusters, objective,
                     workdir_lib.load_objective_options(workdir), step, float32_kernel)


def load_translator(workdir: str, settings: DecodeSettings, clusters_dir: str | None = None,
                    dtype: str = 'float32', checkpoint='latest', drafter_workdir: str | None = None,
                    float32_kernel: bool = False) -> Translator:
  """A workdir's checkpoint ('latest', 'best' or a step) as a Translator; clusters_dir selects the clustered
  output projection (a direction without clusters falls back to the dense projection with a warning); dtype
  'bfloat16' decodes in half precision, 'int8' / 'int8_layers' in 8 bits, 'bfloat16_int8[_layers]' both
  (fastmt.precision.DTYPES); settings.jacobi_init='bigram' loads the draft table; drafter_workdir is the
  separate drafter of --drafter model (its latest checkpoint, in the same dtype); float32_kernel: Translator's.
  An algorithm that cannot decode the workdir's objective is an error before the weights load."""
  model = load_model(workdir, [settings.algorithm], clusters_dir, dtype, checkpoint, float32_kernel)
  return model.translator(settings, load_draft_model(drafter_workdir, dtype))


@dataclasses.dataclass
class WidthChoice:
  """What --block_size auto chose: the width (1 = greedy), its settings and Translator, and every width's
  median seconds per calibration pass."""
  width: int
  settings: DecodeSettings
  translator: Translator
  median_s: dict


def load_fastest_spec_translator(workdir: str, settings: DecodeSettings, batch_size: int,
                                 clusters_dir: str | None = None, dtype: str = 'float32', checkpoint='latest',
                                 drafter_workdir: str | None = None, float32_kernel: bool = False) -> WidthChoice:
  """--algorithm spec --block_size auto: whichever translates fastest at batch_size here, greedy (the window of
  width 1) or spec with these settings at each of fastmt.width.widths_for(drafter), timed on the work directory's
  validation sentences (fastmt.width); the checkpoint and drafter load once. The output is greedy's whichever
  wins."""
  candidates = width.candidate_settings(settings)  # an error for another algorithm than spec
  model = load_model(workdir, ['spec', 'greedy'], clusters_dir, dtype, checkpoint, float32_kernel)
  draft_model = load_draft_model(drafter_workdir, dtype)
  translators = {w: model.translator(s, draft_model if s.algorithm == 'spec' else None)
                 for w, s in candidates.items()}
  chooser = width.AutoWidthTranslator(translators, width.calibration_sentences(workdir), log=logging.warning)
  chosen = chooser.width_for(batch_size)
  return WidthChoice(chosen, candidates[chosen], translators[chosen], chooser.choices[batch_size][1])


def load_draft_model(drafter_workdir: str | None, dtype: str = 'float32'):
  """The separate drafter of --drafter model (a fastmt.TranslationModel), or None without a work directory."""
  if not drafter_workdir:
    return None
  from fastmt import api  # pylint: disable=g-import-not-at-top
  return api.load(drafter_workdir, dtype=dtype)


def translate_stream(translator: Translator, lines, write, batch_size: int = 32, total: int | None = None,
                     keep: bool = False, show_progress: bool = True, stream: bool = False):
  """Translates an iterable of lines, calling write(translation) in input order as lines finish; with
  stream=True (an input that is no file: stdin, a pipe) each line as soon as it has arrived
  (Translator.iter_ids' stream), not once a chunk of 4,096 lines has.

  Returns (stats, wall seconds, source words, hypotheses if keep else None). The progress bar (sentences/s,
  ETA) shows for inputs longer than a screen, or of unknown length.
  """
  stats = TranslationStats()
  bar = progress.progress(total=total, unit='sentence', desc='translate',
                          disable=not show_progress or (total is not None and total < 50))
  words, kept = 0, [] if keep else None

  def counted(source_lines):
    nonlocal words
    for line in source_lines:
      words += len(line.split())
      yield line

  start = time.perf_counter()
  for hypothesis in translator.translate_iter(counted(lines), batch_size, stats, stream=stream):
    hypothesis = one_line(hypothesis)
    write(hypothesis)
    if kept is not None:
      kept.append(hypothesis)
    bar.update(1)
  bar.close()
  return stats, time.perf_counter() - start, words, kept


def time_at_batch1(translator: Translator, sentences: list[str]) -> float | None:
  """Median ms per sentence at batch 1 over `sentences` (compiled first, so compile time is excluded)."""
  sentences = [sentences[i] for i in translator.decodable(sentences)]  # a blank line would time no decoding
  if not sentences:
    return None
  per_sentence = []
  with translate_lib.quiet_repeated_warnings():  # sentences the translation pass has warned of
    translator.translate(sentences, 1)  # compile the batch-1 shapes
    for sentence in sentences:
      t = time.perf_counter()
      translator.translate([sentence], 1)
      per_sentence.append(time.perf_counter() - t)
  return 1000 * statistics.median(per_sentence)


@dataclasses.dataclass(frozen=True)
class Scores:
  """Corpus scores of a hypothesis set against one reference set (sacreBLEU)."""
  bleu: float
  chrf: float
  bleu_signature: str
  chrf_signature: str
  length_ratio: float  # hypothesis / reference length in BLEU's tokens
  brevity_penalty: float  # BLEU's factor for hypotheses shorter than the reference, 1.0 otherwise


# sacreBLEU's tokenizers that need no download: 13a (its default, for space-separated languages), intl
# (Unicode punctuation), zh (Chinese: per character), char, none; ja-mecab / ko-mecab need their extra packages
# (pip install "sacrebleu[ja]" / "sacrebleu[ko]"). With 13a a Chinese or Japanese output is one "word" per
# sentence and scores about 0 even when right.
BLEU_TOKENIZERS = ('13a', 'intl', 'zh', 'char', 'none', 'ja-mecab', 'ko-mecab')


def bleu_metric(tokenize: str = '13a') -> sacrebleu.BLEU:
  """sacreBLEU's corpus BLEU with `tokenize` (BLEU_TOKENIZERS); a tokenizer that needs a missing package is a
  FastmtError saying which."""
  if tokenize not in BLEU_TOKENIZERS:
    raise FastmtError(f'BLEU tokenizer must be one of {BLEU_TOKENIZERS}, got {tokenize!r}')
  try:
    return sacrebleu.BLEU(tokenize=tokenize)
  except (ImportError, RuntimeError) as e:  # ja-mecab / ko-mecab without their packages
    reason = ' '.join(str(e).split())  # sacreBLEU's message spans lines: one line here
    raise FastmtError(f'sacreBLEU\'s {tokenize} tokenizer cannot load: {reason}') from None


def check_bleu_tokenize(tokenize: str) -> str:
  """tokenize, if BLEU can be scored with it here: called before the work (training, a file's translation,
  a bench run), so that a missing mecab package is not found after it."""
  bleu_metric(tokenize)
  return tokenize


def score(hypotheses, references, tokenize: str = '13a') -> Scores | None:
  """BLEU (with sacreBLEU's `tokenize`, BLEU_TOKENIZERS) and chrF with their signatures, and the length ratio
  behind BLEU's brevity penalty; line counts must match. No sentences: None (nothing to score; sacreBLEU
  would fail)."""
  if len(references) != len(hypotheses):
    raise FastmtError(f'{len(hypotheses)} input lines but {len(references)} reference lines')
  if not hypotheses:
    logger.warning('No sentences: nothing to score')
    return None
  bleu_metric_, chrf_metric = bleu_metric(tokenize), sacrebleu.CHRF()
  bleu = bleu_metric_.corpus_score(hypotheses, [references])
  chrf = chrf_metric.corpus_score(hypotheses, [references]).score
  return Scores(bleu.score, chrf, str(bleu_metric_.get_signature()), str(chrf_metric.get_signature()),
                bleu.sys_len / max(1, bleu.ref_len), bleu.bp)


REFERENCE_LINES_NAMED = 5  # the warning of references the model cannot write names at most this many lines
CJK_SHARE_FOR_WARNING = 0.3  # of a reference's letters: 13a then scores whole runs of characters as words


def _is_cjk(char: str) -> bool:
  return ('\u3040' <= char <= '\u30ff' or '\u3400' <= char <= '\u4dbf' or '\u4e00' <= char <= '\u9fff'
          or '\uac00' <= char <= '\ud7af' or '\uf900' <= char <= '\ufaff')


def warn_of_unreachable_references(references, tokenizer, bleu_tokenize: str = '13a') -> int:
  """Warnings about references a perfect translation could not match, before they are scored; returns how many
  reference lines are written in a Unicode form the model's vocabulary never outputs.

  A vocabulary normalises its text (Tokenizer.normalization: SentencePiece's default, NFKC, turns full-width
  punctuation into ASCII, composes decomposed accents, turns zero-width joiners into spaces), so its outputs
  are in that form; a reference that is not scores lower however good the translation (Vietnamese in NFD: BLEU
  9.6 for outputs all right once the reference is composed). And sacreBLEU's 13a tokenizer splits on spaces:
  Chinese or Japanese references score about 0 under it.
  """
  changed = [i + 1 for i, line in enumerate(references) if tokenizer.normalized(line) != ' '.join(line.split())]
  if changed:
    logger.warning('%d of %d reference lines (line%s %s%s) are written in forms the model\'s vocabulary '
                   'rewrites (its normalization %r: full-width punctuation, decomposed accents, ligatures, '
                   'zero-width joiners...), so no output can match them as written and BLEU/chrF are lower for '
                   'it; config.vocab_normalization=\'identity\' trains a vocabulary that keeps text as written',
                   len(changed), len(references), 's' * (len(changed) > 1),
                   ', '.join(map(str, changed[:REFERENCE_LINES_NAMED])),
                   ', ...' if len(changed) > REFERENCE_LINES_NAMED else '', tokenizer.normalization)
  warn_of_13a_on_cjk(references, bleu_tokenize, '--bleu_tokenize ')
  return len(changed)


def warn_of_13a_on_cjk(references, bleu_tokenize: str, option: str) -> None:
  """A warning where references mostly in Chinese, Japanese or Korean are to be scored with BLEU's 13a
  tokenizer, which splits on spaces only: a good translation scores about 0. option: where to choose another."""
  letters = [c for line in references for c in line if c.isalpha()]
  if bleu_tokenize == '13a' and letters and sum(map(_is_cjk, letters)) >= CJK_SHARE_FOR_WARNING * len(letters):
    logger.warning('The references are mostly Chinese, Japanese or Korean, which BLEU\'s 13a tokenizer does not '
                   'split into words (a good translation scores about 0): %szh for Chinese, ja-mecab for '
                   'Japanese, ko-mecab for Korean, or char', option)


def translate_file(translator: Translator, input_path: str, output_path: str, reference_path: str | None = None,
                   batch_size: int = 32, speed_sentences: int = 0, input_errors: str = 'strict',
                   tag_direction: str | None = None, show_progress: bool = True,
                   bleu_tokenize: str = '13a') -> DecodeReport:
  """decode.py's job: input file (or '-') -> output file (or '-'), in order, streamed; a report.

  Holds the hypotheses only when scoring (strings, not tensors) and the first speed_sentences sources. Paths are
  checked first (check_paths), then, with an input file, the reference is read whole (a stream's length and
  UTF-8 checked before any work; with an input stream, after it). An output file is written through a temporary
  file beside it and takes its name only when every line is translated and as many as the reference holds
  (replaced_on_success): a run that fails part way (invalid UTF-8 on line 10,000 of stdin, Ctrl-C, an input
  stream longer than its reference) leaves an existing output file as it was.
  """
  total = check_paths(input_path, output_path, reference_path, errors=input_errors)  # None for a stream
  check_bleu_tokenize(bleu_tokenize)
  if batch_size < 1:
    raise FastmtError(f'batch_size must be >= 1, got {batch_size}')
  reference_counts = InputCounts()
  references, unreachable = None, 0

  def read_references():
    nonlocal references, unreachable
    references = read_input(reference_path, input_errors, reference_counts)
    unreachable = warn_of_unreachable_references(references, translator.tokenizer, bleu_tokenize)

  if reference_path is not None and total is not None:
    # An input file: the reference is read before any work. From stdin or a pipe it can be read only once, so
    # check_paths could not count it or check its UTF-8; both are checked here, before the first line decodes
    # (a stdin reference of the wrong length used to fail only after the whole translation). An input stream's
    # reference is read after it (below): two pipes fed one after the other by one writer, input first, would
    # wait for each other, and a person or program feeding stdin waits for each line's translation.
    read_references()
    if len(references) != total:
      raise FastmtError(f'{input_path} has {total} lines but the reference {_stream_name(reference_path)} has '
                        f'{len(references)}')
  input_counts = InputCounts()
  lines = iter_lines(input_path, input_errors, input_counts)
  if tag_direction:
    tag = corpus.language_tag(tag_direction)
    corpus.check_tag(tag, tag_direction, translator.tokenizer, '--tag_inputs')
  tags_added = 0  # one word each: words_per_s counts the text given, not the tags

  def tagged(source_lines):
    nonlocal tags_added
    for line in source_lines:
      if has_visible_text(line):
        tags_added += 1
        line = f'{tag} {line}'
      yield line

  if tag_direction:
    lines = tagged(lines)
  first_sources = []

  def remembered(source_lines):  # the first speed_sentences that are decoded: a blank line would time nothing
    for line in source_lines:
      if len(first_sources) < speed_sentences and translator.decodable([line]):
        first_sources.append(line)
      yield line

  stream = total is None  # stdin or a pipe: a person or a program may wait for each line's translation

  def write(line, out):
    out.write(line + '\n')
    if stream:
      out.flush()

  with replaced_on_success(output_path) as out:
    stats, wall, words, hypotheses = translate_stream(translator, remembered(lines),
                                                      functools.partial(write, out=out), batch_size, total,
                                                      keep=reference_path is not None, show_progress=show_progress,
                                                      stream=stream)
    out.flush()
    if reference_path is not None and references is None:  # an input stream's: its length is known only now,
      read_references()  # and a reference that fails (its length, its UTF-8) leaves the file that was there
    if total is None and references is not None and len(references) != stats.sentences:
      raise FastmtError(f'{_stream_name(input_path)} had {stats.sentences} lines but the reference '
                        f'{_stream_name(reference_path)} has {len(references)}')
  if total is not None and stats.sentences != total:  # the translations of what was read are kept
    raise FastmtError(f'{input_path} had {total} lines when decoding began but {stats.sentences} were translated: '
                      'the file changed while it was read')
  scores = score(hypotheses, references, bleu_tokenize) if references is not None else None
  # The report's score fields are Scores' own, None where nothing was scored.
  scored = dataclasses.asdict(scores) if scores else dict.fromkeys(f.name for f in dataclasses.fields(Scores))
  ms_per_sentence = time_at_batch1(translator, first_sources) if speed_sentences else None
  decode_seconds = max(wall - stats.compile_seconds, 1e-9)
  decoded = max(1, stats.sentences - stats.empty_inputs)
  return DecodeReport(
      sentences=stats.sentences, **scored,
      ms_per_sentence=ms_per_sentence, sentences_per_s=stats.sentences / decode_seconds,
      words_per_s=(words - tags_added) / decode_seconds, decoder_calls_per_sentence=stats.decoder_calls / decoded,
      tokens_per_call=stats.tokens_per_call, drafter_calls_per_sentence=stats.drafter_calls / decoded,
      compile_s=stats.compile_seconds, empty_inputs=stats.empty_inputs, truncated_inputs=stats.truncated_inputs,
      outputs_at_cap=stats.outputs_at_cap, unreadable_inputs=stats.unreadable_inputs, wall_s=wall,
      empty_outputs=stats.empty_outputs, outputs_with_unknown=stats.outputs_with_unknown,
      padding_rows=stats.padding_rows,
      replaced_input_lines=input_counts.replaced_lines, replaced_reference_lines=reference_counts.replaced_lines,
      references_not_in_output_form=unreachable, timed_sentences=len(first_sources) if speed_sentences else 0)


@contextlib.contextmanager
def replaced_on_success(path: str):
  """A text stream to write `path` through: a temporary file in its directory, renamed to `path` only when the
  block ends without an error; on an error (or Ctrl-C) the temporary file is removed and whatever `path` held
  before is untouched, not replaced by half a translation. '-' is stdout, written as it comes; so is a path
  that exists and is not a regular file (/dev/null, a named pipe). A symbolic link keeps pointing where it
  did: the file it points to is replaced, keeping its permission bits (not its owner, ACLs or other hard
  links: the new file is another inode). An existing file we may not write is an error before any work, as
  open(path, 'w') would be; if the final rename fails, the finished translation is kept in the temporary file,
  which the error names."""
  with _write_errors_named(path):
    yield from _replaced_on_success(path)


@contextlib.contextmanager
def _write_errors_named(path: str):
  """A full disk or quota while writing `path`: an error naming it ('[Errno 28] No space left on device'
  said nothing of which output)."""
  try:
    yield
  except OSError as e:
    if e.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) or e.filename:
      raise
    raise FastmtError(f'writing {"stdout" if path == "-" else repr(path)}: {e.strerror or e}') from e


def _replaced_on_success(path: str):
  if path == '-':
    yield utf8_stdout()
    return
  if os.path.exists(path) and not os.path.isfile(path):
    with open(path, 'w', encoding='utf-8') as f:
      yield f
    return
  target = os.path.realpath(path)
  check_output_path(target)  # an existing file we may not write: an error, as open(path, 'w') would raise
  directory, name = os.path.split(target)
  try:
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=f'.{name}.', suffix='.partial')
  except OSError as e:  # a writable file in a directory we may not create files in: written in place
    logger.warning('%s is written in place (no temporary file in %s: %s): a failed run leaves part of a '
                   'translation there', path, directory, e.strerror or e)
    with open(path, 'w', encoding='utf-8') as f:
      yield f
    return
  try:
    with os.fdopen(handle, 'w', encoding='utf-8') as f:
      yield f
  except BaseException:
    os.remove(temporary)
    raise
  try:
    os.chmod(temporary, files.mode_for(target))
    os.replace(temporary, target)
  except OSError as e:
    raise FastmtError(f'the translation is complete but could not replace {path!r} ({e.strerror or e}); it is '
                      f'in {temporary!r}') from e


def write_lines(path: str, lines) -> None:
  if path == '-':
    utf8_stdout().writelines(one_line(line) + '\n' for line in lines)
    return
  with open(path, 'w', encoding='utf-8') as f:
    f.writelines(one_line(line) + '\n' for line in lines)


def format_report(report: DecodeReport) -> str:
  parts = []
  if report.bleu is not None:
    parts.append(f'BLEU {report.bleu:.2f} ({report.bleu_signature})')
    parts.append(f'chrF {report.chrf:.2f} ({report.chrf_signature})')
    parts.append(f'length: hypotheses / reference {report.length_ratio:.3f} (BLEU\'s brevity penalty '
                 f'{report.brevity_penalty:.3f})')
  if report.ms_per_sentence is not None:
    parts.append(f'batch 1: {report.ms_per_sentence:.2f} ms/sentence (median of {report.timed_sentences})')
  parts.append(f'{report.sentences} sentences in {report.wall_s:.1f} s ({report.compile_s:.1f} s compiling); '
               f'{report.sentences_per_s:.1f} sentences/s, {report.words_per_s:.0f} source words/s without compiling')
  drafter = (f'; and {report.drafter_calls_per_sentence:.2f} drafter model calls/sentence'
             if report.drafter_calls_per_sentence else '')
  parts.append(f'decoder calls/sentence {report.decoder_calls_per_sentence:.2f}, output tokens (EOS included) per '
               f'call {report.tokens_per_call:.2f}{drafter}')
  unreadable = f' ({report.unreadable_inputs} in characters the vocabulary lacks)' if report.unreadable_inputs else ''
  parts.append(f'empty inputs {report.empty_inputs}{unreadable}, truncated inputs {report.truncated_inputs}, '
               f'outputs at the length cap {report.outputs_at_cap}, empty outputs of non-empty inputs '
               f'{report.empty_outputs}, outputs with <unk> {report.outputs_with_unknown}, input lines with invalid '
               f'UTF-8 replaced {report.replaced_input_lines}'
               + (f' (reference lines: {report.replaced_reference_lines})' if report.replaced_reference_lines else ''))
  return '\n'.join(parts)


def write_metrics_json(path: str, report: DecodeReport, extra: dict) -> None:
  """The report and `extra` as JSON into path ('-': stdout), a file written whole (files.write_whole)."""
  metrics = {**dataclasses.asdict(report), **extra}
  if path == '-':
    json.dump(metrics, sys.stdout, indent=1)
    sys.stdout.write('\n')
    return
  text = json.dumps(metrics, indent=1) + '\n'
  if os.path.exists(path) and not os.path.isfile(path):  # /dev/stderr, a named pipe: written as it is
    with open(path, 'w', encoding='utf-8') as f:
      f.write(text)
    return
  # Whole or not at all (a kill or a full disk mid-write left half a JSON that the next reader choked on); a
  # symbolic link stays a link to the file it names, as the output file's does.
  try:
    files.write_whole(os.path.realpath(path), text)
  except PermissionError:  # a writable file in a directory that is not (no temporary file there): in place
    with open(path, 'w', encoding='utf-8') as f:
      f.write(text)
