"""Greedy autoregressive decoding: one position per decoder call, all steps in one `lax.while_loop`."""

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from fastmt.decoding.step import (BOS_ID, EOS_ID, PAD_ID, DecoderStepFn, best_tokens, causal_window_mask,
                                  output_lengths)


@flax.struct.dataclass
class GreedyState:
  step: jax.Array  # int32 []: tokens produced so far
  tokens: jax.Array  # int32 [B, L + 1]: BOS, then the outputs; PAD after EOS
  done: jax.Array  # bool [B]: the row has produced EOS
  cache: Any


@flax.struct.dataclass
class DecodeOutput:
  tokens: jax.Array  # int32 [B, L]: output ids up to and including EOS, PAD after
  decoder_calls: jax.Array  # int32 [B]: decoder calls each row needed before its output was final
  loop_iterations: jax.Array  # int32 []: iterations the batch ran (the slowest row's count)


def row_limits(batch_size: int, max_length: int, row_caps) -> jax.Array:
  """Each row's output cap, int32 [B], clipped to max_length; None = max_length for every row.

  A cap of 0 marks a padding row: it is done before the first step, so it never keeps a loop running and its
  output is all PAD. A row's cap depends only on its own source (fastmt.translate), which is what makes its
  translation independent of its batch-mates.
  """
  if row_caps is None:
    return jnp.full((batch_size,), max_length, jnp.int32)
  return jnp.minimum(jnp.asarray(row_caps, jnp.int32), max_length)


def greedy_search(step_fn: DecoderStepFn, cache: Any, batch_size: int, max_length: int,
                  row_caps: jax.Array | None = None) -> DecodeOutput:
  """Greedy decoding of up to max_length tokens (EOS included); stops when every row is done.

  row_caps: optional int32 [B], each row's own output cap (<= max_length, the static bound); 0 = a padding
    row, done from the start. A row is done at its EOS or at its cap.
  The cache must have at least max_length slots. Rows that finished keep running (shapes are static) but
  their outputs are PAD; `decoder_calls` counts, per row, the calls up to its EOS or cap.
  """
  cache_length = jax.tree_util.tree_leaves(cache)[0].shape[1]
  if cache_length < max_length:
    raise ValueError(f'cache has {cache_length} slots, fewer than max_length={max_length}')
  caps = row_limits(batch_size, max_length, row_caps)
  tokens = jnp.full((batch_size, max_length + 1), PAD_ID, jnp.int32).at[:, 0].set(BOS_ID)
  state = GreedyState(jnp.int32(0), tokens, caps <= 0, cache)

  def not_finished(state):
    return (state.step < max_length) & ~state.done.all()

  def advance(state):
    offsets = jnp.full((batch_size,), state.step, jnp.int32)
    current = jax.lax.dynamic_slice_in_dim(state.tokens, state.step, 1, axis=1)  # [B, 1]
    logits, cache = step_fn(current, offsets[:, None], causal_window_mask(offsets, 1, cache_length),
                            state.cache, offsets)
    next_token = best_tokens(logits[:, 0])  # [B]
    next_token = jnp.where(state.done, PAD_ID, next_token)
    tokens = jax.lax.dynamic_update_slice_in_dim(state.tokens, next_token[:, None], state.step + 1, axis=1)
    done = state.done | (next_token == EOS_ID) | (state.step + 1 >= caps)
    return GreedyState(state.step + 1, tokens, done, cache)

  state = jax.lax.while_loop(not_finished, advance, state)
  outputs = state.tokens[:, 1:]
  # A row without EOS ran to its cap, so its length (capped) is also its number of calls.
  return DecodeOutput(outputs, jnp.minimum(output_lengths(outputs), caps), state.step)
