"""Batched beam search with a GNMT length penalty, in one `lax.while_loop`.

Finalisation follows fairseq: each step ranks the top 2K continuations of the K live beams; a continuation
that ends in EOS is finished only if it ranks within the top K, and the K best non-EOS continuations stay
live. A sentence is done once it has K finished hypotheses (or at max_length, where its live beams are taken
as they are). With K = 1 this is exactly greedy decoding.
"""

import math
import numbers
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from fastmt.decoding.greedy import DecodeOutput, row_limits
from fastmt.decoding.step import (BOS_ID, EOS_ID, PAD_ID, DecoderStepFn, best_tokens, cache_slots,
                                  causal_window_mask, check_counts, check_special_ids, checked_step_output,
                                  output_lengths)

_LOW = -1e9  # score of an empty slot; finite so that sums and comparisons never make NaN


def length_penalty(length, alpha: float):
  """GNMT: ((5 + length) / 6) ** alpha; alpha = 0 ranks by plain log-probability."""
  return ((5.0 + length.astype(jnp.float32)) / 6.0)**alpha


@flax.struct.dataclass
class BeamState:
  step: jax.Array  # int32 []
  live_seqs: jax.Array  # int32 [B, K, L + 1]: BOS then tokens
  live_scores: jax.Array  # float32 [B, K]: log-probability of each live beam
  finished_seqs: jax.Array  # int32 [B, K, L + 1]
  finished_scores: jax.Array  # float32 [B, K]: length-normalised; _LOW for an empty slot
  num_finished: jax.Array  # int32 [B]
  calls: jax.Array  # int32 [B]: decoder steps each sentence took until done
  cache: Any  # leaves [B * K, ...]


def _log_probs(logits: jax.Array) -> jax.Array:
  """float32 log-softmax of logits [..., V] for the searches (beam and interleaved beam).

  A row holding NaN or +inf (a float16 model can overflow) has no distribution: its log-softmax is NaN, which
  no beam would ever keep or finish, so the sentence would come back empty. There the token greedy's argmax
  takes (best_tokens: the first NaN, else the first +inf; the first token of an all -inf row) gets
  log-probability 0 and every other token -inf, so that a beam of any size takes greedy's token. Only one
  token at 0: with several (every +inf token, say) a beam of 3 could take EOS among them and end.
  """
  logits = logits.astype(jnp.float32)
  top = jnp.max(logits, axis=-1, keepdims=True)  # NaN with a NaN logit, +inf with +inf, -inf if all are
  greedys = jnp.arange(logits.shape[-1]) == best_tokens(logits)[..., None]
  # jax.nn.log_softmax itself where the row has a distribution: the same numbers as before the guard.
  return jnp.where(jnp.isfinite(top), jax.nn.log_softmax(logits), jnp.where(greedys, 0.0, -jnp.inf))


def _gather_beams(x, beam_indices):
  """x [B, K, ...], beam_indices [B, K'] -> [B, K', ...]."""
  return jnp.take_along_axis(x, beam_indices.reshape(beam_indices.shape + (1,) * (x.ndim - 2)), axis=1)


def _gather_cache(cache, beam_indices, batch_size, beam_size):
  def gather(leaf):
    leaf = leaf.reshape((batch_size, beam_size) + leaf.shape[1:])
    return _gather_beams(leaf, beam_indices).reshape((batch_size * beam_size,) + leaf.shape[2:])
  return jax.tree_util.tree_map(gather, cache)


def expand_to_beams(tree, beam_size: int):
  """Repeats every leaf's rows beam_size times: [B, ...] -> [B * K, ...] (row b's beams adjacent)."""
  return jax.tree_util.tree_map(lambda x: jnp.repeat(x, beam_size, axis=0), tree)


