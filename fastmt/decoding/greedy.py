"""Greedy autoregressive decoding: one position per decoder call, all steps in one `lax.while_loop`."""

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from fastmt.decoding import repeats
from fastmt.decoding.step import (BOS_ID, EOS_ID, PAD_ID, DecoderStepFn, best_tokens, cache_slots,
                                  causal_window_mask, check_counts, check_special_ids, checked_step_output,
                                  output_lengths)


@flax.struct.dataclass
class GreedyState:
  step: jax.Array  # int32 []: tokens produced so far
  tokens: jax.Array  # int32 [B, L + 1]: BOS, then the outputs; PAD after EOS
  done: jax.Array  # bool [B]: the row has produced EOS
  cache: Any
  run: Any = None  # int32 [B] with the repetition guard: copies of the last output in a row; None without it


@flax.struct.dataclass
class DecodeOutput:
  # int32 [B, L]: output ids up to and including EOS, PAD after; a row that reached its cap (max_length or its
  # row cap) first has no EOS: its tokens up to the cap, then PAD
  tokens: jax.Array
  decoder_calls: jax.Array  # int32 [B]: decoder calls each row needed before its output was final
  loop_iterations: jax.Array  # int32 []: iterations the batch ran (the slowest row's count)
  # int32 [B]: a separate drafter model's calls up to the row's last decoder call (speculative decoding's
  # --drafter model / int8, fastmt/decoding/draft_model.py); None where no drafter model runs
  drafter_calls: jax.Array | None = None


def row_limits(batch_size: int, max_length: int, row_caps) -> jax.Array:
  """Each row's output cap, int32 [B], clipped to max_length; None = max_length for every row.

  A cap of 0 marks a padding row: it is done before the first step, so it never keeps a loop running and its
  output is all PAD. A row's cap depends only on its own source (fastmt.translate), which is what makes its
  translation independent of its batch-mates.
  """
  if row_caps is None:
    return jnp.full((batch_size,), max_length, jnp.int32)
  if np.shape(row_caps) != (batch_size,):
    raise ValueError(f'row_caps must have one cap per row, shape ({batch_size},), got {np.shape(row_caps)}')
  dtype = getattr(row_caps, 'dtype', None) or np.asarray(row_caps).dtype
  if not jnp.issubdtype(dtype, jnp.integer):  # 3.5 became a cap of 3 without a word
    raise ValueError(f'row_caps must be integers (token counts), got dtype {dtype}')
  return jnp.clip(jnp.asarray(row_caps, jnp.int32), 0, max_length)  # a negative cap is a padding row too


def greedy_search(step_fn: DecoderStepFn, cache: Any, batch_size: int, max_length: int,
                  row_caps: jax.Array | None = None, *, bos_id: int = BOS_ID, eos_id: int = EOS_ID,
                  pad_id: int = PAD_ID, max_repeats: int = 0) -> DecodeOutput:
  """Greedy decoding of up to max_length tokens (EOS included); stops when every row is done.

  row_caps: optional int32 [B], each row's own output cap (<= max_length, the static bound); 0 = a padding
    row, done from the start. A row is done at its EOS or at its cap.
  bos_id, eos_id, pad_id: the model's special ids (fastmt's by default; step.check_special_ids): the first
    input of every row, the token that ends a row, the filler after it.
  max_repeats: the repetition guard (fastmt.decoding.repeats; 0 = off): a row is also done when its last
    max_repeats outputs are one token, and its output keeps one copy of them, then EOS.
  The cache must have at least max_length slots. Rows that finished keep running (shapes are static) but
  their outputs are PAD; `decoder_calls` counts, per row, the calls up to its EOS, cap or guard.
  """
  repeats.check_max_repeats(max_repeats)
  check_counts(batch_size=batch_size, max_length=max_length)
  cache_length = cache_slots(cache, batch_size)
  if cache_length < max_length:
    raise ValueError(f'cache has {cache_length} slots, fewer than max_length={max_length}')
  bos_id, eos_id, pad_id = check_special_ids(bos_id, eos_id, pad_id)
  caps = row_limits(batch_size, max_length, row_caps)
  tokens = jnp.full((batch_size, max_length + 1), pad_id, jnp.int32).at[:, 0].set(bos_id)
  state = GreedyState(jnp.int32(0), tokens, caps <= 0, cache,
                      jnp.zeros((batch_size,), jnp.int32) if max_repeats else None)

  def not_finished(state):
    return (state.step < max_length) & ~state.done.all()

  def advance(state):
    offsets = jnp.full((batch_size,), state.step, jnp.int32)
    current = jax.lax.dynamic_slice_in_dim(state.tokens, state.step, 1, axis=1)  # [B, 1]
    logits, cache = checked_step_output(
        step_fn(current, offsets[:, None], causal_window_mask(offsets, 1, cache_length), state.cache, offsets),
        batch_size, 1, (bos_id, eos_id, pad_id), cache_in=state.cache)
    next_token = best_tokens(logits[:, 0])  # [B]
    next_token = jnp.where(state.done, pad_id, next_token)
    tokens = jax.lax.dynamic_update_slice_in_dim(state.tokens, next_token[:, None], state.step + 1, axis=1)
    done = state.done | (next_token == eos_id) | (state.step + 1 >= caps)
    run = None
    if max_repeats:  # a counter, not a look back over the outputs: two element-wise ops a step
      run = jnp.where(next_token == current[:, 0], state.run + 1, 1)
      regular = (next_token != bos_id) & (next_token != eos_id) & (next_token != pad_id)
      done |= (run >= max_repeats) & regular
    return GreedyState(state.step + 1, tokens, done, cache, run)

  state = jax.lax.while_loop(not_finished, advance, state)
  outputs = state.tokens[:, 1:]
  # A row without EOS ran to its cap, so its length (capped) is also its number of calls.
  calls = jnp.minimum(output_lengths(outputs, eos_id), caps)
  if max_repeats:  # a guarded row stopped at its run's last copy: cut it to one copy
    outputs, run_end = repeats.cut_first_run(outputs, max_repeats, eos_id, pad_id, bos_id)
    calls = jnp.where(run_end >= 0, run_end, calls)
  return DecodeOutput(outputs, calls, state.step)
