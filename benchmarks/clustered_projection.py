r"""End-to-end clustered vocabulary projection on a multilingual model (issue [vocab]), measured side by side.

    python benchmarks/clustered_projection.py --workdir runs/multi --output_dir runs/multi/clustered

Three measurements, each in one process with compile time excluded:
  1. sweep (the paper's Figures 3-4), on the *validation* split of --sweep_direction: centroids x K, each
     clustered greedy decoder against the dense one: speed-up at batch 1 and at the large batch, share of
     sentences identical to dense, BLEU delta, active columns per call;
  2. per direction (Tables 3-5), on the test split at --num_clusters/--top_k: the same figures plus the
     memory the clusters add;
  3. per-direction vs pooled clusters (Figure 2): clusters fitted on one direction's states or on all
     directions' states mixed, K=1, 100..500 centroids: the largest and mean share of the vocabulary that a
     batch-1 call activates, on the direction's validation states.

States are recorded on training sources only (the model's own greedy outputs; no reference is read), as the
paper builds clusters from unlabelled text.
"""

import json
import os
import sys

from absl import app, flags, logging
import jax
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from fastmt import bench, clusters_lib, projection, workdir as workdir_lib  # noqa: E402  pylint: disable=g-import-not-at-top
from fastmt.data import corpus  # noqa: E402  pylint: disable=g-import-not-at-top
from fastmt.translate import Translator  # noqa: E402  pylint: disable=g-import-not-at-top

FLAGS = flags.FLAGS
flags.DEFINE_string('workdir', None, 'A multilingual train.py work directory.')
flags.DEFINE_list('directions', [], 'Directions to measure (default: every direction of the dataset).')
flags.DEFINE_integer('record_sentences', 3000, 'Training sources per direction whose decoder states are recorded.')
flags.DEFINE_integer('num_clusters', 1000, 'Centroids of the per-direction table.')
flags.DEFINE_integer('top_k', 1, 'K of the per-direction table.')
flags.DEFINE_string('sweep_direction', 'en_fr', 'Direction of the centroid/K sweep ("" = no sweep).')
flags.DEFINE_list('sweep_clusters', ['100', '500', '1000', '2000'], 'Centroid counts of the sweep.')
flags.DEFINE_integer('sweep_sentences', 200, 'Validation sentences of the sweep (each setting compiles anew).')
flags.DEFINE_list('sweep_top_k', ['1', '3', '5'], 'K values of the sweep.')
flags.DEFINE_integer('batch_size', 32, 'The large batch.')
flags.DEFINE_integer('speed_sentences', 100, 'Sentences timed at batch 1.')
flags.DEFINE_integer('large_batch_sentences', 256, 'Sentences timed at the large batch.')
flags.DEFINE_integer('repeats', 3, 'Timed repeats (median).')
flags.DEFINE_string('output_dir', None, 'Where results.json and tables.md go.')


def fit(hidden, top, num_clusters, top_k, vocab_size, seed=0):
  centroids = projection.fit_kmeans(hidden, num_clusters, iterations=20, batch_size=8192, seed=seed)
  return projection.build_clusters(hidden, top[:, :top_k], centroids, vocab_size)


def active_share(clusters, hidden):
  """Share of the vocabulary active per batch-1 call (one state): (mean, max) over the states."""
  count = jax.jit(jax.vmap(lambda h: projection.active_mask(h[None], clusters)[1]))
  counts = np.concatenate([np.asarray(count(hidden[i:i + 256])) for i in range(0, len(hidden), 256)])
  return float(counts.mean() / clusters.vocab_size), float(counts.max() / clusters.vocab_size)


def compare(dense, clustered: dict, data, log, exactness_at_batch1=False):
  """bench.measure of the dense greedy translator against clustered ones; rows as dicts."""
  translators = {'greedy': dense, **clustered}
  results, _, signatures = bench.measure(
      translators, data.sources, data.targets, FLAGS.batch_size, FLAGS.speed_sentences,
      FLAGS.large_batch_sentences, FLAGS.repeats, exactness_at_batch1=exactness_at_batch1, log=log)
  base = results[0]
  rows = []
  for r in results[1:]:
    rows.append({'method': r.method, 'bleu': r.bleu, 'bleu_delta': r.bleu - base.bleu, 'chrf_delta': r.chrf - base.chrf,
                 'identical': r.identical_to_greedy, 'speedup_b1': r.speedup_b1,
                 f'speedup_b{FLAGS.batch_size}': r.speedup_large, 'ms_per_sentence_b1': r.ms_per_sentence_b1,
                 'dense_ms_per_sentence_b1': base.ms_per_sentence_b1,
                 f'sentences_per_s_b{FLAGS.batch_size}': r.sentences_per_s,
                 f'dense_sentences_per_s_b{FLAGS.batch_size}': base.sentences_per_s, 'dense_bleu': base.bleu})
  return rows, signatures


