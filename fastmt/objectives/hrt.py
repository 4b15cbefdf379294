"""Hybrid-regressive translation (HRT): four tasks on one shared decoder, moved from {AT, CMLM} to
{Skip-AT, Skip-CMLM} by a curriculum.

Spec: ../shared/papers/hybrid-regressive-translation.txt (Section 4.2, Table 1, Algorithm 1 of Appendix C) and
../shared/papers/royalflush-wmt22-efficiency.txt (Section 2, Figure 1). Every sentence pair of a batch gives
two samples, decoded in one pass of 2B rows (the paper accumulates both, "a batch twice the standard"):

* an autoregressive sample under the causal mask: AT (BOS y1 .. -> y1 .. EOS, positions 0, 1, ...) or
  Skip-AT (<bos_k> z1 z2 .. -> z1 z2 .. EOS, positions 0, k, 2k, ...; fastmt/decoding/chunks.py);
* a masked sample under the bidirectional mask, positions 1 .. L, loss on the masked slots only: CMLM (a
  uniformly drawn number of the words masked at random, Mask-Predict's recipe) or Skip-CMLM (the first k - 1
  tokens of every chunk masked, deterministically).

The curriculum: the first round(B p_k) rows of a batch take the skip tasks, the rest the chunk-size-1 tasks,
with p_k = (t / T)^lambda (lambda = 1 in the paper: linear). Batches are shuffled, so which rows does not
matter. Mixed distillation is the data pipeline's `p_raw`; fine-tuning from an AT model is train.py's
`config.init_from`.

The loss is train_step's: summed over the scored tokens of both samples and divided by their count (the
paper "accumulate[s] their gradients" and does not say more). So the tasks weigh as their scored tokens: a
Skip-AT row scores about n / k tokens where AT scores n, a Skip-CMLM row (k - 1) n / k where CMLM scores n / 2
on average, and the autoregressive task's share of the loss falls as the curriculum moves on.
"""

import dataclasses

import jax
import jax.numpy as jnp

from fastmt.data.tokenizer import MASK, MAX_CHUNK_SIZE, PAD_ID, chunk_bos
from fastmt.decoding import chunks
from fastmt.errors import FastmtError


@dataclasses.dataclass(frozen=True)
class HrtOptions:
  chunk_size: int = 2  # k
  curriculum: bool = True  # False: the skip tasks from the first step (the ablation "-CL")
  curriculum_power: float = 1.0  # lambda of p_k = (t / T)^lambda
  curriculum_steps: int = 0  # T; 0 = the run's num_train_steps at its first start (kept by resumes: train_lib)
  seed: int = 0  # of the CMLM masks (a function of the step, so a resumed run masks the same way)

  def __post_init__(self):
    if not 2 <= self.chunk_size <= MAX_CHUNK_SIZE:
      raise FastmtError(f'HRT chunk_size must be in 2..{MAX_CHUNK_SIZE}, got {self.chunk_size}')
    if self.curriculum_power <= 0:
      raise FastmtError(f'curriculum_power must be > 0, got {self.curriculum_power}')
    if self.curriculum_steps < 0:
      raise FastmtError(f'curriculum_steps must be >= 0, got {self.curriculum_steps}')


def skip_fraction(options: HrtOptions, step) -> jax.Array:
  """p_k at optimiser step t: the share of a batch's rows trained on Skip-AT / Skip-CMLM."""
  if not options.curriculum:
    return jnp.float32(1.0)
  total = max(options.curriculum_steps, 1)
  progress = jnp.clip(jnp.asarray(step, jnp.float32) / total, 0.0, 1.0)
  return progress**options.curriculum_power


