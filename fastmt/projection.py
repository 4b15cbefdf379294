"""Output projections: dense (tied embedding) and clustered (Zhang et al., "Fast Vocabulary Projection Method
via Clustering for Multilingual Machine Translation on GPU").

Offline, per language direction: run the model over unlabelled source text, record the decoder's final
hidden states h and their top-K tokens, fit k-means (mini-batch Lloyd in JAX, so it runs on TPU too), and give
each cluster the union of its members' top-K tokens as its active set.

Online, for a batch of hidden states: the nearest centroid by argmin ||C_j||^2 - 2 h.C_j (Eq. 2; ||C||^2 is
precomputed), the union of the active sets over the batch as a boolean mask over the vocabulary, turned into a
fixed-capacity index list; the reduced projection gathers those embedding rows with `jnp.take`, and the
logits are scattered back with a finite -inf everywhere else.

Documented fallbacks: when the union is larger than the capacity, that call uses the dense projection (exact,
counted by the caller through `overflowed`); EOS is always in the union, so a row never has only -inf logits
(and NEG_INF is finite, so softmax never makes NaN).
"""

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from fastmt.data.tokenizer import EOS_ID
from fastmt.layers import NEG_INF


def dense_logits(hidden, embedding):
  """hidden [..., E], embedding [V, E] -> float32 logits [..., V] (the tied output projection)."""
  return jnp.einsum('...e,ve->...v', hidden.astype(jnp.float32), embedding.astype(jnp.float32))


@flax.struct.dataclass
class Clusters:
  centroids: jax.Array  # float32 [C, E]
  centroid_sq_norms: jax.Array  # float32 [C]: ||C_j||^2, precomputed once
  active_sets: jax.Array  # int32 [C, A]: token ids of each cluster's active set, padded with vocab_size
  vocab_size: int = flax.struct.field(pytree_node=False)
  capacity: int = flax.struct.field(pytree_node=False)  # columns of the reduced projection

  @property
  def num_clusters(self) -> int:
    return self.centroids.shape[0]


def nearest_centroid(hidden, centroids, centroid_sq_norms):
  """Eq. 2: argmin_j ||h - C_j||^2 = argmin_j ||C_j||^2 - 2 h.C_j. hidden [N, E] -> int32 [N]."""
  scores = centroid_sq_norms[None, :] - 2.0 * hidden.astype(jnp.float32) @ centroids.T
  return jnp.argmin(scores, axis=-1).astype(jnp.int32)


def fit_kmeans(points, num_clusters: int, iterations: int = 20, batch_size: int | None = None, seed: int = 0):
  """Mini-batch Lloyd k-means in JAX. points float32 [N, E] -> centroids [C, E].

  Initialised from distinct random points; each iteration assigns a batch (all points when batch_size is
  None) and moves every centroid to the running mean of the points it received. A cluster that receives no
  point keeps its centroid.
  """
  points = jnp.asarray(points, jnp.float32)
  n = points.shape[0]
  if num_clusters > n:
    raise ValueError(f'{num_clusters} clusters need at least as many points, got {n}')
  key = jax.random.PRNGKey(seed)
  init_key, key = jax.random.split(key)
  centroids = points[jax.random.choice(init_key, n, (num_clusters,), replace=False)]
  counts = jnp.zeros((num_clusters,), jnp.float32)

  @jax.jit
  def update(centroids, counts, batch):
    assign = nearest_centroid(batch, centroids, (centroids**2).sum(-1))
    sums = jax.ops.segment_sum(batch, assign, num_segments=num_clusters)
    batch_counts = jax.ops.segment_sum(jnp.ones(batch.shape[0]), assign, num_segments=num_clusters)
    if batch_size is None:  # full-batch Lloyd: the mean of this assignment
      new = sums / jnp.maximum(batch_counts, 1.0)[:, None]
      return jnp.where(batch_counts[:, None] > 0, new, centroids), counts
    counts = counts + batch_counts  # mini-batch: per-centroid learning rate 1 / count (Sculley 2010)
    rate = jnp.where(batch_counts > 0, batch_counts / jnp.maximum(counts, 1.0), 0.0)[:, None]
    mean = sums / jnp.maximum(batch_counts, 1.0)[:, None]
    return centroids + rate * (mean - centroids), counts

  for _ in range(iterations):
    if batch_size is None:
      batch = points
    else:
      key, sample_key = jax.random.split(key)
      batch = points[jax.random.choice(sample_key, n, (min(batch_size, n),), replace=False)]
    centroids, counts = update(centroids, counts, batch)
  return centroids


def build_clusters(hidden, top_tokens, centroids, vocab_size: int, capacity: int | None = None) -> Clusters:
  """Active sets from recorded states: cluster j's set is the union of its members' top-K tokens.

  hidden [N, E], top_tokens int [N, K] (the model's K most likely tokens for each state).
  capacity: reduced-projection columns (default: the largest union of 16 active sets, rounded up to 128).
  """
  centroids = jnp.asarray(centroids, jnp.float32)
  sq = (centroids**2).sum(-1)
  assign = np.asarray(nearest_centroid(jnp.asarray(hidden), centroids, sq))
  top_tokens = np.asarray(top_tokens)
  sets = [set() for _ in range(centroids.shape[0])]
  for cluster, tokens in zip(assign, top_tokens):
    sets[cluster].update(int(t) for t in tokens)
  width = max(1, max(len(s) for s in sets))
  active = np.full((len(sets), width), vocab_size, np.int32)
  for j, s in enumerate(sets):
    active[j, :len(s)] = sorted(s)
  if capacity is None:
    largest = sorted((len(s) for s in sets), reverse=True)[:16]
    capacity = int(min(vocab_size, -(-max(1, sum(largest)) // 128) * 128))
  return Clusters(centroids, sq, jnp.asarray(active), vocab_size, capacity)


def active_columns(hidden, clusters: Clusters):
  """The union of the batch's active sets as a fixed-capacity index list.

  hidden [..., E] -> (indices int32 [capacity] padded with vocab_size, number of active columns).
  """
  flat = hidden.reshape(-1, hidden.shape[-1])
  assign = nearest_centroid(flat, clusters.centroids, clusters.centroid_sq_norms)  # [N]
  mask = jnp.zeros((clusters.vocab_size,), bool)
  mask = mask.at[clusters.active_sets[assign].ravel()].set(True, mode='drop')  # padding ids fall outside
  mask = mask.at[EOS_ID].set(True)  # every row keeps a valid token, even for an empty active set
  count = mask.sum()
  (indices,) = jnp.nonzero(mask, size=clusters.capacity, fill_value=clusters.vocab_size)
  return indices.astype(jnp.int32), count


def clustered_logits(hidden, embedding, clusters: Clusters):
  """Drop-in output layer: logits [..., V], exact on the batch's active columns, NEG_INF elsewhere.

  Returns (logits, overflowed): when the union exceeds clusters.capacity the dense projection is used for
  this call (overflowed=True), so no active token is ever silently dropped.
  """
  indices, count = active_columns(hidden, clusters)

  def reduced(_):
    weights = jnp.take(embedding, indices, axis=0, mode='clip')  # [capacity, E]; padding rows unused
    sub = jnp.einsum('...e,ce->...c', hidden.astype(jnp.float32), weights.astype(jnp.float32))
    full = jnp.full(hidden.shape[:-1] + (clusters.vocab_size,), NEG_INF, jnp.float32)
    return full.at[..., indices].set(sub, mode='drop')

  overflowed = count > clusters.capacity
  logits = jax.lax.cond(overflowed, lambda _: dense_logits(hidden, embedding), reduced, None)
  return logits, overflowed
