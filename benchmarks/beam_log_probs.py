r"""Beam search with and without its guard for NaN / +inf logits, side by side in one process.

    python benchmarks/beam_log_probs.py --workdir runs/quickstart --method beam:4 --sentences 100

fastmt.decoding.beam._log_probs turns a row of logits holding NaN or +inf (no distribution: its log-softmax is
NaN, and beam search returned an empty sentence) into greedy's choice; a few elementwise operations per step
on the [rows, vocab] log-probabilities. This script builds the method's translator twice, the second one traced
with the plain log-softmax (the code before the guard), then times both on the split's first sentences at
batch 1 and, in one call each, all of them at --batch_size, alternating, median of --repeats, compile
excluded, and checks that the outputs are identical.
"""

import argparse
import statistics
import time
from unittest import mock

import jax
import jax.numpy as jnp

from fastmt import bench, workdir as workdir_lib
from fastmt.data import corpus
from fastmt.decoding import beam


def plain_log_probs(logits):
  return jax.nn.log_softmax(logits.astype(jnp.float32))


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--workdir', required=True)
  parser.add_argument('--method', default='beam:4', help='A fastmt.bench beam method.')
  parser.add_argument('--split', default='test')
  parser.add_argument('--sentences', type=int, default=100)
  parser.add_argument('--batch_size', type=int, default=32)
  parser.add_argument('--repeats', type=int, default=5)
  args = parser.parse_args()
  texts = corpus.load_split(workdir_lib.load_train_config(args.workdir).dataset, args.split).sources
  texts = texts[:args.sentences]
  guarded = bench.build_translators(args.workdir, [args.method])[0][args.method]
  plain = bench.build_translators(args.workdir, [args.method])[0][args.method]
  runs = {'batch 1': lambda t: [t.translate([text], 1)[0][0] for text in texts],
          f'batch {args.batch_size}': lambda t: t.translate(texts, args.batch_size)[0]}
  outputs = {}
  with mock.patch.object(beam, '_log_probs', plain_log_probs):  # traced now, compiled once per shape
    for name, run in runs.items():
      outputs['plain', name] = run(plain)
  for name, run in runs.items():
    outputs['guarded', name] = run(guarded)
  times = {key: [] for key in outputs}
  for repeat in range(args.repeats):
    for name, run in runs.items():
      for way, translator in (('plain', plain), ('guarded', guarded))[::1 if repeat % 2 else -1]:
        start = time.perf_counter()
        run(translator)
        times[way, name].append(time.perf_counter() - start)
  print(f'{args.workdir}, {args.method}, {len(texts)} {args.split} sentences, {args.repeats} repeats, median; '
        f'{jax.devices()[0].device_kind}')
  for name in runs:
    same = outputs['plain', name] == outputs['guarded', name]
    plain_s, guarded_s = (statistics.median(times[way, name]) for way in ('plain', 'guarded'))
    print(f'{name}: plain {plain_s * 1e3 / len(texts):.2f} ms/sentence, guarded {guarded_s * 1e3 / len(texts):.2f}'
          f' ms/sentence, guarded / plain time {guarded_s / plain_s:.3f}, identical outputs: {same}')


if __name__ == '__main__':
  main()
