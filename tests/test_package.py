"""The package as a whole: every module imports alongside every other, every CLI and console script starts,
setup.cfg lists every package, and inference never imports the training stack.

A library module that defined absl flags at import time broke the suite once (two modules both defining
--workdir); modules now define their flags only when run as programs, and this test keeps it that way.
"""

import configparser
import fnmatch
import importlib
import os
import pkgutil
import subprocess
import sys

import pytest

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


def _setup_cfg():
  parser = configparser.ConfigParser()
  parser.read(REPO / 'setup.cfg')
  return parser


def test_setup_cfg_lists_every_package_and_ships_the_configs():
  listed = set(_setup_cfg()['options']['packages'].split())
  found = {'fastmt'} | {m.name for m in pkgutil.walk_packages(fastmt.__path__, 'fastmt.') if m.ispkg}
  assert found <= listed, found - listed
  assert 'fastmt.configs' in listed and 'fastmt.configs = configs' in _setup_cfg()['options']['package_dir']
  # The kernels' C++ sources and the headers they include are compiled on first use, so an installed package
  # must carry every one of them.
  patterns = [p.strip() for p in _setup_cfg()['options.package_data']['fastmt.kernels'].split(',')]
  sources = [p.name for p in (REPO / 'fastmt' / 'kernels').iterdir() if p.suffix in ('.cc', '.h')]
  assert sources and all(any(fnmatch.fnmatch(name, pattern) for pattern in patterns) for name in sources), patterns
  from fastmt import kernels  # pylint: disable=g-import-not-at-top
  assert all(os.path.exists(header) for header in kernels._HEADERS)  # pylint: disable=protected-access


def test_every_console_script_starts():
  entry_points = dict(line.replace(' ', '').split('=') for line in
                      _setup_cfg()['options.entry_points']['console_scripts'].strip().splitlines())
  assert {'fastmt-train', 'fastmt-translate', 'fastmt-bench'} <= set(entry_points)
  bin_dir = os.path.dirname(sys.executable)
  processes = [subprocess.Popen([os.path.join(bin_dir, name), '--help'], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True) for name in entry_points]
  for (name, target), process in zip(entry_points.items(), processes):
    output, _ = process.communicate(timeout=300)
    assert 'Traceback' not in output and ('--workdir' in output or '--teacher' in output), (name, output)
    # the usage above the flags is the tool's own docstring (pip's wrapper script, absl's __main__, has none)
    usage = importlib.import_module(target.split(':')[0]).__doc__.strip().splitlines()[0]
    assert output.lstrip().startswith(usage), (name, output[:300])
  # a bad flag is reported under the tool's name, not the path of the wrapper script in the environment
  result = subprocess.run([os.path.join(bin_dir, 'fastmt-translate'), '--nosuchflag'], capture_output=True, text=True)
  assert result.returncode != 0 and result.stderr.startswith('fastmt-translate: error: bad flag: '), result.stderr


def test_a_shipped_config_is_named_without_its_path(tmp_path, monkeypatch):
  from fastmt import configs  # pylint: disable=g-import-not-at-top
  monkeypatch.chdir(tmp_path)
  (tmp_path / 'quickstart').mkdir()  # beside a work directory of that name (cd runs): still the shipped config
  assert configs.resolve_config_flag(['x', '--config=quickstart'])[1] == f'--config={configs.path("quickstart")}'
  (tmp_path / 'tiny').write_text('')  # a file of that name is the user's
  assert configs.resolve_config_flag(['x', '--config=tiny'])[1] == '--config=tiny'
  monkeypatch.chdir(REPO)
  assert {'quickstart', 'tiny'} <= set(configs.names())
  assert configs.resolve_config_flag(['x', '--config=tiny', '--config.seed=1'])[1] == f'--config={configs.path("tiny")}'
  assert configs.resolve_config_flag(['x', '--config', 'tiny'])[2] == configs.path('tiny')
  assert configs.resolve_config_flag(['x', '--config=my/own.py'])[1] == '--config=my/own.py'
  assert configs.resolve_config_flag(['x', '--config=interleaved:ib_sa'])[1] == f'--config={configs.path("interleaved")}:ib_sa'
  from fastmt.configs import quickstart, teacher  # pylint: disable=g-import-not-at-top
  students = teacher.get_config('students')  # the CPU teacher: the students' shape, regularised, trained longer
  shape = quickstart.get_config().model.to_dict()
  assert students.model.to_dict() == shape | {'dropout_rate': 0.1}
  assert students.model.dropout_rate == 0.1 and students.num_train_steps == 4 * quickstart.get_config().num_train_steps
  assert teacher.get_config().model.emb_dim == 384
  with pytest.raises(ValueError, match='Unknown argument'):
    teacher.get_config('big')


