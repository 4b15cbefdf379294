"""A separate drafter model for exact speculative decoding (issue [spec], `--drafter model`).

The verifier is any autoregressive model, untouched; the drafter is a second, small model trained with the
selfdraft objective (fastmt/objectives/selfdraft.py: its <mask> slots fill in the W tokens after any prefix,
e.g. configs/selfdraft.py:w3,drafter on the verifier's own greedy outputs), sharing nothing with it but the
vocabulary (which the drafter's may extend with fastmt's reserved symbols: drafts keep to the verifier's ids):
its own encoder pass over the source, its own decoder and KV cache. Jacobi's commit rule verifies its
drafts, so the output is the verifier's greedy output whatever the drafter proposes.

One drafter call after every verification call (and one before the first), over 2W + 1 positions:
  * inputs n .. n + W (n = the verifier's committed length before its call: tokens[n] is output n - 1, BOS
    at 0, then the call's W predictions, of which the first `accepted` are now committed), written at slots
    n .. n + W, causal. Only the first accepted + 1 are final; the rest are written where the next call
    writes again before anything reads them;
  * W <mask> slots at positions n' .. n' + W - 1 (n' = n + accepted, the outputs the next window verifies),
    written at slots n + W + 1 .. n + 2W, seeing the slots 0 .. n' (every final input) and each other: the
    training layout's block at cut n' exactly.
So after a call the drafter's cache holds inputs 0 .. n' (the invariant each call relies on). The first
draft, of output n', comes from the drafter's causal slot at position n' (input n', the last committed
output), not from the first mask slot: in a one-decoder-layer drafter a mask slot has one attention step to
find the last token, and the causal slot holds it in its own residual stream (benchmarks/draft_probe.py:
54% agreement with the verifier's greedy token against the mask slot's 27%, configs/drafter.py's model on
runs/quickstart). The other W - 1 drafts are mask slots 1 .. W - 1; mask slot 0 stays in the call (unused)
so that the others see the block they were trained with. The output projection runs over these W
positions only (DecoderStepFn's per-row `project`). The drafter's cost is its encoder once per sentence
plus one call per iteration; it is counted in every timing (the bench), not in `decoder_calls` (the
verifier's calls, as for every decoder here).

An autoregressive drafter (DraftModel.autoregressive; `--drafter int8`: the verifier's own int8 copy, built by
fastmt.translate, no training) instead drafts by W - 1 causal calls of its own at the start of every
iteration, from the tokens committed so far (draft_autoregressive): its greedy continuation of the committed prefix.
"""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from fastmt.decoding.step import DecoderStepFn, best_tokens, causal_window_mask


@dataclasses.dataclass(frozen=True)
class DraftModel:
  step_fn: DecoderStepFn  # over the drafter's parameters and its encoding of the source (int8 copy: the model's)
  cache: Any  # the drafter's cache: drafter_cache_length(max_length, W) slots
  mask_id: int | None  # the drafter's <mask> (None for an autoregressive drafter)
  # The verifier's vocabulary size: drafts are restricted to its ids. A drafter's vocabulary may extend the
  # verifier's (fastmt's reserved symbols appended to an older vocabulary), and an id the verifier has no
  # embedding for must never reach it. None = the drafter's whole vocabulary.
  vocab_size: int | None = None
  # An autoregressive drafter (draft_autoregressive: W - 1 causal steps at the start of every iteration, e.g.
  # the model's own int8 copy, `--drafter int8`) instead of a selfdraft model's <mask> slots.
  autoregressive: bool = False


def drafter_cache_length(max_length: int, width: int) -> int:
  """Slots a drafter's cache gets: a selfdraft drafter's call at committed length n <= max_length writes
  n .. n + 2W; an autoregressive one writes at most up to max_length + W - 2 and masks the rest out."""
  return max_length + 2 * width + 1


def draft_call_mask(write_offsets: jax.Array, accepted: jax.Array, width: int, cache_length: int) -> jax.Array:
  """bool [B, 2W + 1, M]: the W + 1 inputs are causal (slot n + t sees slots <= n + t); the W mask slots
  (written at n + W + 1 .. n + 2W) see slots <= n + accepted and each other."""
  inputs = causal_window_mask(write_offsets, width + 1, cache_length)
  slots = jnp.arange(cache_length)[None, None, :]
  offsets = write_offsets[:, None, None]
  masks = (slots <= offsets + accepted[:, None, None]) | ((slots > offsets + width) & (slots <= offsets + 2 * width))
  return jnp.concatenate([inputs, jnp.broadcast_to(masks, (write_offsets.shape[0], width, cache_length))], axis=1)


