"""Parallel Jacobi decoding (Santilli et al. 2023): PJ, PGJ and HGJ, batched, exact, in `lax.while_loop`s.

Greedy decoding solves the triangular system y_i = argmax_v p(v | y_<i, x), i = 1..m, by substitution. Jacobi
iteration updates a window of W positions at once from the current iterate:
    y_i^(k+1) = argmax p(. | y_<i^(k), x)   for every i in the window.

Commit rule (the exactness argument, Proposition 1 of the paper, made per iteration): the window's first
prediction is final, since all its inputs are final; prediction j is final when every guess it was
conditioned on equals the prediction just computed for that position. Each iteration therefore commits the
longest verified prefix (>= 1 token), so iterations <= greedy steps, the output equals greedy's token for
token, and stopping needs no confirming pass of its own: a row is done when it commits EOS or hits the cap.
Unverified predictions are kept as the next window's initial guesses; positions entering the window for
the first time take the initialiser's value (PAD by default, as in the paper).

  PJ:  W = the output cap (the whole target, no oracle length).
  PGJ: W = block size b; the block is re-anchored at the first unfinished position after every commit.
       (The paper's blocks have fixed boundaries; re-anchoring never accepts less and keeps shapes static.)
  HGJ: PGJ while some unfinished row's committed length is below the parallel length l, then W = 1 (which
       is exactly greedy with per-row offsets) until EOS. In a batch the switch is the batch's, not each
       row's: a row past l keeps the W-wide window until every row is past l or done (see jacobi_decode).

KV cache: the window's inputs are written at slots committed .. committed + W - 1; slots of committed
inputs are correct (their inputs and everything they attend to are final) and are not rewritten later.
"""

import functools
from typing import Any, Callable

import flax.struct
import jax
import jax.numpy as jnp

from fastmt.decoding import draft_model as draft_model_lib, drafts
from fastmt.decoding.greedy import DecodeOutput, row_limits
from fastmt.decoding.step import (BOS_ID, EOS_ID, PAD_ID, DecoderStepFn, best_tokens, cache_slots,
                                  causal_window_mask, check_counts, check_special_ids, checked_step_output)

# Guesses for positions entering the window. An initialiser is called once per loop with the (static) window
# width, outside the loop body so that any table it precomputes is built once, and returns a function from
# the anchor token of each row (int32 [B]: the token just before the first new position, BOS at the start)
# to guesses int32 [B, W] for the W positions that follow it. Exactness never depends on the guesses (every
# committed token is verified); only the number of iterations does.
Initializer = Callable[[int], Callable[[jax.Array], jax.Array]]

# A prefix drafter proposes, after every commit, the next W tokens from the row's tokens so far:
# (tokens int32 [B, H] (BOS first), end int32 [B] (index of the last committed token), W) -> (drafts int32
# [B, W] for the outputs after it, found bool [B]). Where found, its drafts replace Jacobi's guesses for the
# next window. drafts.lookup_drafts is one (the n-gram drafter); like every guess, drafts never change the
# output, only the number of calls.
PrefixDrafter = Callable[[jax.Array, jax.Array, int], tuple[jax.Array, jax.Array]]


def pad_initializer(width: int, pad_id: int = PAD_ID) -> Callable[[jax.Array], jax.Array]:
  """The paper's initialisation: every new position starts as PAD (jacobi_decode's default, with its pad_id)."""
  return lambda anchor: jnp.full((anchor.shape[0], width), pad_id, jnp.int32)


def checked_guesses(guesses, rows: int, width: int) -> jax.Array:
  """An initializer's guesses or a drafter's drafts, checked at trace time: token ids [rows, width] (an
  initializer returning [W] was an IndexError deep inside the loop, a drafter's other width a broadcasting
  error, float guesses a silent cast)."""
  shape, dtype = getattr(guesses, 'shape', None), getattr(guesses, 'dtype', None)
  if shape is None or tuple(shape) != (rows, width) or not jnp.issubdtype(dtype, jnp.integer):
    raise ValueError(f'guesses (initializer(width)(anchors [B]), or a drafter\'s drafts) must be token ids '
                     f'[B, width] = [{rows}, {width}], got shape {shape} of {dtype}')
  return guesses


