"""The one shape every decoding algorithm shares: the decoder step.

Decoding algorithms never import the model. They receive a `DecoderStepFn` that closes over the parameters
and the encoded source, plus an opaque cache pytree whose leaves all have the batch as leading axis.
"""

import numbers
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from fastmt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID  # re-exported: decoders only need the ids

__all__ = ['DecoderStepFn', 'BOS_ID', 'EOS_ID', 'PAD_ID', 'best_tokens', 'cache_slots', 'causal_window_mask',
           'check_counts', 'check_special_ids', 'checked_step_output', 'is_whole_number', 'pad_after_eos']


class DecoderStepFn(Protocol):

  def __call__(self, tokens: jax.Array, positions: jax.Array, self_mask: jax.Array, cache: Any,
               write_offsets: jax.Array, project: jax.Array | None = None) -> tuple[jax.Array, Any]:
    """Runs the decoder over T new positions per row.

    Args:
      tokens: int32 [B, T] target ids; positions: int32 [B, T] their positions.
      self_mask: bool [B, T, M]: which of the M cache slots each new position may attend to.
      cache: the cache pytree; the new positions' keys/values are written at slots
        write_offsets[b] .. write_offsets[b] + T - 1.
      write_offsets: int32 [B].
      project: optional int32 [P], the same for every row, or [B, P], per row: logits only for these of the T
        new positions (HRT's stage II needs them at its masks only; fastmt's step function, make_step_fn,
        then runs the last decoder layer and the output projection at those positions alone).
        Decoders that never pass it may be given step functions without it.
      The interleaved decoders also pass `directions=` int32 [B, T] to a layout with direction embeddings
      (IMDecoder); a step function for such a model takes it.
    Returns:
      (logits [B, T, V], or [B, P, V] with `project`: float32, bfloat16 or float16, the searches compute in
      float32; updated cache).
    """


def best_tokens(logits: jax.Array) -> jax.Array:
  """int32 argmax over the last axis: jnp.argmax's answer (the first maximum; a NaN counts as the maximum).

  Two plain reductions (the maximum, then the first index holding it) instead of jnp.argmax's reduction over
  (value, index) pairs, which XLA:CPU does not vectorise: over an 8,000-token vocabulary 3.3 instead of
  32.6 µs per row at batch 1, a sixth of an int8 greedy step (docs/BENCHMARKS.md section 9).
  """
  best = jnp.max(logits, axis=-1, keepdims=True)
  vocab = logits.shape[-1]
  index = jnp.arange(vocab, dtype=jnp.int32)
  return jnp.min(jnp.where((logits == best) | jnp.isnan(logits), index, vocab), axis=-1)


def causal_window_mask(write_offsets: jax.Array, width: int, cache_length: int) -> jax.Array:
  """[B, width, M]: new position t of row b sees slots 0 .. write_offsets[b] + t (itself included)."""
  slots = jnp.arange(cache_length)[None, None, :]
  query_slot = write_offsets[:, None, None] + jnp.arange(width)[None, :, None]
  return slots <= query_slot


def is_whole_number(value) -> bool:
  """An int or numpy integer, not a bool (2.5, '4' and True are not counts)."""
  return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_counts(**counts) -> None:
  """Each count (batch_size=..., max_length=...) must be a whole number >= 1: a clear ValueError here instead
  of a TypeError or IndexError from deep inside JAX (a float shape, an empty argmax)."""
  for name, value in counts.items():
    if isinstance(value, jax.core.Tracer):  # a count jax.jit traced: shapes are made of it
      raise ValueError(f'{name} must be a Python int, got a traced value ({value}): under jax.jit give it as a '
                       f'static argument (static_argnames=({name!r}, ...))')
    if not is_whole_number(value) or value < 1:
      raise ValueError(f'{name} must be a whole number >= 1, got {value!r}')


def cache_slots(cache: Any, rows: int) -> int:
  """The number of slots of a decoder cache, checked against what every decoder relies on: each leaf has the
  `rows` on axis 0 and the slots on axis 1 (e.g. K/V [rows, slots, heads, head_dim]).

  Checked at trace time (shapes are static), so it costs nothing per call. Encoder outputs, cross-attention
  keys and counters belong in the step function's closure, not in the cache; Flax's own `decode=True` attention
  cache (a shared scalar index, one query position per call) does not fit these decoders.
  """
  leaves = jax.tree_util.tree_leaves_with_path(cache)
  if not leaves:
    raise ValueError('the cache holds no arrays: every decoder writes each new position into it')
  slots = {}
  for path, leaf in leaves:
    shape = tuple(np.shape(leaf))
    if len(shape) < 2 or shape[0] != rows:
      raise ValueError(f'cache leaf {jax.tree_util.keystr(path) or "(root)"} has shape {shape}; every leaf needs '
                       f'[rows, slots, ...] with rows = {rows} (keep encoder outputs and counters in the step '
                       'function\'s closure, not in the cache)')
    slots.setdefault(shape[1], jax.tree_util.keystr(path) or '(root)')
  if len(slots) > 1:
    raise ValueError('cache leaves have different numbers of slots (axis 1): ' +
                     ', '.join(f'{where}: {n}' for n, where in slots.items()))
  return next(iter(slots))