def draft_logits(model: DraftModel, cache: Any, tokens: jax.Array, start: jax.Array, accepted: jax.Array,
                 width: int) -> tuple[jax.Array, Any]:
  """The drafter's logits for outputs start + accepted .. + W - 1: (float32 [B, W, V], updated cache): the
  causal slot at position start + accepted, then mask slots 1 .. W - 1.

  tokens: int32 [B, >= max(start) + W + 1], BOS then outputs, final up to start + accepted; start: int32 [B],
  the committed length before the verification call; accepted: int32 [B], what it committed (0 before the
  first call). The cache must hold the inputs 0 .. start (the previous call's invariant; nothing at start 0).
  """
  batch = tokens.shape[0]
  cache_length = jax.tree_util.tree_leaves(cache)[0].shape[1]
  inputs = jax.vmap(lambda row, at: jax.lax.dynamic_slice(row, (at,), (width + 1,)))(tokens, start)
  steps = jnp.arange(width + 1)
  positions = jnp.concatenate([start[:, None] + steps[None, :],
                               (start + accepted)[:, None] + steps[None, :width]], axis=1)
  call = jnp.concatenate([inputs, jnp.full((batch, width), model.mask_id, jnp.int32)], axis=1)
  masks = jnp.broadcast_to(jnp.arange(width + 2, 2 * width + 1), (batch, width - 1))
  drafted = jnp.concatenate([accepted[:, None], masks], axis=1)  # [B, W]: causal slot `accepted`, masks 1 ..
  return model.step_fn(call, positions, draft_call_mask(start, accepted, width, cache_length), cache, start,
                       project=drafted)


def draft(model: DraftModel, cache: Any, tokens: jax.Array, start: jax.Array, accepted: jax.Array,
          width: int) -> tuple[jax.Array, Any]:
  """The drafter's argmax within the verifier's vocabulary: (drafts int32 [B, W] for outputs start + accepted
  .., updated cache); draft_logits' for a selfdraft drafter, draft_autoregressive's for an autoregressive one."""
  if model.autoregressive:
    return draft_autoregressive(model, cache, tokens, start + accepted, width)
  logits, cache = draft_logits(model, cache, tokens, start, accepted, width)
  return best_tokens(logits[..., :model.vocab_size]), cache


def draft_autoregressive(model: DraftModel, cache: Any, tokens: jax.Array, committed: jax.Array,
                         width: int) -> tuple[jax.Array, Any]:
  """An autoregressive drafter's greedy continuation of the committed outputs: (drafts int32 [B, W] for
  outputs committed .. committed + W - 1, updated cache).

  Only the first W - 1 drafts are real: a verification call of width W feeds the last committed token and W - 1
  guesses (jacobi.commit compares W - 1), so the last column repeats the one before it. W - 1 drafter calls:
  * the first over 2 positions, inputs c - 1 and c (c = committed; tokens[i] is output i - 1, BOS at 0),
    written at slots c - 1 and c: the logits of slot c are the draft of output c. Slot c - 1 is written again
    because the previous iteration's drafting stopped one slot short of it when the whole window was accepted;
    rewriting a slot whose input and context are final gives it the same keys and values. At c = 0 both
    inputs sit at slots 0 and 1 and slot 0's logits are used (BOS; slot 1 is rewritten before it is read);
  * then W - 2 calls of one position, each feeding the draft just made.
  Invariant: after a call the slots 0 .. c hold the final inputs 0 .. c (those after them hold drafts, which the
  causal mask of the next call hides until they are written again). The drafts are the drafter's greedy
  tokens given the verifier's committed prefix; the verifier's commit rule keeps the output its own greedy.
  """
  cache_length = jax.tree_util.tree_leaves(cache)[0].shape[1]
  offset = jnp.maximum(committed - 1, 0)  # [B]
  pair = jax.vmap(lambda row, at: jax.lax.dynamic_slice(row, (at,), (2,)))(tokens, offset)
  positions = offset[:, None] + jnp.arange(2)[None, :]
  last = (committed - offset)[:, None]  # [B, 1]: the slot whose logits draft output c (1, or 0 at c = 0)
  logits, cache = model.step_fn(pair, positions, causal_window_mask(offset, 2, cache_length), cache, offset,
                                project=last)
  drafts = [best_tokens(logits[:, 0, :model.vocab_size])]
  for j in range(1, width - 1):  # unrolled: W is small and static
    at = committed + j
    logits, cache = model.step_fn(drafts[-1][:, None], at[:, None], causal_window_mask(at, 1, cache_length),
                                  cache, at)
    drafts.append(best_tokens(logits[:, 0, :model.vocab_size]))
  drafts.append(drafts[-1])  # never compared: the window feeds W - 1 guesses
  return jnp.stack(drafts, axis=1).astype(jnp.int32), cache
