"""Drafts for Jacobi initialisation and speculative decoding: cheap guesses of what follows.

Jacobi decoding is exact whatever its initial guesses are (every committed token is verified against the
model), but it needs fewer iterations when the guesses are right more often. PAD guesses (the paper's) are
never right, so an iteration commits a second token only when the model's own unverified prediction
happens to be right. A bigram table, the most frequent successor of each token in target-language text,
guesses frequent continuations ("und" -> "er", "Herrn" -> ",") for free: one gather per iteration.

    table = bigram_table(tokenizer.encode(train.targets), vocab_size)
    jacobi.pgj_decode(step_fn, cache, batch, max_len, 3, initializer=jacobi.chain_initializer(table))

Lookup drafts (`lookup_drafts`, the n-gram idea of lookahead decoding) need no table: a row that repeats
itself ("der Herr ... der Herr") or copies a name from its source ("Barnabas") gets the tokens that followed
the same two tokens before. `--algorithm spec --drafter ngram` uses them: where a lookup finds something,
its drafts replace the next window's guesses; elsewhere Jacobi's own guesses stand.
"""

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from fastmt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID


def bigram_table(sequences, vocab_size: int) -> np.ndarray:
  """The most frequent successor of every token in `sequences` (BOS before and EOS after each one).

  Args:
    sequences: iterable of int arrays (token ids without BOS/EOS), e.g. tokenised training targets.
    vocab_size: V.
  Returns:
    int32 [V]: next_token[t] = argmax_u count(t, u); a token never seen before another guesses EOS.
    Ties go to the smaller id, so the table is a pure function of the data.
  """
  pairs = []
  for ids in sequences:
    ids = np.asarray(ids, np.int64)
    if not len(ids):
      continue
    row = np.concatenate([[BOS_ID], ids, [EOS_ID]])
    pairs.append(row[:-1] * vocab_size + row[1:])
  table = np.full((vocab_size,), EOS_ID, np.int32)
  if not pairs:
    return table
  keys, counts = np.unique(np.concatenate(pairs), return_counts=True)
  previous, following = keys // vocab_size, keys % vocab_size
  # Sort by (previous, -count, following): the first entry of each `previous` run is its best successor.
  order = np.lexsort((following, -counts, previous))
  previous, following = previous[order], following[order]
  first = np.flatnonzero(np.r_[True, previous[1:] != previous[:-1]])
  table[previous[first]] = following[first]
  table[PAD_ID] = EOS_ID  # PAD never precedes a real token
  return table


def lookup_drafts(history, end, width: int, ngram: int = 2, source=None):
  """Prompt-lookup drafts (the n-gram idea of lookahead decoding, without its pool): the `width` tokens that
  followed the latest earlier occurrence of the row's last `ngram` tokens, in its own output so far, else in
  its source (names and numbers that a translation copies: the vocabulary is joint). Pure jnp, jit-friendly.

  Args:
    history: int [B, H]: each row's tokens so far (BOS first); entries past `end` are ignored.
    end: int [B]: index of each row's last token (the anchor); the key is history[end - ngram + 1 .. end].
    width: tokens to draft. A match in the output so close to the anchor that fewer than `width` known tokens
      follow it repeats what follows it ("a b a b" -> "a b a b ...": a repetition continued).
    ngram: length of the key (>= 1).
    source: optional int [B, S] source ids (EOS, then PAD, after the sentence).
  Returns:
    (drafts int32 [B, width], found bool [B]): found is False where no match exists (drafts are then PAD).
  """
  history = jnp.asarray(history, jnp.int32)
  end = jnp.asarray(end, jnp.int32)
  rows, length = history.shape
  offsets = jnp.arange(ngram)[None, :] - (ngram - 1)  # key = history[end + offsets]
  key = jnp.take_along_axis(history, jnp.clip(end[:, None] + offsets, 0, length - 1), axis=1)  # [B, n]
  key_valid = end >= ngram - 1

  def latest_match(sequence, last_allowed):
    """The largest j <= last_allowed[b] with sequence[b, j - n + 1 .. j] == key[b], or -1."""
    positions = jnp.arange(sequence.shape[1])
    matches = jnp.ones(sequence.shape, bool)
    for i in range(ngram):  # sequence[j - (n - 1 - i)] == key[i]
      shift = ngram - 1 - i
      shifted = jnp.pad(sequence, ((0, 0), (shift, 0)), constant_values=-1)[:, :sequence.shape[1]]
      matches &= shifted == key[:, i:i + 1]
    matches &= (positions[None, :] >= ngram - 1) & (positions[None, :] <= last_allowed[:, None])
    matches &= key_valid[:, None]
    return jnp.max(jnp.where(matches, positions[None, :], -1), axis=1)

  steps = jnp.arange(width)[None, :]
  in_output = latest_match(history, end - 1)  # [B]
  period = jnp.maximum(end - in_output, 1)  # known tokens after the match: in_output + 1 .. end
  from_output = jnp.take_along_axis(history, jnp.clip(in_output[:, None] + 1 + steps % period[:, None], 0,
                                                      length - 1), axis=1)
  drafts, found = jnp.where((in_output >= 0)[:, None], from_output, PAD_ID), in_output >= 0
  if source is not None:
    source = jnp.asarray(source, jnp.int32)
    if source.shape[0] != rows:
      raise ValueError(f'source has {source.shape[0]} rows, the tokens {rows}: one source per row')
    in_source = latest_match(source, jnp.full((rows,), source.shape[1] - 2, jnp.int32))
    from_source = jnp.take_along_axis(source, jnp.clip(in_source[:, None] + 1 + steps, 0, source.shape[1] - 1),
                                      axis=1)
    from_source = jnp.where(in_source[:, None] + 1 + steps < source.shape[1], from_source, PAD_ID)
    use_source = ~found & (in_source >= 0)
    drafts = jnp.where(use_source[:, None], from_source, drafts)
    found = found | use_source
  return drafts.astype(jnp.int32), found