def random_word_mask(target: jax.Array, rng: jax.Array) -> jax.Array:
  """CMLM's mask: per row a number u ~ U{1..n} of its n words (EOS excluded), the u of lowest random score."""
  batch, length = target.shape
  words = (target != PAD_ID).sum(axis=1) - 1
  count_rng, order_rng = jax.random.split(rng)
  count = 1 + jnp.floor(jax.random.uniform(count_rng, (batch,)) * jnp.maximum(words, 1)).astype(jnp.int32)
  is_word = jnp.arange(length)[None, :] < words[:, None]
  scores = jnp.where(is_word, jax.random.uniform(order_rng, (batch, length)), 2.0)
  rank = jnp.argsort(jnp.argsort(scores, axis=1), axis=1)
  return is_word & (rank < count[:, None])


def hrt_batch(batch: dict, step, options: HrtOptions, mask_id: int, bos_k_id: int) -> dict:
  """batch {source [B, S], decoder_input [B, T], target [B, T]} -> DecoderBatch fields over 2B rows."""
  source, target = batch['source'], batch['target']
  batch_size = target.shape[0]
  k = options.chunk_size
  extended = chunks.extended_target(target, k)  # [B, L]
  length = extended.shape[1]
  pad_to = lambda x: jnp.pad(x, ((0, 0), (0, length - x.shape[1])))
  skip_rows = (jnp.arange(batch_size) < jnp.round(batch_size * skip_fraction(options, step)))[:, None]

  # Autoregressive samples: AT or Skip-AT, causal.
  z = chunks.skip_targets(extended, k)  # [B, L / k], ends with EOS, then PAD
  skip_input = jnp.concatenate([jnp.full((batch_size, 1), bos_k_id, jnp.int32), z[:, :-1]], axis=1)
  skip_input = jnp.where(z != PAD_ID, skip_input, PAD_ID)
  skip_positions = jnp.broadcast_to(chunks.skip_positions(length // k, k), z.shape)
  ar_input = jnp.where(skip_rows, pad_to(skip_input), pad_to(batch['decoder_input']))
  ar_target = jnp.where(skip_rows, pad_to(z), pad_to(target))
  ar_positions = jnp.where(skip_rows, pad_to(skip_positions), jnp.arange(length)[None, :])
  ar_mask = jnp.broadcast_to(jnp.tril(jnp.ones((length, length), bool)), (batch_size, length, length))

  # Masked samples: CMLM or Skip-CMLM, bidirectional over the row's real tokens, loss on masks only.
  rng = jax.random.fold_in(jax.random.PRNGKey(options.seed), jnp.asarray(step, jnp.int32))
  cmlm_masked = random_word_mask(pad_to(target), rng)
  skip_masked = ~chunks.is_chunk_last(length, k)[None, :] & (extended != PAD_ID)
  masked = jnp.where(skip_rows, skip_masked, cmlm_masked)
  mlm_target = jnp.where(skip_rows, extended, pad_to(target))
  mlm_input = jnp.where(masked, mask_id, mlm_target)
  mlm_mask = jnp.broadcast_to((mlm_input != PAD_ID)[:, None, :], (batch_size, length, length))
  mlm_positions = jnp.broadcast_to(jnp.arange(1, length + 1), (batch_size, length))

  real = ((target != PAD_ID).sum(axis=1) > 0)[:, None]  # an all-PAD row scores nothing
  weights = jnp.concatenate([(ar_target != PAD_ID) & real, masked & real]).astype(jnp.float32)
  return dict(source=jnp.concatenate([source, source]),
              decoder_input=jnp.concatenate([ar_input, mlm_input]).astype(jnp.int32),
              positions=jnp.concatenate([ar_positions, mlm_positions]).astype(jnp.int32),
              self_mask=jnp.concatenate([ar_mask, mlm_mask]),
              target=jnp.concatenate([ar_target, mlm_target]).astype(jnp.int32), weights=weights)


def special_ids(options: HrtOptions, tokenizer) -> tuple[int, int]:
  """(<mask>, <bos_k>) ids: HRT needs a vocabulary with the reserved symbols (a clear error otherwise)."""
  return tokenizer.special_id(MASK), tokenizer.special_id(chunk_bos(options.chunk_size))
