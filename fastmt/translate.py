"""Translating text with a trained model and any decoding algorithm, in input order.

This is where the model meets the model-agnostic decoders: `make_step_fn` closes a `DecoderStepFn` over the
parameters and the encoded source, and `Translator` batches sentences by length into a few static shapes,
runs one compiled function per shape, and puts every output back in its input position.

A sentence's translation depends on that sentence alone: its output cap comes from its own source length,
and the rows that only pad a batch to its static shape are marked done before the first step, so they never
keep a decoding loop running. A short input uses a small batch (the next power of two), and a batch is split
over every local device (a data-parallel Mesh), so the same code runs on one CPU, 8 TPU cores or a pod.

Inputs stream: `translate_iter` reads a chunk of lines at a time, sorts the chunk by length into batches and
yields translations in input order as soon as they are ready, so memory stays bounded on a file of any size.

Bad input is never dropped: an empty line translates to an empty line (no decoding), a line longer than the
model's maximum is truncated (counted, with a warning naming the input line), and a row that hits the output
cap is counted.
"""

import collections.abc
import contextlib
import dataclasses
import functools
import heapq
import itertools
import logging
import math
import threading
import time
from typing import Iterable, Iterator

import jax
import jax.numpy as jnp
import numpy as np

from jax.sharding import NamedSharding, PartitionSpec as P

from fastmt import (executables, few_rows, int8_step, kernels, models, objectives, precision, projection, quantize,
                    streaming)
from fastmt.objectives import hrt as hrt_objective
from fastmt.objectives import selfdraft
from fastmt.config import ModelConfig
from fastmt.data.tokenizer import EOS_ID, PAD_ID, UNK_ID, Tokenizer, has_visible_text
from fastmt.decoding import draft_model as draft_model_lib, drafts, registry
from fastmt.decoding.greedy import DecodeOutput
from fastmt.decoding.interleaving import Interleaving
from fastmt.errors import FastmtError

logger = logging.getLogger(__name__)  # named 'fastmt.<module>': users set its level or handlers by name

SOURCE_BUCKETS = (8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)


@dataclasses.dataclass(frozen=True)
class DecodeSettings:
  algorithm: str = 'greedy'
  beam_size: int | None = None  # None = the algorithm's default (beam: 4; ib: 1 = greedy)
  alpha: float = 0.6  # beam search length penalty
  block_size: int = 3  # Jacobi PGJ/HGJ block size b
  parallel_length: int = 0  # HGJ parallel length l; 0 = the output cap
  output_length_ratio: float = 2.0  # a sentence's output cap = min(max_length, ceil(ratio * source tokens) + 8)
  jacobi_init: str = 'pad'  # Jacobi guesses for new positions: 'pad' (the paper's) or 'bigram' (a draft table)
  # The factorisation of an interleaved model (--algorithm ib): read from its work directory by Translator,
  # never set by hand (decoding with another (h, c) than the model learnt would be meaningless).
  interleaving: Interleaving | None = None
  dedup_ngram: int = 0  # --algorithm ib: remove immediately repeated n-grams up to this n (0 = off; Figure 4)
  # --algorithm ib: when a step ends a hypothesis. 'any' = Algorithm 1's (an EOS in any slot, whatever the other
  # slots hold); 'layout' = only as a training target ends (words in the first slots, then EOS in the rest).
  end_rule: str = 'any'
  chunk_size: int = 0  # --algorithm hrt: k; 0 = the model's (the only one it was trained for)
  nat_beam_size: int = 1  # --algorithm hrt: Skip-AT hypotheses that stage II fills (b_nat <= b_at = beam_size)
  hrt_symbols: tuple[int, int] | None = None  # (<mask>, <bos_k>) ids: resolved by Translator, never by hand
  # --algorithm spec: 'self' (the model's <mask> slots), 'ngram', 'model', 'int8' (the model's own int8 copy,
  # drafting autoregressively), 'bigram' or 'pad'
  drafter: str = 'self'
  draft_mask_id: int | None = None  # --drafter self / model: the (drafter's) <mask> id, resolved by Translator
  draft_model_config: ModelConfig | None = None  # --drafter model / int8: the drafter's shape, set by Translator
  # --drafter ngram: also look up the last ngram_memory tokens of the outputs of the sentences translated before
  # (in the same call of translate / iter_ids: one input stream); 0 = the row's own output and source only.
  ngram_memory: int = 0
  # --algorithm spec (drafter ngram, bigram or pad): also draft from the trajectory pool (lookahead decoding's
  # n-grams of the window's own predictions, drafts.TrajectoryPool) keyed on this many tokens (1 or 2; 0 = off).
  ngram_pool: int = 0
  # --algorithm greedy or hrt: the repetition guard (fastmt.decoding.repeats): a row ends at this many identical
  # tokens in a row, keeping one (0 = off; 8 on the built-in corpus: above most of its small models' stutters;
  # hrt counts stage I's tokens, every k-th word).
  max_repeats: int = 0

  def __post_init__(self):
    if self.beam_size is None:
      object.__setattr__(self, 'beam_size', registry.get(self.algorithm).default_beam_size)
    registry.validate(self)


@dataclasses.dataclass
class TranslationStats:
  sentences: int = 0
  empty_inputs: int = 0  # translated as an empty line without decoding (unreadable_inputs included)
  unreadable_inputs: int = 0  # lines in characters the vocabulary lacks only (all <unk>): empty outputs, warned
  truncated_inputs: int = 0
  outputs_at_cap: int = 0  # rows that reached the output cap without EOS
  empty_outputs: int = 0  # non-empty inputs translated to no text (first token EOS, or pieces of no text), warned
  # outputs holding <unk> (a character the vocabulary left out), which the text shows as SentencePiece's ' ⁇ '
  outputs_with_unknown: int = 0
  decoder_calls: int = 0  # sum over sentences of the decoder calls that sentence needed
  # sum over sentences of a separate drafter model's calls (spec with drafter 'model' or 'int8'): each costs
  # what the drafter's size makes it cost, besides the decoder calls above
  drafter_calls: int = 0
  loop_iterations: int = 0  # sum over batches of while-loop iterations
  output_tokens: int = 0
  batches: int = 0
  padding_rows: int = 0  # rows that only pad a batch to its static shape (done from the start)
  compile_seconds: float = 0.0  # time spent compiling new (batch rows, source bucket) shapes

  @property
  def tokens_per_call(self) -> float:
    """Output tokens, EOS included, per decoder call: what a call commits (greedy 1; a parallel decoder more,
    the accepted drafts; a drafter model's own calls are not decoder calls)."""
    ended = self.sentences - self.outputs_at_cap - self.empty_inputs  # the outputs that carry an EOS
    return (self.output_tokens + ended) / max(1, self.decoder_calls)


