r"""Speed and quality of every decoding method on one model, measured side by side in one process.

    python -m fastmt.bench --workdir runs/quickstart --split test --output_dir runs/quickstart/bench

For each method: BLEU and chrF (sacreBLEU, signatures printed), whether the output equals greedy's for every
sentence, decoder calls per sentence, ms/sentence at batch 1 and sentences/s and source words/s at a large
batch. Timing rules (docs/BENCHMARKS.md's opening section): every shape is compiled before timing (compile
time is reported apart), each call is blocked until ready, methods are interleaved within each repeat and the
median over repeats is reported, speed-ups are ratios to greedy from the same repeats.
"""

import dataclasses
import glob
import json
import os
import platform
import statistics
import time

from absl import flags, logging
import jax
import numpy as np

from fastmt.data import corpus
from fastmt import api, cli, decode_lib, few_rows, files, kernels, precision, roofline, rounds, width
from fastmt import workdir as workdir_lib
from fastmt.decoding import registry
from fastmt import translate
from fastmt.translate import DecodeSettings, Translator
from fastmt.errors import FastmtError

DEFAULT_METHODS = ('greedy', 'beam:4', 'pj', 'pgj:3', 'pgj:5', 'hgj:3')
# Without --methods, each model is benched with what it was trained for (an interleaved model decodes with ib
# only, so the AT list would leave it nothing to run); an autoregressive model with DEFAULT_METHODS.
OBJECTIVE_METHODS = {'interleaved': ('ib', 'ib:4'), 'hrt': ('greedy', 'beam:4', 'hrt', 'hrt:5:1'),
                     'selfdraft': ('greedy', 'beam:4', 'spec:2', 'spec:3', 'spec:4')}


def default_methods(workdirs) -> list[str]:
  """The methods a bench of these work directories runs without --methods: each one's objective's (in order,
  once each); build_translators then gives each model those of them it can decode."""
  methods = []
  for workdir in workdirs:
    for method in OBJECTIVE_METHODS.get(workdir_lib.load_objective(workdir), DEFAULT_METHODS):
      if method not in methods:
        methods.append(method)
  return methods


def is_auto(label: str) -> bool:
  return label.partition('@')[0].partition('+')[0] == 'spec:auto'


def parse_method(spec: str, allow_auto: bool = False) -> tuple[str, DecodeSettings, str]:
  """'greedy' | 'beam:K' | 'pj' | 'pgj:B' | 'hgj:B' | 'hgj:B:L' | 'ib' | 'ib:K' (interleaved, beam K) | 'hrt' |
  'hrt:B_AT:B_NAT' (hybrid-regressive, Skip-AT beam B_AT, Skip-CMLM on the top B_NAT) | 'spec:W' (speculative,
  window W, the model's own drafts), then optionally '+bigram' (Jacobi draft guesses; spec: the bigram drafter),
  '+ngram' (spec: prompt-lookup drafts; '+ngramM': also in the last M tokens of the earlier outputs of the same
  pass, ngram_memory), '+model' (spec: a separate drafter model, --drafter_workdir), '+int8' (spec: the model's own
  int8 copy drafts), '+pad' (spec: PAD guesses), '+dedupN' (ib: remove repeated n-grams up to N) or '+repN' (greedy,
  hrt: the repetition guard, max_repeats N; +rep = 8); spec's +ngram, +bigram and +pad may be followed by '+pool' or
  '+pool2' (also the trajectory pool, keyed on 1 or 2 tokens: spec:3+ngram+pool); and '@bf16' (half precision),
  '@int8' or '@int8_layers' (8-bit, fastmt.quantize), '@bf16_int8' or '@bf16_int8_layers' (both) -> (label,
  settings, dtype). 'spec:auto' (allow_auto: the bench's own translators) is spec at the width that times fastest
  per batch size (fastmt.width; its settings carry the widest candidate); elsewhere a width must be named."""
  label = spec
  spec, _, suffix = spec.partition('@')
  dtype = {'': 'float32', 'fp32': 'float32', 'bf16': 'bfloat16', 'int8': 'int8', 'int8_layers': 'int8_layers',
           'bf16_int8': 'bfloat16_int8', 'bf16_int8_layers': 'bfloat16_int8_layers'}.get(suffix)
  if dtype is None:
    raise FastmtError(f'Unknown precision suffix @{suffix}: use @bf16, @int8, @int8_layers, @bf16_int8 or '
                      '@bf16_int8_layers (or none for float32)')
  spec, _, init = spec.partition('+')
  init, pool = _trajectory_pool_suffix(label, init)
  name, *args = spec.split(':')
  if name == 'spec' and args == ['auto']:
    if not allow_auto:
      raise FastmtError(f'{label}: spec:auto chooses among decoders by timing them (fastmt.bench, decode.py '
                        '--block_size auto); name a width here, e.g. spec:2')
    args = [str(max(width.widths_for(init or 'self')))]
  if name in _METHOD_FORMS:
    most, suffixes, example = _METHOD_FORMS[name]
    if len(args) > most:
      raise FastmtError(f'{label}: {name} takes at most {most} number{"s" if most != 1 else ""} after it '
                        f'(e.g. {example})')
    if init and not any(init == x or (x in ('dedupN', 'repN') and init.startswith(x[:-1]))
                        or (x == 'ngram' and init.startswith('ngram') and init[5:].isdigit()) for x in suffixes):
      raise FastmtError(f'{label}: unknown suffix +{init} for {name}'
                        + (f': use one of {["+" + x for x in suffixes]}' if suffixes else ' (it takes none)'))
  try:
    values = [int(a) for a in args]
  except ValueError:
    raise FastmtError(f'{label}: the numbers after {name} must be integers, got {args}') from None
  if any(v < 0 for v in values):
    raise FastmtError(f'{label}: the numbers after {name} must not be negative, got {values}')
  if name in ('beam', 'ib'):
    try:
      dedup = {'dedup_ngram': int(init[len('dedup'):] or 2)} if name == 'ib' and init else {}
    except ValueError:
      raise FastmtError(f'{label}: +dedupN takes an integer N, got +{init}') from None
    return label, DecodeSettings(name, beam_size=values[0] if values else None, **dedup), dtype
  if name == 'spec':
    memory = {}
    if init.startswith('ngram') and init[5:]:  # +ngramM: a memory of M tokens of earlier outputs
      init, memory = 'ngram', {'ngram_memory': int(init[5:])}
    return label, DecodeSettings('spec', block_size=values[0] if values else 4, drafter=init or 'self',
                                 ngram_pool=pool, **memory), dtype
  guard = {}
  if name in ('greedy', 'hrt') and init:  # +repN: the repetition guard
    try:
      guard = {'max_repeats': int(init[len('rep'):] or 8)}
    except ValueError:
      raise FastmtError(f'{label}: +repN takes an integer N, got +{init}') from None
    if not guard['max_repeats']:  # the label would say guarded
      raise FastmtError(f'{label}: +rep0 is no guard; leave the suffix out (+repN, N >= 2)')
  if name == 'hrt':
    return label, DecodeSettings('hrt', beam_size=values[0] if values else None,
                                 nat_beam_size=values[1] if len(values) > 1 else 1, **guard), dtype
  if name == 'greedy':
    return label, DecodeSettings('greedy', **guard), dtype
  jacobi = {'jacobi_init': init or 'pad'} if name in ('pj', 'pgj', 'hgj') else {}
  if name in ('pgj', 'hgj'):
    block = values[0] if values else 3
    parallel = values[1] if len(values) > 1 else 0
    return label, DecodeSettings(name, block_size=block, parallel_length=parallel, **jacobi), dtype
  return label, DecodeSettings(name, **jacobi), dtype


