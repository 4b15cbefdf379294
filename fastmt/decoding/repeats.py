"""The repetition guard (`max_repeats`, off by default): a row that emits one token max_repeats times in a row
has fallen into a loop ("selbst selbst selbst ...", "Gesprossssss"), which a small model may feed itself until
its output cap; the guard ends the row there and keeps one copy.

Why end the row and not penalise the token: a run-on holds its whole batch until the cap (docs/BENCHMARKS.md
section 6), and its copies carry nothing, so ending the row both frees the batch and drops the garbage. The
price: a model that stutters and then recovers ("euch selbst selbst selbst selbst, um des Todes, ...") loses
what it would have said after the stutter, so max_repeats must sit above the stutters and below the run-ons.
No human translation of the built-in corpus's training split repeats a piece 4 times in a row (51,766 targets:
at most 3, six times), but its small models stutter for 4-6 copies and recover; on its validation split 8 ended
every two-pass run-on of the HRT model and changed 3 of the 433 AT outputs (BLEU +0.02, chrF +0.01; two of them
long stutters the model had recovered from), where 3-5 cost chrF (docs/BENCHMARKS.md section 6). A corpus whose
text repeats a piece ("ha ha ha ha", "!!!!") needs its own choice.

HRT (hrt.hrt_decode) guards stage I's tokens, every k-th word: a loop of one word, or of k words, repeats one
token there, and so would a list whose every k-th piece is the same (eight commas at every second piece, at
R = 8, k = 2). Stage II then fills the masks around stage I's last copy, so the output may keep up to 2k - 1
copies of a loop's word; the two stages' output is cut at R identical tokens as well. The guard changes the
decoder's output, so the exact decoders (Jacobi, speculative: greedy's output, token for token) do not take it;
greedy and HRT do.
"""

import jax
import jax.numpy as jnp

from fastmt.decoding.step import EOS_ID, PAD_ID


def check_max_repeats(max_repeats: int) -> None:
  if max_repeats == 1 or max_repeats < 0:
    raise ValueError(f'max_repeats must be 0 (off) or >= 2 (a row ends at that many identical tokens in a row; 1 '
                     f'would end every row at its first token), got {max_repeats}')


def cut_first_run(tokens: jax.Array, max_repeats: int, eos_id: int = EOS_ID, pad_id: int = PAD_ID,
                  bos_id: int | None = None):
  """Outputs [B, L] (tokens, EOS, PAD) with each row's first run of max_repeats identical tokens before its EOS
  cut to one copy, then EOS, then PAD -> (tokens [B, L], run_end [B]): the index after the run's last copy
  (the outputs the row had made when the guard fired), or -1 for a row without such a run (left as it was).
  A run longer than max_repeats is cut from its first copy as well. Runs of PAD (or of bos_id) are no runs, as
  in greedy_search's guard, which ends a row where this cuts it."""
  length = tokens.shape[1]
  if max_repeats > length:
    return tokens, jnp.full((tokens.shape[0],), -1, jnp.int32)
  starts = length - max_repeats + 1
  first = tokens[:, :starts]
  same = jnp.ones_like(first, bool)
  for offset in range(1, max_repeats):
    same &= tokens[:, offset:offset + starts] == first
  before_eos = jnp.cumsum(tokens == eos_id, axis=1)[:, :starts] == 0  # runs after the EOS are not outputs
  starts_run = same & before_eos & (first != pad_id)
  if bos_id is not None:
    starts_run &= first != bos_id
  found = starts_run.any(axis=1)
  start = jnp.argmax(starts_run, axis=1)
  position = jnp.arange(length)[None, :]
  cut = jnp.where(position <= start[:, None], tokens, jnp.where(position == start[:, None] + 1, eos_id, pad_id))
  return (jnp.where(found[:, None], cut, tokens),
          jnp.where(found, start + max_repeats, -1).astype(jnp.int32))
