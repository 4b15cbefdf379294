r"""What a sentence pays at batch 1 besides its decoding loop: the host's share, placed against host arrays.

    python benchmarks/dispatch_cost.py --workdir runs/quickstart --method greedy --sentences 30

Translator.decode_batch hands each padded source and its row caps to the compiled decoder. Until 2026-11-25 it
placed them first with jax.device_put(x, rows_sharding); on one device it now passes the NumPy arrays as they
are. This script times both ways side by side in one process (the same executable, sentences at their own
buckets, ways rotated from repeat to repeat, median, compile excluded), with the output cap of each sentence and
with a cap of 1 token (where the encoder is nearly all the work, so the host's share shows most), plus the
encoder and the cross-attention memory alone at each sentence's bucket (roofline's encoder function): the
rest of a cap-1 run is what a sentence pays once besides the encoder. A last way is the whole user path,
`Translator.translate([sentence], batch_size=1)` (tokenising, batching, the call, detokenising): its excess
over "host arrays, own cap" is the Python around the call. Run it on a quiet machine.
"""

import argparse
import statistics
import time

import jax
import numpy as np

from fastmt import bench, roofline, workdir as workdir_lib
from fastmt.data import corpus
from fastmt.data.tokenizer import PAD_ID
from fastmt.translate import TranslationStats


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--workdir', required=True)
  parser.add_argument('--method', default='greedy', help='A fastmt.bench method (greedy, ib, ...).')
  parser.add_argument('--split', default='test')
  parser.add_argument('--sentences', type=int, default=30)
  parser.add_argument('--repeats', type=int, default=15)
  args = parser.parse_args()
  translator = bench.build_translators(args.workdir, [args.method])[0][args.method]
  texts = corpus.load_split(workdir_lib.load_train_config(args.workdir).dataset, args.split).sources
  batches = []  # (text, padded source [1, bucket], its output cap [1]) per sentence
  for text in texts[:args.sentences]:
    ids = translator.encode_sources([text], TranslationStats())[0]
    (_, source, caps), = translator.batches([ids], 1)
    batches.append((text, source, caps))
  # The executable's arguments after the source and caps, as Translator.decode_batch passes them (the last:
  # no earlier outputs to draft from).
  recent = np.full((translator.recent_size,), PAD_ID, np.int32) if translator.recent_size else None
  rest = (translator.clusters, translator.draft_table, translator.output_projection, translator.drafter, recent)
  encode = roofline._encode_fn(translator.config)  # pylint: disable=protected-access

  def placed(source, caps):
    put = lambda x: jax.device_put(x, translator.rows_sharding)
    return translator._executable(*source.shape, None)(translator.params, put(source), put(caps), *rest)  # pylint: disable=protected-access

  def host(source, caps):
    return translator._executable(*source.shape, None)(translator.params, source, caps, *rest)  # pylint: disable=protected-access

  one = np.ones((1,), np.int32)
  ways = {'device_put, own cap': lambda t, s, c: placed(s, c), 'host arrays, own cap': lambda t, s, c: host(s, c),
          'device_put, cap 1': lambda t, s, c: placed(s, one), 'host arrays, cap 1': lambda t, s, c: host(s, one),
          'encoder + memory alone': lambda t, s, c: encode(translator.params, s),
          'translate(), batch 1': lambda t, s, c: translator.translate([t], 1)[0]}
  times = {label: [] for label in ways}
  for fn in ways.values():  # compile and warm up
    for batch in batches:
      jax.block_until_ready(fn(*batch))
  labels = list(ways)
  for rep in range(args.repeats):
    for label in labels[rep % len(labels):] + labels[:rep % len(labels)]:
      start = time.perf_counter()
      for batch in batches:
        jax.block_until_ready(ways[label](*batch))
      times[label].append(time.perf_counter() - start)
  ms = {label: 1000 * statistics.median(t) / len(batches) for label, t in times.items()}
  print(f'{args.workdir} {args.method}, {len(batches)} sentences at batch 1, median of {args.repeats}:')
  for label, value in ms.items():
    print(f'  {label:24s} {value:7.3f} ms/sentence')
  for cap in ('own cap', 'cap 1'):
    print(f'  host arrays save {ms[f"device_put, {cap}"] - ms[f"host arrays, {cap}"]:.3f} ms/sentence ({cap}: '
          f'{ms[f"device_put, {cap}"] / ms[f"host arrays, {cap}"]:.3f}x)')
  print(f'  the Python around the call: {ms["translate(), batch 1"] - ms["host arrays, own cap"]:.3f} ms/sentence; '
        f'a cap-1 run besides the encoder: {ms["host arrays, cap 1"] - ms["encoder + memory alone"]:.3f}')


if __name__ == '__main__':
  main()
