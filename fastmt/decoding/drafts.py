"""Draft tables for Jacobi initialisation: a cheap guess of what follows each token.

Jacobi decoding is exact whatever its initial guesses are (every committed token is verified against the
model), but it needs fewer iterations when the guesses are right more often. PAD guesses (the paper's) are
never right, so an iteration commits a second token only when the model's own unverified prediction
happens to be right. A bigram table, the most frequent successor of each token in target-language text,
guesses frequent continuations ("und" -> "er", "Herrn" -> ",") for free: one gather per iteration.

    table = bigram_table(tokenizer.encode(train.targets), vocab_size)
    jacobi.pgj_decode(step_fn, cache, batch, max_len, 3, initializer=jacobi.chain_initializer(table))
"""

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
