r"""Where a decoder step's time goes on XLA's CPU backend: a jax.profiler trace of one sentence, per kernel.

    python benchmarks/step_profile.py --workdir runs/quickstart --algorithms greedy,pgj:3 --top 25
    python benchmarks/step_profile.py --workdir runs/quickstart --algorithms pgj:3 --transposed_output_embedding
    python benchmarks/step_profile.py --workdir runs/ib/ib_kd_avg5 --algorithms ib     # any model and method
    python benchmarks/step_profile.py --workdir runs/quickstart --algorithms greedy --dtype int8 \
        --transposed_output_embedding                                             # an int8 step (Translator's)

For each algorithm: while-loop iterations, run time, and the kernels (XLA CPU thunks) that run at least once
per iteration, in microseconds per iteration, largest first. --transposed_output_embedding computes the
logits as hidden @ E^T with E^T laid out once outside the jitted function (Translator's transposed_output);
the default uses the model's own tied projection. --dtype decodes as decode.py --dtype does (fastmt.precision);
--float32_kernel runs the layers' products of at most 8 rows through fastmt's float32 kernel (fastmt.few_rows).
Run it on a quiet machine: it times kernels.
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

from fastmt import decode_lib, few_rows, precision, translate, workdir as workdir_lib
from fastmt.data import corpus
from fastmt.data.tokenizer import EOS_ID
from fastmt.decoding import registry
from fastmt.bench import parse_method

FLAGS = flags.FLAGS


def decode_one(params, output_projection, draft_table, source, *, config, settings):
  """translate.decode_source_batch on one source row, with the logits optionally from E^T laid out once."""
  return translate.decode_source_batch(params, source, np.array([translate.output_cap(config, source.shape[1],
                                                                                      settings)], np.int32),
                                       None, draft_table, output_projection, config=config, settings=settings)


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
  config, params = precision.for_inference(config, params, FLAGS.dtype)
  if FLAGS.float32_kernel:  # the layers' products of at most 8 rows through fastmt's kernel, as Translator(float32_kernel)
    params = few_rows.with_layout(params)
  tokenizer = workdir_lib.load_tokenizer(FLAGS.workdir)
  text = corpus.load_split(workdir_lib.load_train_config(FLAGS.workdir).dataset, FLAGS.split).sources[FLAGS.sentence]
  ids = tokenizer.encode([text])[0]
  bucket = next(b for b in translate.SOURCE_BUCKETS if b >= len(ids) + 1)
  source = np.zeros((1, bucket), np.int32)
  source[0, :len(ids)] = ids
  source[0, len(ids)] = EOS_ID
  # On the device, as the Translator holds it (a host array would be copied in at every run).
  projection = (jax.device_put(translate.transposed_output_layout(params)) if FLAGS.transposed_output_embedding
                else None)
  objective = workdir_lib.load_objective(FLAGS.workdir)
  options = workdir_lib.load_objective_options(FLAGS.workdir)
  for method in FLAGS.algorithms:
    _, settings, _ = parse_method(method)
    table = decode_lib.load_draft_table(FLAGS.workdir) if registry.uses_draft_table(settings) else None
    # The Translator resolves what the model's objective adds to the settings (an interleaving, <mask> ids).
    settings = translate.Translator(config, params, tokenizer, settings, draft_table=table, objective=objective,
                                    objective_options=options).settings
    fn = jax.jit(functools.partial(decode_one, config=config, settings=settings))
    iterations, run_ms, kernels = kernel_times(fn, (params, projection, table, source), FLAGS.repeats)
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
  flags.DEFINE_enum('dtype', 'float32', list(precision.DTYPES), 'Inference precision (decode.py --dtype).')
  flags.DEFINE_bool('transposed_output_embedding', False, 'Logits as hidden @ E^T with E^T laid out once.')
  flags.DEFINE_bool('float32_kernel', False, 'Products of 2-8 rows through fastmt\'s float32 CPU kernel.')


if __name__ == '__main__':
  define_flags()
  flags.mark_flags_as_required(['workdir'])
  app.run(main)