def _trajectory_pool_suffix(label: str, init: str) -> tuple[str, int]:
  """'ngram+pool2' -> ('ngram', 2): a last '+poolN' suffix (spec: the trajectory pool keyed on N = 1 or 2
  tokens; '+pool' = 1) and the suffix before it."""
  head, plus, last = init.rpartition('+')
  if not plus and not init.startswith('pool'):
    return init, 0
  last = last if plus else init
  if not last.startswith('pool') or last[4:] not in ('', '1', '2'):
    raise FastmtError(f'{label}: unknown suffix +{last} (the last suffix of two must be +pool, +pool1 or +pool2)')
  if not label.startswith('spec'):
    raise FastmtError(f'{label}: +pool (the trajectory pool) is a drafter of spec:W')
  return head if plus else '', int(last[4:] or 1)


# What each method name takes (parse_method's forms): (at most this many numbers, suffixes, an example).
_METHOD_FORMS = {'greedy': (0, ('repN',), 'greedy'), 'beam': (1, (), 'beam:4'), 'pj': (0, ('bigram', 'pad'), 'pj+bigram'),
                 'pgj': (1, ('bigram', 'pad'), 'pgj:3'), 'hgj': (2, ('bigram', 'pad'), 'hgj:3:16'),
                 'ib': (1, ('dedupN',), 'ib:4'), 'hrt': (2, ('repN',), 'hrt:5:1'), 'spec': (1, registry.DRAFTERS, 'spec:3+ngram')}


def source_words(texts) -> int:
  return sum(len(t.split()) for t in texts)


@dataclasses.dataclass
class MethodResult:
  method: str
  bleu: float = 0.0
  chrf: float = 0.0
  length_ratio: float = float('nan')  # hypothesis / reference length (BLEU's tokens): below 1, a brevity penalty
  identical_to_greedy: str = ''  # 'n/m' sentences identical
  decoder_calls_per_sentence: float = 0.0
  tokens_per_call: float = 0.0  # output tokens (EOS included) per decoder call
  drafter_calls_per_sentence: float = 0.0  # a separate drafter model's calls (spec:...:model / int8), besides
  loop_iterations_per_batch: float = 0.0  # while-loop iterations per batch at the large batch (slowest row)
  iteration_speedup: float = 0.0  # the baseline's decoder calls per sentence / this method's
  bleu_b1: float = float('nan')  # BLEU of the batch-1 outputs (with exactness_at_batch1)
  ms_per_sentence_b1: float = 0.0
  speedup_b1: float = 0.0  # the baseline's time / this method's, median over the interleaved repeats
  speedup_large: float = 0.0  # the same at the large batch
  sentences_per_s: float = 0.0
  words_per_s: float = 0.0  # source words per second at the large batch
  words_per_s_b1: float = 0.0  # source words per second at batch 1 (the RoyalFlush figure)
  compile_s: float = 0.0  # the first pass at batch_size less a compiled pass's time: batch-1 compiles not in it
  # decoder calls per sentence on the batch-1 timed sentences (the first speed_sentences): the calls to set
  # beside speedup_b1 and ms_per_sentence_b1 (decoder_calls_per_sentence is of every sentence)
  decoder_calls_per_sentence_b1_timed: float = float('nan')


