r"""Trains a fastmt model; resumes from the work directory's latest checkpoint.

    python train.py --config configs/quickstart.py --workdir runs/quickstart [--config.num_train_steps=2000]
"""

from absl import app, flags, logging
from ml_collections import config_flags
import jax

from fastmt import cli, train_lib

FLAGS = flags.FLAGS
flags.DEFINE_string('workdir', None, 'Directory for checkpoints, tokenizer and logs.', required=True)
flags.DEFINE_bool('multihost', False, 'Call jax.distributed.initialize() first (TPU pods, multi-GPU hosts).')
config_flags.DEFINE_config_file('config', None, 'ml_collections config file.', lock_config=True)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  # orbax logs every checkpoint write at INFO; keep the console to fastmt's progress bar and warnings.
  logging.set_verbosity(logging.WARNING)
  if FLAGS.multihost:
    jax.distributed.initialize()
  logging.info('JAX devices: %s', jax.devices())
  train_lib.train_and_evaluate(FLAGS.config, FLAGS.workdir)


if __name__ == '__main__':
  flags.mark_flags_as_required(['config'])
  app.run(cli.exit_on_user_error(main), flags_parser=cli.parse_flags_or_exit)
