r"""Micro-benchmark of the output projection alone: dense vs clustered (issue [vocab]).

    python benchmarks/projection_micro.py --vocab 32000,64000,250000 --batch 1,32 --active_fraction 0.05,0.125

Synthetic weights (no trained model has these vocabularies here): embedding [V, E] and 1000 centroids; the
active sets are drawn so that the union over the batch covers `active_fraction` of the vocabulary (the paper
reports 12-16% at its operating point). Both projections run jitted, interleaved, median of repeats, compile
excluded; the clustered time includes the centroid argmin, the union, the choice of the reduced width (the
smallest of 128, 256, ... that holds the union), the gather and the scatter back.
"""

import statistics
import time

from absl import app, flags
import jax
import jax.numpy as jnp
import numpy as np

from fastmt import projection

FLAGS = flags.FLAGS
flags.DEFINE_list('vocab', ['32000', '64000', '250000'], 'Vocabulary sizes.')
flags.DEFINE_list('batch', ['1', '32'], 'Hidden states per call (batch x beam).')
flags.DEFINE_list('active_fraction', ['0.05', '0.125'], 'Union of active sets over the batch, as a fraction of V.')
flags.DEFINE_integer('emb_dim', 512, 'Hidden size.')
flags.DEFINE_integer('clusters', 1000, 'Centroids.')
flags.DEFINE_integer('repeats', 20, 'Timed calls per method (median).')


def synthetic_clusters(vocab, batch, fraction, emb_dim, num_clusters, rng):
  centroids = rng.standard_normal((num_clusters, emb_dim)).astype(np.float32)
  union = max(1, int(fraction * vocab))
  per_row = max(1, union // batch)
  active = np.stack([rng.choice(vocab, per_row, replace=False) for _ in range(num_clusters)]).astype(np.int32)
  return projection.Clusters(jnp.asarray(centroids), jnp.asarray((centroids**2).sum(-1)), jnp.asarray(active),
                             vocab, projection.default_capacity(vocab))


def main(argv):
  del argv
  rng = np.random.default_rng(0)
  print('| V | batch | active | reduced width | dense ms | clustered ms | speed-up |\n|---|---|---|---|---|---|---|')
  for vocab in map(int, FLAGS.vocab):
    embedding = jnp.asarray(rng.standard_normal((vocab, FLAGS.emb_dim)).astype(np.float32))
    for batch in map(int, FLAGS.batch):
      for fraction in map(float, FLAGS.active_fraction):
        clusters = synthetic_clusters(vocab, batch, fraction, FLAGS.emb_dim, FLAGS.clusters, rng)
        # Hidden states placed on distinct centroids so the batch hits `batch` different active sets.
        hidden = clusters.centroids[rng.choice(FLAGS.clusters, batch, replace=False)] * 3.0
        dense = jax.jit(projection.dense_logits)
        clustered = jax.jit(lambda h, w: projection.clustered_logits(h, w, clusters)[0])
        fns = {'dense': lambda: dense(hidden, embedding), 'clustered': lambda: clustered(hidden, embedding)}
        for fn in fns.values():
          jax.block_until_ready(fn())
        times = {name: [] for name in fns}
        for rep in range(FLAGS.repeats):
          for name in (list(fns) if rep % 2 == 0 else list(fns)[::-1]):
            start = time.perf_counter()
            jax.block_until_ready(fns[name]())
            times[name].append(time.perf_counter() - start)
        d, c = (1000 * statistics.median(times[n]) for n in ('dense', 'clustered'))
        _, count = projection.active_columns(hidden, clusters)
        width = next(w for w in clusters.widths + (vocab,) if w >= int(count))
        print(f'| {vocab} | {batch} | {int(count) / vocab:.1%} | {width} | {d:.3f} | {c:.3f} | {d / c:.2f} |',
              flush=True)


if __name__ == '__main__':
  app.run(main)
