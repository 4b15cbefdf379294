"""fastmt's own error type for bad user input.

The command-line tools print a FastmtError as one line and exit; every other exception keeps its traceback,
because an unexpected ValueError deep in JAX or numpy is a bug to see, not a message to hide.

FastmtError subclasses ValueError (bad values) and MissingError also FileNotFoundError (a missing work
directory, checkpoint or file), so code that catches the built-in types keeps working.
"""


class FastmtError(ValueError):
  """Bad input from the user: a flag, a config, a file, a work directory, a checkpoint, a line of text."""


class MissingError(FastmtError, FileNotFoundError):
  """Something the user named does not exist: a work directory, a checkpoint step, a file."""
