r"""What a decoder call costs in the step-cost curve's setting and in a sentence's, one difference at a time.

    python benchmarks/call_context.py \
        --runs greedy=runs/ib_ft/at_kd_ft3_avg5,ib=runs/ib_ft/ib_kd_ft3_avg5,ib=runs/ib_ft/ib_sa_kd_ft3_avg5

The ideal speed-ups of docs/BENCHMARKS.md section 5 price every call with the step-cost curve
(fastmt.roofline.step_cost_curve): 64 calls back to back with the first row's (the AT model's) weights, nothing
before them, over a 40-token source of one repeated id, plain causal calls at write offsets 0-7. A decoder's
calls at batch 1 differ from those in several ways (benchmarks/iteration_cost.py's bare loops cost more per
call than the curve, most of all for a decoder with few calls). This script goes from the one to the other,
changing one thing per column, for each METHOD=WORKDIR row (greedy or ib, as in iteration_cost.py), in ms per
call:

  curve          the curve's call of the row's width, the first row's weights (what the ideal is priced with)
  own weights    the same with the row's own weights
  own shapes     the same at the sentences' bucket width and the decoder's own cache length
  own calls      the decoder's own calls (its positions, mask and write offsets) on the sentences' own memory,
                 64 back to back in a program of their own (iteration_cost.bare_loop without its encoder)
  after encoder  the same calls right after the encoder in one program, as the decoder makes them: the mean
                 cost of a sentence's own n calls, (T(encoder + n calls) - T(encoder alone)) / n

The last column, excess ms/sentence, is what a sentence's n calls after the encoder cost beyond n calls at
the "own calls" price: (T(encoder + n calls) - T(encoder alone)) - n x own calls, a cost per sentence, like the
encoder's, that the ideal does not count. Run back to back, each encoder of a program with calls follows the
previous run's calls, as in a stream of sentences, while the encoder-alone program follows an encoder: the
excess (and the first bin below) carries the encoder's own slowdown after the calls too. And, to see where in a sentence the difference lies, the marginal cost of calls 1, 2, 3-4, 5-8, 9-16, 17-32
and 33-64 of the program, with and without the encoder before them. Every figure is at one source bucket (by
default the commonest among the split's first --sentences sources), on the sentences of that bucket; for each
sentence every program of every row (the curve's columns too: roofline.step_cost_loop, a run's time / 64 as
in the curve) is run --repeats times back to back, as a model's sentences follow each other in a decoder's
use and in the bench's passes (a program run right after another model's pays for bringing its weights back
into the caches), compile excluded, and each timing is the median; the programs' order is rotated from
sentence to sentence; then the mean over sentences. The bare loops run past a sentence's end for the bins (the calls keep their shapes and
cost; writes past the cache are clamped), so only "after encoder" is a real sentence's work. Run it on a quiet
machine.
"""

import argparse
import collections
import functools
import json
import os
import statistics
import sys
import time

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import iteration_cost  # pylint: disable=g-import-not-at-top,wrong-import-position

from fastmt import bench, models, roofline, workdir as workdir_lib  # pylint: disable=g-import-not-at-top,wrong-import-position
from fastmt.data import corpus  # pylint: disable=g-import-not-at-top,wrong-import-position
from fastmt.decoding import registry  # pylint: disable=g-import-not-at-top,wrong-import-position
from fastmt.translate import DecodeSettings, TranslationStats, output_cap, transposed_output_layout  # pylint: disable=g-import-not-at-top,wrong-import-position

LONG = 64  # calls of the curve's programs (roofline.step_cost_curve's default) and of 'own calls'
CALLS = (0, 1, 2, 4, 8, 16, 32, LONG)  # program lengths timed for the marginal bins
CURVE_SOURCE = 40  # the curve's source length (roofline.step_cost_curve's default)
COLUMNS = ('curve', 'own weights', 'own shapes', 'own calls', 'after encoder')


