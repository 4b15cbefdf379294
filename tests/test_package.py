"""The package as a whole: every module imports alongside every other, and every CLI starts.

A library module that defined absl flags at import time broke the suite once (two modules both defining
--workdir); modules now define their flags only when run as programs, and this test keeps it that way.
"""

import importlib
import pkgutil
import subprocess
import sys

import fastmt
from conftest import REPO

CLI_MODULES = ('fastmt.bench', 'fastmt.clusters_lib', 'fastmt.checkpoint_average', 'fastmt.distill',
               'fastmt.export_split')
CLI_SCRIPTS = ('train.py', 'decode.py')


def test_every_module_imports_together_without_defining_flags():
  from absl import flags  # pylint: disable=g-import-not-at-top
  names = [m.name for m in pkgutil.walk_packages(fastmt.__path__, 'fastmt.')]
  assert len(names) > 20
  for name in names:
    importlib.import_module(name)
  ours = {name for name in flags.FLAGS
          if (flags.FLAGS.find_module_defining_flag(name) or '').startswith('fastmt')}
  assert not ours, ours


def test_every_cli_starts_and_prints_its_flags():
  commands = [[sys.executable, '-m', m, '--help'] for m in CLI_MODULES]
  commands += [[sys.executable, str(REPO / s), '--help'] for s in CLI_SCRIPTS]
  processes = [subprocess.Popen(c, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
               for c in commands]
  for command, process in zip(commands, processes):
    output, _ = process.communicate(timeout=300)
    # absl's --help exits with status 1 after printing; what matters is that the flags were defined and shown.
    assert 'Traceback' not in output, (command, output)
    assert '--workdir' in output or '--teacher' in output, (command, output)