def build_translators(workdir: str, methods=DEFAULT_METHODS, checkpoint='latest', drafter_workdir=None,
                      float32_kernel: bool = False):
  """(translators by label, model_config, checkpoint step) for a workdir's checkpoint (latest, best, a step).

  Methods whose algorithm cannot decode the workdir's objective are left out (greedy for an interleaved
  model, ib for an AT one, spec's own drafts for a model not trained to draft), so one method list serves a comparison of AT and interleaved models; a workdir
  that none of them can decode is an error. drafter_workdir: the drafter of spec:W+model methods (a selfdraft
  model with the workdir's vocabulary), in each method's precision. float32_kernel: the float32 methods' Translators
  run products of at most 8 rows through fastmt's CPU kernel (Translator's float32_kernel).
  """
  model_config = workdir_lib.load_model_config(workdir)
  objective = workdir_lib.load_objective(workdir)
  options = workdir_lib.load_objective_options(workdir)
  every = [parse_method(x, allow_auto=True) for x in methods]
  parsed = [m for m in every if registry.decodes(m[1], objective)]
  if not parsed:
    raise FastmtError(f'None of the methods {list(methods)} decodes {workdir} (objective {objective!r})')
  skipped = [m[0] for m in every if m not in parsed]
  if skipped:  # expected in a comparison of AT and interleaved models; build_comparison warns if no model runs one
    logging.info('%s (objective %r) skips %s: not for this objective', workdir, objective, skipped)
  params, step = workdir_lib.restore_params(workdir, model_config, checkpoint)
  tokenizer = workdir_lib.load_tokenizer(workdir)
  translators = {}
  drafter = decode_lib.load_draft_model(drafter_workdir)

  for label, settings, dtype in parsed:
    weights = precision.for_inference(model_config, params, dtype)  # once per method, however many candidates
    int8_copy = translate.SharedInt8Copy(*weights)  # --drafter int8's, shared by spec:auto's candidates
    if float32_kernel and dtype == 'float32':  # packed once, shared the same way
      weights = (weights[0], few_rows.with_layout(weights[1]))

    def translator(settings, table=None, draft_model=None, weights=weights, int8_copy=int8_copy):
      return Translator(*weights, tokenizer, settings, draft_table=table, objective=objective,
                        objective_options=options, draft_model=draft_model,
                        int8_copy=int8_copy.for_settings(settings),
                        float32_kernel=float32_kernel and dtype == 'float32')

    table = decode_lib.draft_table_for(workdir, settings)
    draft_model = None
    if registry.get(settings.algorithm).uses_draft_model(settings):
      if drafter is None:
        raise FastmtError(f'{label} needs a drafter model: --drafter_workdir')
      draft_model = api.TranslationModel(drafter.config, drafter.params, drafter.tokenizer, drafter.objective,
                                         drafter.workdir, drafter.step, dtype)
    if is_auto(label):  # width 1 is the fallback: greedy's own step, with no drafts
      candidates = {w: translator(s, table, draft_model) if w > 1 else translator(s)
                    for w, s in width.candidate_settings(settings).items()}
      translators[label] = width.AutoWidthTranslator(candidates, width.calibration_sentences(workdir),
                                                     log=lambda m, label=label: logging.info('%s: %s', label, m))
    else:
      translators[label] = translator(settings, table, draft_model)
  return translators, model_config, step


def build_comparison(workdir: str, compare_workdirs, methods=DEFAULT_METHODS, checkpoint='latest',
                     drafter_workdir=None, float32_kernel: bool = False):
  """build_translators for `workdir` and every model of `compare_workdirs`, in one dict: the other models'
  labels are 'NAME/method' (NAME = the work directory's base name), so that all of them are timed side by
  side in one process, interleaved, with `workdir`'s greedy as the baseline (the RoyalFlush table's rows)."""
  translators, model_config, step = build_translators(workdir, methods, checkpoint, drafter_workdir, float32_kernel)
  dataset = workdir_lib.load_train_config(workdir).dataset.to_dict()
  for other in compare_workdirs:
    name = os.path.basename(os.path.normpath(other))
    other_dataset = workdir_lib.load_train_config(other).dataset.to_dict()
    if _comparable(other_dataset) != _comparable(dataset):
      raise FastmtError(f'{other} was trained on another dataset than {workdir}: their scores are not comparable')
    if any(label.startswith(f'{name}/') for label in translators):
      raise FastmtError(f'Two compared work directories are named {name!r}: their rows would share labels')
    more, _, _ = build_translators(other, methods, checkpoint, drafter_workdir, float32_kernel)
    translators.update({f'{name}/{label}': t for label, t in more.items()})
  unused = [m for m in methods if not any(label.rpartition('/')[2] == m for label in translators)]
  if unused:  # a method no model can run (a typo'd drafter, spec:W's own drafts on AT models): said, not silent
    logging.warning('No model here runs %s: each needs another objective%s', unused,
                    ' (spec:W drafts with the model itself: spec:W+ngram, +bigram or +model decode any AT model)'
                    if any(m.startswith('spec:') and '+' not in m for m in unused) else '')
  return translators, model_config, step


