r"""What one iteration of a decoder's loop costs, apart from what a sentence pays once: batch 1, real sentences.

    python benchmarks/iteration_cost.py \
        --runs greedy=runs/ib/at_kd_avg5,ib=runs/ib/ib_kd_avg5,ib=runs/ib/ib_sa_kd_avg5

The step-cost curve (fastmt.roofline, the bench's floor pass) times synthetic calls in a loop of its own; this
script times the decoders themselves. For each sentence and each METHOD=WORKDIR (a fastmt.bench method, e.g.
greedy, ib, pgj:3, and a work directory; a row is named WORKDIR's base name/METHOD), the Translator decodes
it twice at batch 1: with the sentence's own output cap (n loop iterations) and with a cap of 1 token (1
iteration; every decoder stops at its cap). Then

    per-iteration cost = (T(own cap) - T(cap 1)) / (n - 1),    fixed cost = T(cap 1) - per-iteration cost,

the fixed cost being what the sentence pays whatever its length: the encoder, the dispatch of the compiled
function, the loop's set-up and the recovery of the output. Methods are interleaved sentence by sentence,
each time the median of --repeats runs, compile excluded. Reported: mean ms/sentence, mean iterations,
mean fixed cost, and the per-iteration cost as total decoding time less the fixed costs over all iterations.
Only for decoders with one loop whose iterations are alike (greedy, ib, PJ, PGJ); not HGJ (wide iterations,
then one-position ones) or HRT (two stages). Run it on a quiet machine.
"""

import argparse
import json
import os
import statistics
import time

import numpy as np

from fastmt import bench, workdir as workdir_lib
from fastmt.data import corpus
from fastmt.translate import TranslationStats


def padded(translator, ids):
  """The sentence as Translator.batches lays it out at batch 1: its bucket's width, PAD after it."""
  bucket = next(b for b in translator.buckets if b >= len(ids))
  source = np.zeros((1, bucket), np.int32)
  source[0, :len(ids)] = ids
  return source


def median_ms(fn, repeats: int) -> float:
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return 1000 * statistics.median(times)


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--runs', required=True, help='METHOD=WORKDIR,...; the first row is the baseline')
  parser.add_argument('--split', default='test')
  parser.add_argument('--sentences', type=int, default=100)
  parser.add_argument('--repeats', type=int, default=7)
  parser.add_argument('--output', help='Write the figures here as JSON.')
  args = parser.parse_args()
  runs = {}
  for item in args.runs.split(','):
    method, workdir = item.split('=', 1)
    if bench.is_auto(method):
      parser.error(f'{method}: this script times one decoder\'s loop; name a width (spec:2+ngram), not auto')
    label = f'{os.path.basename(os.path.normpath(workdir))}/{method}'
    if label in runs:
      parser.error(f'two rows would be named {label}')
    runs[label] = (method, workdir)
  translators = {label: bench.build_translators(workdir, [method])[0][method]
                 for label, (method, workdir) in runs.items()}
  first = next(iter(runs.values()))[1]
  sources = corpus.load_split(workdir_lib.load_train_config(first).dataset, args.split).sources[:args.sentences]
  figures = {label: {'total_ms': [], 'fixed_ms': [], 'iterations': []} for label in translators}
  for text in sources:
    for label, translator in translators.items():
      ids = translator.encode_sources([text], TranslationStats())[0]
      source, cap = padded(translator, ids), np.array([translator.row_cap(len(ids))], np.int32)
      one = np.ones((1,), np.int32)
      iterations = int(translator.decode_batch(source, cap).loop_iterations)  # compiles, if new
      translator.decode_batch(source, one)
      total = median_ms(lambda: translator.decode_batch(source, cap), args.repeats)
      first_only = median_ms(lambda: translator.decode_batch(source, one), args.repeats)
      per_iteration = (total - first_only) / max(iterations - 1, 1)
      figures[label]['total_ms'].append(total)
      figures[label]['fixed_ms'].append(first_only - per_iteration)
      figures[label]['iterations'].append(iterations)
  summary = {}
  for label, f in figures.items():
    total, fixed, iterations = (np.array(f[k]) for k in ('total_ms', 'fixed_ms', 'iterations'))
    summary[label] = {'ms_per_sentence': total.mean(), 'iterations': iterations.mean(), 'fixed_ms': fixed.mean(),
                      'ms_per_iteration': (total.sum() - fixed.sum()) / iterations.sum()}
  base = next(iter(summary.values()))
  print('| method | ms/sentence | iterations | fixed ms | ms/iteration | iteration vs first | speed-up vs first |')
  print('|---|---|---|---|---|---|---|')
  for label, s in summary.items():
    print(f"| {label} | {s['ms_per_sentence']:.2f} | {s['iterations']:.2f} | {s['fixed_ms']:.2f} | "
          f"{s['ms_per_iteration']:.3f} | {s['ms_per_iteration'] / base['ms_per_iteration']:.2f}x | "
          f"{base['ms_per_sentence'] / s['ms_per_sentence']:.2f} |")
  if args.output:
    with open(args.output, 'w') as f:
      json.dump({'runs': runs, 'sentences': len(sources), 'repeats': args.repeats, 'summary': summary}, f, indent=1)


if __name__ == '__main__':
  main()