# Decoders whose calls project a window of positions, guesses included: exact with the dense projection only.
_WINDOW_ALGORITHMS = ('pj', 'pgj', 'hgj', 'spec')


def make_step_fn(model: models.Transformer, params, memory, clusters=None, output_projection=None):
  """A DecoderStepFn over `model` with the encoded source `memory` closed in.

  clusters: a projection.Clusters to use the clustered output projection instead of the dense one.
  output_projection: float32 [E, V] (a bfloat16 model's: bfloat16), the tied embedding transposed and laid out
    once (transposed_output): calls over more than one position (rows x positions > 1) project with it, the
    same logits as the tied projection without reading E through a transpose (faster for beam, Jacobi and
    batches on XLA:CPU, docs/BENCHMARKS.md); a single position keeps the tied projection, a matrix-vector
    product over E's rows that is already as fast. For an int8 embedding it is {'values': int8 [E, V],
    'scale': [V]}, used by every call (an int8 product reads the [E, V] layout fastest at any number of rows).
  The step function takes DecoderStepFn's optional `project` (logits at only some of the new positions).

  An int8 model (fastmt.quantize's 'int8' scheme, packed for fastmt's int8 kernel) with its int8 output layout and
  no clusters gets the decoder call in one custom call where the kernel runs (fastmt.int8_step: the same
  function, a few operations instead of hundreds per call on XLA:CPU).
  """
  if (clusters is None and isinstance(output_projection, dict)
      and not int8_step.unsupported_reason(model.config, params)):
    return int8_step.make_step_fn(model, params, memory, output_projection)

  def step_fn(tokens, positions, self_mask, cache, write_offsets, project=None, directions=None):
    rows_projected = tokens.shape[0] * (tokens.shape[1] if project is None else project.shape[-1])
    int8_projection = isinstance(output_projection, dict)
    transposed = output_projection is not None and (rows_projected > 1 or int8_projection)
    # With `project`, the decoder's last layer computes only those positions (their keys and values still
    # come from every position): HRT's stage II needs (k - 1) / k of its slots, the draft model W of 2W + 1.
    _, hidden, cache = model.apply({'params': params}, tokens, positions, self_mask, memory, cache, write_offsets,
                                   return_logits=False, directions=directions, query_slots=project,
                                   method=models.Transformer.decode)
    if clusters is not None:
      # A padding row (an all-PAD source) adds nothing to the union of the call's active sets.
      live_rows = memory['mask'].any(-1) if memory['mask'].shape[0] == hidden.shape[0] else None
      logits, _ = projection.clustered_logits(hidden, quantize.float_embedding(params), clusters, live_rows)
    elif int8_projection:
      logits = quantize.int8_product(hidden, output_projection)
    elif transposed:  # a bfloat16 layout: bfloat16 products summed in float32 (the CPU's matrix unit, few_rows)
      logits = jnp.dot(hidden.astype(output_projection.dtype), output_projection, preferred_element_type=jnp.float32)
    else:  # the model's own tied projection
      logits = model.apply({'params': params}, hidden, method=models.Transformer.project)
    return logits, cache
  return step_fn


def transposed_output_layout(params):
  """The tied output projection as a contiguous float32 (a bfloat16 model's: bfloat16) [E, V] array
  (Translator's transposed_output), or
  for an int8 embedding {'values': int8 [E, V], 'scale': float32 [V]}."""
  embed = params['embed']
  if 'scale' in embed:
    layout = {'values': np.ascontiguousarray(np.asarray(embed['embedding']).T), 'scale': np.asarray(embed['scale'])}
    if kernels.available():  # fastmt's int8 CPU kernel: the same logits, faster
      layout['packed'], layout['colsum'] = kernels.pack_weights(layout['values'])
    return layout
  embedding = np.asarray(embed['embedding'])
  if embedding.dtype != jnp.bfloat16:  # a bfloat16 model's stays bfloat16: the same products, half the bytes
    embedding = embedding.astype(np.float32)
  return np.ascontiguousarray(embedding.T)


_LINES_AT_CAP_NAMED = 10  # the cap warning names this many input lines at most
# The per-call warnings about the inputs and outputs of a call (quiet_repeated_warnings leaves them out).
OUTPUT_CAP_WARNING = '%d output%s reached the output cap without EOS (input line%s %s%s)'
EMPTY_OUTPUT_WARNING = ('%d non-empty input%s translated to nothing, the model ending the output at once or '
                        'writing only pieces without text (input line%s %s%s; beam search with a large beam '
                        'favours the first)')
UNREADABLE_WARNING = ('%d input line%s in characters the vocabulary lacks only (line%s %s%s): translated as empty '
                      'lines')


class _DropPerCallWarnings(logging.Filter):

  def filter(self, record):
    return record.msg not in (OUTPUT_CAP_WARNING, EMPTY_OUTPUT_WARNING, UNREADABLE_WARNING)


@contextlib.contextmanager
def quiet_repeated_warnings():
  """Within it, Translator calls do not log their per-call warnings (outputs at the cap, empty outputs,
  unreadable lines).

  For callers that translate the same sentences again and again or count those themselves: the bench's timing
  passes (the quality pass has warned once), training's validation BLEU at every evaluation (the history
  counts valid_outputs_at_cap). Warnings about the inputs of one line (truncation) still come.
  """
  quiet = _DropPerCallWarnings()
  logger.addFilter(quiet)  # this module's own logger: a filter there sees only the records made there
  try:
    yield
  finally:
    logger.removeFilter(quiet)


def _stats_or_new(stats) -> TranslationStats:
  """The caller's TranslationStats to add to, or a new one; anything else is a clear error."""
  if stats is None:
    return TranslationStats()
  if not isinstance(stats, TranslationStats):
    raise FastmtError(f'stats must be a fastmt TranslationStats (or None), got {type(stats).__name__}')
  return stats


