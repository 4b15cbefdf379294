r"""One matrix product of a decoder step, float32 against bfloat16, fastmt.quantize's int8 and fastmt's kernels, on this
machine's XLA backend.

    python benchmarks/int8_matmul.py --emb_dim 256 --mlp_dim 1024 --vocab_size 8000 --rows 1,2,32

For each shape a decoder step multiplies by (E x E attention, E x F and F x E feed-forward, E x V output
projection) and each number of rows, times `--steps` chained products inside one jitted fori_loop (as a
decoding loop runs them: the weights loop-invariant), median of `--repeats`, compile excluded:

  float32        x @ W
  int8           fastmt.quantize.int8_matmul as the library runs it (a single row padded to two only for
                 matrices of at least quantize.YNN_MIN_WEIGHTS weights)
  int8 unpadded  a single row never padded: XLA:CPU's own matrix-vector loop, which widens int8 to int32
  int8 padded    a single row always padded to two: YNNPACK's int8 GEMM
  int8 fastmt    fastmt.kernels.int8_matmul, fastmt's AVX-512 VNNI custom call (weights packed once), where
                 the CPU has it
  float32 fastmt fastmt.kernels.float32_matmul, fastmt's AVX-512 float32 custom call for a few rows (plus a
                 zero bias, which it adds in the same pass), where the CPU has it
  bfloat16       a bfloat16 layer's product (fastmt.few_rows.accumulate_in_float32: bfloat16 weights and
                 activations summed in float32, rounded once); on a CPU with AMX XLA runs it on the matrix unit
  bfloat16 sum   a bfloat16 product asked for a bfloat16 result (what a Flax bfloat16 Dense asks by default)
  bfloat16 padded  a single row padded to two for the bfloat16 product

and says which kernel XLA chose (a YNNPACK fusion or XLA's own dot) from the compiled HLO. This is where
quantize.YNN_MIN_WEIGHTS comes from (docs/BENCHMARKS.md, section 9).
"""

import json
import time

from absl import app, flags
import jax
import jax.numpy as jnp
import numpy as np

from fastmt import few_rows, kernels, quantize

FLAGS = flags.FLAGS
flags.DEFINE_integer('emb_dim', 256, 'Model width E.')
flags.DEFINE_integer('mlp_dim', 1024, 'Feed-forward width F.')
flags.DEFINE_integer('vocab_size', 8000, 'Vocabulary V (the output projection E x V).')
flags.DEFINE_list('rows', ['1', '2', '32'], 'Rows of activations per product (batch x positions).')
flags.DEFINE_integer('steps', 400, 'Chained products per timed call.')
flags.DEFINE_integer('repeats', 7, 'Timed calls; the median is reported.')
flags.DEFINE_string('output_json', None, 'Also write the results here.')


_MATMUL = (((1,), (0,)), ((), ()))  # lax.dot_general's [rows, k] x [k, n]


def chained(product, steps: int):
  """A jitted function running `steps` products, each input depending on the last output (no hoisting)."""
  def run(weights, x):
    def body(_, acc):
      y = product(acc[:, :1] * 1e-9 + x, weights)
      return acc + y[:, :1]
    return jax.lax.fori_loop(0, steps, body, jnp.zeros((x.shape[0], 1), jnp.float32))
  return jax.jit(run)


def time_us(fn, weights, x, repeats: int, steps: int):
  compiled = fn.lower(weights, x).compile()
  jax.block_until_ready(compiled(weights, x))
  runs = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(compiled(weights, x))
    runs.append(time.perf_counter() - start)
  text = compiled.as_text()
  kernel = 'fastmt' if kernels.TARGET in text or kernels.FLOAT32_TARGET in text else 'ynnpack' if 'ynn' in text else 'xla'
  return 1e6 * float(np.median(runs)) / steps, kernel


def main(argv):
  del argv
  e, f, v = FLAGS.emb_dim, FLAGS.mlp_dim, FLAGS.vocab_size
  shapes = {'attention E x E': (e, e), 'feed-forward E x F': (e, f), 'feed-forward F x E': (f, e),
            'output projection E x V': (e, v)}
  rng = np.random.default_rng(0)
  variants = {
      'float32': lambda x, w: x @ w['float'],
      'int8': lambda x, w: quantize.int8_matmul(x, w['values'], w['scale']),
      'bfloat16': lambda x, w: few_rows.accumulate_in_float32(x.astype(jnp.bfloat16), w['half'], _MATMUL),
      'bfloat16 sum': lambda x, w: jnp.dot(x.astype(jnp.bfloat16), w['half']),
  }
  if kernels.available():
    variants['int8 fastmt'] = lambda x, w: kernels.int8_matmul(x, w['packed'], w['colsum'], w['scale'])
  if kernels.available('float32'):
    variants['float32 fastmt'] = lambda x, w: kernels.float32_matmul(x, w['float_packed'], w['bias'])
  results = []
  print(f'backend {jax.default_backend()}, µs per product (median of {FLAGS.repeats} x {FLAGS.steps})')
  for name, (k, n) in shapes.items():
    w = (rng.standard_normal((k, n)) * k**-0.5).astype(np.float32)
    values, scale = quantize.quantize_array(w, (0,))
    weights = {'float': w, 'values': values, 'scale': scale, 'bias': np.zeros(n, np.float32),
               'half': jnp.asarray(w, jnp.bfloat16)}
    if kernels.available('float32'):
      weights['float_packed'] = kernels.pack_float32_weights(w)
    if kernels.available():
      weights['packed'], weights['colsum'] = kernels.pack_weights(values)
    for rows in map(int, FLAGS.rows):
      x = jnp.asarray(rng.standard_normal((rows, k)), jnp.float32)
      row = {'matrix': name, 'k': k, 'n': n, 'rows': rows}
      for label, product in variants.items():
        row[label], row[label + ' kernel'] = time_us(chained(product, FLAGS.steps), weights, x, FLAGS.repeats,
                                                     FLAGS.steps)
      if rows == 1:  # both sides of quantize.YNN_MIN_WEIGHTS
        default = quantize.YNN_MIN_WEIGHTS
        for label, threshold in (('int8 unpadded', 1 << 62), ('int8 padded', 0)):
          quantize.YNN_MIN_WEIGHTS = threshold
          try:
            row[label], row[label + ' kernel'] = time_us(chained(variants['int8'], FLAGS.steps), weights, x,
                                                         FLAGS.repeats, FLAGS.steps)
          finally:
            quantize.YNN_MIN_WEIGHTS = default
      if rows == 1:  # a single bfloat16 row padded to two (XLA:CPU's matrix-vector product against its GEMM)
        padded = lambda x, w: variants['bfloat16'](jnp.concatenate([x, jnp.zeros_like(x)]), w)[:1]
        row['bfloat16 padded'], row['bfloat16 padded kernel'] = time_us(chained(padded, FLAGS.steps), weights, x,
                                                                        FLAGS.repeats, FLAGS.steps)
      results.append(row)
      timed = {key: val for key, val in row.items() if isinstance(val, float)}
      chosen = {key[:-len(' kernel')]: val for key, val in row.items() if key.endswith(' kernel')}
      print(f'{name:26s} rows {rows:3d}: ' + '  '.join(
          f'{key} {val:7.1f} ({chosen[key]})' for key, val in timed.items()), flush=True)
  if FLAGS.output_json:
    with open(FLAGS.output_json, 'w') as f:
      json.dump({'backend': jax.default_backend(), 'ynn_min_weights': quantize.YNN_MIN_WEIGHTS,
                 'results': results}, f, indent=1)


if __name__ == '__main__':
  app.run(main)
