r"""Training speed of objectives side by side: the same batches, one process, compile excluded, interleaved.

    python benchmarks/train_speed.py --workdir runs/quickstart \
        --configs at=configs/interleaved.py:at,ib=configs/interleaved.py:ib,ib_sa=configs/interleaved.py:ib_sa
    python benchmarks/train_speed.py --workdir runs/quickstart \
        --configs hrt=configs/hrt.py:k2,hrt_rpr=configs/hrt.py:k2,rpr     # commas inside an argument are kept

Each config's model is initialised and its train step compiled for every batch shape first; then every repeat
times `--steps` optimiser steps of each config in a rotated order, on the same training batches (the
workdir's vocabulary and data). Reports real (non-PAD) target tokens per second, median over repeats, and the
ratio to the first config: what the interleaved paper's "Train" column measures (IBDecoder: 0.98x).
Timing lives here, never in unit tests.
"""

import argparse
import functools
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time

import jax

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fastmt import objectives, train_lib  # noqa: E402
from fastmt.config import ModelConfig  # noqa: E402
from fastmt.data import pipeline  # noqa: E402


YNN = 'xla_cpu_experimental_ynn_fusion_type'
COMPILER_OPTIONS = {'': {}, 'individual_dot': {YNN: 'LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT'}, 'no_ynn': {YNN: ''}}


def load_config(spec: str):
  """'path/to/config.py[:arg]' -> the ml_collections config its get_config(arg) returns."""
  import importlib.util  # pylint: disable=g-import-not-at-top
  path, _, arg = spec.partition(':')
  module_spec = importlib.util.spec_from_file_location('bench_config', path)
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  return module.get_config(arg) if arg else module.get_config()


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--workdir', required=True, help='A work directory whose vocabulary (spm.model) is used.')
  parser.add_argument('--configs', required=True, help='name=config.py[:arg][@variant],... (the first is the '
                      'baseline); variant: individual_dot or no_ynn (XLA:CPU compile options, as in cpu_variants.py)')
  parser.add_argument('--steps', type=int, default=20)
  parser.add_argument('--repeats', type=int, default=5)
  parser.add_argument('--output', default=None, help='JSON file for the results.')
  args = parser.parse_args()

  # Items split at the commas before a 'name=': a config argument may hold commas itself (configs/hrt.py:k2,rpr).
  specs = [item.split('=', 1) for item in re.split(r',(?=[\w.-]+=)', args.configs)]
  scratch = tempfile.mkdtemp()
  shutil.copyfile(os.path.join(args.workdir, 'spm.model'), os.path.join(scratch, 'spm.model'))
  runs = {}
  batches = None
  for name, spec in specs:
    spec, _, variant = spec.partition('@')
    compiler_options = COMPILER_OPTIONS[variant]
    config = load_config(spec)
    if batches is None:
      data = pipeline.load_training_data(config, scratch)
      batches = [data.train_batches.batch(i) for i in range(args.steps)]
      tokenizer = data.tokenizer
    objective = config.get('objective', 'at')
    objective_fn = objectives.build(objective, objectives.options_of(config, objective), tokenizer,
                                    config.num_train_steps)
    model_config = ModelConfig.from_config(config.model, tokenizer.vocab_size)
    state = train_lib.initial_state(model_config, config)
    step = jax.jit(functools.partial(train_lib.train_step, label_smoothing=config.label_smoothing,
                                     objective_fn=objective_fn), donate_argnums=(0,),
                   compiler_options=compiler_options or None)
    runs[name] = {'state': state, 'step': step}
  as_dict = lambda b: {'source': b.source, 'decoder_input': b.decoder_input, 'target': b.target}
  real_tokens = sum(b.num_tokens for b in batches)

  def run(name):
    state = runs[name]['state']
    start = time.perf_counter()
    for batch in batches:
      state, _ = runs[name]['step'](state, as_dict(batch))
    jax.block_until_ready(state)
    runs[name]['state'] = state
    return time.perf_counter() - start

  for name, _ in specs:  # compile every batch shape once, untimed
    run(name)
  times = {name: [] for name, _ in specs}
  names = [name for name, _ in specs]
  for repeat in range(args.repeats):
    order = names[repeat % len(names):] + names[:repeat % len(names)]
    for name in order:
      times[name].append(run(name))
  baseline = names[0]
  results = {}
  print(f'{len(batches)} batches, {real_tokens} real target tokens each pass, {args.repeats} repeats, '
        f'{jax.device_count()} {jax.devices()[0].platform} device(s)')
  print('| objective | tokens/s | vs ' + baseline + ' |')
  print('|---|---|---|')
  for name in names:
    ratio = statistics.median(b / t for b, t in zip(times[baseline], times[name]))
    tokens_per_s = real_tokens / statistics.median(times[name])
    results[name] = {'tokens_per_s': tokens_per_s, 'speed_vs_baseline': ratio}
    print(f'| {name} | {tokens_per_s:.0f} | {ratio:.3f} |')
  if args.output:
    with open(args.output, 'w') as f:
      json.dump(results, f, indent=1)
  shutil.rmtree(scratch)


if __name__ == '__main__':
  main()
