"""The shipped configs, one `get_config()` per file; installed as `fastmt.configs`.

`fastmt-train --config quickstart` names one of them; a path to any other config file works too.
"""

import os
import re

_HERE = os.path.dirname(os.path.abspath(__file__))


def names() -> list[str]:
  return sorted(f[:-3] for f in os.listdir(_HERE) if f.endswith('.py') and not f.startswith('_'))


def path(name: str) -> str:
  """The file of the shipped config `name` (e.g. 'quickstart')."""
  return os.path.join(_HERE, f'{name}.py')


def resolve_config_flag(argv: list[str]) -> list[str]:
  """argv with `--config NAME[:ARG]` / `--config=NAME[:ARG]` of a shipped config replaced by its path (keeping
  the `:ARG` that config files take, e.g. `interleaved:ib`); a path passes through unchanged."""
  def resolve(value):
    match = re.fullmatch(r'([A-Za-z0-9_]+)(:.*)?', value)
    # a file of that name wins; a folder does not (`cd runs; fastmt-train --config quickstart` beside the
    # runs/quickstart work directory)
    if match and not os.path.isfile(match.group(1)) and match.group(1) in names():
      return path(match.group(1)) + (match.group(2) or '')
    return value

  resolved = list(argv)
  for i, arg in enumerate(resolved):
    if arg.startswith('--config='):
      resolved[i] = '--config=' + resolve(arg[len('--config='):])
    elif arg == '--config' and i + 1 < len(resolved):
      resolved[i + 1] = resolve(resolved[i + 1])
  return resolved


def config_flag_value(argv: list[str]) -> str | None:
  """The value of --config in argv (None without one)."""
  for i, arg in enumerate(argv):
    if arg.startswith('--config='):
      return arg[len('--config='):]
    if arg == '--config' and i + 1 < len(argv):
      return argv[i + 1]
  return None


def missing_config_file(argv: list[str]) -> str | None:
  """The file part of --config (before a ':ARG') when no such file exists, else None (no --config, or found)."""
  value = config_flag_value(argv)
  if value is None:
    return None
  file = value.split(':', 1)[0]
  return None if os.path.isfile(file) else file