def _comparable(dataset: dict) -> dict:
  """The dataset settings that decide which sentences the test split holds (not the training-only ones: a model
  trained on part of the training split, or on distilled targets, is scored on the same test sentences)."""
  dataset = corpus.with_absolute_paths(dataset)  # a record from before train.py made its names absolute
  return {k: v for k, v in dataset.items() if k not in ('distilled_dir', 'p_raw', 'data_dir', 'train_split')}


def measure(translators: dict, sources, references=None, batch_size: int = 32, speed_sentences: int = 100,
            large_batch_sentences: int = 256, repeats: int = 3, exactness_at_batch1: bool = True,
            baseline: str = 'greedy', log=print, bleu_tokenize: str = '13a'):
  """Measures translators side by side; returns (list of MethodResult, hypotheses by label, signatures).

  Quality, exactness and decoder calls use every sentence (at batch_size, and at batch 1 when
  exactness_at_batch1); the timed repeats use the first large_batch_sentences at batch_size and the first
  speed_sentences at batch 1, every shape compiled beforehand, the methods interleaved within each repeat (in
  a Williams design's order, fastmt.rounds). Identity and speed-ups are relative to the `baseline` label when
  it is present. The count columns (calls, tokens per call, identity) are of every sentence at batch_size; the
  speed columns of the timed subsets.
  """
  results = {label: MethodResult(label) for label in translators}
  hypotheses, hypotheses_b1, signatures = {}, {}, {}

  # Quality, exactness and decoder calls over the whole set. The first pass also compiles.
  for label, translator in translators.items():
    start = time.perf_counter()
    hypotheses[label], stats = translator.translate(sources, batch_size)
    results[label].compile_s = time.perf_counter() - start  # minus the compiled pass's time, below
    r = results[label]
    decoded = max(1, stats.sentences - stats.empty_inputs)
    r.decoder_calls_per_sentence = stats.decoder_calls / decoded
    r.loop_iterations_per_batch = stats.loop_iterations / max(1, -(-decoded // batch_size))
    r.tokens_per_call = stats.tokens_per_call
    r.drafter_calls_per_sentence = stats.drafter_calls / decoded
    if references is not None and sources:
      scores = decode_lib.score(hypotheses[label], references, bleu_tokenize)
      r.bleu, r.chrf, r.length_ratio = scores.bleu, scores.chrf, scores.length_ratio
      signatures = {'bleu_signature': scores.bleu_signature, 'chrf_signature': scores.chrf_signature}
    log(f'{label}: BLEU {r.bleu:.2f} chrF {r.chrf:.2f} length ratio {r.length_ratio:.3f} '
        f'calls/sentence {r.decoder_calls_per_sentence:.2f} '
        f'({time.perf_counter() - start:.0f} s)')
    if exactness_at_batch1 and _searches_one_hypothesis(translator):
      with translate.quiet_repeated_warnings():  # the same sentences as the pass above
        hypotheses_b1[label], _ = translator.translate(sources, 1)
      if references is not None:  # differs from the batched BLEU where outputs depend on the batch (clusters)
        r.bleu_b1 = decode_lib.bleu_metric(bleu_tokenize).corpus_score(hypotheses_b1[label], [references]).score
  if baseline in hypotheses:
    for label in translators:
      same = sum(a == b for a, b in zip(hypotheses[label], hypotheses[baseline]))
      results[label].identical_to_greedy = f'{same}/{len(sources)}'
      results[label].iteration_speedup = (results[baseline].decoder_calls_per_sentence /
                                          max(1e-9, results[label].decoder_calls_per_sentence))
      if label in hypotheses_b1 and baseline in hypotheses_b1:
        same_b1 = sum(a == b for a, b in zip(hypotheses_b1[label], hypotheses_b1[baseline]))
        results[label].identical_to_greedy += f' (b1: {same_b1}/{len(sources)})'

  # Large-batch throughput (every shape already compiled above).
  subset = sources[:large_batch_sentences]
  large, _ = _interleaved_times(translators, subset, batch_size, repeats)
  for label, times in large.items():
    median = statistics.median(times)
    results[label].compile_s = max(0.0, results[label].compile_s - median * len(sources) / len(subset))
    results[label].sentences_per_s = len(subset) / median
    results[label].words_per_s = source_words(subset) / median
    if baseline in large:
      results[label].speedup_large = statistics.median(g / t for g, t in zip(large[baseline], times))
  log('large batch timed')

  # Batch 1 on the first speed_sentences sentences (none: not timed, its columns stay 0).
  subset = sources[:speed_sentences]
  small, calls_b1 = _interleaved_times(translators, subset, 1, repeats) if subset else ({}, {})
  for label, times in small.items():
    r = results[label]
    r.decoder_calls_per_sentence_b1_timed = calls_b1[label]
    r.ms_per_sentence_b1 = 1000 * statistics.median(times) / len(subset)
    r.words_per_s_b1 = source_words(subset) / statistics.median(times)
    if baseline in small:
      r.speedup_b1 = statistics.median(g / t for g, t in zip(small[baseline], times))
  return list(results.values()), hypotheses, signatures


def _interleaved_times(translators: dict, sentences, batch_size: int, repeats: int) -> tuple[dict, dict]:
  """(seconds per pass over `sentences`, per label; decoder calls per sentence, per label): one warm-up pass
  each (compiles any missing shape; it counts the calls), then `repeats` rounds in which every translator runs
  once, in a Williams design's order (fastmt.rounds: every method in every position, right after every other,
  equally often)."""
  calls = {}
  with translate.quiet_repeated_warnings():  # the quality pass warned of these sentences once
    for label, translator in translators.items():
      calls[label] = translator.translate(sentences, batch_size)[1].decoder_calls / len(sentences)
    times = {label: [] for label in translators}
    for rep in range(repeats):
      for label in rounds.round_order(translators, rep):
        start = time.perf_counter()
        _, stats = translators[label].translate(sentences, batch_size)
        # Less any compile: a shape dropped under vm.max_map_count (fastmt.executables) compiles again.
        times[label].append(time.perf_counter() - start - stats.compile_seconds)
  return times, calls


def environment_facts(**extra) -> dict:
  """The machine and software a measurement ran on (every figure names them)."""
  return {**extra, 'nproc': os.cpu_count(), 'cpu': _cpu_model(), 'jax': jax.__version__,
          'device': str(jax.devices()[0]), 'date': time.strftime('%Y-%m-%d'), 'python': platform.python_version()}


def _searches_one_hypothesis(translator) -> bool:
  """Whether the batch-1 identity pass applies: it is the exact decoders' check. A beam search (beam:K, ib:K,
  hrt:B:N, a compared model's too, 'NAME/beam:4') is not greedy at any batch size, and its batch-1 pass is the
  slowest; spec:auto (an AutoWidthTranslator, no settings of its own) chooses among greedy and exact spec."""
  if isinstance(translator, width.AutoWidthTranslator):
    return True
  return translator.settings.beam_size <= 1


def run_benchmark(workdir: str, sources, references, methods=DEFAULT_METHODS, batch_size: int = 32,
                  speed_sentences: int = 100, large_batch_sentences: int = 256, repeats: int = 3,
                  exactness_at_batch1: bool = True, log=print, compare_workdirs=(), checkpoint='latest',
                  drafter_workdir=None, bleu_tokenize: str = '13a', float32_kernel: bool = False,
                  baseline: str = 'greedy'):
  """Every method of `methods` on one workdir's model (and on compare_workdirs' models, side by side);
  returns (results, environment facts, hypotheses). bleu_tokenize: sacreBLEU's tokenizer
  (decode_lib.BLEU_TOKENIZERS; zh for Chinese targets). float32_kernel: build_translators'. baseline: the label
  the identity and speed-ups are relative to (measure's)."""
  decode_lib.check_bleu_tokenize(bleu_tokenize)  # before any model loads
  translators, model_config, step = build_comparison(workdir, compare_workdirs, methods, checkpoint, drafter_workdir,
                                                     float32_kernel)
  results, hypotheses, signatures = measure(translators, sources, references, batch_size, speed_sentences,
                                            large_batch_sentences, repeats, exactness_at_batch1,
                                            baseline=baseline, log=log, bleu_tokenize=bleu_tokenize)
  environment = environment_facts(
      workdir=workdir, checkpoint_step=step, model_config=dataclasses.asdict(model_config), sentences=len(sources),
      speed_sentences=min(speed_sentences, len(sources)),
      large_batch_sentences=min(large_batch_sentences, len(sources)),
      batch_size=batch_size, repeats=repeats, compared_with=list(compare_workdirs), drafter_workdir=drafter_workdir,
      objectives=objectives_of(workdir, compare_workdirs), auto_widths=auto_widths_of(translators),
      float32_kernel=float32_kernel and kernels.available('float32'), baseline=baseline, **signatures)
  return results, environment, hypotheses


def auto_widths_of(translators) -> dict:
  """{spec:auto label: {batch size: {'width': the chosen W, 'median_s': {W: seconds per calibration pass},
  'calibration_s': what choosing took (compiles included)}}}. The choice at the bench's batch_size is made in the
  first pass, so its time is inside the row's compile_s; batch 1's in the batch-1 exactness pass or the timing
  warm-up, outside every figure (compile_s covers the batch_size shapes only)."""
  return {label: {str(batch): {'width': chosen, 'median_s': {str(w): s for w, s in medians.items()},
                               'calibration_s': seconds}
                  for batch, (chosen, medians, seconds) in t.choices.items()}
          for label, t in translators.items() if isinstance(t, width.AutoWidthTranslator)}


def objectives_of(workdir: str, compare_workdirs=()) -> dict:
  """Every row's objective and options, keyed by its label's prefix, so that results.json describes each row by
  itself after the work directories are gone (copied off a lent machine): NAME (a compared directory's base name)
  for the 'NAME/method' rows, '' for `workdir`'s own, unprefixed rows. `workdir`'s entry is also kept under its
  base name (what readers from before '' looked up) unless a compared directory's rows hold that name."""
  def entry(d):
    return {'objective': workdir_lib.load_objective(d), 'options': workdir_lib.load_objective_options(d)}
  compared = {os.path.basename(os.path.normpath(d)): entry(d) for d in compare_workdirs}
  own = entry(workdir)
  return {os.path.basename(os.path.normpath(workdir)): own, **compared, '': own}


def _cpu_model() -> str:
  try:
    with open('/proc/cpuinfo') as f:
      for line in f:
        if line.startswith('model name'):
          return line.split(':', 1)[1].strip()
  except OSError:
    pass
  return platform.processor()


def no_baseline_note(labels, baseline: str = 'greedy') -> str | None:
  """Why the identity and speed-up columns are blank when no row is --workdir's `baseline` (greedy unless
  --baseline names another; they are relative to it): an interleaved model, which has no greedy search, benched
  alone or as the --workdir of a comparison."""
  if baseline in labels:
    return None
  others = [label for label in labels if label.rpartition('/')[2] == baseline]
  where = (f'the {baseline} rows ({", ".join(others)}) are of --compare\'s models: give that model as --workdir'
           if others else 'bench it beside an autoregressive model of the same data: --workdir AT --compare THIS')
  return (f'No {baseline} row of --workdir\'s model: the "= greedy" and speed-up columns, relative to it, are '
          f'blank; {where}')


def format_table(results, batch_size: int = 32) -> str:
  """Markdown table of MethodResults; speed-ups and identity are relative to the baseline (greedy)."""
  b = batch_size
  header = (f'| method | BLEU | chrF | len ratio | = greedy | calls/sent | iter. speed-up | tok/call | '
            f'iters/batch b{b} | ms/sent b1 | speed-up b1 | words/s b1 | sent/s b{b} | speed-up b{b} | words/s b{b} | compile s |')
  lines = [header, '|' + '---|' * 16]

  def timed(value, spec):  # a figure not measured (no batch-1 timing, no greedy row to divide by) reads 0: blank
    return format(value, spec) if value else ''
  for r in results:
    lines.append(f'| {r.method} | {r.bleu:.2f} | {r.chrf:.2f} | {r.length_ratio:.3f} | {r.identical_to_greedy} | '
                 f'{r.decoder_calls_per_sentence:.2f} | {timed(r.iteration_speedup, ".3f")} | '
                 f'{r.tokens_per_call:.2f} | {r.loop_iterations_per_batch:.1f} | '
                 f'{timed(r.ms_per_sentence_b1, ".2f")} | {timed(r.speedup_b1, ".3f")} | '
                 f'{timed(r.words_per_s_b1, ".0f")} | {timed(r.sentences_per_s, ".1f")} | '
                 f'{timed(r.speedup_large, ".3f")} | {timed(r.words_per_s, ".0f")} | {r.compile_s:.1f} |')
  return '\n'.join(lines)


FLAGS = flags.FLAGS


def define_flags():
  """The CLI's flags, defined only when it runs as a program: importing this module as a library
  registers nothing, so any set of fastmt modules imports together."""
  flags.DEFINE_string('workdir', None, 'A train.py work directory.')
  cli.define_plugins_flag()
  cli.define_checkpoint_flag('The checkpoint (of --workdir and every --compare work directory)')
  flags.DEFINE_string('split', 'test', 'Split of the workdir\'s dataset to translate (never 40-43: not in any split).')
  flags.DEFINE_list('methods', None,
                    'Default: each model\'s own, by the objective it was trained with (at: ' + ', '.join(DEFAULT_METHODS)
                    + '; ' + '; '.join(f'{o}: {", ".join(m)}' for o, m in OBJECTIVE_METHODS.items()) + '). '
                    'Methods: greedy, beam:K, pj, pgj:B, hgj:B[:L], spec:W (own drafts; spec:W+bigram, +ngram, '
                    '+model, +int8 (the model\'s own int8 copy drafts), +pad; after +ngram, +bigram or +pad, '
                    '+pool or +pool2 adds the trajectory pool: '
                    'spec:3+ngram+pool; spec:auto: the width that times fastest on validation sentences, 1 = greedy), '
                    'ib, ib:K, hrt, hrt:B_AT:B_NAT; append +bigram for Jacobi draft guesses (pgj:3+bigram), +repN to greedy '
                    'or hrt for the repetition guard (hrt+rep8), and @bf16 '
                    'for half precision (greedy@bf16), @int8, @int8_layers, @bf16_int8 or @bf16_int8_layers for '
                    '8-bit weights (greedy@int8). See parse_method.')
  flags.DEFINE_integer('batch_size', 32, 'The large batch.')
  flags.DEFINE_bool('float32_kernel', False, 'The float32 methods run products of at most 8 rows through fastmt\'s '
                    'own CPU kernel (Translator float32_kernel; x86 with AVX-512), and so do the step-cost curve and '
                    'the encoder cost of --floor, so that the ideal speed-ups price the calls the decoders make.')
  flags.DEFINE_integer('speed_sentences', 100, 'Sentences timed at batch 1.')
  flags.DEFINE_integer('large_batch_sentences', 256, 'Sentences timed at --batch_size.')
  flags.DEFINE_bool('exactness_at_batch1', True, 'Also translate the whole set at batch 1 to check exactness.')
  flags.DEFINE_integer('repeats', 3, 'Timed repeats (median reported).')
  flags.DEFINE_list('compare', [], 'Other work directories (same dataset) whose models are timed side by side '
                    'with --workdir\'s in this process; their rows are labelled NAME/method.')
  flags.DEFINE_string('direction', '', 'Multilingual datasets: only this direction\'s lines (e.g. en_fr).')
  flags.DEFINE_string('drafter_workdir', None, 'The drafter of spec:W+model methods (a selfdraft model with the '
                      'workdir\'s vocabulary; its latest checkpoint, in each method\'s precision).')
  flags.DEFINE_enum('bleu_tokenize', '13a', list(decode_lib.BLEU_TOKENIZERS), 'sacreBLEU\'s tokenizer for BLEU '
                    '(zh for Chinese targets; decode.py --help says more).')
  flags.DEFINE_integer('limit', 0, 'Translate only the first N sentences of the split (0 = all).')
  flags.DEFINE_string('output_dir', None, 'Where to write results.json, table.md and hypotheses.')
  flags.DEFINE_string('baseline', 'greedy', 'The row of --workdir\'s model that identity and speed-ups are relative '
                      'to and that --floor prices: greedy, or greedy in another precision (greedy@int8: int8 '
                      'decoders against int8 greedy, their ideal speed-ups from the int8 step-cost curve and '
                      'encoder). One of --methods.')
  flags.DEFINE_bool('floor', True, 'Also measure batch-1 greedy against the bandwidth/compute floor and the '
                    'step-cost curve and the encoder alone (a minute more).')


def priced_weights(model_config, params, baseline: str = 'greedy', float32_kernel: bool = False):
  """(config, params) of the model as the `baseline` row decodes it (its precision; with float32_kernel, a
  float32 row's products of at most 8 rows through fastmt's kernel): what the floor pass's step-cost curve and
  encoder time, so that they price the calls that row and its peers in the same precision make."""
  _, _, dtype = parse_method(baseline)
  config, params = precision.for_inference(model_config, params, dtype)
  if float32_kernel and dtype == 'float32':
    params = few_rows.with_layout(params)
  # On the device, as a Translator holds them: quantizing leaves host arrays, which every timed call would copy
  # in (the int8 encoder read 3.6 ms a source that way, 2.8 ms from the device; section 5's E^T lesson).
  return config, jax.device_put(params)


def _greedy_floor(workdir, sources, results, baseline: str = 'greedy'):
  """Batch-1 greedy ms/token against the bandwidth/compute floor measured on this machine.

  greedy_ms_per_token_b1 is end to end (the encoder, tokenising and detokenising included) over greedy's
  decoder calls on the same timed sentences; greedy_step_ms_b1 subtracts the encoder (padded as the Translator
  pads it), so step_times_the_floor compares a decoder step with the floor's step.

  `baseline` is the greedy row priced (--baseline): its precision is the step-cost curve's and the encoder's, so
  that greedy@int8 as the baseline gives the int8 decoders' ideal speed-ups (the int8 step, the int8 encoder).
  The bandwidth/compute floor counts float32 weights whatever the precision.
  """
  greedy = next((r for r in results if r.method == baseline), None)
  if greedy is None:
    return {}
  model_config = workdir_lib.load_model_config(workdir)
  tokenizer = workdir_lib.load_tokenizer(workdir)
  subset = sources[:FLAGS.speed_sentences]
  source_lengths = [len(x) + 1 for x in tokenizer.encode(subset)]
  source_len = float(np.mean(source_lengths))
  params, _ = workdir_lib.restore_params(workdir, model_config, FLAGS.checkpoint)
  floor_config, floor_params = priced_weights(model_config, params, baseline, FLAGS.float32_kernel)
  calls_per_sentence = greedy.decoder_calls_per_sentence_b1_timed  # on the timed sentences, as the time is
  target_len = round(calls_per_sentence)
  step_bytes, _ = roofline.decoder_step_cost(model_config, int(source_len), target_len)
  bandwidth = roofline.measure_read_bandwidth_gb_s(step_bytes)
  peak = roofline.measure_peak_gflop_s()
  floor = roofline.floor_ms_per_token(model_config, int(source_len), target_len, bandwidth, peak)
  dram = roofline.measure_bandwidth_gb_s()
  ms_per_token = greedy.ms_per_sentence_b1 / calls_per_sentence
  curves = {f'step_cost_ms_b{b}': roofline.step_cost_curve(floor_config, floor_params, batch_size=b,
                                                           source_length=int(source_len)) for b in (1, 32)}
  # What every sentence pays once whatever decodes it: the ideal speed-ups add it to the decoder calls. At
  # batch 1 each source is padded to its own bucket, as the Translator does (until 2026-11-25: the mean length,
  # kept as encoder_ms_b1_mean_length); at batch 32 the mean length stands for a batch's width.
  encoder = {f'encoder_ms_b{b}': roofline.encoder_cost(floor_config, floor_params, batch_size=b,
                                                      source_length=int(source_len)) for b in (1, 32)}
  encoder['encoder_ms_b1_mean_length'] = encoder['encoder_ms_b1']
  encoder['encoder_ms_b1'] = roofline.encoder_cost_padded(floor_config, floor_params, source_lengths)
  step_ms = (greedy.ms_per_sentence_b1 - encoder['encoder_ms_b1']) / calls_per_sentence
  return {**floor, 'priced_row': baseline, 'bandwidth_gb_s': bandwidth, 'main_memory_gb_s': dram,
          'main_memory_floor_ms': step_bytes / (dram * 1e9) * 1e3, 'peak_gflop_s': peak,
          'greedy_calls_per_sentence_b1': calls_per_sentence, 'greedy_ms_per_token_b1': ms_per_token,
          'times_the_floor': ms_per_token / floor['floor_ms_per_token'],
          'greedy_step_ms_b1': step_ms, 'step_times_the_floor': step_ms / floor['floor_ms_per_token'],
          **curves, **encoder}


def _check_counts() -> None:
  """Counts that would otherwise fail after minutes of work (a median of no repeats) or cut silently."""
  for name, least in (('repeats', 1), ('batch_size', 1), ('large_batch_sentences', 1), ('speed_sentences', 0),
                      ('limit', 0)):
    if FLAGS[name].value < least:
      raise FastmtError(f'--{name} must be >= {least}, got {FLAGS[name].value}')
  for label in FLAGS.methods or ():
    parse_method(label, allow_auto=True)  # a malformed method is an error before any model loads
  _, baseline, _ = parse_method(FLAGS.baseline)
  if baseline.algorithm != 'greedy':  # the floor prices the baseline's calls at the one-position step's cost
    raise FastmtError(f'--baseline must be a greedy row (greedy, greedy@int8, ...), got {FLAGS.baseline}')
  if FLAGS.methods and FLAGS.baseline not in FLAGS.methods:
    raise FastmtError(f'--baseline {FLAGS.baseline} is not one of --methods ({",".join(FLAGS.methods)})')
  repeated = sorted({label for label in FLAGS.methods or () if FLAGS.methods.count(label) > 1})
  if repeated:  # the table kept one row of each, without a word
    raise FastmtError(f'--methods names {", ".join(repeated)} more than once')
  if FLAGS.output_dir:
    cli.check_output_directory(FLAGS.output_dir, '--output_dir')


def main(argv):
  del argv  # cli.run refuses positional arguments
  logging.set_verbosity(logging.WARNING)  # orbax and tfds log every read at INFO
  cli.import_plugins(FLAGS.plugins)  # before --methods names an algorithm registered there
  _check_counts()
  config = workdir_lib.load_train_config(FLAGS.workdir)
  data = corpus.load_split(config.dataset, FLAGS.split)
  if FLAGS.direction:
    data = data.select(FLAGS.direction)
  sources, references = data.sources, data.targets
  if FLAGS.limit:
    sources, references = sources[:FLAGS.limit], references[:FLAGS.limit]
  if not sources:
    raise FastmtError(f'the {FLAGS.split} split has no sentences to translate')
  methods = FLAGS.methods or default_methods([FLAGS.workdir, *FLAGS.compare])
  if FLAGS['baseline'].present and FLAGS.baseline not in methods:  # checked against --methods in _check_counts
    raise FastmtError(f'--baseline {FLAGS.baseline} is not one of the methods benched without --methods '
                      f'({",".join(methods)}): name them with --methods, the baseline among them')
  if FLAGS.split == width.CALIBRATION_SPLIT and any(map(is_auto, methods)):
    logging.warning('spec:auto times its widths on the %s split, which this bench also scores: its choice '
                    'has seen these sentences (the output is greedy\'s either way; the speed is not independent)',
                    FLAGS.split)
  results, environment, hypotheses = run_benchmark(
      FLAGS.workdir, sources, references, methods, FLAGS.batch_size, FLAGS.speed_sentences,
      FLAGS.large_batch_sentences, FLAGS.repeats, FLAGS.exactness_at_batch1, compare_workdirs=FLAGS.compare,
      checkpoint=FLAGS.checkpoint, drafter_workdir=FLAGS.drafter_workdir, bleu_tokenize=FLAGS.bleu_tokenize,
      float32_kernel=FLAGS.float32_kernel, baseline=FLAGS.baseline)
  table = format_table(results, FLAGS.batch_size)
  print(table)
  print(json.dumps(environment, indent=1))
  note = no_baseline_note([r.method for r in results], FLAGS.baseline)
  if note:
    logging.warning(note)
  # Written before the floor pass, so a failure there loses nothing.
  write_outputs(FLAGS.output_dir, results, environment, hypotheses, table)
  if FLAGS.floor and not FLAGS.speed_sentences:
    logging.warning('--floor needs batch-1 timing: skipped with --speed_sentences 0')
  elif FLAGS.floor and not note:  # the floor prices greedy's calls: nothing to price without its row (said above)
    environment['greedy_floor'] = _greedy_floor(FLAGS.workdir, sources, results, FLAGS.baseline)
    print(json.dumps(environment['greedy_floor'], indent=1))
    write_outputs(FLAGS.output_dir, results, environment, hypotheses, table)


def write_outputs(output_dir, results, environment, hypotheses, table):
  """results.json, table.md and one hyp.<method>.txt per method into output_dir (none: nothing); an earlier
  run's hypotheses there are removed, so the files always belong to this run."""
  if not output_dir:
    return
  contents = {
      os.path.join(output_dir, 'results.json'):
          json.dumps({'results': [dataclasses.asdict(r) for r in results], 'environment': environment}, indent=1),
      os.path.join(output_dir, 'table.md'): table + '\n'}
  for label, lines in hypotheses.items():  # one line per sentence, whatever the detokeniser returned
    contents[os.path.join(output_dir, f'hyp.{label.replace(":", "_").replace("/", "__")}.txt')] = ''.join(
        decode_lib.one_line(line) + '\n' for line in lines)
  # All or none (a kill or a full disk while writing left a cut results.json beside the earlier run's table),
  # then an earlier run's hypotheses of methods this run did not bench go, so the files all belong to this run.
  stale = set(glob.glob(os.path.join(output_dir, 'hyp.*.txt'))) - set(contents)
  files.write_all_whole(contents)
  for path in stale:
    os.remove(path)


def run():
  cli.run(main, define_flags, required=('workdir',))


if __name__ == '__main__':
  run()
