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
  """argv with `--config NAME` / `--config=NAME` of a shipped config replaced by its path (a path, or a
  name with a `:arg` suffix, passes through unchanged when no such file exists)."""
  resolved = list(argv)
  for i, arg in enumerate(resolved):
    match = re.fullmatch(r'--config=([A-Za-z0-9_]+)', arg)
    if match and not os.path.exists(match.group(1)) and match.group(1) in names():
      resolved[i] = f'--config={path(match.group(1))}'
    elif arg == '--config' and i + 1 < len(resolved):
      value = resolved[i + 1]
      if re.fullmatch(r'[A-Za-z0-9_]+', value) and not os.path.exists(value) and value in names():
        resolved[i + 1] = path(value)
  return resolved
