"""Decoding interleaved models (IBDecoder, SA, IB+SA, IMDecoder): z = h * c words per decoder call.

Spec: ../shared/papers/interleaved-bidirectional-decoder.txt, Section 4.2 and Algorithm 1. The reordered
layout, positions, mask and the recovery of the natural order live in interleaving.py; here are the two
searches, each one `lax.while_loop`:

* greedy: each step feeds the z words of the previous step (the z start symbols first) at their slots'
  positions, writes their keys/values to the KV cache, and takes the argmax of every slot; a row stops at the
  first step with an EOS in any slot (or at its own cap).
* beam (Algorithm 1): each live hypothesis proposes the top B words of every slot; the B^z combinations are
  pruned to B by adding the slots one at a time and keeping the B best partial sums (exact: a combination in
  the final top B has every prefix in that prefix's top B), then the B x B continuations of a sentence are
  ranked as in fastmt's beam search (a continuation is finished when any of its z words is EOS, scored by
  its log-probability over a GNMT penalty of the t = steps * z words generated, Algorithm 1's s_t / t with
  the usual alpha), and the best finished hypothesis is put back in natural order.

Both take end_rule: 'any' is Algorithm 1's end-of-hypothesis rule (any EOS in a step); 'layout' an alternative
(the paper leaves them open): only the combinations a training target's last step can hold, words in the first
slots then EOS in every later one (docs/BENCHMARKS.md section 5 measures it: it mends beam 4's short outputs,
not its BLEU).

Both return DecodeOutput in natural order (words, EOS, PAD), so translate.py treats them as any decoder.
"""

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from fastmt.decoding import interleaving as order
# Beam search's state (live_seqs and finished_seqs hold reordered outputs here, [B, K, S * z]) and helpers.
from fastmt.decoding.beam import (_LOW, BeamState, _gather_beams, _gather_cache, _log_probs, length_penalty,
                                  select_beams)
from fastmt.decoding.greedy import DecodeOutput, row_limits
from fastmt.decoding.step import (EOS_ID, PAD_ID, DecoderStepFn, best_tokens, cache_slots, check_counts,
                                  checked_step_output)


END_RULES = ('any', 'layout')


def _check_end_rule(end_rule):
  if end_rule not in END_RULES:
    raise ValueError(f'end_rule must be one of {END_RULES}, got {end_rule!r}')


def _best_layout_combination(logits):
  """[R, z, V] -> int32 [R, z]: the most likely combination of words under the 'layout' end rule."""
  log_probs = _log_probs(logits)  # beam search's: greedy's token where a slot's logits hold NaN or +inf
  scores, words = jax.lax.top_k(log_probs, 2)  # the best word that is not EOS is among the top 2
  _, combination = prune_outer_sum(scores, words.astype(jnp.int32), 1, log_probs[..., EOS_ID])
  return combination[:, 0]


def _check_inputs(cache, layout: order.Interleaving, max_length: int, rows: int, **counts) -> int:
  """The cache's slots, after the checks every decoder makes (step.check_counts, step.cache_slots) and the
  layout's: a raw TypeError or a broadcasting error from inside the loop otherwise."""
  if not isinstance(layout, order.Interleaving) or not layout.start_ids:
    raise ValueError('layout must be an Interleaving with its start ids (Interleaving.with_start_ids(tokenizer)), '
                     f'got {layout!r}')
  check_counts(max_length=max_length, **counts)
  cache_length = cache_slots(cache, rows)
  needed = layout.steps_for(max_length) * layout.slots
  if cache_length < needed:
    raise ValueError(f'cache has {cache_length} slots, the interleaved decoder needs {needed} '
                     f'(ceil(max_length / z) * z)')
  return cache_length