def select_beams(finished_seqs, finished_scores, num_finished, top_seqs, top_scores, top_beams, is_end, done,
                 at_cap, penalty, k: int):
  """One step's bookkeeping, shared by every beam search (fairseq's rule). Of the 2K best continuations
  [B, 2K] of the K live beams, those that end (is_end) and rank within the top K join the finished pool
  (scored over `penalty`), the K best that do not end stay live, and a sentence at its cap (at_cap [B]) moves
  its live beams into the pool, where they compete with its finished hypotheses. A sentence with no live beam
  left (every continuation -inf or from an empty slot: a model that allows fewer than 2K tokens) is complete
  with what it has finished: nothing could join the pool any more, so running on to its cap would only cost
  decoder calls.

  Returns (live_seqs, live_scores, live_beams (their parents, to gather the cache), finished_seqs,
  finished_scores, num_finished).
  """
  rank = jnp.arange(top_scores.shape[1])[None, :]
  newly_finished = is_end & (rank < k) & (top_scores > _LOW / 2) & ~done[:, None]
  pool_scores = jnp.concatenate([finished_scores, jnp.where(newly_finished, top_scores / penalty, _LOW)], 1)
  finished_scores, keep = jax.lax.top_k(pool_scores, k)
  finished_seqs = _gather_beams(jnp.concatenate([finished_seqs, top_seqs], axis=1), keep)
  num_finished = jnp.minimum(k, num_finished + newly_finished.sum(-1).astype(jnp.int32))

  live_scores, live_rank = jax.lax.top_k(jnp.where(is_end, _LOW, top_scores), k)
  live_seqs = _gather_beams(top_seqs, live_rank)

  capped = at_cap[:, None] & (live_scores > _LOW / 2)
  pool_scores = jnp.concatenate([finished_scores, jnp.where(capped, live_scores / penalty, _LOW)], 1)
  finished_scores, keep = jax.lax.top_k(pool_scores, k)
  finished_seqs = _gather_beams(jnp.concatenate([finished_seqs, live_seqs], axis=1), keep)
  no_live_beam = (live_scores <= _LOW / 2).all(axis=-1)
  num_finished = jnp.where(at_cap | no_live_beam, k, num_finished)
  return live_seqs, live_scores, _gather_beams(top_beams, live_rank), finished_seqs, finished_scores, num_finished


def beam_search(step_fn: DecoderStepFn, cache: Any, batch_size: int, beam_size: int, max_length: int,
                alpha: float = 0.6, row_caps: jax.Array | None = None, *, bos_id: int = BOS_ID,
                eos_id: int = EOS_ID, pad_id: int = PAD_ID) -> DecodeOutput:
  """Beam search; `cache` and `step_fn` must already work on batch_size * beam_size rows, sentence b's beams
  in rows b * beam_size .. (b + 1) * beam_size - 1 (expand_to_beams lays a per-sentence pytree out so).

  row_caps: optional int32 [B] (per sentence), each sentence's own output cap (<= max_length); 0 = a padding
    sentence, done from the start. At its cap a sentence's live beams join its finished ones.
  bos_id, eos_id, pad_id: the model's special ids, as for greedy_search.
  Returns the best hypothesis per sentence: tokens [B, L] up to and including EOS, PAD after (no EOS where the
  sentence reached its cap first).
  """
  state = _search(step_fn, cache, batch_size, beam_size, max_length, alpha, row_caps,
                  check_special_ids(bos_id, eos_id, pad_id))
  # Every sentence ended by K finished hypotheses or at its cap (caps <= max_length), so the best finished
  # hypothesis is the answer; a padding sentence's is BOS then PAD.
  best = jnp.argmax(state.finished_scores, axis=1)
  tokens = _gather_beams(state.finished_seqs, best[:, None])[:, 0, 1:]
  return DecodeOutput(tokens, state.calls, state.step)


def beam_search_top(step_fn: DecoderStepFn, cache: Any, batch_size: int, beam_size: int, max_length: int,
                    top: int, alpha: float = 0.6, row_caps: jax.Array | None = None, *, bos_id: int = BOS_ID,
                    eos_id: int = EOS_ID, pad_id: int = PAD_ID):
  """Beam search returning each sentence's `top` best finished hypotheses (best first), for rescoring.

  Returns (DecodeOutput with tokens [B, top, L], log_probs [B, top]: the hypotheses' plain log-probabilities,
  before the length penalty that ranked them).
  """
  ids = check_special_ids(bos_id, eos_id, pad_id)
  state = _search(step_fn, cache, batch_size, beam_size, max_length, alpha, row_caps, ids)
  scores, order = jax.lax.top_k(state.finished_scores, top)
  tokens = _gather_beams(state.finished_seqs, order)[:, :, 1:]
  # A hypothesis's length: up to its EOS, else its sentence's cap (a model may emit pad_id as a real token).
  caps = row_limits(batch_size, max_length, row_caps)
  lengths = jnp.minimum(output_lengths(tokens, ids[1]), caps[:, None])
  log_probs = scores * length_penalty(lengths, alpha)
  return DecodeOutput(tokens, state.calls, state.step), log_probs


