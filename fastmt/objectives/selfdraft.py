"""Self-drafting: the autoregressive loss plus drafting of the next block with <mask> slots, on one decoder.

A model trained with this objective is an ordinary AT model (its causal slots never see the mask slots, so
greedy, beam and Jacobi decode it as they decode any AT model) that can also guess the W tokens after any
prefix in one pass: W <mask> slots at the positions of those tokens, seeing the prefix and each other. The
speculative decoder (fastmt/decoding/speculative.py) puts such a block after each verification window, so
the draft of the next window costs no decoder call of its own, and Jacobi's commit rule keeps the output
equal to the model's own greedy output whatever the draft says.

Every training row is the AT row (BOS y1 .. -> y1 .. EOS, causal, every token scored) followed by `blocks`
blocks of W masks, each at its own random cut m (0 <= m <= the row's word count): the masks of a block sit at
positions m .. m + W - 1, see the AT slots 0 .. m (BOS and y1 .. ym, the prefix) and the masks of their own
block, and are scored on y_(m+1) .. y_(m+W) (EOS included; nothing past it). One row of T + blocks * W
slots, so the draft task costs (T + blocks * W) / T of an AT step, not a second batch.
This is the mask algebra of the decoder's call exactly (a block after a window of W verified slots is a
block at cut m = n + W - 1), and blockwise parallel decoding's idea (Stern et al., 2018) with masks in place
of extra output heads: no parameter is added.
"""

import dataclasses

import jax
import jax.numpy as jnp

from fastmt.data.tokenizer import MASK, PAD_ID
from fastmt.errors import FastmtError
from fastmt.objectives import autoregressive


@dataclasses.dataclass(frozen=True)
class SelfDraftOptions:
  block_size: int = 4  # W: masks per block = the width of the speculative decoder's window
  blocks: int = 2  # mask blocks per training row, each at its own random cut
  draft_weight: float = 1.0  # loss weight of a mask slot relative to an AT token
  seed: int = 0  # of the cuts (a function of the step: a resumed run cuts the same way)

  def __post_init__(self):
    if self.block_size < 2:
      raise FastmtError(f'selfdraft block_size must be >= 2 (a window of 1 is greedy), got {self.block_size}')
    if self.blocks < 1:
      raise FastmtError(f'selfdraft blocks must be >= 1, got {self.blocks}')
    if self.draft_weight <= 0:
      raise FastmtError(f'selfdraft draft_weight must be > 0, got {self.draft_weight}')


def draft_cuts(target: jax.Array, blocks: int, rng: jax.Array) -> jax.Array:
  """int32 [B, blocks]: a cut m uniform in 0 .. words for each block of each row (words = EOS excluded)."""
  words = jnp.maximum((target != PAD_ID).sum(axis=1) - 1, 0)
  uniform = jax.random.uniform(rng, (target.shape[0], blocks))
  return jnp.minimum(jnp.floor(uniform * (words + 1)[:, None]), words[:, None]).astype(jnp.int32)


def block_mask(length: int, cuts: jax.Array, block_size: int) -> jax.Array:
  """bool [B, T + K W, T + K W]: causal over the T AT slots; mask slots of block k see AT slots 0 .. cut_k and
  their own block; AT slots never see a mask slot (so the AT task is exactly the plain one)."""
  batch, blocks = cuts.shape
  at = jnp.broadcast_to(jnp.tril(jnp.ones((length, length), bool)), (batch, length, length))
  at = jnp.pad(at, ((0, 0), (0, 0), (0, blocks * block_size)))
  block_of = jnp.repeat(jnp.arange(blocks), block_size)  # [K W]
  sees_prefix = jnp.arange(length)[None, None, :] <= jnp.repeat(cuts, block_size, axis=1)[:, :, None]
  same_block = block_of[:, None] == block_of[None, :]
  masks = jnp.concatenate([sees_prefix, jnp.broadcast_to(same_block, (batch,) + same_block.shape)], axis=2)
  return jnp.concatenate([at, masks], axis=1)


def draft_batch(batch: dict, step, options: SelfDraftOptions, mask_id: int) -> dict:
  """batch {source [B, S], decoder_input [B, T], target [B, T]} -> DecoderBatch fields over T + K W slots."""
  at = autoregressive.left_to_right(batch)
  target = batch['target']
  batch_size, length = target.shape
  width = options.block_size
  rng = jax.random.fold_in(jax.random.PRNGKey(options.seed), jnp.asarray(step, jnp.int32))
  cuts = draft_cuts(target, options.blocks, rng)
  outputs = (cuts[:, :, None] + jnp.arange(width)).reshape(batch_size, -1)  # [B, K W]: the token each predicts
  padded = jnp.pad(target, ((0, 0), (0, width)))
  mask_target = jnp.take_along_axis(padded, outputs, axis=1)  # PAD past the row's EOS
  mask_weights = (mask_target != PAD_ID) * options.draft_weight  # an all-PAD row scores nothing
  positions = jnp.concatenate([at['positions'], jnp.minimum(outputs, length - 1)], axis=1)  # past T: unscored
  return dict(source=batch['source'],
              decoder_input=jnp.concatenate([at['decoder_input'], jnp.full_like(outputs, mask_id)], axis=1),
              positions=positions.astype(jnp.int32),
              self_mask=block_mask(length, cuts, width),
              target=jnp.concatenate([target, mask_target], axis=1).astype(jnp.int32),
              weights=jnp.concatenate([at['weights'], mask_weights], axis=1).astype(jnp.float32))


def mask_id_of(tokenizer) -> int:
  """The <mask> id: self-drafting needs a vocabulary with fastmt's reserved symbols (a clear error otherwise)."""
  return tokenizer.special_id(MASK)