def test_an_unknown_objective_or_config_key_is_one_line(tmp_path):
  # a config file's own KeyError is its error, not the override's
  (tmp_path / 'own.py').write_text("def get_config():\n  raise KeyError('missing_in_the_config_file')\n")
  # a typo inside a config file trained with the default in its place, where the same typo as a flag failed
  for name, typo in (('typo', "c.objectve = 'selfdraft'"), ('typo_data', "c.dataset.distiled_dir = '/kd'")):
    (tmp_path / f'{name}.py').write_text(
        f'from fastmt.configs import tiny\ndef get_config():\n  c = tiny.get_config()\n  {typo}\n  return c\n')
  for config, override, message in (
      ('tiny', '--config.objective=nat', "Unknown training objective 'nat'"),
      ('tiny', '--config.model.heads=3', "--config.model.heads: the config has no key 'heads'"),
      ('tiny', '--config.nosuch=1', "--config.nosuch: the config has no key 'nosuch'"),
      ('tiny', '--config.model.emb_dimm=64',  # ml_collections' suggestion, on the same line
       '--config.model.emb_dimm: the config has no key \'emb_dimm\' (did you mean "emb_dim" instead of "emb_dimm"?)'),
      ('tiny', '--nosuchflag', "Unknown command line flag 'nosuchflag'"),
      ('nosuchconfig', '--config.seed=1', "no config file 'nosuchconfig', and no shipped config of that name"),
      ('quickstart:zzz', '--config.seed=1', 'get_config() takes 0 positional arguments'),
      (str(tmp_path / 'own.py'), '--config.seed=1', "bad config: KeyError 'missing_in_the_config_file'"),
      ('tiny', '--workdir=', 'the work directory is empty: give --workdir a path'),  # an unset shell variable
      ('', '--config.seed=1', '--config is empty: give a config file or the name of a shipped config'),
      (str(tmp_path / 'typo.py'), '--config.seed=1',
       'Unknown training config key config.objectve (did you mean config.objective?)'),
      (str(tmp_path / 'typo_data.py'), '--config.seed=1',
       'Unknown training config key config.dataset.distiled_dir (did you mean config.dataset.distilled_dir?)'),
      # ml_collections joined the two tuples, (12, 16, 20), without a word
      ('tiny', ('--config.bucket_lengths=(12,16)', '--config.bucket_lengths', '(20,)'),
       '--config.bucket_lengths given more than once')):
    overrides = [override] if isinstance(override, str) else list(override)
    result = subprocess.run([sys.executable, str(REPO / 'train.py'), '--config', config, '--workdir',
                             str(tmp_path / 'run'), *overrides], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode != 0 and message in result.stderr and 'Traceback' not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
  assert not (tmp_path / 'run').exists()


def test_the_known_training_keys_are_the_reference_configs_and_every_shipped_config_has_only_those():
  """configs/quickstart.py sets and explains every key fastmt reads (TRAINING_KEYS, DATASET_KEYS); a shipped
  config adds only its objective's options block."""
  import importlib  # pylint: disable=g-import-not-at-top
  from fastmt.config import DATASET_KEYS, TRAINING_KEYS, check_training_keys  # pylint: disable=g-import-not-at-top
  from fastmt.objectives import OPTIONS_KEY  # pylint: disable=g-import-not-at-top
  reference = importlib.import_module('fastmt.configs.quickstart').get_config()
  assert set(reference.keys()) == TRAINING_KEYS and set(reference.dataset.keys()) == DATASET_KEYS
  names = sorted(p.stem for p in (REPO / 'configs').glob('*.py') if not p.stem.startswith('_'))
  for name in names:
    get_config = importlib.import_module(f'fastmt.configs.{name}').get_config
    config = get_config()  # the default argument where one is taken
    check_training_keys(config, [key for key in OPTIONS_KEY.values() if key])
  assert len(names) >= 12


def test_the_submodules_the_package_docstring_names_are_attributes_of_a_bare_import():
  """`import fastmt; fastmt.decoding` was an AttributeError; dir(fastmt) lacked the lazy names (tab completion).
  `import fastmt` alone still loads no JAX."""
  code = ('import sys, fastmt; jax_first = "jax" in sys.modules; '
          'print(jax_first, callable(fastmt.decoding.greedy_search), fastmt.models.Transformer.__name__, '
          '{"decoding", "models", "TranslationModel", "FastmtError"} <= set(dir(fastmt)))')
  result = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, cwd=REPO)
  assert result.returncode == 0 and result.stdout.split() == ['False', 'True', 'Transformer', 'True'], result.stderr
  import fastmt  # pylint: disable=g-import-not-at-top
  with pytest.raises(AttributeError, match="no attribute 'nosuch'"):
    fastmt.nosuch  # pylint: disable=pointless-statement


def test_inference_does_not_import_the_training_stack():
  code = ('import sys, fastmt, fastmt.api, fastmt.decode_lib, fastmt.commands.translate, fastmt.distill, '
          'fastmt.clusters_lib, fastmt.bench, fastmt.data.pipeline; '
          'print(sorted(m for m in sys.modules if m in ("fastmt.train_lib", "optax")))')
  result = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, cwd=REPO)
  assert result.returncode == 0, result.stderr
  assert result.stdout.strip() == '[]', result.stdout