def _search(step_fn, cache, batch_size, beam_size, max_length, alpha, row_caps, ids) -> 'BeamState':
  """The search itself: the final BeamState. ids: (bos_id, eos_id, pad_id), checked."""
  bos_id, eos_id, pad_id = ids
  k, n = beam_size, batch_size
  check_counts(batch_size=batch_size, beam_size=beam_size, max_length=max_length)
  if isinstance(alpha, numbers.Real) and not (math.isfinite(alpha) and alpha >= 0):
    raise ValueError(f'alpha (the length penalty\'s exponent) must be a finite number >= 0, got {alpha!r}')
  cache_length = cache_slots(cache, n * k)  # the cache and step_fn work on batch_size * beam_size rows
  if cache_length < max_length:
    raise ValueError(f'cache has {cache_length} slots, fewer than max_length={max_length}')
  caps = row_limits(n, max_length, row_caps)
  seqs = jnp.full((n, k, max_length + 1), pad_id, jnp.int32).at[:, :, 0].set(bos_id)
  # Only beam 0 is real at the start; the others would duplicate it.
  live_scores = jnp.tile(jnp.array([0.0] + [_LOW] * (k - 1), jnp.float32), (n, 1))
  num_finished = jnp.where(caps <= 0, k, 0).astype(jnp.int32)  # padding sentences are done from the start
  state = BeamState(jnp.int32(0), seqs, live_scores, seqs, jnp.full((n, k), _LOW, jnp.float32),
                    num_finished, jnp.zeros((n,), jnp.int32), cache)

  def not_finished(state):
    return (state.step < max_length) & (state.num_finished < k).any()

  def advance(state):
    offsets = jnp.full((n * k,), state.step, jnp.int32)
    current = jax.lax.dynamic_slice_in_dim(state.live_seqs, state.step, 1, axis=2).reshape(n * k, 1)
    logits, cache = checked_step_output(
        step_fn(current, offsets[:, None], causal_window_mask(offsets, 1, cache_length), state.cache, offsets),
        n * k, 1, ids, cache_in=state.cache)
    log_probs = _log_probs(logits[:, 0]).reshape(n, k, -1)  # [B, K, V]
    vocab = log_probs.shape[-1]
    candidates = (state.live_scores[:, :, None] + log_probs).reshape(n, k * vocab)
    top_scores, top_ids = jax.lax.top_k(candidates, 2 * k)  # [B, 2K]
    top_beams, top_tokens = top_ids // vocab, (top_ids % vocab).astype(jnp.int32)
    top_seqs = _gather_beams(state.live_seqs, top_beams)
    top_seqs = jax.lax.dynamic_update_slice_in_dim(top_seqs, top_tokens[:, :, None], state.step + 1, axis=2)
    is_eos = top_tokens == eos_id
    done = state.num_finished >= k  # [B]: sentences already complete keep their state
    at_cap = (state.step + 1 >= caps) & ~done  # a sentence at its cap ends now
    (live_seqs, live_scores, live_beams, finished_seqs, finished_scores, num_finished) = select_beams(
        state.finished_seqs, state.finished_scores, state.num_finished, top_seqs, top_scores, top_beams, is_eos,
        done, at_cap, length_penalty(state.step + 1, alpha), k)
    cache = _gather_cache(cache, live_beams, n, k)

    keep_old = lambda new, old: jnp.where(done.reshape((n,) + (1,) * (new.ndim - 1)), old, new)
    return BeamState(state.step + 1, keep_old(live_seqs, state.live_seqs),
                     keep_old(live_scores, state.live_scores), keep_old(finished_seqs, state.finished_seqs),
                     keep_old(finished_scores, state.finished_scores), num_finished,
                     state.calls + (~done).astype(jnp.int32), cache)

  return jax.lax.while_loop(not_finished, advance, state)