def chain_initializer(next_token: jax.Array) -> Initializer:
  """Guesses by following a next-token table from the anchor: g_1 = next[anchor], g_j = next[g_(j-1)].

  next_token: int32 [V], e.g. the most frequent successor of each token in the training targets
  (fastmt.decoding.drafts.bigram_table). The W-step chains from every token are tabulated once per loop
  ([W, V] gathers), so a new guess costs one gather inside the loop.
  """
  next_token = jnp.asarray(next_token, jnp.int32)

  def for_width(width: int):
    def follow(previous, _):
      following = next_token[previous]
      return following, following
    _, chains = jax.lax.scan(follow, jnp.arange(next_token.shape[0], dtype=jnp.int32), None, length=width)
    return lambda anchor: chains[:, anchor].T  # [W, V] -> [B, W]
  return for_width


@flax.struct.dataclass
class JacobiTrace:
  """What DDGviz draws, one row per loop iteration (entries past the last iteration are zero)."""
  start: jax.Array  # int32 [I, B]: first window position (= committed length before the iteration)
  inputs: jax.Array  # int32 [I, B, W]: the iterate fed in (guesses for positions start .. start+W-1 shifted)
  predictions: jax.Array  # int32 [I, B, W]: argmax for positions start .. start + W - 1
  probabilities: jax.Array  # float32 [I, B, W]: softmax probability of each prediction
  accepted: jax.Array  # int32 [I, B]: tokens committed by the iteration (0 once the row is done)
  widths: jax.Array  # int32 [I]: the iteration's window (W; 1 in HGJ's greedy phase): later columns are padding


@flax.struct.dataclass
class JacobiState:
  iteration: jax.Array  # int32 []
  tokens: jax.Array  # int32 [B, L + W + 1]: BOS, then outputs; final up to `committed`
  committed: jax.Array  # int32 [B]: how many output tokens are final (a count, not ids)
  guess: jax.Array  # int32 [B, W]: the iterate for outputs committed .. committed + W - 1
  done: jax.Array  # bool [B]
  calls: jax.Array  # int32 [B]: decoder calls the row made until done
  cache: Any
  trace: JacobiTrace | None
  guess_is_draft: jax.Array  # bool [B]: `guess` is a self-draft (mask_id): draft after the window next
  draft_cache: Any = None  # a separate drafter model's cache (draft_model), else None
  pool: drafts.TrajectoryPool | None = None  # the trajectory pool (trajectory_pool), else None


def commit(guess: jax.Array, predictions: jax.Array, committed: jax.Array, caps: jax.Array, done: jax.Array,
           eos_id: int = EOS_ID):
  """Jacobi's commit rule for one call over a window of W positions: (accepted [B], done [B]).

  guess [B, W] is the iterate the call was fed (guess[:, j] the input of window position j + 1) and
  predictions [B, W] its argmax for outputs committed .. committed + W - 1. Prediction j is final when guesses
  0 .. j-1 equal predictions 0 .. j-1 (all its inputs are then final), so the longest verified prefix, >= 1
  token, is committed; it is cut after its first EOS and at the row's cap, and a done row commits nothing.
  """
  width = predictions.shape[1]
  agrees = (guess[:, :width - 1] == predictions[:, :width - 1]).astype(jnp.int32)
  accepted = 1 + jnp.cumprod(agrees, axis=1).sum(axis=1)  # [B] in 1..W
  is_eos = (predictions == eos_id) & (jnp.arange(width)[None, :] < accepted[:, None])
  accepted = jnp.where(is_eos.any(1), jnp.argmax(is_eos, axis=1) + 1, accepted)
  accepted = jnp.minimum(accepted, caps - committed)
  accepted = jnp.where(done, 0, accepted)
  return accepted, done | is_eos.any(1) | (committed + accepted >= caps)