def output_cap(config: ModelConfig, source_length: int, settings: DecodeSettings) -> int:
  """Output tokens (EOS included) allowed for a source of source_length tokens (EOS included)."""
  return min(config.max_length, int(math.ceil(settings.output_length_ratio * source_length)) + 8)


def decode_source_batch(params, source, row_caps, clusters=None, draft_table=None, output_projection=None,
                        drafter=None, recent=None, *, config: ModelConfig, settings: DecodeSettings) -> DecodeOutput:
  """Encodes source [B, S] and decodes it with settings.algorithm. Jit with config/settings static.

  row_caps: int32 [B], each row's output cap (output_cap of its own source length; 0 = a padding row).
  clusters: optional projection.Clusters (the clustered output projection); None = dense.
  draft_table: int32 [V] next-token guesses for settings.jacobi_init='bigram' (decoding/drafts.py).
  output_projection: optional float32 [E, V] (make_step_fn).
  drafter: --drafter model: {'params', 'output_projection'} of the drafter (settings.draft_model_config's
    shape); it encodes the source itself (it shares nothing with the model but the vocabulary). --drafter
    int8: the same of the model's int8 copy, which reads the model's own encoding of the source.
  recent: --drafter ngram with settings.ngram_memory: int32 [ngram_memory], the outputs of the sentences
    translated before this batch (drafts.remember_outputs), searched for drafts.
  """
  model = models.Transformer(config)
  batch = source.shape[0]
  max_len = output_cap(config, source.shape[1], settings)  # static: the bound of every row in the bucket
  encoded = model.apply({'params': params}, source, method=models.Transformer.encode)
  memory = model.apply({'params': params}, encoded, source, method=models.Transformer.memory)
  algorithm = registry.get(settings.algorithm)
  rows = batch * algorithm.rows_per_sentence(settings)
  memory = algorithm.expand(memory, settings)
  cache = models.init_cache(config, rows, algorithm.cache_length(max_len, settings))
  extra = {'source': source} if algorithm.uses_source(settings) else {}
  if algorithm.uses_recent_outputs(settings):
    extra['recent'] = recent
  if algorithm.uses_draft_model(settings) or registry.drafts_with_int8_copy(settings):
    extra['draft_model'] = draft_model_for(drafter, source, batch, max_len, settings, config.vocab_size, encoded)
  return algorithm.run(make_step_fn(model, params, memory, clusters, output_projection), cache, batch, max_len,
                       settings, draft_table, row_caps, **extra)


def draft_model_for(drafter, source, batch: int, max_len: int, settings: DecodeSettings, vocab_size: int,
                    encoded=None) -> draft_model_lib.DraftModel:
  """The drafter of --drafter model or int8: its step function and cache; drafts restricted to the model's
  vocabulary (vocab_size).

  --drafter model: a separate selfdraft model, which encodes the source itself. --drafter int8: the model's own
  int8 copy, drafting autoregressively; it reads `encoded` (the model's float encoding of the source, already
  computed) through its own int8 cross-attention projections, so the sentence pays one encoder, not two.
  """
  config = settings.draft_model_config
  model = models.Transformer(config)
  variables = {'params': drafter['params']}
  int8_copy = registry.drafts_with_int8_copy(settings)
  if not int8_copy:
    encoded = model.apply(variables, source, method=models.Transformer.encode)
  memory = model.apply(variables, encoded, source, method=models.Transformer.memory)
  width = min(settings.block_size, max_len)
  cache = models.init_cache(config, batch, draft_model_lib.drafter_cache_length(max_len, width))
  step_fn = make_step_fn(model, drafter['params'], memory, None, drafter['output_projection'])
  if int8_copy:
    return draft_model_lib.DraftModel(step_fn, cache, None, vocab_size, autoregressive=True)
  return draft_model_lib.DraftModel(step_fn, cache, settings.draft_mask_id, vocab_size)


def int8_drafter_of(config: ModelConfig, params) -> tuple[ModelConfig, dict]:
  """--drafter int8: (config, {'params', 'output_projection'}) of the model's own int8 copy (fastmt.quantize's
  'int8' scheme, float32 activations), the drafter of its speculative decoding. A model that is already 8-bit
  has no float output to be exact to: a clear error."""
  if config.quantization:
    raise FastmtError(f"drafter 'int8' (--drafter int8) drafts with an int8 copy of a float model; this model is "
                      f"already {config.quantization}: decode it with greedy, or spec with drafter 'ngram', 'bigram' "
                      "or 'pad'")
  int8_config, int8_params = precision.for_inference(config.replace(dtype='float32'), params, 'int8')
  return int8_config, {'params': int8_params, 'output_projection': transposed_output_layout(int8_params)}


class SharedInt8Copy:
  """--drafter int8's copy of one model's weights (int8_drafter_of), made on first use and then shared by every
  Translator of that model that drafts with it (spec:auto's candidates, one per width):
  Translator(..., int8_copy=shared.for_settings(settings))."""

  def __init__(self, config: ModelConfig, params):
    self._config, self._params, self._copy = config, params, None

  def for_settings(self, settings):
    """The copy for a Translator with these settings: None unless they draft with it."""
    if not registry.drafts_with_int8_copy(settings):
      return None
    if self._copy is None:
      self._copy = int8_drafter_of(self._config, self._params)
    return self._copy


def check_draft_model(draft_model, tokenizer: Tokenizer) -> None:
  """A drafter for --drafter model: trained with the selfdraft objective (its <mask> slots draft), with the
  model's vocabulary piece for piece (drafts are token ids of the model's vocabulary), possibly extended with
  pieces of its own after them (fastmt's reserved symbols appended to an older vocabulary; drafts never use
  them). Else a clear error."""
  if draft_model.objective != 'selfdraft':
    raise FastmtError(f'--drafter model needs a drafter trained with the selfdraft objective (configs/selfdraft.py); '
                      f'this one was trained with {draft_model.objective!r}')
  theirs, ours = draft_model.tokenizer, tokenizer
  if theirs.vocab_size < ours.vocab_size or draft_model.config.vocab_size != theirs.vocab_size:
    raise FastmtError(f'the drafter has a {theirs.vocab_size}-piece vocabulary (an embedding of '
                      f'{draft_model.config.vocab_size}), the model {ours.vocab_size}: a drafter shares the model\'s '
                      'vocabulary (train it on the model\'s distillation, which carries it)')
  ids = list(range(ours.vocab_size))
  differ = [i for i, (a, b) in enumerate(zip(theirs.pieces(ids), ours.pieces(ids))) if a != b]
  if differ:
    raise FastmtError(f'the drafter\'s vocabulary differs from the model\'s in {len(differ)} pieces (the first at id '
                      f'{differ[0]}): a drafter shares the model\'s vocabulary')


