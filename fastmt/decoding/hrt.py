"""Hybrid-regressive decoding: two masked passes of one shared decoder (HRT Section 4.3, RoyalFlush Eq. 2).

Stage I (Skip-AT): autoregressive over every k-th position, from <bos_k>, with the KV cache, until EOS; at most
max(L // k, 1) calls for the maximum length L, so stage II never exceeds L slots (or k for L below k), and
ceil(cap / k) for a row's own lower cap (the output is then cut to its cap, as greedy's is). It is greedy_search or
beam search on a decoder step that feeds position p as p * k and the start symbol as <bos_k>.
Stage II (Skip-CMLM): one decoder call over the k - 1 masks placed before every stage-I token, with a
bidirectional mask over the row's real slots, projected to the vocabulary at the masks only; each mask takes
its argmax; the result is cut at its first EOS.

With beam sizes b_at >= b_nat the top b_nat stage-I hypotheses go through stage II and the best total
score wins: Skip-AT log-probability + the Skip-CMLM log-probabilities of the filled masks (Eq. 2). "Top"
is the beam's own ranking, by its length-penalised score (alpha); Eq. 2 then adds the raw Skip-AT
log-probability (RoyalFlush does not say which ranking picks the b_nat; with b_nat = 1 this is the beam's
best hypothesis).
Stage II runs on the b_at rows per sentence the step function was built for (the memory is expanded once):
the rows beyond b_nat are all PAD and their scores ignored.
"""

import inspect

import jax
import jax.numpy as jnp
import numpy as np

from fastmt.decoding import chunks, repeats
from fastmt.decoding.beam import beam_search_top
from fastmt.decoding.greedy import DecodeOutput, greedy_search, row_limits
from fastmt.decoding.step import (PAD_ID, DecoderStepFn, best_tokens, cache_slots, check_counts, checked_step_output,
                                  is_whole_number)



