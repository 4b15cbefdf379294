r"""Averaging the parameters of a run's last N checkpoints into a new work directory (decode-only).

    python -m fastmt.checkpoint_average --workdir runs/e12d1 --last 5 --output runs/e12d1_avg5
    python decode.py --workdir runs/e12d1_avg5 --input src.en --output hyp.de

The IB and RoyalFlush papers decode with the average of the last checkpoints: a cheap ensemble of nearby
points on the trajectory. The run must keep at least N checkpoints (`--config.max_checkpoints_to_keep`).
The output directory holds the averaged parameters as one checkpoint (at the newest averaged step), plus the
run's model config, training config and SentencePiece model, so decode.py and fastmt.bench read it like any
work directory. It holds no optimiser state: it is not a run to resume.

`--dtype bfloat16` stores the parameters in bfloat16: half the size, for carrying a model where space is
short (benchmarks/gpu_carry.sh: a lent GPU takes 64 MiB per run). Loading casts them back to the model's own
float32 (fastmt.workdir.restore_params), so the model decodes as one whose weights were rounded to bfloat16;
`--last 1` turns a single checkpoint into such a directory.
"""

import json
import os
import shutil

from absl import flags, logging
import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp

from fastmt import cli, files, workdir as workdir_lib
from fastmt.errors import FastmtError, MissingError

AVERAGED_FROM_FILE = 'averaged_from.json'


def average_trees(trees):
  """Element-wise mean of identically shaped pytrees, accumulated in float32."""
  if not trees:
    raise FastmtError('nothing to average')
  total = jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float32), trees[0])
  for tree in trees[1:]:
    total = jax.tree_util.tree_map(lambda a, b: a + jnp.asarray(b, jnp.float32), total, tree)
  return jax.tree_util.tree_map(lambda a, ref: (a / len(trees)).astype(jnp.asarray(ref).dtype), total, trees[0])


def last_steps(workdir: str, last: int, up_to='latest') -> list[int]:
  """The newest `last` checkpoint steps of a run up to checkpoint `up_to` ('latest' or a step); an error if
  it kept fewer ('best' is a single checkpoint of its own: nothing to average)."""
  if last < 1:
    raise FastmtError(f'--last must be at least 1, got {last}')
  up_to = workdir_lib.parse_checkpoint(up_to)
  if up_to == 'best':
    raise FastmtError("--checkpoint best is one checkpoint; average the last steps ('latest' or a step)")
  if not os.path.isdir(os.path.join(workdir, workdir_lib.CHECKPOINT_DIR)):
    raise MissingError(f'No checkpoint under {os.path.join(workdir, workdir_lib.CHECKPOINT_DIR)}')
  kept = sorted(workdir_lib.checkpoint_manager(workdir).all_steps())
  if not kept:  # 'train with a larger max_checkpoints_to_keep' did not fit a run that saved none
    raise MissingError(f'No checkpoint under {os.path.join(workdir, workdir_lib.CHECKPOINT_DIR)}: the run saved '
                       'none yet (or its steps were set aside as unreadable)')
  steps = kept
  if up_to != 'latest':
    if up_to not in kept:
      raise MissingError(f'{workdir!r} has no checkpoint step {up_to}; it has steps {kept}')
    steps = [s for s in kept if s <= up_to]
  if len(steps) < last:
    if len(steps) < len(kept):  # the later steps exist: the cut, not the run, leaves too few
      raise FastmtError(f'{workdir} keeps {len(steps)} checkpoint{"s" * (len(steps) != 1)} up to step {up_to} '
                        f'({steps}; all kept: {kept}), fewer than the {last} to average: average up to a later '
                        f'step, or fewer steps (--last {len(steps)})')
    raise FastmtError(f'{workdir} keeps {len(steps)} checkpoints ({steps}), fewer than the {last} to average; '
                      'train with a larger --config.max_checkpoints_to_keep')
  return steps[-last:]


def average_last_checkpoints(workdir: str, last: int, up_to='latest'):
  """(averaged params, averaged steps) of a run's newest `last` checkpoints up to `up_to`."""
  model_config = workdir_lib.load_model_config(workdir)
  steps = last_steps(workdir, last, up_to)
  params = [workdir_lib.restore_params(workdir, model_config, checkpoint=s)[0] for s in steps]
  return average_trees(params), steps


STORED_DTYPES = ('float32', 'bfloat16')


def stored_as(params, dtype: str):
  """The parameters to write: float leaves in `dtype` (one of STORED_DTYPES), integer leaves (an int8 model's
  values) as they are."""
  if dtype not in STORED_DTYPES:
    raise FastmtError(f'--dtype must be one of {STORED_DTYPES}, got {dtype!r}')
  cast = lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x
  return jax.tree_util.tree_map(lambda x: cast(jnp.asarray(x)), params)


