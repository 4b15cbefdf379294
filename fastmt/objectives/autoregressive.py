"""The autoregressive (AT) objective: predict token t from BOS and tokens < t, left to right.

This is the plain teacher-forced Transformer loss that every decoder of fastmt/decoding/ (greedy, beam,
PJ/PGJ/HGJ) assumes: positions 0 .. T-1, a causal mask, every non-PAD target scored.
"""

import jax.numpy as jnp

from fastmt.decoding.step import PAD_ID


def left_to_right(batch: dict) -> dict:
  """batch {source [B, S], decoder_input [B, T], target [B, T]} -> DecoderBatch fields (a dict)."""
  decoder_input, target = batch['decoder_input'], batch['target']
  length = decoder_input.shape[1]
  positions = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), decoder_input.shape)
  causal = jnp.tril(jnp.ones((1, length, length), bool))  # [1, T, T]: input t sees inputs 0 .. t
  return dict(source=batch['source'], decoder_input=decoder_input, positions=positions, self_mask=causal,
              target=target, weights=(target != PAD_ID).astype(jnp.float32))
