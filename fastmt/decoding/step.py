"""The one shape every decoding algorithm shares: the decoder step.

Decoding algorithms never import the model. They receive a `DecoderStepFn` that closes over the parameters
and the encoded source, plus an opaque cache pytree whose leaves all have the batch as leading axis.
"""

from typing import Any, Protocol

import jax
import jax.numpy as jnp

from fastmt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID  # re-exported: decoders only need the ids

__all__ = ['DecoderStepFn', 'BOS_ID', 'EOS_ID', 'PAD_ID', 'best_tokens', 'causal_window_mask', 'pad_after_eos']


class DecoderStepFn(Protocol):

  def __call__(self, tokens: jax.Array, positions: jax.Array, self_mask: jax.Array, cache: Any,
               write_offsets: jax.Array, project: jax.Array | None = None) -> tuple[jax.Array, Any]:
    """Runs the decoder over T new positions per row.

    Args:
      tokens: int32 [B, T] target ids; positions: int32 [B, T] their positions.
      self_mask: bool [B, T, M]: which of the M cache slots each new position may attend to.
      cache: the cache pytree; the new positions' keys/values are written at slots
        write_offsets[b] .. write_offsets[b] + T - 1.
      write_offsets: int32 [B].
      project: optional int32 [P], the same for every row, or [B, P], per row: logits only for these of the T
        new positions (HRT's stage II needs them at its masks only; the output projection is most of a wide
        call's cost).
        Decoders that never pass it may be given step functions without it.
    Returns:
      (logits float32 [B, T, V], or [B, P, V] with `project`; updated cache).
    """


def best_tokens(logits: jax.Array) -> jax.Array:
  """int32 argmax over the last axis: jnp.argmax's answer (the first maximum; a NaN counts as the maximum).

  Two plain reductions (the maximum, then the first index holding it) instead of jnp.argmax's reduction over
  (value, index) pairs, which XLA:CPU does not vectorise: over an 8,000-token vocabulary 3.3 instead of
  32.6 µs per row at batch 1, a sixth of an int8 greedy step (docs/BENCHMARKS.md section 9).
  """
  best = jnp.max(logits, axis=-1, keepdims=True)
  vocab = logits.shape[-1]
  index = jnp.arange(vocab, dtype=jnp.int32)
  return jnp.min(jnp.where((logits == best) | jnp.isnan(logits), index, vocab), axis=-1)


def causal_window_mask(write_offsets: jax.Array, width: int, cache_length: int) -> jax.Array:
  """[B, width, M]: new position t of row b sees slots 0 .. write_offsets[b] + t (itself included)."""
  slots = jnp.arange(cache_length)[None, None, :]
  query_slot = write_offsets[:, None, None] + jnp.arange(width)[None, :, None]
  return slots <= query_slot


def pad_after_eos(tokens: jax.Array) -> jax.Array:
  """Keeps each row up to and including its first EOS; PAD after it. tokens: int [B, L]."""
  is_eos = tokens == EOS_ID
  after_eos = jnp.cumsum(is_eos, axis=-1) - is_eos > 0
  return jnp.where(after_eos, PAD_ID, tokens)


def output_lengths(tokens: jax.Array) -> jax.Array:
  """Number of tokens up to and including the first EOS (all of them if none). tokens: [B, L] -> [B]."""
  is_eos = tokens == EOS_ID
  first_eos = jnp.argmax(is_eos, axis=-1)
  return jnp.where(is_eos.any(-1), first_eos + 1, tokens.shape[-1]).astype(jnp.int32)