def _call(step_fn, layout: order.Interleaving, current, step, cache, cache_length: int):
  """One decoder call over the z slots of `step` for every row: logits [R, z, V] and the cache."""
  rows, z = current.shape
  num_steps = cache_length // z
  offsets = jnp.full((rows,), step * z, jnp.int32)
  positions = jax.lax.dynamic_slice_in_dim(order.positions(layout, num_steps), step * z, z)
  mask = order.self_mask(layout, z, cache_length, query_offset=step * z)
  extra = {}
  if layout.direction_embeddings:
    directions = jax.lax.dynamic_slice_in_dim(order.directions(layout, num_steps), step * z, z)
    extra['directions'] = jnp.broadcast_to(directions, (rows, z))
  return checked_step_output(step_fn(current, jnp.broadcast_to(positions, (rows, z)),
                                     jnp.broadcast_to(mask, (rows,) + mask.shape), cache, offsets, **extra),
                             rows, z, cache_in=cache)


def _natural_order(layout, reordered, caps, max_length):
  """Recovered words, EOS, PAD [B, max_length], each row cut at its own cap."""
  tokens = order.recover(layout, reordered, max_length)
  return jnp.where(jnp.arange(max_length)[None, :] < caps[:, None], tokens, PAD_ID)


@flax.struct.dataclass
class _GreedyState:
  step: jax.Array  # int32 []: decoder calls so far
  tokens: jax.Array  # int32 [B, S * z]: reordered outputs
  current: jax.Array  # int32 [B, z]: the inputs of the next call
  done: jax.Array  # bool [B]
  calls: jax.Array  # int32 [B]
  cache: Any