def checked_step_output(output: Any, rows: int, width: int, ids: tuple[int, ...] = (),
                        cache_in: Any = None) -> tuple[jax.Array, Any]:
  """step_fn's (logits [rows, width, V], cache), its shape checked at trace time: logits of the last position
  only ([B, V]) or (cache, logits) in the other order would otherwise decode garbage or fail deep inside.
  ids: the decoder's special ids, which must lie in the vocabulary (an eos_id >= V is never predicted: every
  row would run to its cap). cache_in: the cache the call was given; the returned one must have its leaves,
  shapes and dtypes (a while loop carries it; lax.while_loop's own TypeError named none of this)."""
  if not isinstance(output, (tuple, list)) or len(output) != 2:
    raise ValueError(f'step_fn must return (logits, cache), got {type(output).__name__}')
  logits, cache = output
  shape = getattr(logits, 'shape', None)
  if shape is None or len(shape) != 3 or tuple(shape[:2]) != (rows, width):
    raise ValueError(f'step_fn returned logits of shape {shape}; expected [rows, positions, vocab] with rows = '
                     f'{rows} and positions = {width}, first in the pair (logits, cache)')
  if ids and max(ids) >= shape[-1]:
    raise ValueError(f'special ids {ids} (bos_id, eos_id, pad_id) must be below the vocabulary size {shape[-1]} '
                     'of the logits')
  if cache_in is not None:
    leaves = lambda tree: {jax.tree_util.keystr(path): (tuple(leaf.shape), str(leaf.dtype))
                           for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}
    given, returned = leaves(cache_in), leaves(cache)
    if given != returned:
      changed = sorted(k for k in given.keys() | returned.keys() if given.get(k) != returned.get(k))
      raise ValueError('step_fn must return the cache it was given with new values only (the same leaves, shapes '
                       'and dtypes); these differ (given, returned): '
                       + ', '.join(f'{k}: {given.get(k)} -> {returned.get(k)}' for k in changed[:4]))
  return logits, cache


def check_special_ids(bos_id, eos_id, pad_id) -> tuple[int, int, int]:
  """The special ids a decoder is given, checked: (bos_id, eos_id, pad_id) as Python ints.

  fastmt's own vocabularies use BOS_ID, EOS_ID and PAD_ID, the decoders' defaults; a model trained elsewhere
  passes its own (T5 and Marian start the decoder from their PAD: bos_id == pad_id is fine). pad_id only fills
  the outputs after EOS (and is Jacobi's initial guess), so it must differ from eos_id, or the end of an
  output could not be told from its padding.
  """
  ids = {'bos_id': bos_id, 'eos_id': eos_id, 'pad_id': pad_id}
  for name, value in ids.items():
    if not is_whole_number(value) or value < 0:
      raise ValueError(f'{name} must be a token id (an int >= 0; static under jax.jit), got {value!r}')
  if eos_id == pad_id:
    raise ValueError(f'eos_id and pad_id must differ (both {eos_id}): pad_id fills the outputs after EOS; '
                     'give another id as pad_id (an unused one will do)')
  return int(bos_id), int(eos_id), int(pad_id)


def pad_after_eos(tokens: jax.Array, eos_id: int = EOS_ID, pad_id: int = PAD_ID) -> jax.Array:
  """Keeps each row up to and including its first EOS; PAD after it. tokens: int [B, L]."""
  is_eos = tokens == eos_id
  after_eos = jnp.cumsum(is_eos, axis=-1) - is_eos > 0
  return jnp.where(after_eos, pad_id, tokens)


def output_lengths(tokens: jax.Array, eos_id: int = EOS_ID) -> jax.Array:
  """Number of tokens up to and including the first EOS (all of them if none). tokens: [B, L] -> [B]."""
  is_eos = tokens == eos_id
  first_eos = jnp.argmax(is_eos, axis=-1)
  return jnp.where(is_eos.any(-1), first_eos + 1, tokens.shape[-1]).astype(jnp.int32)
