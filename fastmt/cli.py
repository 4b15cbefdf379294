"""What every fastmt command-line tool shares: flag parsing and error handling that end in one clear line.

A FastmtError (bad input: a flag, a file, a work directory, a checkpoint) prints its message and exits 1;
any other exception keeps its traceback, since it is a bug to report, not a user's mistake.
"""

import sys

from absl import app, flags

from fastmt.errors import FastmtError


def parse_flags_or_exit(argv):
  """absl flags parser for app.run: an unknown config key or bad value exits with one clear message."""
  try:
    return flags.FLAGS(argv)
  except (flags.Error, AttributeError, KeyError, TypeError, ValueError) as e:
    message = str(e).strip().strip("'").replace('\\n', ' ').replace("\\'", "'")
    sys.exit(f'{argv[0]}: bad flag or config override: {message}')


def exit_on_user_error(main):
  """Wraps an absl main: a FastmtError ends the program with its one-line message instead of a traceback."""
  def wrapped(argv):
    try:
      return main(argv)
    except FastmtError as e:
      sys.exit(f'{sys.argv[0]}: error: {e}')
  return wrapped


def define_checkpoint_flag(what: str = 'The checkpoint') -> None:
  flags.DEFINE_string('checkpoint', 'latest', f'{what} to restore: latest, best (the best validation BLEU, '
                      'kept with --config.keep_best_checkpoint) or a step number.')


def run(main, define_flags=None, required=()):
  """Entry point of a console script: defines the tool's flags, then runs main under absl with the handlers
  above. `define_flags` is called here, not at import, so that importing any set of fastmt modules together
  never registers a flag twice."""
  if define_flags is not None:
    before = set(flags.FLAGS)
    define_flags()
    # --help lists the main module's flags; a console script's main module is its wrapper file, so the
    # tool's flags are declared key flags of that file (absl names the main module by sys.argv[0]).
    for name in set(flags.FLAGS) - before:
      flags.FLAGS.register_key_flag_for_module(sys.argv[0], flags.FLAGS[name])
  for name in required:
    flags.mark_flag_as_required(name)
  app.run(exit_on_user_error(main), flags_parser=parse_flags_or_exit)