def draft_window_mask(write_offsets: jax.Array, context: jax.Array, width: int, cache_length: int) -> jax.Array:
  """[B, 2W, M] for a call of W window positions then W <mask> slots (self-drafting, below): window position
  t sees slots <= offset + t (causal, as in causal_window_mask); the mask slots (written at offset + W ..
  offset + 2W - 1) see each other and the slots <= offset + context[b]: the committed prefix (context 0) or
  the whole window too (context W - 1). No window position sees a mask slot."""
  window = causal_window_mask(write_offsets, width, cache_length)
  slots = jnp.arange(cache_length)[None, None, :]
  offsets = write_offsets[:, None, None]
  masks = (slots <= offsets + context[:, None, None]) | ((slots >= offsets + width) & (slots < offsets + 2 * width))
  return jnp.concatenate([window, jnp.broadcast_to(masks, (write_offsets.shape[0], width, cache_length))], axis=1)


def _jacobi_loop(step_fn, state: JacobiState, width: int, max_length: int, parallel_limit: int,
                 initializer: Initializer, caps: jax.Array, mask_id: int | None = None,
                 drafter: PrefixDrafter | None = None,
                 draft_model: draft_model_lib.DraftModel | None = None,
                 ids: tuple[int, int, int] = (BOS_ID, EOS_ID, PAD_ID)) -> JacobiState:
  """Runs iterations with window `width` while some row is unfinished and below `parallel_limit`.

  mask_id (self-drafting; a model trained with the selfdraft objective): each call also carries W <mask>
  slots, the model's draft of W outputs, in one of two places per row:
  * after the window (positions n + W - 1 .., seeing the whole window) when the row's guesses are a draft:
    if the whole window is accepted, the next guesses are the draft of what follows it;
  * right after the committed prefix (positions n .., seeing only the prefix) when the guesses are not a
    draft (the first call, or the window was not accepted whole): whatever the call accepts, the next
    guesses are this draft from the accepted point on (its first slots are the outputs just committed).
  Otherwise the next guesses are Jacobi's (the unverified predictions, shifted), or the prefix drafter's
  where it finds something, or a separate drafter model's (draft_model, fastmt/decoding/draft_model.py: a
  selfdraft drafter's call after every commit; an autoregressive drafter's W - 1 calls at the start of every
  iteration). With a trajectory pool in the state (drafts.TrajectoryPool), every
  call's (input, prediction) pairs go into it, and the next guesses follow it from the committed tokens where
  it knows a continuation (before the prefix drafter, whose matches win). Drafts are guesses like any other:
  the commit rule keeps the output exact whatever they say.
  """
  rows, eos_id = state.tokens.shape[0], ids[1]
  cache_length = cache_slots(state.cache, rows)
  guesses_after = initializer(width)  # built here, once: the loop body only indexes into it
  kept = min(width, state.guess.shape[1])
  guess = state.guess[:, :kept]
  if kept < width:
    guess = jnp.concatenate([guess, checked_guesses(guesses_after(guess[:, -1]), rows, width)[:, :width - kept]],
                            axis=1)
  # A guess outside the vocabulary (a user's initializer or drafter, a bad draft table) would embed as NaN in
  # most models (an out-of-range lookup), and NaN keys and values reach every position of the call, masked or
  # not (0 x NaN): such guesses are fed as PAD. An id the model cannot predict never passes the commit rule
  # anyway, so this changes no output, only what a bad guess costs. V is read from an abstract call (no work).
  # (checked_step_output: a step function of the wrong contract is the same clear error as in the loop.)
  vocab_size = checked_step_output(jax.eval_shape(lambda cache: step_fn(
      jnp.zeros((rows, width), jnp.int32), jnp.zeros((rows, width), jnp.int32),
      causal_window_mask(jnp.zeros((rows,), jnp.int32), width, cache_length), cache,
      jnp.zeros((rows,), jnp.int32)), state.cache), rows, width, ids)[0].shape[-1]
  pad_id = ids[2]
  in_vocabulary = lambda guess: jnp.where((guess >= 0) & (guess < vocab_size), guess, pad_id)
  state = state.replace(guess=in_vocabulary(guess))
  window = jnp.arange(width)
  drafting = mask_id is not None and width > 1
  # An autoregressive drafter (--drafter int8) drafts at the start of each iteration, from the committed
  # tokens, rather than after the previous commit: the same drafts, and none after the last commit, which
  # would feed no call (W - 1 drafter calls a sentence saved at batch 1, with no branch in the loop: a
  # lax.cond skipping that last draft cost 5-13.5% at batch 32 on XLA:CPU in an A/B bench).
  drafts_first = draft_model is not None and draft_model.autoregressive and width > 1

  def not_finished(s):
    active = ~s.done & (s.committed < parallel_limit)
    return active.any() & (s.iteration < max_length)  # each iteration commits >= 1: max_length is a bound

  def advance(s):
    n = s.committed  # [B]
    draft_cache = s.draft_cache
    if drafts_first:
      drafted, draft_cache = draft_model_lib.draft_autoregressive(draft_model, draft_cache, s.tokens, n, width)
      s = s.replace(guess=jnp.where(s.done[:, None], s.guess, in_vocabulary(drafted)))
    previous = jnp.take_along_axis(s.tokens, n[:, None], axis=1)  # [B, 1]: output n-1 (BOS for n = 0)
    inputs = jnp.concatenate([previous, s.guess[:, :width - 1]], axis=1)  # [B, W]
    positions = n[:, None] + window[None, :]
    if drafting:
      context = jnp.where(s.guess_is_draft, width - 1, 0)  # [B]: where the draft block starts
      logits, cache = checked_step_output(
          step_fn(jnp.concatenate([inputs, jnp.full_like(inputs, mask_id)], 1),
                  jnp.concatenate([positions, positions + context[:, None]], 1),
                  draft_window_mask(n, context, width, cache_length), s.cache, n), rows, 2 * width, ids, s.cache)
      logits, draft_logits = logits[:, :width], logits[:, width:]
    else:
      logits, cache = checked_step_output(
          step_fn(inputs, positions, causal_window_mask(n, width, cache_length), s.cache, n), rows, width, ids,
          s.cache)
    predictions = best_tokens(logits)  # [B, W]: for outputs n .. n + W - 1
    accepted, done = commit(s.guess, predictions, n, caps, s.done, eos_id)
    committed = n + accepted

    # Predictions go to tokens[n + 1 ..]; those past the verified prefix are overwritten later.
    tokens = jax.vmap(lambda row, new, at: jax.lax.dynamic_update_slice(row, new, (at + 1,)))(
        s.tokens, predictions, n)
    tokens = jnp.where(s.done[:, None], s.tokens, tokens)
    # Unverified predictions become the next guesses; the `accepted` positions that enter the window take
    # the initialiser's guesses for the positions after the window's last prediction.
    slot = window[None, :] + accepted[:, None]  # [B, W]: index into predictions, then past the window
    shifted = jnp.take_along_axis(predictions, jnp.minimum(slot, width - 1), 1)
    fresh = jnp.take_along_axis(guesses_after(predictions[:, -1]), jnp.clip(slot - width, 0, width - 1), 1)
    guess = jnp.where(slot < width, shifted, fresh)
    guess_is_draft = s.guess_is_draft
    if drafting:
      # Draft slot j predicts output n + context + j; the next window starts at output n + accepted.
      draft = best_tokens(draft_logits)
      index = (accepted - context)[:, None] + window[None, :]
      past_draft = guesses_after(draft[:, -1])
      from_draft = jnp.where(index < width, jnp.take_along_axis(draft, jnp.clip(index, 0, width - 1), 1),
                             jnp.take_along_axis(past_draft, jnp.clip(index - width, 0, width - 1), 1))
      # A draft after the prefix always fits; a draft after the window only if the whole window was accepted.
      guess_is_draft = ~s.guess_is_draft | (accepted == width)
      guess = jnp.where(guess_is_draft[:, None], from_draft, guess)
    pool = s.pool
    if pool is not None and width > 1:
      # tokens[i] is output i - 1 (BOS at 0); the token before BOS is -1, which no key holds
      token_at = lambda row_tokens, i: jnp.where(i >= 0, jnp.take_along_axis(
          row_tokens, jnp.maximum(i, 0)[:, None], 1)[:, 0], -1)
      pool = drafts.remember_window(pool, inputs, predictions, token_at(s.tokens, n - 1), ~s.done)
      guess = drafts.follow_pool(pool, token_at(tokens, committed - 1), token_at(tokens, committed), guess)
    if drafter is not None and width > 1:
      # tokens[1 .. committed] are final: the drafter continues them (it reads nothing past `committed`).
      drafted, found = drafter(tokens, committed, width)
      drafted = checked_guesses(drafted, rows, width)
      if getattr(found, 'shape', None) != (rows,):
        raise ValueError(f'a drafter must return (drafts [B, width], found [B]) with B = {rows}, got found of shape '
                         f'{getattr(found, "shape", None)}')
      guess = jnp.where(found[:, None], drafted, guess)
    if draft_model is not None and width > 1 and not drafts_first:
      guess, draft_cache = draft_model_lib.draft(draft_model, draft_cache, tokens, n, accepted, width)
    guess = jnp.where(s.done[:, None], s.guess, in_vocabulary(guess))

    trace = s.trace
    if trace is not None:
      probs = jnp.take_along_axis(jax.nn.softmax(logits.astype(jnp.float32)), predictions[..., None], -1)[..., 0]
      pad = lambda x: jnp.pad(x, ((0, 0), (0, trace.predictions.shape[2] - width)))
      trace = JacobiTrace(
          trace.start.at[s.iteration].set(n),
          trace.inputs.at[s.iteration].set(pad(inputs)),
          trace.predictions.at[s.iteration].set(pad(predictions)),
          trace.probabilities.at[s.iteration].set(pad(probs)),
          trace.accepted.at[s.iteration].set(accepted),
          trace.widths.at[s.iteration].set(width))
    return JacobiState(s.iteration + 1, tokens, committed, guess, done, s.calls + (~s.done).astype(jnp.int32),
                       cache, trace, guess_is_draft, draft_cache, pool)

  return jax.lax.while_loop(not_finished, advance, state)


