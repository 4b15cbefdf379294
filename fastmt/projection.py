"""Output projections: dense (tied embedding) and clustered (Zhang et al., "Fast Vocabulary Projection Method
via Clustering for Multilingual Machine Translation on GPU").

Offline, per language direction: run the model over unlabelled source text, record the decoder's final
hidden states h and their top-K tokens, fit k-means (mini-batch Lloyd in JAX, so it runs on TPU too), and give
each cluster the union of its members' top-K tokens as its active set.

Online, for a batch of hidden states: the nearest centroid by argmin ||C_j||^2 - 2 h.C_j (Eq. 2; ||C||^2 is
precomputed), the union of the active sets over the batch as a boolean mask over the vocabulary, turned into
an index list; the reduced projection gathers those embedding rows with `jnp.take`, and the logits are
scattered back with a finite -inf everywhere else.

The union is the paper's (one reduced product per call, for speed), so a position's candidates are those of
every state of the call: the batch's other sentences, its rows already past EOS and, for the parallel decoders
(PJ/PGJ/HGJ and spec), the window's other positions, guesses included. A translation can so
depend on its batch-mates and, with those decoders, differ from clustered greedy's (their exactness is the
dense projection's, which has no such union). A batch's padding rows (all-PAD sources, filling a static
batch shape) are left out of the union: a sentence's output does not depend on how many the batch got.

Static shapes: the union's size varies from call to call (one state or a batch of 32, common or rare
clusters), so the index list has one of a few fixed widths, 128, 256, 512, ... up to `capacity`, chosen per
call by `lax.switch` (each width is compiled once, like a length bucket); a call pays for the smallest width
that holds its union.

Documented fallbacks: when the union is larger than `capacity` (by default half the vocabulary, beyond which
the gather costs more than it saves), that call uses the dense projection (exact; `overflowed` says so); EOS
is always in the union, so a row never has only -inf logits (and NEG_INF is finite, so softmax never makes
NaN).
"""

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from fastmt.data.tokenizer import EOS_ID
from fastmt.layers import NEG_INF
from fastmt.errors import FastmtError


def dense_logits(hidden, embedding):
  """hidden [..., E], embedding [V, E] -> float32 logits [..., V] (the tied output projection)."""
  return jnp.einsum('...e,ve->...v', hidden.astype(jnp.float32), embedding.astype(jnp.float32))


@flax.struct.dataclass
class Clusters:
  centroids: jax.Array  # float32 [C, E]
  centroid_sq_norms: jax.Array  # float32 [C]: ||C_j||^2, precomputed once
  active_sets: jax.Array  # int32 [C, A]: token ids of each cluster's active set, padded with vocab_size
  vocab_size: int = flax.struct.field(pytree_node=False)
  capacity: int = flax.struct.field(pytree_node=False)  # most columns of a reduced projection; beyond: dense

  @property
  def num_clusters(self) -> int:
    return self.centroids.shape[0]

  @property
  def widths(self) -> tuple[int, ...]:
    """The reduced projection's widths, smallest first: 128, 256, ... doubling, then capacity itself."""
    widths, width = [], min(128, self.capacity)
    while width < self.capacity:
      widths.append(width)
      width *= 2
    return tuple(widths) + (self.capacity,)

  def nbytes(self) -> int:
    """Memory the clusters add to the model: centroids, their norms and the padded active sets."""
    return sum(int(x.size) * x.dtype.itemsize for x in (self.centroids, self.centroid_sq_norms, self.active_sets))


def default_capacity(vocab_size: int) -> int:
  """Half the vocabulary (rounded up to 128): a larger union is projected densely, which is then as fast."""
  return int(min(vocab_size, -(-(vocab_size // 2) // 128) * 128))


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
    raise FastmtError(f'{num_clusters} clusters need at least as many points, got {n}')
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
  capacity: the widest reduced projection (default: default_capacity(vocab_size)).
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
  capacity = default_capacity(vocab_size) if capacity is None else capacity
  return Clusters(centroids, sq, jnp.asarray(active), vocab_size, capacity)


def active_mask(hidden, clusters: Clusters, live_rows=None):
  """The union of the active sets of the states' nearest clusters.

  hidden [..., E] -> (bool [V] mask, int32 [] number of active columns). live_rows: bool [B] over hidden's
  first axis, or None (all): the states of other rows (a batch's padding rows) add nothing to the union.
  """
  flat = hidden.reshape(-1, hidden.shape[-1])
  assign = nearest_centroid(flat, clusters.centroids, clusters.centroid_sq_norms)  # [N]
  ids = clusters.active_sets[assign]  # [N, A]
  if live_rows is not None:
    live = jnp.broadcast_to(live_rows.reshape(live_rows.shape + (1,) * (hidden.ndim - 2)), hidden.shape[:-1])
    ids = jnp.where(live.reshape(-1, 1), ids, clusters.vocab_size)  # vocab_size: dropped, like set padding
  mask = jnp.zeros((clusters.vocab_size,), bool)
  mask = mask.at[ids.ravel()].set(True, mode='drop')  # padding ids fall outside
  mask = mask.at[EOS_ID].set(True)  # every row keeps a valid token, even for an empty active set
  return mask, mask.sum().astype(jnp.int32)


def active_columns(hidden, clusters: Clusters, width: int | None = None):
  """The union of the batch's active sets as an index list of a fixed width (default: clusters.capacity).

  hidden [..., E] -> (indices int32 [width] ascending, padded with vocab_size; number of active columns).
  """
  mask, count = active_mask(hidden, clusters)
  (indices,) = jnp.nonzero(mask, size=width or clusters.capacity, fill_value=clusters.vocab_size)
  return indices.astype(jnp.int32), count


def reduced_logits(hidden, embedding, mask, width: int):
  """Logits [..., V] computed only for the first `width` active columns of mask [V]; NEG_INF elsewhere."""
  vocab = embedding.shape[0]
  (indices,) = jnp.nonzero(mask, size=width, fill_value=vocab)
  weights = jnp.take(embedding, indices, axis=0, mode='clip')  # [width, E]; padding rows are never kept
  sub = jnp.einsum('...e,ce->...c', hidden.astype(jnp.float32), weights.astype(jnp.float32))  # [..., width]
  full = jnp.full(hidden.shape[:-1] + (vocab,), NEG_INF, jnp.float32)
  return full.at[..., indices].set(sub, mode='drop')  # index `vocab` (padding) is dropped


def clustered_logits(hidden, embedding, clusters: Clusters, live_rows=None):
  """Drop-in output layer: logits [..., V], exact on the batch's active columns, NEG_INF elsewhere.

  The reduced projection runs at the smallest of clusters.widths that holds the union (of live_rows' states:
  active_mask). Returns (logits, overflowed): when the union exceeds clusters.capacity the dense projection is
  used for this call (overflowed=True), so no active token is ever silently dropped.
  """
  mask, count = active_mask(hidden, clusters, live_rows)
  widths = clusters.widths
  branches = [lambda h, w=w: reduced_logits(h, embedding, mask, w) for w in widths]
  branches.append(lambda h: dense_logits(h, embedding))
  choice = jnp.searchsorted(jnp.asarray(widths), count)  # first width >= count; len(widths) = dense
  return jax.lax.switch(choice, branches, hidden), count > clusters.capacity