def stage_one_caps(caps: jax.Array, k: int, max_length: int) -> jax.Array:
  """Skip-AT calls allowed per row: ceil(cap / k), so stage II reaches the row's own cap (the output is then
  cut to it), but at most max(max_length // k, 1), the bound of the papers (stage II never exceeds the
  allocation of max_length slots); 0 for a padding row. cap // k would end a row whose cap k does not divide
  up to k - 1 tokens before greedy's cap: a translation that fits the cap lost its last word or its EOS."""
  bound = max(max_length // k, 1)
  return jnp.where(caps > 0, jnp.minimum(-(-caps // k), bound), 0).astype(jnp.int32)


def skip_step(step_fn: DecoderStepFn, k: int, bos_k_id: int) -> DecoderStepFn:
  """The Skip-AT view of a decoder step: input position p is position p * k, the start symbol <bos_k>."""
  def step(tokens, positions, self_mask, cache, write_offsets):
    tokens = jnp.where(positions == 0, bos_k_id, tokens)
    output = step_fn(tokens, positions * k, self_mask, cache, write_offsets)
    return checked_step_output(output, *tokens.shape, (bos_k_id,))  # <bos_k> in the vocabulary
  return step


def accepts_projection(step_fn) -> bool:
  """Whether step_fn takes the optional `project` keyword by name (fastmt's step functions do; a step function
  written to docs/API.md's plain contract need not). A **kwargs catch-all does not count: a step function that
  takes `directions=` that way for the interleaved decoders returned every position's logits to `project`."""
  try:
    parameters = inspect.signature(step_fn).parameters.values()
  except (TypeError, ValueError):  # no signature to read (a C callable): fastmt's contract assumed
    return True
  return any(p.name == 'project' and p.kind is not inspect.Parameter.POSITIONAL_ONLY for p in parameters)


def fill_masks(step_fn: DecoderStepFn, cache, skip_tokens: jax.Array, k: int, mask_id: int):
  """Stage II on rows of stage-I outputs [R, m] (EOS then PAD): (filled tokens [R, m * k] cut at the first
  EOS, log-probability of the filled masks [R])."""
  x = chunks.masked_input(skip_tokens, k, mask_id)
  rows, length = x.shape
  cache_length = jax.tree_util.tree_leaves(cache)[0].shape[1]
  if cache_length < length:
    raise ValueError(f'cache has {cache_length} slots, stage II needs {length}')
  fresh = jax.tree_util.tree_map(lambda c: jnp.zeros_like(c[:, :length]), cache)  # one pass: `length` slots
  visible = x != PAD_ID  # every real slot sees every other
  mask = jnp.broadcast_to(visible[:, None, :], (rows, length, length))
  positions = jnp.broadcast_to(jnp.arange(1, length + 1, dtype=jnp.int32), (rows, length))
  # Logits at the masks only (the first k - 1 slots of every chunk): the stage-I slots already hold their
  # tokens, and fastmt's step function then runs its last layer and the output projection at the masks alone.
  slots = np.flatnonzero(~chunks.is_chunk_last(length, k))
  offsets = jnp.zeros((rows,), jnp.int32)
  if accepts_projection(step_fn):
    output = step_fn(x, positions, mask, fresh, offsets, project=slots)
  else:  # a step function of the plain contract (docs/API.md): all positions' logits, the masks' taken
    logits, cache = checked_step_output(step_fn(x, positions, mask, fresh, offsets), rows, length)
    output = logits[:, slots], cache
  logits, _ = checked_step_output(output, rows, len(slots), (mask_id,))
  best = best_tokens(logits)  # on the logits: greedy needs no softmax
  is_mask = x[:, slots] == mask_id  # False in a PAD chunk (after the row's stage-I EOS)
  filled = x.at[:, slots].set(jnp.where(is_mask, best, x[:, slots]))
  # Only Eq. 2 (beams) reads the score; under jit an unread score costs nothing.
  best_log_prob = jnp.max(logits, axis=-1) - jax.nn.logsumexp(logits.astype(jnp.float32), axis=-1)
  score = jnp.where(is_mask, best_log_prob, 0.0).sum(-1)
  return chunks.truncate_at_first_eos(filled), score


def stage_two_sizes(m: int) -> list[int]:
  """The stage-I lengths fill_masks_bucketed compiles a branch for, up to m: every multiple of 8 to 64, then a
  quarter of the power of two below apart (80, 96, 112, 128, 160, ...), then m. The batch's longest row of n
  stage-I tokens runs in a branch at most max(7, n // 4) tokens longer (k times as many slots); powers of two
  wasted up to half the pass (measured on 2 CPU cores: HRT k=2 at batch 32 1.05x -> 1.15x AT's speed; at batch
  1 no change). More branches, more to compile: 8 instead of 4 for m = 64."""
  sizes, size = {m}, 8
  while size < m:
    sizes.add(size)
    size += max(8, (1 << (size.bit_length() - 1)) // 4)
  return sorted(sizes)


def fill_masks_bucketed(step_fn: DecoderStepFn, cache, skip_tokens: jax.Array, k: int, mask_id: int):
  """fill_masks over only as many stage-I tokens as the longest row has (rounded up to one of
  stage_two_sizes), chosen at run time with lax.switch: stage II is one pass over L positions, and the cap L
  of a batch's source bucket is often twice its longest output. The same result as fill_masks on all [R, m]."""
  rows, m = skip_tokens.shape
  sizes = stage_two_sizes(m)
  # The end of the last non-PAD token, not the count of them: a PAD predicted before a row's EOS (which a trained
  # model hardly ever does, as PAD is never a target) would otherwise choose a bucket that cuts off its tail.
  positions = jnp.arange(1, m + 1)[None, :]
  used = jnp.max(jnp.where(skip_tokens != PAD_ID, positions, 0))

  def branch(size):
    def run(tokens):
      filled, score = fill_masks(step_fn, cache, tokens[:, :size], k, mask_id)
      return jnp.pad(filled, ((0, 0), (0, (m - size) * k))), score
    return run

  index = jnp.searchsorted(jnp.asarray(sizes), used)  # the smallest bucket that holds every row
  return jax.lax.switch(jnp.minimum(index, len(sizes) - 1), [branch(size) for size in sizes], skip_tokens)


def _fit(tokens: jax.Array, caps: jax.Array, max_length: int) -> jax.Array:
  """[B, T] -> [B, max_length], each row cut at its own cap."""
  width = tokens.shape[1]
  tokens = jnp.pad(tokens, ((0, 0), (0, max(0, max_length - width))))[:, :max_length]
  return jnp.where(jnp.arange(max_length)[None, :] < caps[:, None], tokens, PAD_ID)


def _stage_one_inputs(step_fn: DecoderStepFn, cache, max_length: int, k: int, bos_k_id: int, caps: jax.Array):
  """(Skip-AT step, its cache, its length, its per-row caps): stage I writes max_length // k slots, so it runs
  on a cache of that length (less attention per step than max_length)."""
  first_length = max(1, max_length // k)
  first_cache = jax.tree_util.tree_map(lambda c: c[:, :first_length], cache)
  return skip_step(step_fn, k, bos_k_id), first_cache, first_length, stage_one_caps(caps, k, max_length)


def stage_one_greedy(step_fn: DecoderStepFn, cache, batch_size: int, max_length: int, k: int, bos_k_id: int,
                     caps: jax.Array, max_repeats: int = 0) -> DecodeOutput:
  """Stage I alone with b_at = 1 (greedy Skip-AT; tokens [B, max_length // k]): what hrt_decode runs before
  stage II, and what benchmarks/hrt_cost.py times on its own. max_repeats: greedy_search's repetition guard on
  the Skip-AT tokens (a loop of one or of k tokens in the output repeats one token there)."""
  skip, first_cache, first_length, first_caps = _stage_one_inputs(step_fn, cache, max_length, k, bos_k_id, caps)
  return greedy_search(skip, first_cache, batch_size, first_length, first_caps, max_repeats=max_repeats)


def hrt_decode(step_fn: DecoderStepFn, cache, batch_size: int, max_length: int, chunk_size: int, mask_id: int,
               bos_k_id: int, beam_size: int = 1, nat_beam_size: int = 1, alpha: float = 0.6,
               row_caps: jax.Array | None = None, max_repeats: int = 0) -> DecodeOutput:
  """Two-stage HRT decoding; step_fn and cache on batch_size * beam_size rows, cache of max_length slots.

  mask_id, bos_k_id: the model's <mask> and <bos_k> ids (k = chunk_size); BOS, EOS and PAD are fastmt's
    (chunks.py's layout is built on them: a model trained by fastmt's HRT objective has them).
  beam_size, nat_beam_size: b_at >= b_nat (1, 1 = greedy stage I); alpha: stage I's length penalty (beam only).
  row_caps: optional int32 [B], each sentence's own output cap (<= max_length); 0 = a padding sentence.
  Returns DecodeOutput: tokens int32 [B, max_length] (words, EOS, PAD; each row cut at its cap), decoder_calls
  [B] (stage I's calls plus the one stage II call), loop_iterations. max_repeats (greedy stage I only; 0 =
  off): the repetition guard (fastmt.decoding.repeats) on stage I's tokens, and on the two stages' output.
  """
  check_counts(batch_size=batch_size, max_length=max_length, chunk_size=chunk_size, beam_size=beam_size,
               nat_beam_size=nat_beam_size)
  for name, value in (('mask_id', mask_id), ('bos_k_id', bos_k_id)):  # a vocabulary's ids: checked in the calls
    if not is_whole_number(value) or value < 0:
      raise ValueError(f'{name} must be a token id (an int >= 0), got {value!r}')
  cache_slots(cache, batch_size * beam_size)
  k = chunk_size
  if not 1 <= nat_beam_size <= beam_size:
    raise ValueError(f'HRT needs 1 <= nat_beam_size <= beam_size, got {nat_beam_size} and {beam_size}')
  repeats.check_max_repeats(max_repeats)
  if max_repeats and beam_size > 1:
    raise ValueError('the repetition guard (max_repeats) acts on greedy stage I only (beam_size 1)')
  caps = row_limits(batch_size, max_length, row_caps)
  if beam_size == 1:
    first = stage_one_greedy(step_fn, cache, batch_size, max_length, k, bos_k_id, caps, max_repeats)
    tokens, _ = fill_masks_bucketed(step_fn, cache, first.tokens, k, mask_id)
    calls = first.decoder_calls + (caps > 0)
    tokens = _fit(tokens, caps, max_length)
    if max_repeats:  # a run that stage II's words make with stage I's
      tokens, _ = repeats.cut_first_run(tokens, max_repeats)
    return DecodeOutput(tokens, calls, first.loop_iterations + 1)

  skip, first_cache, first_length, first_caps = _stage_one_inputs(step_fn, cache, max_length, k, bos_k_id, caps)
  first, skip_scores = beam_search_top(skip, first_cache, batch_size, beam_size, first_length, nat_beam_size,
                                       alpha, first_caps)
  # Stage II rows: the top b_nat hypotheses in a sentence's first b_nat beam rows, PAD rows after them.
  rows = jnp.pad(first.tokens, ((0, 0), (0, beam_size - nat_beam_size), (0, 0)))
  filled, nat_scores = fill_masks_bucketed(step_fn, cache, rows.reshape(batch_size * beam_size, -1), k, mask_id)
  filled = filled.reshape(batch_size, beam_size, -1)[:, :nat_beam_size]
  total = skip_scores + nat_scores.reshape(batch_size, beam_size)[:, :nat_beam_size]  # Eq. 2
  best = jnp.argmax(total, axis=1)
  tokens = jnp.take_along_axis(filled, best[:, None, None], axis=1)[:, 0]
  calls = first.decoder_calls + (caps > 0)
  return DecodeOutput(_fit(tokens, caps, max_length), calls, first.loop_iterations + 1)
