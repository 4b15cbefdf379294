"""Length-bucketed training batches with a token budget, as a pure function of the step number.

`TrainBatches.batch(step)` returns the same batch for the same (data, seed, step) on every run, which is what
makes a killed run resume with nothing lost: after restoring step s, training asks for batch s and goes on.
Plain numpy: the data fits in memory (tens of thousands of pairs), and shapes are fixed per bucket so that the
train step compiles once per bucket.
"""

import dataclasses
import logging

import numpy as np

from fastmt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID


@dataclasses.dataclass(frozen=True)
class Batch:
  """One padded batch. Shapes: source [B, S], decoder_input/target [B, T]; int32, PAD=0."""
  source: np.ndarray
  decoder_input: np.ndarray
  target: np.ndarray

  @property
  def num_tokens(self) -> int:
    """Real (non-pad) source + target tokens, the unit of reported throughput."""
    return int((self.source != PAD_ID).sum() + (self.target != PAD_ID).sum())


def bucket_for(length: int, bucket_lengths) -> int:
  for b in bucket_lengths:
    if length <= b:
      return b
  raise ValueError(f'length {length} exceeds the largest bucket {bucket_lengths[-1]}')


def prepare_pairs(source_ids, target_ids, max_length: int):
  """Drops pairs that cannot train (an empty side, or longer than max_length with EOS); returns counts.

  Returns (kept_source, kept_target, counts) where counts = {'empty': n, 'too_long': n}. Nothing is
  shifted: pairs are kept or dropped whole.
  """
  kept_src, kept_tgt, counts = [], [], {'empty': 0, 'too_long': 0}
  for s, t in zip(source_ids, target_ids, strict=True):
    if len(s) == 0 or len(t) == 0:
      counts['empty'] += 1
    elif max(len(s), len(t)) + 1 > max_length:
      counts['too_long'] += 1
    else:
      kept_src.append(s)
      kept_tgt.append(t)
  if counts['empty'] or counts['too_long']:
    logging.warning('Skipped %d training pairs with an empty side and %d longer than %d tokens (of %d)',
                    counts['empty'], counts['too_long'], max_length, len(source_ids))
  return kept_src, kept_tgt, counts


def pad_batch(source_rows, target_rows, source_len: int, target_len: int) -> Batch:
  """Builds a Batch: source gets EOS appended, target is shifted right behind BOS."""
  n = len(source_rows)
  source = np.full((n, source_len), PAD_ID, np.int32)
  decoder_input = np.full((n, target_len), PAD_ID, np.int32)
  target = np.full((n, target_len), PAD_ID, np.int32)
  for i, (s, t) in enumerate(zip(source_rows, target_rows)):
    source[i, :len(s)] = s
    source[i, len(s)] = EOS_ID
    decoder_input[i, 0] = BOS_ID
    decoder_input[i, 1:len(t) + 1] = t
    target[i, :len(t)] = t
    target[i, len(t)] = EOS_ID
  return Batch(source, decoder_input, target)


class TrainBatches:
  """Deterministic, shuffled, length-bucketed batches; `batch(step)` is a pure function of step."""

  def __init__(self, source_ids, target_ids, bucket_lengths, tokens_per_batch: int, seed: int,
               batch_multiple: int = 1):
    self.source_ids = source_ids
    self.target_ids = target_ids
    self.bucket_lengths = tuple(sorted(bucket_lengths))
    self.seed = seed
    lengths = np.array([max(len(s), len(t)) + 1 for s, t in zip(source_ids, target_ids)])
    self._bucket_of = np.array([bucket_for(n, self.bucket_lengths) for n in lengths])
    # Rows per batch for each bucket: the token budget over the padded length, a multiple of the device
    # count so the batch splits evenly over the mesh.
    self.rows_per_batch = {
        b: max(batch_multiple, (tokens_per_batch // b) // batch_multiple * batch_multiple)
        for b in self.bucket_lengths
    }
    self._cached_epoch, self._cached_plan = None, None
    self.batches_per_epoch = len(self._plan(0))

  def _plan(self, epoch: int):
    """The epoch's list of (bucket_length, row indices), shuffled with a key of (seed, epoch)."""
    if self._cached_epoch == epoch:
      return self._cached_plan
    rng = np.random.default_rng([self.seed, epoch])
    plan = []
    for b in self.bucket_lengths:
      rows = np.flatnonzero(self._bucket_of == b)
      rng.shuffle(rows)
      size = self.rows_per_batch[b]
      # A last partial batch is padded with rows drawn from the same bucket so shapes stay fixed; every
      # pair is still seen once per epoch.
      if len(rows) % size:
        fill = rng.choice(rows, size - len(rows) % size) if len(rows) else rows
        rows = np.concatenate([rows, fill])
      plan.extend((b, rows[i:i + size]) for i in range(0, len(rows), size))
    order = rng.permutation(len(plan))
    self._cached_epoch, self._cached_plan = epoch, [plan[i] for i in order]
    return self._cached_plan

  def batch(self, step: int) -> Batch:
    epoch, index = divmod(step, self.batches_per_epoch)
    length, rows = self._plan(epoch)[index]
    return pad_batch([self.source_ids[i] for i in rows], [self.target_ids[i] for i in rows], length,
                     length)