def table(rows, columns) -> str:
  lines = ['| ' + ' | '.join(columns) + ' |', '|' + '---|' * len(columns)]
  for row in rows:
    lines.append('| ' + ' | '.join(f'{row[c]:.3f}' if isinstance(row[c], float) else str(row[c])
                                   for c in columns) + ' |')
  return '\n'.join(lines)


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  log = lambda message: print(message, flush=True)
  workdir = FLAGS.workdir
  config = workdir_lib.load_train_config(workdir)
  model_config = workdir_lib.load_model_config(workdir)
  params, step = workdir_lib.restore_params(workdir, model_config)
  tokenizer = workdir_lib.load_tokenizer(workdir)
  vocab = model_config.vocab_size
  splits = {s: corpus.load_split(config.dataset, s) for s in ('train', 'validation', 'test')}
  directions = FLAGS.directions or sorted(set(splits['test'].directions or []))
  if not directions:
    raise app.UsageError(f'{workdir} is not a multilingual model: its dataset has no directions')
  dense = Translator(model_config, params, tokenizer)
  params_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(params))

  states = {}
  for d in directions:
    sources = splits['train'].select(d).sources[:FLAGS.record_sentences]
    states[d] = clusters_lib.record_states(dense, sources, top_k=5)
    log(f'{d}: recorded {len(states[d][0])} decoder states from {len(sources)} training sources')
  out = {'environment': bench.environment_facts(workdir=workdir, checkpoint_step=step,
                                                model_config=model_config.__dict__, batch_size=FLAGS.batch_size,
                                                repeats=FLAGS.repeats, record_sentences=FLAGS.record_sentences)}
  markdown = []

  if FLAGS.sweep_direction:
    d = FLAGS.sweep_direction
    hidden, top = states[d]
    clustered = {}
    for c in map(int, FLAGS.sweep_clusters):
      centroids = projection.fit_kmeans(hidden, c, iterations=20, batch_size=8192)
      for k in map(int, FLAGS.sweep_top_k):
        clusters = projection.build_clusters(hidden, top[:, :k], centroids, vocab)
        clustered[f'C={c} K={k}'] = Translator(model_config, params, tokenizer, clusters=clusters)
    validation = splits['validation'].select(d)
    validation = corpus.ParallelText(validation.sources[:FLAGS.sweep_sentences],
                                     validation.targets[:FLAGS.sweep_sentences])
    rows, signatures = compare(dense, clustered, validation, log)
    out['sweep'] = {'direction': d, 'split': 'validation', 'rows': rows, **signatures}
    markdown.append(f'Sweep, {d}, validation split:\n\n' + table(
        rows, ['method', 'speedup_b1', f'speedup_b{FLAGS.batch_size}', 'identical', 'bleu_delta', 'chrf_delta']))
    log(markdown[-1])

  rows = []
  for d in directions:
    hidden, top = states[d]
    clusters = fit(hidden, top, FLAGS.num_clusters, FLAGS.top_k, vocab)
    mean_share, max_share = active_share(clusters, hidden[:2000])
    label = f'{d} C={FLAGS.num_clusters} K={FLAGS.top_k}'
    direction_rows, signatures = compare(dense, {label: Translator(model_config, params, tokenizer, clusters=clusters)},
                                         splits['test'].select(d), log, exactness_at_batch1=True)
    row = direction_rows[0]
    row.update({'direction': d, 'active_share_mean_b1': mean_share, 'active_share_max_b1': max_share,
                'clusters_mb': clusters.nbytes() / 2**20, 'memory_overhead': clusters.nbytes() / params_bytes})
    rows.append(row)
    log(table([row], ['method', 'speedup_b1', f'speedup_b{FLAGS.batch_size}', 'identical', 'bleu_delta']))
  out['directions'] = {'split': 'test', 'rows': rows, **signatures}
  markdown.append('Per direction, test split:\n\n' + table(
      rows, ['direction', 'dense_bleu', 'bleu_delta', 'chrf_delta', 'identical', 'speedup_b1',
             f'speedup_b{FLAGS.batch_size}', 'dense_ms_per_sentence_b1', 'ms_per_sentence_b1',
             'active_share_mean_b1', 'clusters_mb', 'memory_overhead']))

  # Figure 2: clusters from one direction's states vs from every direction's states mixed.
  pooled_hidden = np.concatenate([states[d][0][:len(states[d][0]) // len(directions)] for d in directions])
  pooled_top = np.concatenate([states[d][1][:len(states[d][1]) // len(directions)] for d in directions])
  figure2 = []
  for d in directions:
    hidden, top = states[d]
    validation_states, _ = clusters_lib.record_states(dense, splits['validation'].select(d).sources[:200], top_k=1)
    for c in (100, 200, 300, 400, 500):
      for name, (h, t) in (('per direction', (hidden, top)), ('pooled', (pooled_hidden, pooled_top))):
        mean_share, max_share = active_share(fit(h, t, c, 1, vocab), validation_states)
        figure2.append({'direction': d, 'clusters_from': name, 'centroids': c, 'active_share_mean': mean_share,
                        'active_share_max': max_share})
  out['figure2'] = figure2
  markdown.append('Active share of the vocabulary per batch-1 call, validation states:\n\n' + table(
      figure2, ['direction', 'clusters_from', 'centroids', 'active_share_mean', 'active_share_max']))
  text = '\n\n'.join(markdown)
  print(text)
  if FLAGS.output_dir:
    os.makedirs(FLAGS.output_dir, exist_ok=True)
    with open(os.path.join(FLAGS.output_dir, 'results.json'), 'w') as f:
      json.dump(out, f, indent=1, default=str)
    with open(os.path.join(FLAGS.output_dir, 'tables.md'), 'w') as f:
      f.write(text + '\n')


if __name__ == '__main__':
  flags.mark_flags_as_required(['workdir'])
  app.run(main)
