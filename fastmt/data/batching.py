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
from fastmt.errors import FastmtError

logger = logging.getLogger(__name__)  # named 'fastmt.<module>': users set its level or handlers by name

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


def prepare_pairs(source_ids, target_ids, max_length: int, distilled_ids=None, split: str = 'training'):
  """Drops pairs that cannot train (an empty side, or longer than max_length with EOS); returns counts.

  distilled_ids: optional second target per pair (a teacher's translation, for mixed distillation); a pair
  is kept only when its source and both targets can train.
  Returns (kept_source, kept_target, kept_distilled or None, counts) where counts = {'empty': n,
  'too_long': n}. Nothing is shifted: pairs are kept or dropped whole. No pair left is a FastmtError that
  says why (split names the pairs in messages).
  """
  targets = [target_ids] if distilled_ids is None else [target_ids, distilled_ids]
  kept_src, kept_tgt, kept_distilled, counts = [], [], [], {'empty': 0, 'too_long': 0}
  for s, *ts in zip(source_ids, *targets, strict=True):
    if len(s) == 0 or any(len(t) == 0 for t in ts):
      counts['empty'] += 1
    elif max(len(s), *(len(t) for t in ts)) + 1 > max_length:
      counts['too_long'] += 1
    else:
      kept_src.append(s)
      kept_tgt.append(ts[0])
      kept_distilled.append(ts[-1])
  if not kept_src:
    raise FastmtError(f'no {split} pair can be used: of {len(source_ids)}, {counts["empty"]} have an empty side '
                      f'and {counts["too_long"]} are longer than {max_length} tokens with EOS '
                      '(config.model.max_length)')
  if counts['empty'] or counts['too_long']:
    sides = 'an empty side' if distilled_ids is None else 'an empty source, target or distilled target'
    logger.warning('Skipped %d %s pairs with %s and %d longer than %d tokens with EOS (config.model.max_length; '
                   'of %d)', counts['empty'], split, sides, counts['too_long'], max_length, len(source_ids))
  return kept_src, kept_tgt, (None if distilled_ids is None else kept_distilled), counts


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


def validation_batches(source_ids, target_ids, bucket_lengths, tokens_per_batch: int,
                       batch_multiple: int = 1) -> tuple[list[Batch], int]:
  """Every pair once, in length buckets, for the validation loss: (batches, padding rows).

  Unlike TrainBatches, a bucket's last batch is not filled up to the full row count with repeated pairs
  (with few pairs in a bucket that counted some of them many times over); it keeps its own row count, rounded
  up to a multiple of batch_multiple (the device count) with all-PAD rows, which every objective weighs 0
  (returned as a count): so the validation loss does not depend on the device count. (They were repeats of
  the batch's first rows, counted twice.) Each bucket still has at most two shapes to compile, the full and
  its last batch.
  """
  bucket_lengths = tuple(sorted(bucket_lengths))
  lengths = [max(len(s), len(t)) + 1 for s, t in zip(source_ids, target_ids)]
  buckets = np.array([bucket_for(n, bucket_lengths) for n in lengths], dtype=np.int64)
  batches, padding = [], 0
  for b in bucket_lengths:
    rows = np.flatnonzero(buckets == b)
    size = max(batch_multiple, (tokens_per_batch // b) // batch_multiple * batch_multiple)
    for start in range(0, len(rows), size):
      chunk = rows[start:start + size]
      extra = -len(chunk) % batch_multiple
      padding += extra
      batch = pad_batch([source_ids[i] for i in chunk], [target_ids[i] for i in chunk], b, b)
      batches.append(Batch(*(np.pad(x, ((0, extra), (0, 0)), constant_values=PAD_ID) for x in
                             (batch.source, batch.decoder_input, batch.target))))
  return batches, padding


class TrainBatches:
  """Deterministic, shuffled, length-bucketed batches; `batch(step)` is a pure function of step.

  With distilled_ids (mixed distillation, HRT Sec. 3.3): each time a pair is drawn its target is the raw one
  with probability p_raw and the distilled one otherwise, drawn from a key of (seed, epoch) so that resuming
  redraws the same choice. p_raw = 0 trains on distilled targets only.
  """

  def __init__(self, source_ids, target_ids, bucket_lengths, tokens_per_batch: int, seed: int,
               batch_multiple: int = 1, distilled_ids=None, p_raw: float = 0.0):
    if not 0.0 <= p_raw <= 1.0:
      raise FastmtError(f'p_raw must be in [0, 1], got {p_raw}')
    self.source_ids = source_ids
    self.target_ids = target_ids
    self.distilled_ids = distilled_ids
    self.p_raw = p_raw
    self.bucket_lengths = tuple(sorted(bucket_lengths))
    self.seed = seed
    targets = [target_ids] if distilled_ids is None else [target_ids, distilled_ids]
    lengths = np.array([max(len(s), *(len(t) for t in ts)) + 1 for s, *ts in zip(source_ids, *targets)])
    self._bucket_of = np.array([bucket_for(n, self.bucket_lengths) for n in lengths])
    # Rows per batch for each bucket: the token budget over the padded length, a multiple of the device
    # count so the batch splits evenly over the mesh.
    self.rows_per_batch = {
        b: max(batch_multiple, (tokens_per_batch // b) // batch_multiple * batch_multiple)
        for b in self.bucket_lengths
    }
    self._cached_epoch, self._cached_plan, self._cached_raw = None, None, None
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
      # A last partial batch is filled with rows drawn at random from the same bucket (with replacement) so
      # shapes stay fixed: every pair is seen at least once per epoch, up to size - 1 of them twice or more.
      if len(rows) % size:
        fill = rng.choice(rows, size - len(rows) % size) if len(rows) else rows
        rows = np.concatenate([rows, fill])
      plan.extend((b, rows[i:i + size]) for i in range(0, len(rows), size))
    order = rng.permutation(len(plan))
    # Which pairs take their raw target this epoch (mixed distillation); its own stream, so the batch plan
    # above is the same whatever p_raw is.
    self._cached_raw = np.random.default_rng([self.seed, epoch, 1]).random(len(self.source_ids)) < self.p_raw
    self._cached_epoch, self._cached_plan = epoch, [plan[i] for i in order]
    return self._cached_plan

  def batch(self, step: int) -> Batch:
    epoch, index = divmod(step, self.batches_per_epoch)
    length, rows = self._plan(epoch)[index]
    if self.distilled_ids is None:
      targets = [self.target_ids[i] for i in rows]
    else:
      targets = [self.target_ids[i] if self._cached_raw[i] else self.distilled_ids[i] for i in rows]
    return pad_batch([self.source_ids[i] for i in rows], targets, length, length)
