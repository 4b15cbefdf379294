r"""What splitting fastmt's CPU kernels over threads gains (fastmt/kernels/parallel_blocks.h).

    python benchmarks/kernel_threads.py --rounds 5 --output runs/threads/kernels.json

Times the matrix products of one decoder step of a Transformer-base-sized model (d 512, FFN 2048, 6 layers,
an 8,000-piece output projection: per layer the self-attention's query, key, value and output, the
cross-attention's query and output, and the two feed-forward products) through each kernel: int8 (26 MB of
weights a step, the int8 drafter's and int8 greedy's) at 1 row, float32 (104 MB, greedy's and a verification
window's with --float32_kernel) at 1 and 8 rows. Each chain runs --repeats times in one jitted loop, compile
time excluded; each setting in a process of its own, FASTMT_KERNEL_THREADS=1 (the calling thread alone, the
kernels before the split) and unset (XLA's intra-op threads) alternating for --rounds rounds; median per
setting. Weights are random: the kernels' time does not depend on the values.
"""

import json
import os
import statistics
import subprocess
import sys
import time

from absl import app, flags

FLAGS = flags.FLAGS
LAYERS, MODEL, HIDDEN, VOCAB = 6, 512, 2048, 8000
CASES = (('int8', 1), ('float32', 1), ('float32', 8))


def step_shapes():
  """(K, N) of every product of one decoder step, in order."""
  layer = [(MODEL, MODEL)] * 6 + [(MODEL, HIDDEN), (HIDDEN, MODEL)]
  return layer * LAYERS + [(MODEL, VOCAB)]


def time_chain(kind: str, rows: int, repeats: int) -> float:
  """ms per step's chain of products, in this process (its FASTMT_KERNEL_THREADS as the caller set it)."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  from fastmt import kernels
  if not kernels.available(kind):
    raise SystemExit(f'the {kind} kernel is not available here: {kernels.unavailable_reason(kind)}')
  rng = np.random.default_rng(0)
  weights = []
  for k, n in step_shapes():
    if kind == 'int8':
      packed, colsum = kernels.pack_weights(rng.integers(-127, 128, (k, n), dtype=np.int8))
      weights.append((jnp.asarray(packed), jnp.asarray(colsum), jnp.full((n,), 1e-3, jnp.float32)))
    else:
      weights.append((jnp.asarray(kernels.pack_float32_weights(rng.normal(size=(k, n)).astype(np.float32) * 0.03)),
                      jnp.zeros((n,), jnp.float32)))

  @jax.jit
  def chain(x, weights):
    def body(_, x):
      for (k, _), w in zip(step_shapes(), weights):
        y = kernels.int8_matmul(x[:, :k], *w) if kind == 'int8' else kernels.float32_matmul(x[:, :k], *w)
        x = jnp.tanh(jnp.pad(y, ((0, 0), (0, max(HIDDEN - y.shape[1], 0))))[:, :HIDDEN])  # feeds the next one
      return x
    return jax.lax.fori_loop(0, repeats, body, x)

  x = jnp.full((rows, HIDDEN), 0.1, jnp.float32)
  jax.block_until_ready(chain(x, weights))  # compiled and warm
  times = []
  for _ in range(5):
    start = time.perf_counter()
    jax.block_until_ready(chain(x, weights))
    times.append(time.perf_counter() - start)
  return 1000 * statistics.median(times) / repeats


def main(argv):
  del argv
  if FLAGS.child:
    kind, rows = FLAGS.child.split(':')
    print(json.dumps({'ms': time_chain(kind, int(rows), FLAGS.repeats)}))
    return
  results = {f'{kind}:{rows}': {'one_thread': [], 'threads': []} for kind, rows in CASES}
  for round_ in range(FLAGS.rounds):
    for case in results:
      for setting in (('one_thread', 'threads') if round_ % 2 == 0 else ('threads', 'one_thread')):
        env = dict(os.environ)
        env.pop('FASTMT_KERNEL_THREADS', None)
        if setting == 'one_thread':
          env['FASTMT_KERNEL_THREADS'] = '1'
        out = subprocess.run([sys.executable, __file__, f'--child={case}', f'--repeats={FLAGS.repeats}'], env=env,
                             capture_output=True, text=True, check=True).stdout
        results[case][setting].append(json.loads(out.strip().splitlines()[-1])['ms'])
  report = {'cases': {}, 'rounds': FLAGS.rounds, 'repeats': FLAGS.repeats, 'cpus': os.cpu_count()}
  for case, times in results.items():
    one, many = statistics.median(times['one_thread']), statistics.median(times['threads'])
    report['cases'][case] = {'one_thread_ms': one, 'threads_ms': many, 'speedup': one / many, 'runs': times}
    kind, rows = case.split(':')
    print(f'{kind} kernel, {rows} row{"s" if rows != "1" else ""}: a decoder step\'s products {one:.3f} ms on one '
          f'thread, {many:.3f} ms split over threads ({one / many:.2f}x)')
  if FLAGS.output:
    with open(FLAGS.output, 'w') as f:
      json.dump(report, f, indent=1)


if __name__ == '__main__':
  flags.DEFINE_integer('rounds', 5, 'Alternating rounds (a process per setting and round).')
  flags.DEFINE_integer('repeats', 20, 'Decoder steps\' chains per timed loop.')
  flags.DEFINE_string('output', '', 'Optional JSON file for the report.')
  flags.DEFINE_string('child', '', 'Internal: time one case (kind:rows) in this process.')
  app.run(main)