def test_a_plain_clone_runs_without_being_installed():
  """`python train.py` in a clone that was never `pip install`ed (the dependencies alone present): configs/
  is fastmt.configs there too. -S keeps the editable install's import hook out, as on such a machine."""
  import site  # pylint: disable=g-import-not-at-top
  env = {**os.environ, 'PYTHONPATH': os.pathsep.join(site.getsitepackages())}
  code = ('import sys, fastmt; from fastmt.configs import interleaved, quickstart; '
          'assert fastmt.configs.__file__.startswith(sys.argv[1]), fastmt.configs.__file__; '
          'assert interleaved.get_config("ib").objective == "interleaved"; assert "jax" not in sys.modules')
  result = subprocess.run([sys.executable, '-S', '-c', code, str(REPO / 'configs')], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
  assert result.returncode == 0, result.stderr


def test_the_committed_notebooks_run_small_and_set_up_colab_the_same_way():
  """CI executes the notebooks as committed (SMALL = True); on Colab their first code cell clones the repository
  the user names (no placeholder URL) and installs the jax build of the runtime's accelerator."""
  import json  # pylint: disable=g-import-not-at-top
  setups = {}
  for path in sorted((REPO / 'notebooks').glob('*.ipynb')):
    cells = json.loads(path.read_text(encoding='utf-8'))['cells']
    code = [''.join(c['source']) for c in cells if c['cell_type'] == 'code']
    assert '\nSMALL = True\n' in code[0], path.name
    assert 'YOUR-ACCOUNT' not in path.read_text(encoding='utf-8'), path.name
    setups[path.name] = code[0][code[0].index('\nimport '):]  # from the setup's first import on
  assert len(setups) == 5 and len(set(setups.values())) == 1, 'the notebooks\' setup cells differ'
  setup = next(iter(setups.values()))
  assert "REPO_URL = ''  # @param" in setup and 'jax[tpu]' in setup and 'jax[cuda12]' in setup
  # a TPU from v5e on shows no /dev/accel*: libtpu (on every TPU runtime) tells it
  assert "find_spec('libtpu')" in setup


def test_the_notebook_runner_keeps_each_notebook_after_those_it_reuses(monkeypatch):
  """notebooks/execute.py --jobs N (make notebooks): at most N at once, a notebook only after those whose run
  directories it reuses (01 first, 05 after 02), and one that waits for a failed notebook is skipped, not run."""
  import argparse  # pylint: disable=g-import-not-at-top
  import importlib.util  # pylint: disable=g-import-not-at-top
  spec = importlib.util.spec_from_file_location('notebook_runner', REPO / 'notebooks' / 'execute.py')
  runner = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(runner)
  monkeypatch.setattr(runner.time, 'sleep', lambda seconds: None)
  names = ['01_quickstart', '02_parallel_decoding', '03_ib_im_hrt', '04_clustered_projection',
           '05_distillation_royalflush']

  def simulate(jobs, seconds, failing=()):
    """(start and end tick of every notebook run, most running at once, the runner's failed list)"""
    clock, spans, running = [0], {}, []

    class FakeNotebook:  # a notebook's process that ends `seconds[name]` polls after it starts
      def __init__(self, command):
        self.name = command[2]
        self.returncode = None
        spans[self.name] = [clock[0], None]
        running.append(self)
        peak[0] = max(peak[0], len(running))

      def poll(self):
        clock[0] += 1
        if self.returncode is None and clock[0] - spans[self.name][0] >= seconds[self.name]:
          self.returncode = 1 if self.name in failing else 0
          spans[self.name][1] = clock[0]
          running.remove(self)
        return self.returncode
    peak = [0]
    monkeypatch.setattr(runner.subprocess, 'Popen', FakeNotebook)
    args = argparse.Namespace(jobs=jobs, output_dir='unused', cell_timeout_s=1, inplace=False)
    failed = runner.run_in_parallel(names, args)
    return spans, peak[0], failed

  seconds = dict(zip(names, (3, 2, 9, 3, 4)))
  spans, peak, failed = simulate(2, seconds)
  assert failed == [] and set(spans) == set(names) and peak == 2
  for name in names[1:]:
    assert spans[name][0] >= spans['01_quickstart'][1], name
  assert spans['05_distillation_royalflush'][0] >= spans['02_parallel_decoding'][1]
  spans, peak, failed = simulate(1, seconds)
  assert failed == [] and peak == 1
  spans, peak, failed = simulate(3, seconds, failing={'02_parallel_decoding'})
  assert sorted(failed) == ['02_parallel_decoding', '05_distillation_royalflush']
  assert '05_distillation_royalflush' not in spans and '04_clustered_projection' in spans
  spans, peak, failed = simulate(2, seconds, failing={'01_quickstart'})
  assert set(spans) == {'01_quickstart'} and sorted(failed) == sorted(names)