def bins(times: dict[int, float]) -> dict[str, float]:
  """Marginal ms per call between consecutive program lengths: {'1': ..., '2': ..., '3-4': ..., ...}."""
  lengths = [n for n in CALLS if n in times]
  return {(f'{a + 1}' if b == a + 1 else f'{a + 1}-{b}'): (times[b] - times[a]) / (b - a)
          for a, b in zip(lengths, lengths[1:])}


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--runs', required=True, help='METHOD=WORKDIR,... (greedy or ib); the first row\'s weights '
                      'price the curve column, as the bench prices the ideal with the AT model\'s')
  parser.add_argument('--split', default='test')
  parser.add_argument('--sentences', type=int, default=100, help='Pick the bucket among this many sources.')
  parser.add_argument('--max_sentences', type=int, default=10, help='Time at most this many of the bucket\'s.')
  parser.add_argument('--bucket', type=int, default=0, help='Source bucket width; 0 = the commonest.')
  parser.add_argument('--repeats', type=int, default=15)
  parser.add_argument('--output', help='Write the figures here as JSON.')
  parser.add_argument('--float32_kernel', action='store_true', help='Every program with the layers\' products '
                      'of at most 8 rows through fastmt\'s float32 CPU kernel (Translator float32_kernel), the '
                      'curve columns too.')
  args = parser.parse_args()
  translators = {}
  for item in args.runs.split(','):
    method, workdir = item.split('=', 1)
    if method not in ('greedy', 'ib'):
      parser.error(f'{method}: only greedy and ib rows have a bare loop')
    label = f'{os.path.basename(os.path.normpath(workdir))}/{method}'
    if label in translators:
      parser.error(f'two rows would be named {label}')
    translators[label] = bench.build_translators(workdir, [method], float32_kernel=args.float32_kernel)[0][method]
  first = next(iter(translators.values()))
  dataset = workdir_lib.load_train_config(args.runs.split(',')[0].split('=', 1)[1]).dataset
  ids = [first.encode_sources([text], TranslationStats())[0]
         for text in corpus.load_split(dataset, args.split).sources[:args.sentences]]
  bucket_of = lambda n: next(b for b in first.buckets if b >= n)
  counts = collections.Counter(bucket_of(len(i)) for i in ids)
  bucket = args.bucket or counts.most_common(1)[0][0]
  chosen = [i for i in ids if bucket_of(len(i)) == bucket][:args.max_sentences]
  if not chosen:
    parser.error(f'no source of the first {args.sentences} falls in bucket {bucket} (buckets: {dict(counts)})')
  print(f'bucket {bucket}: {len(chosen)} sentences (buckets of the first {len(ids)}: {dict(sorted(counts.items()))})')

  figures = {label: {column: [] for column in COLUMNS} | {'bins_after_encoder': [], 'bins_alone': [],
                                                          'calls': [], 'excess_ms': []} for label in translators}
  synthetic = {}  # label -> {column: a function that runs the column's 64 calls once}: the curve's programs
  for label, translator in translators.items():
    width = iteration_cost.call_width(translator.settings)
    own_cache = registry.get(translator.settings.algorithm).cache_length(
        output_cap(translator.config, bucket, translator.settings), translator.settings)
    curve_cache = max(output_cap(first.config, CURVE_SOURCE, DecodeSettings('greedy')), width + 8)
    columns = {'curve': (first, CURVE_SOURCE, curve_cache), 'own weights': (translator, CURVE_SOURCE, curve_cache),
               'own shapes': (translator, bucket, max(own_cache, width + 8))}
    synthetic[label] = {}
    for column, (model_of, source_length, cache_length) in columns.items():
      loop = roofline.step_cost_loop(model_of.config, width, 1, cache_length, LONG)
      data = (model_of.params, jax.device_put(transposed_output_layout(model_of.params)),
              roofline.curve_memory(model_of.config, model_of.params, 1, source_length))
      synthetic[label][column] = lambda loop=loop, data=data: jax.block_until_ready(loop(*data))
  loops = {label: (iteration_cost.bare_loop(t, bucket), iteration_cost.bare_loop(t, bucket, encoder=False))
           for label, t in translators.items()}
  encoders = {label: jax.jit(functools.partial(iteration_cost.encoded_memory, models.Transformer(t.config)))
              for label, t in translators.items()}  # one compile per row, not per sentence
  for sentence_index, ids_of_sentence in enumerate(chosen):
    runs = {}  # (label, program, calls) -> a function that runs it once
    for label, translator in translators.items():
      for column, run in synthetic[label].items():
        run()  # compiles, if new
        runs[(label, column, LONG)] = run
      source = iteration_cost.padded(translator, ids_of_sentence)
      own = int(translator.decode_batch(source, np.array([translator.row_cap(len(ids_of_sentence))],
                                                         np.int32)).loop_iterations)
      figures[label]['calls'].append(own)
      memory = encoders[label](translator.params, source)
      with_encoder, alone = loops[label]
      for n in sorted(set(CALLS) | {own}):
        for program, fn, data in (('after encoder', with_encoder, source), ('alone', alone, memory)):
          if program == 'alone' and n not in CALLS:
            continue
          run = (lambda fn=fn, data=data, n=n, t=translator:
                 jax.block_until_ready(fn(t.params, t.output_projection, data, np.int32(n))))
          run()  # compiles, if new
          runs[(label, program, n)] = run
    samples = {key: [] for key in runs}
    keys = list(runs)
    shift = sentence_index % len(keys)
    for key in keys[shift:] + keys[:shift]:  # each program's runs back to back: as a model's own sentences run
      for _ in range(args.repeats):
        start = time.perf_counter()
        runs[key]()
        samples[key].append(time.perf_counter() - start)
    ms = {key: 1000 * statistics.median(s) for key, s in samples.items()}
    for label in translators:
      own = figures[label]['calls'][-1]
      after = {n: ms[(label, 'after encoder', n)] for n in CALLS}
      alone = {n: ms[(label, 'alone', n)] for n in CALLS}
      for column in synthetic[label]:
        figures[label][column].append(ms[(label, column, LONG)] / LONG)
      figures[label]['own calls'].append((alone[LONG] - alone[0]) / LONG)
      figures[label]['after encoder'].append((ms[(label, 'after encoder', own)] - after[0]) / max(own, 1))
      # what the sentence's calls cost beyond the same calls' steady price: a per-sentence cost, like the encoder
      figures[label]['excess_ms'].append(ms[(label, 'after encoder', own)] - after[0] - own * figures[label]['own calls'][-1])
      figures[label]['bins_after_encoder'].append(bins(after))
      figures[label]['bins_alone'].append(bins(alone))

  summary = {}
  for label, f in figures.items():
    summary[label] = {column: float(np.mean(f[column])) for column in COLUMNS}
    summary[label]['calls'] = float(np.mean(f['calls']))
    summary[label]['excess_ms'] = float(np.mean(f['excess_ms']))
    for part in ('bins_after_encoder', 'bins_alone'):
      summary[label][part] = {b: float(np.mean([x[b] for x in f[part]])) for b in f[part][0]}
  base = next(iter(summary.values()))
  print('\nms per call (x the first row\'s in the same column):\n')
  print('| row | calls/sentence | ' + ' | '.join(COLUMNS) + ' | excess ms/sentence |')
  print('|---|---|' + '---|' * (len(COLUMNS) + 1))
  for label, s in summary.items():
    cells = ' | '.join(f'{s[c]:.3f} ({s[c] / base[c]:.2f}x)' for c in COLUMNS)
    print(f"| {label} | {s['calls']:.2f} | {cells} | {s['excess_ms']:.2f} |")
  for part, title in (('bins_after_encoder', 'right after the encoder'), ('bins_alone', 'in a program of their own')):
    names = list(base[part])
    print(f'\nMarginal ms per call by its index, {title}:\n')
    print('| row | ' + ' | '.join(names) + ' |')
    print('|---|' + '---|' * len(names))
    for label, s in summary.items():
      print(f'| {label} | ' + ' | '.join(f'{s[part][b]:.3f}' for b in names) + ' |')
  if args.output:
    with open(args.output, 'w') as f:
      json.dump({'runs': args.runs, 'split': args.split, 'bucket': bucket, 'sentences': len(chosen),
                 'repeats': args.repeats, 'float32_kernel': args.float32_kernel, 'summary': summary,
                 'per_sentence': figures}, f, indent=1)


if __name__ == '__main__':
  main()