COPIED_FILES = (workdir_lib.MODEL_CONFIG_FILE, workdir_lib.TRAIN_CONFIG_FILE, workdir_lib.TOKENIZER_FILE)


def check_output(workdir: str, output: str) -> None:
  """An --output the averaged model can be written to: a new directory (or an empty one), not the run's own."""
  if os.path.abspath(output) == os.path.abspath(workdir):
    raise FastmtError('--output must differ from --workdir (the run keeps its own checkpoints)')
  inside = os.path.relpath(os.path.realpath(output), os.path.realpath(workdir))
  # workdir/checkpoints/999 became the run's unreadable latest step. Outside means '..' or '../...': a name that
  # only starts with '..' (workdir/..avg) is inside.
  if inside != os.pardir and not inside.startswith(os.pardir + os.sep):
    raise FastmtError(f'--output {output} is inside --workdir {workdir}; write the averaged model elsewhere')
  cli.check_output_directory(output, '--output')
  # The files the averaged directory copies: a missing one was a raw FileNotFoundError after minutes of reading
  # checkpoints, leaving a half-made --output that refused the next try.
  missing = [name for name in COPIED_FILES if not os.path.isfile(os.path.join(workdir, name))]
  if os.path.isdir(workdir) and missing:
    raise MissingError(f'--workdir {workdir} has no {" or ".join(missing)}: the work directory is damaged (an '
                       'averaged model needs its configs and vocabulary)')
  if os.path.exists(os.path.join(output, workdir_lib.CHECKPOINT_DIR)):
    raise FastmtError(f'{output} already holds checkpoints; choose a new --output')
  if os.path.isdir(output) and os.listdir(output):  # its files were overwritten or kept beside the new model
    raise FastmtError(f'--output {output} is a directory that holds files; give a new or empty one')


def write_averaged_workdir(workdir: str, output: str, params, steps, dtype: str = 'float32') -> None:
  """A decode-ready work directory: the averaged params at the newest step, with the run's configs and vocab.

  dtype: how the parameters are stored (STORED_DTYPES); they load as the model's own dtypes whatever it is.
  """
  params = stored_as(params, dtype)  # before anything is written: a bad dtype leaves no directory behind
  check_output(workdir, output)
  os.makedirs(output, exist_ok=True)
  for name in COPIED_FILES:
    shutil.copyfile(os.path.join(workdir, name), os.path.join(output, name))
  workdir_lib.save_objective(output, workdir_lib.load_objective(workdir),
                            workdir_lib.load_objective_options(workdir))
  manager = workdir_lib.checkpoint_manager(output)
  manager.save(steps[-1], args=ocp.args.StandardSave({'params': params}))
  manager.wait_until_finished()
  files.write_whole(os.path.join(output, AVERAGED_FROM_FILE),
                    json.dumps({'workdir': os.path.abspath(workdir), 'steps': steps, 'stored_dtype': dtype}, indent=1))


FLAGS = flags.FLAGS


def define_flags():
  """The CLI's flags, defined only when it runs as a program: importing this module as a library
  registers nothing, so any set of fastmt modules imports together."""
  flags.DEFINE_string('workdir', None, 'The train.py work directory whose checkpoints to average.')
  flags.DEFINE_integer('last', 5, 'How many of the newest checkpoints to average.')
  flags.DEFINE_string('output', None, 'New work directory for the averaged model.')
  flags.DEFINE_string('checkpoint', 'latest', 'Average the --last checkpoints up to this one: latest or a step.')
  flags.DEFINE_enum('dtype', 'float32', list(STORED_DTYPES), 'How the averaged parameters are stored: bfloat16 '
                    'halves the directory (loading casts them back to float32: weights rounded to bfloat16).')


def main(argv):
  del argv  # cli.run refuses positional arguments
  logging.set_verbosity(logging.WARNING)  # orbax logs every read at INFO
  check_output(FLAGS.workdir, FLAGS.output)  # before minutes of reading checkpoints (--dtype: an enum flag)
  params, steps = average_last_checkpoints(FLAGS.workdir, FLAGS.last, FLAGS.checkpoint)
  write_averaged_workdir(FLAGS.workdir, FLAGS.output, params, steps, FLAGS.dtype)
  print(f'Averaged steps {steps} of {FLAGS.workdir} into {FLAGS.output}')


def run():
  cli.run(main, define_flags, required=('workdir', 'output'))


if __name__ == '__main__':
  run()
