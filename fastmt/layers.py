"""Transformer building blocks: sinusoidal positions, attention with explicit masks and a KV cache, FFN.

The cache differs from Flax's built-in decode cache on purpose: a decoder call may write any number of new
positions, at a different offset in each batch row (Jacobi windows, interleaved slots, CMLM passes all need
this), and the caller passes the attention mask instead of the module assuming "causal, one step".
"""

import jax
import jax.numpy as jnp
import flax.linen as nn

from fastmt import few_rows, quantize

# A finite stand-in for -inf: a fully masked row then softmaxes to a uniform distribution, never NaN.
NEG_INF = -1e9


def sinusoidal_positions(positions: jax.Array, dim: int, max_timescale: float = 10_000.0) -> jax.Array:
  """Sinusoidal encodings of integer positions of any sign (interleaved decoders use negative ones).

  Args:
    positions: int array [..., T].
    dim: even embedding size.
  Returns:
    float32 [..., T, dim]: sin in the first half, cos in the second.
  """
  half = dim // 2
  inv_timescales = jnp.exp(-jnp.log(max_timescale) * jnp.arange(half, dtype=jnp.float32) / half)
  angles = positions.astype(jnp.float32)[..., None] * inv_timescales  # [..., T, half]
  return jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], axis=-1)


def write_at_offsets(cache: jax.Array, new: jax.Array, offsets: jax.Array) -> jax.Array:
  """Writes new[b] into cache[b, offsets[b]:offsets[b] + T] for every row b.

  Args:
    cache: [B, M, ...]; new: [B, T, ...]; offsets: int [B].
  The caller keeps offsets[b] + T <= M: dynamic_update_slice would otherwise clamp the start and overwrite
  earlier slots (decoders size their caches with room for their widest window).
  """
  def write_row(row_cache, row_new, offset):
    start = (offset,) + (0,) * (row_cache.ndim - 1)
    return jax.lax.dynamic_update_slice(row_cache, row_new.astype(row_cache.dtype), start)
  return jax.vmap(write_row)(cache, new, offsets)


def select_positions(x: jax.Array, slots: jax.Array) -> jax.Array:
  """x [B, T, ...] at some of its T positions: slots int [P], the same for every row, or [B, P], per row (an x
  of batch 1, such as a mask shared by the rows, is broadcast to the slots' B)."""
  if slots.ndim == 1:
    return x[:, slots]
  index = slots.reshape(slots.shape + (1,) * (x.ndim - 2))
  return jnp.take_along_axis(jnp.broadcast_to(x, slots.shape[:1] + x.shape[1:]), index, axis=1)


# Key/value layouts of the two attention kinds, as einsum subscripts (b batch, k key, h head, d depth).
# Self-attention caches keep their slots on axis 1, where every decoder writes and counts them. The
# cross-attention memory is stored the way XLA's CPU batched matmul reads it, so that decoder steps stop
# transposing the same memory again at every call (3% of a greedy step; docs/BENCHMARKS.md section 1).
CACHE_LAYOUT = 'bkhd'
MEMORY_LAYOUT = 'bhdk'


def dot_product_attention(query, key, value, mask, dtype=jnp.float32, kv_layout: str = CACHE_LAYOUT,
                          relative_scores=None):
  """Softmax attention.

  Args:
    query: [B, T, H, D]; key, value: [B, K, H, D] (kv_layout 'bkhd') or [B, H, D, K] ('bhdk').
    mask: bool, broadcastable to [B, H, T, K]; True where a query may attend.
    relative_scores: optional float32 [B, H, T, K], query . relative key (relative_key_scores), added to
      query . key before the scaling: HRT Eq. 4's Q (K^T + R) / sqrt(d).
  Returns:
    [B, T, H, D] in `dtype`.
  """
  depth = query.shape[-1]
  scores = jnp.einsum(f'bthd,{kv_layout}->bhtk', query, key, preferred_element_type=jnp.float32)
  if relative_scores is not None:
    scores = scores + relative_scores
  scores = scores / jnp.sqrt(depth).astype(jnp.float32)
  scores = jnp.where(mask, scores, NEG_INF)
  weights = jax.nn.softmax(scores, axis=-1).astype(dtype)  # softmax in float32 even in bfloat16 mode
  # Summed in float32 and rounded once (for bfloat16, also XLA:CPU's fast product: few_rows.accumulate_in_float32).
  return jnp.einsum(f'bhtk,{kv_layout}->bthd', weights, value.astype(dtype),
                    preferred_element_type=jnp.float32).astype(dtype)