def interleaved_greedy(step_fn: DecoderStepFn, cache: Any, batch_size: int, max_length: int,
                       layout: order.Interleaving, row_caps: jax.Array | None = None,
                       end_rule: str = 'any') -> DecodeOutput:
  """Greedy interleaved decoding of up to max_length tokens (EOS included) per row, z words per call.

  layout must carry its start ids (Interleaving.with_start_ids). The cache needs ceil(max_length / z) * z
  slots. step_fn is called with z positions a row and, for a layout with direction embeddings, with
  `directions=` int32 [B, z] as well. row_caps: optional int32 [B], each row's own output cap (0 = a padding
  row); a row's step cap is ceil(cap / z), its output cut to its cap in natural order. end_rule 'any' takes
  every slot's argmax (the paper); 'layout' the most likely combination a training target can end with
  (interleaved_beam's rule, beam size 1). Returns DecodeOutput: tokens int32 [B, max_length] in natural order
  (words, EOS, PAD), decoder_calls [B], loop_iterations.
  """
  _check_end_rule(end_rule)
  cache_length = _check_inputs(cache, layout, max_length, batch_size, batch_size=batch_size)
  z = layout.slots
  num_steps = layout.steps_for(max_length)
  caps = row_limits(batch_size, max_length, row_caps)
  step_caps = -(-caps // z)
  starts = jnp.broadcast_to(jnp.asarray(layout.start_ids, jnp.int32), (batch_size, z))
  state = _GreedyState(jnp.int32(0), jnp.full((batch_size, num_steps * z), PAD_ID, jnp.int32), starts,
                       step_caps <= 0, jnp.zeros((batch_size,), jnp.int32), cache)

  def not_finished(state):
    return (state.step < num_steps) & ~state.done.all()

  def advance(state):
    logits, cache = _call(step_fn, layout, state.current, state.step, state.cache, cache_length)
    words = best_tokens(logits) if end_rule == 'any' else _best_layout_combination(logits)  # [B, z]
    words = jnp.where(state.done[:, None], PAD_ID, words)
    tokens = jax.lax.dynamic_update_slice_in_dim(state.tokens, words, state.step * z, axis=1)
    calls = state.calls + (~state.done).astype(jnp.int32)
    done = state.done | (words == EOS_ID).any(-1) | (state.step + 1 >= step_caps)
    return _GreedyState(state.step + 1, tokens, words, done, calls, cache)

  state = jax.lax.while_loop(not_finished, advance, state)
  return DecodeOutput(_natural_order(layout, state.tokens, caps, max_length), state.calls, state.step)


def prune_outer_sum(slot_scores: jax.Array, slot_words: jax.Array, beam_size: int,
                    eos_scores: jax.Array | None = None):
  """The beam_size best combinations of one word per slot (Algorithm 1, lines 10-14).

  Args:
    slot_scores: float [..., z, K] log-probabilities of each slot's top K words; slot_words: int [..., z, K].
    eos_scores: float [..., z], each slot's log-probability of EOS, for the 'layout' end rule: only the
      combinations a training target can end with are kept (words in the first slots, then EOS in every other
      slot: the reordered layout fills the last step in slot order), and a slot after an EOS is scored by its
      own EOS log-probability; exact when K >= beam_size + 1 (beam_size words other than EOS in every slot).
      None = Algorithm 1's rule, every combination.
  Returns:
    scores [..., beam_size] (sums over the slots, best first), words int [..., beam_size, z].
  """
  z = slot_scores.shape[-2]
  if eos_scores is not None:
    return _prune_layout(slot_scores, slot_words, beam_size, eos_scores)
  scores = slot_scores[..., 0, :beam_size]
  words = slot_words[..., 0, :beam_size, None]
  for j in range(1, z):
    scores, words = _extend(scores, words, slot_scores[..., j, :], slot_words[..., j, :], beam_size)
  return scores, words


def _extend(scores, words, new_scores, new_words, beam_size):
  """The beam_size best of every prefix [..., P] (words [..., P, j]) followed by every word [..., K]."""
  width = new_scores.shape[-1]
  sums = scores[..., :, None] + new_scores[..., None, :]  # [..., P, K]
  flat = sums.reshape(sums.shape[:-2] + (-1,))
  scores, index = jax.lax.top_k(flat, min(beam_size, flat.shape[-1]))
  previous, new = index // width, index % width
  words = jnp.concatenate([jnp.take_along_axis(words, previous[..., None], axis=-2),
                           jnp.take_along_axis(new_words, new, axis=-1)[..., None]], axis=-1)
  return scores, words


def _prune_layout(slot_scores, slot_words, beam_size, eos_scores):
  """prune_outer_sum under the 'layout' end rule, exact: the best prefixes are kept in two groups, open (no
  EOS yet: any word may follow) and ended (only EOS may follow), beam_size each; a combination in the final
  top beam_size has every prefix in its group's top beam_size, since any open prefix takes the same suffix."""
  z = slot_scores.shape[-2]
  is_eos = slot_words == EOS_ID
  open_scores_all = jnp.where(is_eos, _LOW, slot_scores)  # EOS moves a prefix to the ended group
  eos_word = jnp.full(slot_words.shape[:-2] + (1, 1), EOS_ID, slot_words.dtype)
  lead = slot_words.shape[:-2]
  open_scores, open_words = _extend(jnp.zeros(lead + (1,), slot_scores.dtype),
                                    jnp.zeros(lead + (1, 0), slot_words.dtype),
                                    open_scores_all[..., 0, :], slot_words[..., 0, :], beam_size)
  end_scores = jnp.concatenate([eos_scores[..., 0:1], jnp.full(lead + (beam_size - 1,), _LOW, eos_scores.dtype)],
                               axis=-1)
  end_words = jnp.full(lead + (beam_size, 1), EOS_ID, slot_words.dtype)
  for j in range(1, z):
    eos_j = eos_scores[..., j:j + 1]
    # Ended after slot j: an open prefix closed here, or an ended one going on with EOS.
    closing = jnp.concatenate([open_scores + eos_j, end_scores + eos_j], axis=-1)
    closing_words = jnp.concatenate([open_words, end_words], axis=-2)
    end_scores, pick = jax.lax.top_k(closing, beam_size)
    end_words = jnp.concatenate([jnp.take_along_axis(closing_words, pick[..., None], axis=-2),
                                 jnp.broadcast_to(eos_word, lead + (beam_size, 1))], axis=-1)
    open_scores, open_words = _extend(open_scores, open_words, open_scores_all[..., j, :], slot_words[..., j, :],
                                      beam_size)
  scores, pick = jax.lax.top_k(jnp.concatenate([open_scores, end_scores], axis=-1), beam_size)
  words = jnp.take_along_axis(jnp.concatenate([open_words, end_words], axis=-2), pick[..., None], axis=-2)
  return scores, words


def interleaved_beam(step_fn: DecoderStepFn, cache: Any, batch_size: int, beam_size: int, max_length: int,
                     layout: order.Interleaving, alpha: float = 0.6,
                     row_caps: jax.Array | None = None, end_rule: str = 'any') -> DecodeOutput:
  """Algorithm 1: beam search with z words per step; cache and step_fn on batch_size * beam_size rows.

  layout, the cache's slots, step_fn's calls and row_caps (int32 [B], per sentence) as for interleaved_greedy.
  end_rule: 'any' = Algorithm 1's (a combination with EOS in any slot ends the hypothesis); 'layout' = only
  the combinations a training target ends with (see prune_outer_sum). Returns DecodeOutput: each sentence's
  best hypothesis, tokens int32 [B, max_length] in natural order, decoder_calls [B], loop_iterations.
  """
  _check_end_rule(end_rule)
  check_counts(batch_size=batch_size, beam_size=beam_size)
  if beam_size < 2:  # a step keeps 2k of the k x k pruned continuations: k = 1 leaves too few
    raise ValueError(f'interleaved_beam needs beam_size >= 2, got {beam_size}: beam 1 is interleaved_greedy '
                     '(which --algorithm ib decodes with)')
  cache_length = _check_inputs(cache, layout, max_length, batch_size * beam_size)
  n, k, z = batch_size, beam_size, layout.slots
  num_steps = layout.steps_for(max_length)
  caps = row_limits(n, max_length, row_caps)
  step_caps = -(-caps // z)
  seqs = jnp.full((n, k, num_steps * z), PAD_ID, jnp.int32)
  live_scores = jnp.tile(jnp.array([0.0] + [_LOW] * (k - 1), jnp.float32), (n, 1))
  num_finished = jnp.where(step_caps <= 0, k, 0).astype(jnp.int32)
  state = BeamState(jnp.int32(0), seqs, live_scores, seqs, jnp.full((n, k), _LOW, jnp.float32), num_finished,
                     jnp.zeros((n,), jnp.int32), cache)
  starts = jnp.broadcast_to(jnp.asarray(layout.start_ids, jnp.int32), (n * k, z))

  def not_finished(state):
    return (state.step < num_steps) & (state.num_finished < k).any()

  def advance(state):
    previous = jax.lax.dynamic_slice_in_dim(state.live_seqs, jnp.maximum(state.step - 1, 0) * z, z, axis=2)
    current = jnp.where(state.step == 0, starts, previous.reshape(n * k, z))
    logits, cache = _call(step_fn, layout, current, state.step, state.cache, cache_length)
    # beam search's log-softmax: where a slot's logits hold NaN or +inf (a float16 model's overflow) greedy's
    # token at log-probability 0, every other -inf; jax.nn.log_softmax gave NaN there, which no beam kept.
    log_probs = _log_probs(logits).reshape(n, k, z, -1)
    # top_k on a 2-D view: on XLA:CPU a 4-D top_k feeding the pruning's gathers inside the loop compiles to a
    # path ~100x slower (300 ms a step at batch 32, vocabulary 8k; measured), the 2-D one does not.
    vocab = log_probs.shape[-1]
    # Under the 'layout' rule EOS leaves the open group, so one more word per slot keeps k words open.
    width = k + (end_rule == 'layout')
    slot_scores, slot_words = jax.lax.top_k(log_probs.reshape(-1, vocab), width)
    slot_scores, slot_words = slot_scores.reshape(n, k, z, width), slot_words.reshape(n, k, z, width)
    eos_scores = log_probs[..., EOS_ID] if end_rule == 'layout' else None
    step_scores, step_words = prune_outer_sum(slot_scores, slot_words.astype(jnp.int32), k,
                                              eos_scores)  # [n,k,k], [n,k,k,z]
    candidates = (state.live_scores[:, :, None] + step_scores).reshape(n, k * k)
    top_scores, top_ids = jax.lax.top_k(candidates, 2 * k)  # [n, 2k]
    top_beams = top_ids // k
    top_words = jnp.take_along_axis(step_words.reshape(n, k * k, z), top_ids[..., None], axis=1)  # [n, 2k, z]
    top_seqs = _gather_beams(state.live_seqs, top_beams)
    top_seqs = jax.lax.dynamic_update_slice_in_dim(top_seqs, top_words, state.step * z, axis=2)
    is_end = (top_words == EOS_ID).any(-1)  # Algorithm 1, line 17: any word of the step is EOS
    done = state.num_finished >= k
    at_cap = (state.step + 1 >= step_caps) & ~done
    (live_seqs, live_scores, live_beams, finished_seqs, finished_scores, num_finished) = select_beams(
        state.finished_seqs, state.finished_scores, state.num_finished, top_seqs, top_scores, top_beams, is_end,
        done, at_cap, length_penalty((state.step + 1) * z, alpha), k)
    cache = _gather_cache(cache, live_beams, n, k)

    keep_old = lambda new, old: jnp.where(done.reshape((n,) + (1,) * (new.ndim - 1)), old, new)
    return BeamState(state.step + 1, keep_old(live_seqs, state.live_seqs),
                      keep_old(live_scores, state.live_scores), keep_old(finished_seqs, state.finished_seqs),
                      keep_old(finished_scores, state.finished_scores), num_finished,
                      state.calls + (~done).astype(jnp.int32), cache)

  state = jax.lax.while_loop(not_finished, advance, state)
  best = jnp.argmax(state.finished_scores, axis=1)
  reordered = _gather_beams(state.finished_seqs, best[:, None])[:, 0]
  return DecodeOutput(_natural_order(layout, reordered, caps, max_length), state.calls, state.step)


def dedup_repeats(tokens: jax.Array, max_n: int) -> jax.Array:
  """Removes immediately repeated n-grams (n = 1 .. max_n) from natural-order outputs [B, L] (words, EOS, PAD).

  The paper's optional deduplication (Figure 4): words predicted independently in one step, or by two
  directions meeting in the middle, can repeat ("the the", "in the in the"); each word is appended, then the
  last n words are dropped while they equal the n before them. An EOS stays after the kept words.
  """
  length_max = tokens.shape[1]

  def row(words):
    def body(carry, word):
      buf, length, ended = carry
      is_word = (word != EOS_ID) & (word != PAD_ID) & ~ended
      buf = jnp.where(is_word, buf.at[jnp.minimum(length, length_max - 1)].set(word), buf)
      length = length + is_word.astype(jnp.int32)
      for n in range(1, max_n + 1):
        index = jnp.arange(n)
        last = buf[jnp.clip(length - n + index, 0, length_max - 1)]
        before = buf[jnp.clip(length - 2 * n + index, 0, length_max - 1)]
        length = jnp.where(is_word & (length >= 2 * n) & (last == before).all(), length - n, length)
      return (buf, length, ended | (word == EOS_ID)), None

    init = (jnp.zeros((length_max,), jnp.int32), jnp.int32(0), jnp.bool_(False))
    (buf, length, ended), _ = jax.lax.scan(body, init, words)
    position = jnp.arange(length_max)
    return jnp.where(position < length, buf, jnp.where((position == length) & ended, EOS_ID, PAD_ID))

  return jax.vmap(row)(tokens).astype(jnp.int32)
