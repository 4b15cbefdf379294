r"""Where a decoder step's time goes on XLA's CPU backend: a jax.profiler trace of one sentence, per kernel.

    python benchmarks/step_profile.py --workdir runs/quickstart --algorithms greedy,pgj:3 --top 25
    python benchmarks/step_profile.py --workdir runs/quickstart --algorithms pgj:3 --transposed_output_embedding

For each algorithm: while-loop iterations, run time, and the kernels (XLA CPU thunks) that run at least once
per iteration, in microseconds per iteration, largest first. --transposed_output_embedding computes the
logits as hidden @ E^T with E^T laid out once outside the jitted function (the variant of BENCHMARKS.md
section 2); the default uses the model's own tied projection. Run it on a quiet machine: it times kernels.
"""

import collections
import functools
import glob
import gzip
import json
import os
import tempfile

from absl import app, flags
import jax
import numpy as np

from fastmt import models, translate, workdir as workdir_lib
from fastmt.data import corpus
from fastmt.data.tokenizer import EOS_ID
from fastmt.decoding import registry
from fastmt.bench import parse_method

FLAGS = flags.FLAGS


def decode_one(params, output_embedding_t, source, *, config, settings):
  """translate.decode_source_batch, with the logits optionally from a pre-transposed output embedding."""
  model = models.Transformer(config)
  max_len = translate.output_cap(config, source.shape[1], settings)
  encoded = model.apply({'params': params}, source, method=models.Transformer.encode)
  memory = model.apply({'params': params}, encoded, source, method=models.Transformer.memory)
  algorithm = registry.get(settings.algorithm)
  memory = algorithm.expand(memory, settings)
  cache = models.init_cache(config, source.shape[0] * algorithm.rows_per_sentence(settings),
                            algorithm.cache_length(max_len, settings))
  step_fn = translate.make_step_fn(model, params, memory)
  if output_embedding_t is not None:
    def step_fn(tokens, positions, self_mask, cache, write_offsets):  # pylint: disable=function-redefined
      _, hidden, cache = model.apply({'params': params}, tokens, positions, self_mask, memory, cache,
                                     write_offsets, return_logits=False, method=models.Transformer.decode)
      return hidden.astype(np.float32) @ output_embedding_t, cache
  return algorithm.run(step_fn, cache, source.shape[0], max_len, settings, None, None)


def kernel_times(fn, args, repeats: int):
  """(loop iterations, ms per run, {kernel: µs per iteration}) from a perfetto trace of `repeats` runs."""
  iterations = int(jax.block_until_ready(fn(*args)).loop_iterations)
  with tempfile.TemporaryDirectory() as trace_dir:
    jax.profiler.start_trace(trace_dir, create_perfetto_trace=True)
    for _ in range(repeats):
      jax.block_until_ready(fn(*args))
    jax.profiler.stop_trace()
    path = glob.glob(os.path.join(trace_dir, '**', '*.trace.json.gz'), recursive=True)[0]
    with gzip.open(path) as f:
      events = json.load(f)['traceEvents']
  total, count = collections.defaultdict(float), collections.Counter()
  for event in events:
    if event.get('ph') == 'X':
      total[event['name']] += event['dur']
      count[event['name']] += 1
  run_ms = total.get('ThunkExecutor::Execute (wait for completion)', 0.0) / repeats / 1000
  per_iteration = {name: us / repeats / iterations for name, us in total.items()
                   if count[name] // repeats >= iterations and 'Execute' not in name}
  return iterations, run_ms, per_iteration


def main(argv):
  del argv
  config = workdir_lib.load_model_config(FLAGS.workdir)
  params, _ = workdir_lib.restore_params(FLAGS.workdir, config)
  tokenizer = workdir_lib.load_tokenizer(FLAGS.workdir)
  text = corpus.load_split(workdir_lib.load_train_config(FLAGS.workdir).dataset, FLAGS.split).sources[FLAGS.sentence]
  ids = tokenizer.encode([text])[0]
  bucket = next(b for b in translate.SOURCE_BUCKETS if b >= len(ids) + 1)
  source = np.zeros((1, bucket), np.int32)
  source[0, :len(ids)] = ids
  source[0, len(ids)] = EOS_ID
  embedding_t = (np.ascontiguousarray(np.asarray(params['embed']['embedding']).T)
                 if FLAGS.transposed_output_embedding else None)
  for method in FLAGS.algorithms:
    _, settings, _ = parse_method(method)
    fn = jax.jit(functools.partial(decode_one, config=config, settings=settings))
    iterations, run_ms, kernels = kernel_times(fn, (params, embedding_t, source), FLAGS.repeats)
    print(f'== {method}: {iterations} iterations, {run_ms:.2f} ms per run, '
          f'{sum(kernels.values()):.0f} µs per iteration in per-iteration kernels')
    for name, us in sorted(kernels.items(), key=lambda kv: -kv[1])[:FLAGS.top]:
      print(f'  {us:8.1f} µs  {name}')


def define_flags():
  flags.DEFINE_string('workdir', None, 'A train.py work directory.')
  flags.DEFINE_list('algorithms', ['greedy', 'pgj:3'], 'Methods as in fastmt.bench (greedy, pgj:3, hgj:3, ...).')
  flags.DEFINE_string('split', 'test', 'Split to take the sentence from.')
  flags.DEFINE_integer('sentence', 0, 'Index of the sentence in the split.')
  flags.DEFINE_integer('repeats', 20, 'Traced runs.')
  flags.DEFINE_integer('top', 25, 'Kernels to print per algorithm.')
  flags.DEFINE_bool('transposed_output_embedding', False, 'Logits as hidden @ E^T with E^T laid out once.')


if __name__ == '__main__':
  define_flags()
  flags.mark_flags_as_required(['workdir'])
  app.run(main)
