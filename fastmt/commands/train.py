r"""fastmt-train (and train.py): trains a model; resumes from the work directory's latest checkpoint.

    fastmt-train --config quickstart --workdir runs/quickstart            # a config shipped with fastmt
    python train.py --config configs/quickstart.py --workdir runs/qs --config.num_train_steps=2000
    python train.py --config configs/quickstart.py --workdir runs/qs --multihost   # after a pod's launcher

--config takes a path or the name of a config in configs/ (installed as fastmt.configs), with an argument
after a colon where the config takes one (--config interleaved:ib_sa, --config hrt:k3).
--config.KEY=VALUE overrides any field of it, nested ones with dots (--config.model.num_decoder_layers=1,
--config.dataset.p_raw=0.5); a key the config does not have is an error, with the nearest one suggested.
Training runs data parallel over a Mesh of every device (every host's with --multihost, which calls
jax.distributed.initialize() first).
"""

import logging as std_logging
import sys

from absl import flags, logging
from ml_collections import config_flags

from fastmt import cli, configs
from fastmt.errors import FastmtError

FLAGS = flags.FLAGS


def define_flags():
  flags.DEFINE_string('workdir', None, 'Directory for checkpoints, tokenizer and logs.')
  flags.DEFINE_bool('multihost', False, 'Call jax.distributed.initialize() first (TPU pods, multi-GPU hosts): it '
                    'finds the processes under SLURM, Open MPI, Kubernetes or Cloud TPU; elsewhere give the three '
                    'flags below in every process.')
  flags.DEFINE_string('coordinator_address', None, 'With --multihost: host:port of process 0 (default: found by '
                      'jax.distributed, or the JAX_COORDINATOR_ADDRESS variable).')
  flags.DEFINE_integer('num_processes', None, 'With --multihost: how many processes train together.')
  flags.DEFINE_integer('process_id', None, 'With --multihost: this process\'s index, 0 .. num_processes - 1.')
  cli.define_plugins_flag()
  config_flags.DEFINE_config_file('config', None, 'ml_collections config file, or the name of a shipped config '
                                  f'({", ".join(configs.names())}).', lock_config=True)


def main(argv):
  import jax  # pylint: disable=g-import-not-at-top
  from fastmt import train_lib  # pylint: disable=g-import-not-at-top
  del argv  # cli.run refuses positional arguments
  # orbax logs every checkpoint write at INFO; keep the console to fastmt's progress and warnings.
  logging.set_verbosity(logging.WARNING)
  std_logging.getLogger().setLevel(std_logging.WARNING)
  cluster = {'coordinator_address': FLAGS.coordinator_address, 'num_processes': FLAGS.num_processes,
             'process_id': FLAGS.process_id}
  if FLAGS.multihost:
    try:
      jax.distributed.initialize(**cluster)
    except (ValueError, RuntimeError) as e:  # no launcher found, or no coordinator reached
      raise FastmtError(f'--multihost: jax.distributed.initialize() failed ({cli.one_line_message(e)}); outside '
                        'SLURM, Open MPI, Kubernetes or a Cloud TPU, start every process with --coordinator_address '
                        'HOST:PORT --num_processes N --process_id I') from None
  elif any(value is not None for value in cluster.values()):
    raise FastmtError(f'--{next(k for k, v in cluster.items() if v is not None)} is for --multihost')
  cli.import_plugins(FLAGS.plugins)  # objectives of the user's own; after initialize(), which must come first
  logging.info('JAX devices: %s', jax.devices())
  train_lib.train_and_evaluate(FLAGS.config, FLAGS.workdir)


def run():
  sys.argv = configs.resolve_config_flag(sys.argv)
  missing = configs.missing_config_file(sys.argv)
  if missing == '':  # an unset shell variable: `--config=$CONFIG`
    sys.exit(f'{cli.tool_name()}: error: --config is empty: give a config file or the name of a shipped config '
             f'({", ".join(configs.names())})')
  if missing:  # ml_collections would report it only when the config is first read, as a traceback
    sys.exit(f'{cli.tool_name()}: error: no config file {missing!r}, and no shipped config of that name '
             f'({", ".join(configs.names())})')
  cli.run(main, define_flags, required=('workdir', 'config'))


if __name__ == '__main__':
  run()
