"""HRT's chunked target layout (hybrid-regressive-translation.txt Section 4, royalflush-wmt22-efficiency.txt Fig. 1).

With chunk size k the target y (n words) and its EOS are extended with EOS to a multiple of k,
y~ = y_1 .. y_n EOS .. EOS (length ceil((n + 1) / k) * k), and cut into chunks of k tokens. Skip-AT generates
the last token of every chunk, z_i = y~_{ik}, left to right from the chunk start symbol <bos_k>, at the
positions of the original sequence (0 for <bos_k>, then k, 2k, ...); its last token is always EOS. Skip-CMLM
sees y~ with the first k - 1 tokens of every chunk masked (what stage I does not produce) and predicts them in
one bidirectional pass, at positions 1 .. len(y~). "If there are multiple EOS, truncate to the first." (HRT
Section 4.2's text says "masking all non-first tokens in each chunk"; its Table 1, its decoding ("k - 1
[MASK]s before every z_i") and RoyalFlush Figure 1 mask the first k - 1, which is what stage I leaves open.)

Every function here is pure index arithmetic shared by the training objective (fastmt/objectives/hrt.py) and
the two-stage decoder (hrt.py), so that the two cannot disagree.
"""

import jax
import jax.numpy as jnp
import numpy as np

from fastmt.data.tokenizer import EOS_ID, PAD_ID
from fastmt.decoding.step import pad_after_eos


def extended_target(target: jax.Array, k: int) -> jax.Array:
  """target [B, T] (words, EOS, PAD) -> y~ [B, ceil(T / k) * k]: EOS up to the next multiple of k, then PAD."""
  length = -(-target.shape[1] // k) * k
  padded = jnp.pad(target, ((0, 0), (0, length - target.shape[1])))
  tokens = (target != PAD_ID).sum(axis=1)  # n + 1
  extended = -(-tokens // k) * k
  index = jnp.arange(length)[None, :]
  fill = jnp.where(index < extended[:, None], EOS_ID, PAD_ID)
  return jnp.where(index < tokens[:, None], padded, fill).astype(jnp.int32)


def skip_targets(extended: jax.Array, k: int) -> jax.Array:
  """y~ [B, L] -> Skip-AT targets z [B, L / k]: y~_k, y~_2k, ... (the last token of each chunk)."""
  return extended[:, k - 1::k]


def skip_positions(num: int, k: int) -> jax.Array:
  """Positions of Skip-AT's inputs <bos_k>, z_1, z_2, ...: 0, k, 2k, ... (int32 [num])."""
  return (jnp.arange(num) * k).astype(jnp.int32)


def is_chunk_last(length: int, k: int) -> np.ndarray:
  """bool [length]: the slots Skip-AT produces (1-based index a multiple of k); the others are masked.
  A constant of the shapes (numpy), so that it can index under jit."""
  return (np.arange(length) % k) == k - 1


def masked_input(skip_tokens: jax.Array, k: int, mask_id: int) -> jax.Array:
  """Stage II's input: k - 1 masks before every stage-I token, PAD after the first EOS's chunk.

  skip_tokens [B, m] (z_1 .. z_j = EOS, then PAD) -> [B, m * k].
  """
  batch, m = skip_tokens.shape
  chunks = jnp.concatenate([jnp.full((batch, m, k - 1), mask_id, jnp.int32), skip_tokens[:, :, None]], axis=2)
  live = skip_tokens != PAD_ID  # a PAD stage-I slot (after EOS) gives a PAD chunk
  return jnp.where(live[:, :, None], chunks, PAD_ID).reshape(batch, m * k).astype(jnp.int32)


def truncate_at_first_eos(tokens: jax.Array) -> jax.Array:
  """tokens int [B, L] -> words up to and including the first EOS, PAD after (several EOS in the last chunk
  are normal): step.pad_after_eos with fastmt's ids, which the chunked layout is built on."""
  return pad_after_eos(tokens, EOS_ID, PAD_ID)
