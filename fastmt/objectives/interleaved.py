"""The interleaved objectives (IBDecoder, SA, IB+SA, IMDecoder): the same Transformer loss on a reordered target.

Spec: ../shared/papers/interleaved-bidirectional-decoder.txt, Sections 3-4. The target y is reordered into
steps of z = h * c words (fastmt.decoding.interleaving), each step's words are predicted from the words of
earlier steps (the decoder inputs are the reordered target shifted by one step, z start symbols first), under
the block mask M(h, c) and with signed (Eq. 7) or step (Eq. 10) positions. Nothing else changes: no extra
parameters except IMDecoder's direction embeddings, every reordered slot up to the finishing step's EOS scored.
"""

import jax.numpy as jnp

from fastmt.decoding import interleaving as order
from fastmt.decoding.step import PAD_ID


def reordered_batch(batch: dict, layout: order.Interleaving) -> dict:
  """batch {source [B, S], decoder_input [B, T], target [B, T] (words, EOS, PAD)} -> DecoderBatch fields.

  The reordered length is ceil(T / z) * z: every target of T tokens (EOS included) fits, its EOS step too.
  """
  target = batch['target']
  num_steps = layout.steps_for(target.shape[1])
  real = (target != PAD_ID).sum(axis=1)  # words + EOS
  words = jnp.maximum(real - 1, 0)
  reordered = order.reorder(layout, target, words, num_steps)
  weights = ((reordered != PAD_ID) & (real > 0)[:, None]).astype(jnp.float32)  # an all-PAD row scores nothing
  length = num_steps * layout.slots
  fields = dict(source=batch['source'], decoder_input=order.shift_right(layout, reordered),
                positions=jnp.broadcast_to(order.positions(layout, num_steps), reordered.shape),
                self_mask=order.self_mask(layout, length, length)[None], target=reordered, weights=weights)
  if layout.direction_embeddings:
    fields['directions'] = jnp.broadcast_to(order.directions(layout, num_steps), reordered.shape)
  return fields