def jacobi_decode(step_fn: DecoderStepFn, cache: Any, batch_size: int, max_length: int, block_size: int,
                  parallel_length: int | None = None, initializer: Initializer | None = None,
                  return_trace: bool = False, row_caps: jax.Array | None = None, mask_id: int | None = None,
                  drafter: PrefixDrafter | None = None, draft_model: draft_model_lib.DraftModel | None = None, *,
                  trajectory_pool: int = 0, bos_id: int = BOS_ID, eos_id: int = EOS_ID, pad_id: int = PAD_ID):
  """Hybrid GS-Jacobi decoding; PJ and PGJ are its special cases (see module docstring).

  Args:
    step_fn, cache: as for greedy_search; the cache needs max_length + block_size slots.
    max_length: output cap (EOS included), static.
    block_size: window width W (>= 1); W = max_length is PJ.
    parallel_length: HGJ's l. The batch runs W-wide windows while some unfinished row has committed fewer
      than l tokens, then W = 1 (greedy with per-row offsets) for the rows still unfinished. The switch is
      per batch, not per row: a row past l whose batch-mates are still below l keeps its W-wide window, which
      commits >= 1 verified token per call like greedy and never more calls (exactness is unaffected).
      At batch 1 this is the paper's HGJ. None = max_length (PJ/PGJ: parallel to the end).
    row_caps: optional int32 [B]: each row's own output cap (<= max_length); 0 = a padding row, done from
      the start (greedy_search's row_caps).
    return_trace: also return a JacobiTrace (DDGviz).
    mask_id: self-drafting (see _jacobi_loop): every W-wide call also carries W <mask> slots that draft the
      next window; for models trained with the selfdraft objective (fastmt/objectives/selfdraft.py). The
      cache then needs max_length + 2 * block_size slots.
    drafter: a PrefixDrafter (e.g. ngram_drafter): after every commit, its drafts of the next window replace
      Jacobi's guesses where it finds any. Not with mask_id.
    draft_model: a separate drafter model (fastmt/decoding/draft_model.py: a selfdraft model's <mask> slots, or
      an autoregressive drafter such as the model's own int8 copy) whose drafts are the guesses of every
      window, the first included; its cache needs draft_model.drafter_cache_length(max_length, block_size) slots. Not
      with mask_id or drafter.
    trajectory_pool: 1 or 2: keep a trajectory pool keyed on that many tokens (drafts.TrajectoryPool; lookahead
      decoding's n-grams from the window's own predictions, verified or not) and draft from it; 0 = none. Not
      with mask_id or draft_model.
    initializer: guesses for positions entering the window (see Initializer); None = PAD (pad_initializer).
    bos_id, eos_id, pad_id: the model's special ids, as for greedy_search (pad_id is also the default
      initializer's guess). The self-drafting and drafter-model paths are fastmt's own models: their ids.
  Returns:
    DecodeOutput (and the JacobiTrace when return_trace): tokens equal to greedy_search's, decoder_calls
    per row <= its greedy length.
  """
  check_counts(batch_size=batch_size, max_length=max_length, block_size=block_size)
  if parallel_length is not None:
    check_counts(parallel_length=parallel_length)
  bos_id, eos_id, pad_id = check_special_ids(bos_id, eos_id, pad_id)
  if initializer is None:
    initializer = functools.partial(pad_initializer, pad_id=pad_id)
  if sum(x is not None for x in (drafter, mask_id, draft_model)) > 1:
    raise ValueError('give one of a prefix drafter, self-drafting (mask_id) and a drafter model, not several')
  if trajectory_pool and (mask_id is not None or draft_model is not None):
    raise ValueError('the trajectory pool drafts for Jacobi and the prefix drafter, not with self-drafting or a '
                     'drafter model')
  block_size = min(block_size, max_length)
  parallel_length = max_length if parallel_length is None else parallel_length
  if not 0 < parallel_length <= max_length:
    raise ValueError(f'parallel_length must be in 1..{max_length} (the output cap), got {parallel_length}')
  cache_length = cache_slots(cache, batch_size)
  needed = max_length + block_size * (2 if mask_id is not None else 1)
  if cache_length < needed:
    what = 'max_length + 2 * block_size (window and draft slots)' if mask_id is not None else \
        'max_length + block_size'
    raise ValueError(f'cache has {cache_length} slots; Jacobi needs {what} = {needed}')
  tokens = jnp.full((batch_size, max_length + block_size + 1), pad_id, jnp.int32).at[:, 0].set(bos_id)
  trace = None
  if return_trace:
    shape = (max_length, batch_size, block_size)
    trace = JacobiTrace(jnp.zeros(shape[:2], jnp.int32), jnp.zeros(shape, jnp.int32),
                        jnp.zeros(shape, jnp.int32), jnp.zeros(shape, jnp.float32),
                        jnp.zeros(shape[:2], jnp.int32), jnp.zeros(shape[:1], jnp.int32))
  zeros = jnp.zeros((batch_size,), jnp.int32)
  caps = row_limits(batch_size, max_length, row_caps)
  first_guesses = checked_guesses(initializer(block_size)(jnp.full((batch_size,), bos_id, jnp.int32)), batch_size,
                                  block_size)
  draft_cache = None
  if draft_model is not None:
    draft_slots = jax.tree_util.tree_leaves(draft_model.cache)[0].shape[1]
    if draft_slots < draft_model_lib.drafter_cache_length(max_length, block_size):
      raise ValueError(f'the drafter\'s cache has {draft_slots} slots; it needs max_length + 2 * block_size + 1 = '
                       f'{draft_model_lib.drafter_cache_length(max_length, block_size)}')
    draft_cache = draft_model.cache
    if block_size > 1 and not draft_model.autoregressive:  # the first call: BOS alone, drafts of outputs 0 .. W - 1
      first_guesses, draft_cache = draft_model_lib.draft(draft_model, draft_model.cache, tokens, zeros, zeros,
                                                         block_size)
  pool = None
  if trajectory_pool:  # each call adds <= W entries: room for twice what a row can add, a power of two, <= 4096
    slots = min(1 << (2 * max_length * block_size - 1).bit_length(), 4096)
    pool = drafts.empty_pool(batch_size, slots, trajectory_pool)
  state = JacobiState(jnp.int32(0), tokens, zeros, first_guesses, caps <= 0, zeros, cache, trace, zeros > 0,
                      draft_cache, pool)
  state = _jacobi_loop(step_fn, state, block_size, max_length, parallel_length, initializer, caps, mask_id, drafter,
                       draft_model, (bos_id, eos_id, pad_id))
  drafter_calls = None if draft_model is None else _drafter_calls(draft_model, state.calls, block_size)
  if parallel_length < max_length:
    state = _jacobi_loop(step_fn, state, 1, max_length, max_length, initializer, caps,
                         ids=(bos_id, eos_id, pad_id))
  outputs = state.tokens[:, 1:max_length + 1]
  outputs = jnp.where(jnp.arange(max_length)[None, :] < state.committed[:, None], outputs, pad_id)
  result = DecodeOutput(outputs, state.calls, state.iteration, drafter_calls)
  return (result, state.trace) if return_trace else result