def source_buckets(max_length: int) -> tuple[int, ...]:
  """The padded source widths a Translator compiles for: SOURCE_BUCKETS below max_length, then max_length. A
  batch is padded to the first that holds its longest source (EOS included)."""
  return tuple(b for b in SOURCE_BUCKETS if b < max_length) + (max_length,)


def batch_rows(sentences: int, batch_size: int, devices: int = 1) -> int:
  """Rows of the static batch for `sentences` sentences: the next power of two, at most batch_size, a
  multiple of the device count. A lone sentence decodes at batch 1 instead of in a batch of padding."""
  rows = 1
  while rows < sentences:
    rows *= 2
  rows = max(sentences, min(rows, batch_size))
  return -(-rows // devices) * devices


def local_mesh() -> jax.sharding.Mesh:
  """A one-axis ('data') Mesh of every local device: decoding is data parallel, the model replicated."""
  return jax.make_mesh((jax.local_device_count(),), ('data',), axis_types=(jax.sharding.AxisType.Auto,),
                       devices=jax.local_devices())


class Translator:
  """Translates lists or streams of strings; one compiled function per (batch rows, source bucket).

  objective: the training objective of the model (fastmt.workdir.load_objective); an algorithm that cannot
    decode it is an error here, before any work.
  objective_options: that objective's recorded options (fastmt.workdir.load_objective_options): an
    interleaved model's (h, c), positions and mask, which --algorithm ib decodes with.
  mesh: where batches run; default every local device (data parallel).
  transposed_output: (default) calls over several positions or rows project to the vocabulary with the tied
    embedding transposed once (E^T laid out as [E, V], one more copy of the embedding in memory) instead of
    reading E through a transpose at every step; the same logits (make_step_fn; benchmarks/cpu_variants.py
    measures what it saves). Ignored with clusters. Or that layout itself, transposed_output_layout(params),
    made once for several translators of the same weights (TranslationModel's).
  draft_model: --algorithm spec --drafter model: the separate drafter, any object with config, params,
    tokenizer and objective (a fastmt.TranslationModel of a selfdraft model with this model's vocabulary).
  compiler_options: XLA options for compiling the decoder, e.g. {'xla_cpu_experimental_ynn_fusion_type':
    'LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT'} (XLA:CPU hands each matmul to YNNPACK on its own instead of fusing
    a whole layer stack into one YNNPACK graph; benchmarks/cpu_variants.py compares them side by side).
  float32_kernel: run a float32 model's products of at most 8 rows (a greedy step or a window of positions at
    batch 1, a batch of up to 8) through fastmt's own CPU kernel instead of XLA's (fastmt.few_rows: one more
    copy of the layers' weights, made here unless `params` come packed by few_rows.with_layout, which lets the
    Translators of one model share it; the same logits up to float32 rounding); where the kernel cannot run
    here (another backend or CPU), XLA's products, and the reason logged once. A bfloat16 or int8 model is an
    error.
  checkpoint_step: the training step of the parameters, for reports (decode_lib.load_translator sets it; None:
    not known).
  int8_copy: --drafter int8: the model's int8 copy, int8_drafter_of(config, params) of these very weights, when
    the caller holds one already, so that the translators of one model share it (spec:auto's candidates, one
    per width; SharedInt8Copy makes it once); None: made here. Only its shape can be checked: a copy of other weights drafts worse (more
    calls), the output stays this model's greedy output.
  """

  def __init__(self, config: ModelConfig, params, tokenizer: Tokenizer, settings=DecodeSettings(),
               clusters=None, draft_table=None, objective: str = 'at', mesh=None, objective_options=None,
               transposed_output=True, compiler_options: dict | None = None, draft_model=None,
               checkpoint_step: int | None = None, int8_copy=None, float32_kernel: bool = False):
    if float32_kernel and (config.quantization or config.dtype != 'float32'):
      raise FastmtError(f'float32_kernel runs a float32 model\'s products; this one decodes in {config.dtype}'
                        f'{" with " + config.quantization + " weights" if config.quantization else ""}')
    if tokenizer.vocab_size != config.vocab_size:
      raise FastmtError(f'tokenizer has {tokenizer.vocab_size} pieces but the model {config.vocab_size}')
    if settings.beam_size > config.vocab_size:  # top_k over beam x vocabulary scores: an overflow, or gigabytes
      raise FastmtError(f'beam_size {settings.beam_size} is larger than the vocabulary ({config.vocab_size} pieces): '
                        'a beam holds distinct continuations, at most one per piece')
    if clusters is not None and clusters.vocab_size != config.vocab_size:
      raise FastmtError(f'clusters were built for a {clusters.vocab_size}-token vocabulary, the model has '
                        f'{config.vocab_size}')
    registry.check_objective(settings.algorithm, objective)
    if objective == 'interleaved':
      layout = objectives.interleaving_from(objective_options).with_start_ids(tokenizer)
      if layout.direction_embeddings and config.num_directions != layout.directions:
        raise FastmtError(f'the model has {config.num_directions} direction embeddings, its interleaving '
                          f'{layout.directions} directions')
      settings = dataclasses.replace(settings, interleaving=layout)
    if objective == 'hrt' and settings.algorithm != 'hrt' and not objectives.hrt_from(objective_options).curriculum:
      # Allowed (BENCHMARKS' ablation of HRT Table 5 measures it), but never what a user wants by accident.
      logger.warning('this HRT model was trained without the curriculum (the skip tasks from the first step): its '
                     'left-to-right tasks were never trained, so --algorithm %s (C_d = 1) decodes it poorly (the HRT '
                     'paper: 5.18 BLEU; docs/BENCHMARKS.md: 0.69); --algorithm hrt is its decoding',
                     settings.algorithm)
    if objective == 'hrt' and settings.algorithm == 'hrt':
      options = objectives.hrt_from(objective_options)
      if settings.chunk_size not in (0, options.chunk_size):
        raise FastmtError(f'this HRT model was trained with chunk size {options.chunk_size}, not '
                          f'{settings.chunk_size} (chunk size 1 is --algorithm greedy or beam)')
      settings = dataclasses.replace(settings, chunk_size=options.chunk_size,
                                     hrt_symbols=hrt_objective.special_ids(options, tokenizer))
    registry.check_drafter(settings, objective)
    if settings.algorithm == 'spec' and settings.drafter == 'self':
      settings = dataclasses.replace(settings, draft_mask_id=selfdraft.mask_id_of(tokenizer))
    uses_draft_model = registry.get(settings.algorithm).uses_draft_model(settings)
    if uses_draft_model:
      if draft_model is None:
        raise FastmtError('--drafter model needs a drafter model (decode.py --drafter_workdir; draft_model= in '
                          'fastmt)')
      check_draft_model(draft_model, tokenizer)
      settings = dataclasses.replace(settings, draft_mask_id=selfdraft.mask_id_of(draft_model.tokenizer),
                                     draft_model_config=draft_model.config)
    elif draft_model is not None:
      raise FastmtError("a drafter model (draft_model=; decode.py --drafter_workdir) drafts for algorithm 'spec' "
                        "with drafter 'model' only")
    int8_drafter = None
    if registry.drafts_with_int8_copy(settings):
      if int8_copy is None:
        int8_copy = int8_drafter_of(config, params)
      elif int8_copy[0] != config.replace(dtype='float32', quantization='int8'):
        raise FastmtError(f'int8_copy is the int8 copy of a model of another shape ({int8_copy[0]}); this model '
                          'drafts with int8_drafter_of(config, params) of its own weights')
      int8_config, int8_drafter = int8_copy
      settings = dataclasses.replace(settings, draft_model_config=int8_config)
    elif int8_copy is not None:
      raise FastmtError("int8_copy drafts for algorithm 'spec' with drafter 'int8' only")
    self.config, self.tokenizer, self.settings, self.objective = config, tokenizer, settings, objective
    self.checkpoint_step = checkpoint_step
    if registry.needs_draft_table(settings) and draft_table is None:
      needs = ('--drafter bigram' if settings.algorithm == 'spec' and settings.drafter == 'bigram'
               else 'jacobi_init=bigram')
      raise FastmtError(f'{needs} needs a draft table (decode_lib.load_draft_table(workdir))')
    if draft_table is not None and np.shape(draft_table) != (config.vocab_size,):
      raise FastmtError(f'draft table has shape {np.shape(draft_table)}, the model a {config.vocab_size} '
                        'vocabulary')
    if draft_table is not None and not ((np.asarray(draft_table) >= 0) & (np.asarray(draft_table) <
                                                                          config.vocab_size)).all():
      raise FastmtError(f'draft table holds ids outside the model\'s vocabulary [0, {config.vocab_size}): a table '
                        'of another vocabulary (decode_lib.load_draft_table builds this model\'s)')
    self.mesh = mesh or local_mesh()
    self.rows_sharding = NamedSharding(self.mesh, P('data'))  # batch rows split over the devices
    replicated = NamedSharding(self.mesh, P())
    self.float32_kernel = float32_kernel and kernels.available('float32')
    # Parameters packed once by the caller (few_rows.with_layout: one copy for every Translator of a model) are
    # used as they are; packed ones without float32_kernel lose the packing (the layers would use it).
    if self.float32_kernel and not few_rows.has_layout(params):
      params = few_rows.with_layout(params)
    elif not self.float32_kernel and few_rows.has_layout(params):
      params = few_rows.without_layout(params)
    self.params = jax.device_put(params, replicated)
    self.clusters = None if clusters is None else jax.device_put(clusters, replicated)
    if clusters is not None and settings.algorithm in _WINDOW_ALGORITHMS:
      logger.warning('--algorithm %s with the clustered projection: its output can differ from clustered greedy\'s '
                     '(the union of active sets covers the window\'s guessed positions too: fastmt.projection); it '
                     'equals greedy\'s with the dense projection', settings.algorithm)
    self.draft_table = None if draft_table is None else jax.device_put(jnp.asarray(draft_table, jnp.int32),
                                                                       replicated)
    self.output_projection = None
    if clusters is None and not (isinstance(transposed_output, bool) and not transposed_output):
      # True: laid out here; a layout made once by the caller (transposed_output_layout(params); a
      # TranslationModel's for all its translators) is used as it is: one copy, not one per translator.
      layout = transposed_output_layout(params) if isinstance(transposed_output, bool) else transposed_output
      embedding = params['embed']['embedding']
      laid_out = layout['values'] if isinstance(layout, dict) else layout
      if np.shape(laid_out) != tuple(reversed(np.shape(embedding))) or \
          isinstance(layout, dict) != ('scale' in params['embed']):
        raise FastmtError(f'transposed_output: a layout of shape {np.shape(laid_out)} for an embedding of shape '
                          f'{np.shape(embedding)}: give transposed_output_layout(params) of these parameters')
      self.output_projection = jax.device_put(layout, replicated)
    self.drafter = None
    if uses_draft_model:  # the drafter projects W positions per row (its causal slot, W - 1 masks): E^T's case
      drafter_params = draft_model.params
      if self.float32_kernel and draft_model.config.dtype == 'float32' and not draft_model.config.quantization:
        drafter_params = few_rows.with_layout(drafter_params)  # its calls are 2W + 1 positions a row
      self.drafter = jax.device_put({'params': drafter_params,
                                     'output_projection': transposed_output_layout(draft_model.params)}, replicated)
    elif int8_drafter is not None:
      self.drafter = jax.device_put(int8_drafter, replicated)
    # --drafter ngram's memory of earlier outputs (tokens; 0 = none): one more input of every compiled decoder.
    self.recent_size = settings.ngram_memory if registry.get(settings.algorithm).uses_recent_outputs(settings) else 0
    self._decode = jax.jit(functools.partial(decode_source_batch, config=config, settings=settings))
    # (rows, bucket) -> compiled executable; the least recently used may be dropped (fastmt.executables)
    self._compiled = {}
    self._compile_lock = threading.Lock()  # threads sharing a translator compile each new shape once
    self._first_device_weights = None  # _weights(one_device=True)'s, made when first needed
    self.compiler_options = dict(compiler_options or {})
    self.buckets = source_buckets(config.max_length)

  def encode_sources(self, texts, stats: TranslationStats, line_numbers=None):
    """Token ids with EOS, truncated to the model's maximum (counted; the warning names the input line,
    blank lines counted, from line_numbers when given)."""
    return self._with_eos(self.tokenizer.encode(texts), stats, line_numbers)

  def _with_eos(self, rows, stats: TranslationStats, line_numbers=None):
    """Tokenizer rows -> encode_sources' ids: truncated to the model's maximum (counted), then EOS."""
    ids = []
    for i, row in enumerate(rows):
      if len(row) + 1 > self.config.max_length:
        stats.truncated_inputs += 1
        line = line_numbers[i] if line_numbers is not None else i + 1
        logger.warning('Input line %d has %d tokens; truncated to the model maximum %d', line, len(row) + 1,
                       self.config.max_length)
        row = row[:self.config.max_length - 1]
      ids.append(np.append(row, EOS_ID).astype(np.int32))
    return ids

  def decodable(self, texts) -> list[int]:
    """Indices of the texts that are decoded: with a visible character (has_visible_text) that the tokenizer
    keeps and can spell (not only <unk>). The others translate to an empty line without decoding (translate()
    asks the same question)."""
    return self._decodable_rows(texts)[0]

  def _decodable_rows(self, texts):
    """(indices of the decodable texts, their tokenizer rows, indices of the unreadable ones): the one
    definition of a line worth decoding. Unreadable: every piece <unk> (Tokenizer.spells_nothing), a line in a
    script or symbols the vocabulary lacks; decoding it would only invent a sentence."""
    visible = [i for i, t in enumerate(texts) if has_visible_text(t)]
    rows = self.tokenizer.encode([texts[i] for i in visible])
    kept, unreadable = [], []
    for k, row in enumerate(rows):
      if len(row):
        (unreadable if self.tokenizer.spells_nothing(row) else kept).append(k)
    return [visible[k] for k in kept], [rows[k] for k in kept], [visible[k] for k in unreadable]

  def row_cap(self, source_length: int) -> int:
    return output_cap(self.config, source_length, self.settings)

  def batches(self, source_ids, batch_size: int):
    """Yields (input indices, padded source [rows, bucket], row caps [rows]); sentences sorted by length.

    rows = batch_rows(len(indices)): a short input makes a small batch; padding rows have cap 0.
    """
    registry.check_whole_number('batch_size', batch_size)
    if batch_size < 1:
      raise FastmtError(f'batch_size must be >= 1, got {batch_size}')
    order = sorted(range(len(source_ids)), key=lambda i: len(source_ids[i]))
    for start in range(0, len(order), batch_size):
      indices = order[start:start + batch_size]
      bucket = next(b for b in self.buckets if b >= max(len(source_ids[i]) for i in indices))
      # Fewer sentences than devices (a lone sentence on a TPU's 8 cores): one device decodes them (decode_batch)
      # rather than every device a row, mostly padding, with the devices agreeing after every step.
      devices = self.mesh.size if len(indices) >= self.mesh.size else 1
      rows = batch_rows(len(indices), batch_size, devices)
      source = np.full((rows, bucket), PAD_ID, np.int32)
      caps = np.zeros((rows,), np.int32)
      for row, i in enumerate(indices):
        source[row, :len(source_ids[i])] = source_ids[i]
        caps[row] = self.row_cap(len(source_ids[i]))
      yield indices, source, caps

  def _executable(self, rows: int, bucket: int, stats: TranslationStats | None):
    """The compiled decoder of one (rows, bucket) shape, compiled ahead of time so its cost is counted."""
    key = (rows, bucket)
    # get, not `in` then [key]: the process's registry (fastmt.executables) may drop it from another thread.
    executable = self._compiled.get(key)
    if executable is None:
      with self._compile_lock:
        executable = self._compiled.get(key)  # another thread may have compiled it while this one waited
        if executable is None:
          executable = self._compile(rows, bucket, stats)
    executables.PROCESS.used(self, key)
    return executable

  def on_one_device(self, rows: int) -> bool:
    """Whether a batch of `rows` rows decodes on the first device alone: on several devices, a batch that does
    not split evenly over them (fewer rows than devices: batches() makes such batches only then)."""
    return self.mesh.size > 1 and rows % self.mesh.size != 0

  def _weights(self, one_device: bool) -> tuple:
    """(params, clusters, draft_table, output_projection, drafter) as the executable takes them: replicated over
    the mesh, or the first device's copies (views of the replicated arrays' buffers there, made once)."""
    weights = (self.params, self.clusters, self.draft_table, self.output_projection, self.drafter)
    if not one_device:
      return weights
    if self._first_device_weights is None:
      device = self.mesh.devices.flat[0]
      first = lambda x: next(s.data for s in x.addressable_shards if s.device == device) \
          if isinstance(x, jax.Array) else x
      self._first_device_weights = jax.tree_util.tree_map(first, weights)
    return self._first_device_weights

  def _compile(self, rows: int, bucket: int, stats: TranslationStats | None):
    executables.PROCESS.make_room()  # under vm.max_map_count: XLA aborts a compile that meets it
    start = time.perf_counter()
    one_device = self.on_one_device(rows)
    rows_sharding = jax.sharding.SingleDeviceSharding(self.mesh.devices.flat[0]) if one_device else self.rows_sharding
    spec = lambda shape: jax.ShapeDtypeStruct(shape, jnp.int32, sharding=rows_sharding)
    recent = None
    if self.recent_size:
      recent = jax.ShapeDtypeStruct((self.recent_size,), jnp.int32,
                                    sharding=rows_sharding if one_device else NamedSharding(self.mesh, P()))
    params, clusters, draft_table, output_projection, drafter = self._weights(one_device)
    executable = self._decode.lower(params, spec((rows, bucket)), spec((rows,)), clusters, draft_table,
                                    output_projection, drafter, recent).compile(self.compiler_options or None)
    if stats is not None:
      stats.compile_seconds += time.perf_counter() - start
    self._compiled[(rows, bucket)] = executable
    executables.PROCESS.kept(self, (rows, bucket))
    return executable

  def decode_batch(self, source: np.ndarray, row_caps=None, stats: TranslationStats | None = None,
                   recent_outputs=None) -> DecodeOutput:
    """Decodes one padded batch (row_caps default: each row's cap from its own non-PAD length).

    recent_outputs: with --drafter ngram and ngram_memory, int32 [ngram_memory] (drafts.remember_outputs) of
    what was translated before; None = nothing yet. Ignored otherwise. It changes the number of calls only,
    never the output.
    """
    source = np.asarray(source, np.int32)
    recent = None
    if self.recent_size:
      recent = np.full((self.recent_size,), PAD_ID, np.int32) if recent_outputs is None else \
          np.asarray(recent_outputs, np.int32)
      if recent.shape != (self.recent_size,):
        raise FastmtError(f'recent_outputs has shape {recent.shape}; this translator remembers '
                          f'{self.recent_size} tokens (ngram_memory)')
    if row_caps is None:
      lengths = (source != PAD_ID).sum(1)
      row_caps = np.array([self.row_cap(n) if n else 0 for n in lengths], np.int32)
    executable = self._executable(*source.shape, stats)
    first_device_only = self.on_one_device(source.shape[0])  # a batch too small to split over the devices
    if self.mesh.size == 1 or first_device_only:
      # One device: the executable places host arrays itself. A jax.device_put of each first cost 0.2-0.8 ms
      # more per call on XLA:CPU (benchmarks/dispatch_cost.py, docs/BENCHMARKS.md section 1), which a batch-1
      # caller pays per line.
      put = lambda x: np.asarray(x, np.int32)
    else:
      put = lambda x: jax.device_put(np.asarray(x, np.int32), self.rows_sharding)
      if recent is not None:
        recent = jax.device_put(recent, NamedSharding(self.mesh, P()))
    params, clusters, draft_table, output_projection, drafter = self._weights(first_device_only)
    return jax.block_until_ready(executable(params, put(source), put(row_caps), clusters, draft_table,
                                            output_projection, drafter, recent))

  def _decode_chunk(self, texts, batch_size: int, stats: TranslationStats, first_line: int,
                    recent: list | None = None, lines_at_cap: list | None = None,
                    every_line_at_cap: list | None = None, lines_emptied: list | None = None) -> Iterator[dict]:
    """Decodes a chunk of lines; after every batch yields {index in chunk: (output ids, text)} of what
    finished: the text is detokenised here, once, since counting the outputs of no text needs it anyway.

    recent: [int32 [ngram_memory]] (a one-item list, updated in place after every batch) where the decoder
    drafts from earlier outputs, else None. lines_at_cap: the input line numbers of outputs at the cap are
    kept in it (the first _LINES_AT_CAP_NAMED of the input so far), for the warning; every_line_at_cap: all of them.
    lines_emptied: likewise the input lines of the non-empty inputs whose output is empty.
    """
    for i, t in enumerate(texts):
      if not isinstance(t, str):
        raise FastmtError(f'input {first_line + i}: a line to translate must be a str, got {type(t).__name__}')
      try:
        t.encode('utf-8')
      except UnicodeEncodeError as e:  # else the tokenizer's own error, naming no line
        raise FastmtError(f'input {first_line + i}: not valid Unicode text ({t[e.start]!r} at character {e.start}, '
                          'a lone surrogate: bytes read with errors="surrogateescape"?); read the text with '
                          'errors="replace" to translate it with U+FFFD in place of what is not UTF-8') from None
    nonempty, rows, unreadable = self._decodable_rows(texts)
    source_ids = self._with_eos(rows, stats, [first_line + i for i in nonempty])
    stats.sentences += len(texts)
    stats.empty_inputs += len(texts) - len(nonempty)
    stats.unreadable_inputs += len(unreadable)
    if unreadable:
      named = ', '.join(str(first_line + i) for i in unreadable[:_LINES_AT_CAP_NAMED])
      plural = 's' * (len(unreadable) > 1)
      logger.warning(UNREADABLE_WARNING, len(unreadable), plural, plural, named,
                     ', ...' if len(unreadable) > _LINES_AT_CAP_NAMED else '')
    empty = {i: (np.zeros((0,), np.int32), '') for i in sorted(set(range(len(texts))) - set(nonempty))}
    if empty:
      yield empty
    for indices, source, caps in self.batches(source_ids, batch_size):
      result = jax.device_get(self.decode_batch(source, caps, stats, recent[0] if recent else None))  # one transfer
      real = len(indices)
      tokens = result.tokens[:real]
      stats.batches += 1
      stats.padding_rows += source.shape[0] - real
      stats.decoder_calls += int(result.decoder_calls[:real].sum())
      if result.drafter_calls is not None:
        stats.drafter_calls += int(result.drafter_calls[:real].sum())
      stats.loop_iterations += int(result.loop_iterations)
      at_cap = ~(tokens == EOS_ID).any(-1)
      stats.outputs_at_cap += int(at_cap.sum())
      stats.outputs_with_unknown += int((tokens == UNK_ID).any(-1).sum())
      cut_lines = sorted(first_line + nonempty[i] for i, cut in zip(indices, at_cap) if cut)
      if lines_at_cap is not None:  # the first lines of the input, not of the batches (sorted by length)
        lines_at_cap[:] = heapq.nsmallest(_LINES_AT_CAP_NAMED, lines_at_cap + cut_lines)
      if every_line_at_cap is not None:
        every_line_at_cap.extend(cut_lines)
      stats.output_tokens += int(((tokens != PAD_ID) & (tokens != EOS_ID)).sum())
      outputs = []
      for row in tokens:
        eos = np.flatnonzero(row == EOS_ID)
        outputs.append(row[:eos[0]] if len(eos) else row[row != PAD_ID])
      outputs_text = self.tokenizer.decode(outputs)  # one call for the batch
      # No text: EOS first, or only pieces that give none (a lone word boundary, the reserved symbols, BOS;
      # a weak model or a tight repetition guard makes them).
      emptied = [i for i, text in zip(indices, outputs_text) if not text.strip()]
      stats.empty_outputs += len(emptied)
      if lines_emptied is not None:
        lines_emptied[:] = heapq.nsmallest(_LINES_AT_CAP_NAMED, lines_emptied + [
            first_line + nonempty[i] for i in emptied])
      if recent:
        recent[0] = drafts.remember_outputs(recent[0], outputs)
      yield {nonempty[i]: pair for i, pair in zip(indices, zip(outputs, outputs_text))}

  def iter_ids(self, texts: Iterable[str], batch_size: int = 32, stats: TranslationStats | None = None,
               chunk_sentences: int = 4096, lines_at_cap: list | None = None,
               stream: bool = False, first_line: int = 1) -> Iterator[np.ndarray]:
    """Output ids per input line (without EOS; empty for a blank line), in input order, as they finish.
    Arguments as in iter_outputs."""
    # closing: a caller that stops early stops iter_outputs (and a stream's reader) now, not when collected
    with contextlib.closing(self.iter_outputs(texts, batch_size, stats, chunk_sentences, lines_at_cap, stream,
                                              first_line)) as outputs:
      for ids, _ in outputs:
        yield ids

  def iter_outputs(self, texts: Iterable[str], batch_size: int = 32, stats: TranslationStats | None = None,
                   chunk_sentences: int = 4096, lines_at_cap: list | None = None,
                   stream: bool = False, first_line: int = 1) -> Iterator[tuple[np.ndarray, str]]:
    """(output ids, translation) per input line (the ids without EOS; empty, and '', for a blank line), in input
    order, as they finish.

    Reads chunk_sentences lines at a time: memory holds one chunk's tensors, whatever the input's size. With
    stream=True a chunk is the lines that have arrived, at most chunk_sentences (fastmt.streaming): a line
    typed, or sent through a pipe or a queue, is translated without waiting for the lines after it.
    With --drafter ngram and ngram_memory, the drafts also come from the outputs of this stream's earlier
    batches (a fresh memory per call: one call's speed never depends on what an earlier call translated).
    lines_at_cap: if a list, the input line numbers (from first_line) of every output that reached the output
    cap without EOS are added to it, in no particular order (fastmt.distill keeps them out of a student's
    targets). first_line: the number of the first line, in warnings and lines_at_cap (a later chunk of a file).
    """
    if isinstance(texts, str):  # it would be read character by character, each a sentence
      raise FastmtError('give the lines to translate as a list (or any iterable of lines), not one string: '
                        f'[{texts[:40]!r}{"..." if len(texts) > 40 else ""}]')
    for name, value in (('batch_size', batch_size), ('chunk_sentences', chunk_sentences)):
      registry.check_whole_number(name, value)  # a chunk of 0 lines ended the input at once: nothing translated
      if value < 1:
        raise FastmtError(f'{name} must be >= 1, got {value}')
    stats = _stats_or_new(stats)
    lines = iter(texts)
    recent = [np.full((self.recent_size,), PAD_ID, np.int32)] if self.recent_size else None
    at_cap_before, named_at_cap = stats.outputs_at_cap, []  # the warning is this call's (stats may add up calls)
    emptied_before, named_emptied = stats.empty_outputs, []
    chunks = (streaming.available_chunks(lines, chunk_sentences) if stream
              else iter(lambda: list(itertools.islice(lines, chunk_sentences)), []))
    try:
      for chunk in chunks:
        ready, next_index = {}, 0
        for finished in self._decode_chunk(chunk, batch_size, stats, first_line, recent, named_at_cap,
                                           lines_at_cap, named_emptied):
          ready.update(finished)
          while next_index in ready:
            yield ready.pop(next_index)
            next_index += 1
        first_line += len(chunk)
    finally:
      if stream:  # a caller that stops early stops the reader too, now rather than when chunks is collected
        chunks.close()
    at_cap = stats.outputs_at_cap - at_cap_before
    if at_cap:
      named = sorted(named_at_cap)
      more = ', ...' if at_cap > len(named) else ''
      logger.warning(OUTPUT_CAP_WARNING, at_cap, 's' * (at_cap > 1), 's' * (at_cap > 1),
                     ', '.join(map(str, named)), more)
    emptied = stats.empty_outputs - emptied_before
    if emptied:
      logger.warning(EMPTY_OUTPUT_WARNING, emptied, 's' * (emptied > 1), 's' * (emptied > 1),
                     ', '.join(map(str, sorted(named_emptied))), ', ...' if emptied > len(named_emptied) else '')

  def translate_iter(self, texts: Iterable[str], batch_size: int = 32, stats: TranslationStats | None = None,
                     chunk_sentences: int = 4096, stream: bool = False) -> Iterator[str]:
    """Translations in input order, streamed (see iter_outputs, and its stream for an interactive input); a
    blank line gives an empty line."""
    with contextlib.closing(self.iter_outputs(texts, batch_size, stats, chunk_sentences, stream=stream)) as outputs:
      for _, text in outputs:
        yield text

  def translate_ids(self, texts: Iterable[str], batch_size: int = 32, stats: TranslationStats | None = None,
                    lines_at_cap: list | None = None, first_line: int = 1):
    """(output ids per input, statistics): the ids up to EOS, without it; empty for empty inputs. `stats`
    (new if None) is added to; lines_at_cap as in iter_ids. texts: a list, or any iterable of lines (read
    whole: one chunk; translate_iter streams)."""
    outputs, stats = self._all_outputs(texts, batch_size, stats, lines_at_cap, first_line)
    return [ids for ids, _ in outputs], stats

  def translate(self, texts: Iterable[str], batch_size: int = 32, stats: TranslationStats | None = None,
                lines_at_cap: list | None = None, first_line: int = 1) -> tuple[list[str], TranslationStats]:
    """Translations in input order; an empty (or blank) line gives an empty line without decoding.
    lines_at_cap and first_line as in iter_outputs."""
    outputs, stats = self._all_outputs(texts, batch_size, stats, lines_at_cap, first_line)
    return [text for _, text in outputs], stats

  def _all_outputs(self, texts, batch_size, stats, lines_at_cap, first_line):
    """([(ids, text)] of every line, read whole as one chunk, statistics)."""
    if not isinstance(texts, (str, collections.abc.Sequence)):
      texts = list(texts)  # a generator or a file: its length sizes the one chunk
    stats = _stats_or_new(stats)
    return list(self.iter_outputs(texts, batch_size, stats, chunk_sentences=max(1, len(texts)),
                                  lines_at_cap=lines_at_cap, first_line=first_line)), stats
