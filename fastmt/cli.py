"""Shared by train.py and decode.py: flag parsing that turns a bad flag or config override into one line."""

import sys

from absl import flags


def parse_flags_or_exit(argv):
  """absl flags parser for app.run: an unknown config key or bad value exits with one clear message."""
  try:
    return flags.FLAGS(argv)
  except (flags.Error, AttributeError, KeyError, TypeError, ValueError) as e:
    message = str(e).strip().strip("'").replace('\\n', ' ').replace("\\'", "'")
    sys.exit(f'{argv[0]}: bad flag or config override: {message}')


def exit_on_user_error(main):
  """Wraps an absl main: errors fastmt raises for bad input (missing workdir, another model's checkpoint,
  invalid UTF-8, bad settings) end the program with their one-line message instead of a traceback."""
  def wrapped(argv):
    try:
      return main(argv)
    except (FileNotFoundError, ValueError) as e:
      sys.exit(f'{sys.argv[0]}: error: {e}')
  return wrapped