def relative_key_scores(query, table, query_positions, key_positions):
  """query . R[clip(key position - query position, -K, K) + K] for every query and key: float32 [B, H, T, K].

  Args:
    query: [B, T, H, D]; table: [2K + 1, D], one vector per clipped distance, shared by the heads;
    query_positions: int [B, T]; key_positions: int [B, K] (the positions the tokens were embedded at, of any
      sign: interleaved decoders' negative ones and HRT's skipped ones alike).
  Each query is scored against the 2K + 1 vectors once, then the score of each key's distance is picked.
  """
  distance = (table.shape[0] - 1) // 2
  per_distance = jnp.einsum('bthd,rd->bhtr', query, table.astype(query.dtype), preferred_element_type=jnp.float32)
  index = jnp.clip(key_positions[:, None, :] - query_positions[:, :, None], -distance, distance) + distance
  index = jnp.broadcast_to(index[:, None], per_distance.shape[:3] + index.shape[-1:])  # [B, H, T, K]
  return jnp.take_along_axis(per_distance, index, axis=-1)


class MultiHeadAttention(nn.Module):
  """Multi-head attention whose keys/values can come from a cache or a precomputed memory."""
  num_heads: int
  head_dim: int
  out_dim: int
  dtype: jnp.dtype = jnp.float32
  quantization: str = ''  # ModelConfig.quantization: '' = float kernels, else int8 (fastmt.quantize)
  # ModelConfig.relative_key_distance (self-attention only): K > 0 adds the [2K + 1, head_dim] table
  # 'relative_keys', zero at initialisation, so that a model fine-tuned into it starts as the initial one.
  relative_distance: int = 0

  def setup(self):
    dense_class = quantize.dense_class(self.quantization)
    dense = lambda: dense_class((self.num_heads, self.head_dim), dtype=self.dtype)
    self.query = dense()
    self.key = dense()
    self.value = dense()
    self.out = dense_class(self.out_dim, axis=(-2, -1), dtype=self.dtype)
    if self.relative_distance:
      self.relative_keys = self.param('relative_keys', nn.initializers.zeros,
                                      (2 * self.relative_distance + 1, self.head_dim), jnp.float32)

  def project_kv(self, x):
    """x [B, K, E] -> (keys, values), each [B, K, H, D]."""
    return self.key(x), self.value(x)

  def project_memory(self, x):
    """x [B, K, E] -> (keys, values) in MEMORY_LAYOUT [B, H, D, K]: computed once per source."""
    return tuple(jnp.transpose(y, (0, 2, 3, 1)) for y in self.project_kv(x))

  def __call__(self, x, mask, kv=None, cache=None, write_offsets=None, positions=None, query_slots=None):
    """Attends from x [B, T, E] (self-attention with query_slots: from those positions only).

    kv: precomputed (keys, values) [B, H, D, K] from project_memory (cross-attention); None means
      self-attention over x.
    cache: (keys, values) [B, M, H, D] for self-attention; x's keys/values are written at write_offsets [B]
      and the queries attend over all M slots, as `mask` [B, T, M] allows.
    positions: (query positions [B, T], key positions [B, K]) where relative_distance > 0: the keys' are the
      cache slots' (K = M) or x's own (K = T).
    query_slots: optional int [P] or [B, P] (select_positions): every position of x is a key and a value
      (written to the cache), only these are queries; the output is [B, P, E].
    Returns (output [B, T, E], or [B, P, E] with query_slots; updated cache or None).
    """
    if query_slots is not None:
      if kv is not None:
        raise ValueError('query_slots is for self-attention; cross-attention attends from the x it is given')
      # One mask row per query (a mask broadcast over the queries, [B, 1, K], is widened first).
      mask = select_positions(jnp.broadcast_to(mask, mask.shape[:1] + x.shape[1:2] + mask.shape[2:]), query_slots)
      if positions is not None:
        positions = (select_positions(positions[0], query_slots), positions[1])
    query = self.query(x if query_slots is None else select_positions(x, query_slots))
    if kv is not None:
      out = dot_product_attention(query, kv[0], kv[1], mask[:, None], self.dtype, MEMORY_LAYOUT)
      return self.out(out), cache
    key, value = self.project_kv(x)
    if cache is not None:
      key = write_at_offsets(cache[0], key, write_offsets)
      value = write_at_offsets(cache[1], value, write_offsets)
      cache = (key, value)
    relative = None
    if self.relative_distance:
      if positions is None:
        raise ValueError('attention with relative position keys needs (query positions, key positions)')
      relative = relative_key_scores(query, self.relative_keys, *positions)
    out = dot_product_attention(query, key, value, mask[:, None], self.dtype, relative_scores=relative)
    return self.out(out), cache


class FeedForward(nn.Module):
  hidden_dim: int
  out_dim: int
  dropout_rate: float
  dtype: jnp.dtype = jnp.float32
  quantization: str = ''  # as MultiHeadAttention's

  @nn.compact
  def __call__(self, x, deterministic: bool):
    # Explicit names: the ones nn.Dense gets by default, so float and int8 models share one parameter tree.
    dense_class = few_rows.Dense if not self.quantization else quantize.Int8DenseGeneral
    x = dense_class(self.hidden_dim, dtype=self.dtype, name='Dense_0')(x)
    x = nn.relu(x)
    x = nn.Dropout(self.dropout_rate)(x, deterministic=deterministic)
    return dense_class(self.out_dim, dtype=self.dtype, name='Dense_1')(x)