def remember_outputs(recent: np.ndarray, outputs) -> np.ndarray:
  """The memory of recent outputs that `--drafter ngram` also searches (jacobi.ngram_drafter's `recent`),
  after a batch: `outputs` (int arrays without EOS, in the batch's order) appended to `recent` (int32 [M],
  oldest first, PAD-filled in front), each followed by EOS so that no key spans two sentences' tokens; the
  last M tokens kept. A pure function: a translator keeps one per input stream."""
  recent = np.asarray(recent, np.int32)
  size = recent.shape[0]
  if not size:
    return recent
  pieces = [recent] + [np.append(np.asarray(ids, np.int32), EOS_ID).astype(np.int32) for ids in outputs]
  return np.concatenate(pieces)[-size:]


# The trajectory pool (lookahead decoding's n-gram pool, for one row at a time): every decoder call of a Jacobi
# window predicts, at each window position, the token after that position's input, whether the input was
# verified or a guess; the pool remembers the latest such prediction per key (the last `key_length` inputs) and
# drafts by following it from the committed prefix. A wrong guess still teaches the pool what follows the
# guessed token, which the sentence may reach later ("der Herr" guessed too early, then met).
_POOL_MIX = 0x9E3779B1  # Fibonacci hashing: the slot is the high bits of the key's code times this


@flax.struct.dataclass
class TrajectoryPool:
  # int32 [B, H, 3]: each slot's (token before, last input, prediction); token before -1 for 1-token keys (and
  # before BOS); prediction -1 in an empty slot. One array, so that one scatter writes key and value together.
  entries: jax.Array
  key_length: int = flax.struct.field(pytree_node=False, default=1)


def empty_pool(rows: int, slots: int, key_length: int = 1) -> TrajectoryPool:
  """A pool of `slots` entries per row (a power of two; a hash table where a collision overwrites, which only
  costs a draft)."""
  if key_length not in (1, 2):
    raise ValueError(f'the trajectory pool keys on 1 or 2 tokens, got {key_length}')
  if slots < 2 or slots & (slots - 1):
    raise ValueError(f'the trajectory pool needs a power of two >= 2 slots, got {slots}')
  return TrajectoryPool(jnp.full((rows, slots, 3), -1, jnp.int32), key_length)


def _slot(pool: TrajectoryPool, previous, last):
  """(slot int32, the key's first token: `previous`, or -1 for 1-token keys) of keys (previous, last)."""
  previous = previous if pool.key_length == 2 else jnp.full_like(last, -1)
  code = previous.astype(jnp.uint32) * jnp.uint32(1_000_003) + last.astype(jnp.uint32)  # wraps: any 32 bits do
  bits = pool.entries.shape[1].bit_length() - 1
  return ((code * jnp.uint32(_POOL_MIX)) >> jnp.uint32(32 - bits)).astype(jnp.int32), previous


def remember_window(pool: TrajectoryPool, inputs, predictions, before, active) -> TrajectoryPool:
  """The pool after one call: for each window position j of an active row, key (inputs[j - 1], inputs[j]) ->
  predictions[j] (`before` [B]: the token before inputs[0]). Where two positions of a row share a slot the later
  one is written (the latest prediction), decided here so that the scatter never holds two writes to one slot.
  A finished row writes nothing."""
  width = inputs.shape[1]
  previous = jnp.concatenate([before[:, None], inputs[:, :-1]], axis=1)
  slot, previous = _slot(pool, previous, inputs)
  later = jnp.arange(width)[None, :, None] < jnp.arange(width)[None, None, :]  # [1, j, k]: k after j
  overwritten = ((slot[:, :, None] == slot[:, None, :]) & later).any(axis=2)  # [B, W]
  slot = jnp.where(active[:, None] & ~overwritten, slot, pool.entries.shape[1])  # past the end: dropped
  rows = jnp.arange(inputs.shape[0])[:, None]
  entries = pool.entries.at[rows, slot].set(jnp.stack([previous, inputs, predictions], -1), mode='drop')
  return pool.replace(entries=entries)


def follow_pool(pool: TrajectoryPool, previous, last, fallback):
  """Drafts g_1 .. g_W after the committed tokens (previous, last) [B]: g_j = the pool's entry for the two
  tokens before it where it has one, else fallback[:, j - 1] (int32 [B, W]: the guesses the row had)."""
  def follow(carry, fallback_j):
    before, token = carry
    slot, before_key = _slot(pool, before, token)
    entry = jnp.take_along_axis(pool.entries, slot[:, None, None], axis=1)[:, 0]  # [B, 3]
    hit = (entry[:, 0] == before_key) & (entry[:, 1] == token) & (entry[:, 2] >= 0)
    following = jnp.where(hit, entry[:, 2], fallback_j)
    return (token, following), following
  _, chain = jax.lax.scan(follow, (previous, last), fallback.T)
  return chain.T