def _drafter_calls(draft_model: draft_model_lib.DraftModel, calls: jax.Array, width: int) -> jax.Array:
  """int32 [B]: the drafter model's calls for rows that made `calls` verification calls (the parallel loop's):
  a selfdraft drafter one before the first and one after each (draft_model.draft), an autoregressive one
  W - 1 before each (draft_autoregressive); none at width 1, where nothing is drafted."""
  if width == 1:
    return jnp.zeros_like(calls)
  if draft_model.autoregressive:
    return calls * (width - 1)
  return jnp.where(calls > 0, calls + 1, 0)


def ngram_drafter(source: jax.Array | None = None, ngram: int = 2, recent: jax.Array | None = None) -> PrefixDrafter:
  """Prompt-lookup drafts (drafts.lookup_drafts): what followed the row's last `ngram` committed tokens
  earlier in its output, else in its source ids (int32 [B, S], optional: names and numbers a translation
  copies) or in `recent` (int32 [M], optional: the outputs of the sentences translated before this batch,
  each followed by EOS, oldest first, PAD-filled in front; every row searches it after its own output, and a
  match there wins over one in the source, the latest match first, as in benchmarks/lookup_probe.py)."""
  if recent is not None:
    if source is None:
      raise ValueError('recent outputs are searched with the source: give both')
    # One pool per row, built once outside the decoding loop: the source, then the shared recent outputs.
    recent = jnp.broadcast_to(jnp.asarray(recent, jnp.int32)[None, :], (source.shape[0], recent.shape[-1]))
    source = jnp.concatenate([jnp.asarray(source, jnp.int32), recent], axis=1)
  return lambda tokens, end, width: drafts.lookup_drafts(tokens, end, width, ngram, source)


def pj_decode(step_fn, cache, batch_size, max_length, **kwargs):
  """Parallel Jacobi: the window is the whole output (up to the cap). Keywords and the DecodeOutput as
  jacobi_decode's; the cache needs 2 * max_length slots."""
  return jacobi_decode(step_fn, cache, batch_size, max_length, block_size=max_length, **kwargs)


def pgj_decode(step_fn, cache, batch_size, max_length, block_size, **kwargs):
  """Parallel GS-Jacobi: windows of block_size, block after block, to the end. Keywords and the DecodeOutput
  as jacobi_decode's; the cache needs max_length + block_size slots."""
  return jacobi_decode(step_fn, cache, batch_size, max_length, block_size=block_size, **kwargs)


def hgj_decode(step_fn, cache, batch_size, max_length, block_size, parallel_length, **kwargs):
  """Hybrid GS-Jacobi: PGJ up to parallel_length, then greedy until EOS. Keywords and the DecodeOutput as
  jacobi_decode's; the cache needs max_length + block_size slots."""
  return jacobi_decode(step_fn, cache, batch_size, max_length, block_size=block_size,
                       parallel_length=parallel_length, **kwargs)
