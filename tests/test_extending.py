"""Extending fastmt from outside: a decoding algorithm and a training objective of one's own, registered by a
module (docs/API.md's "Extending fastmt", run as written), used through the Python API, decode.py --plugins,
train.py; and the registrations a user could get wrong are clear errors."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

import fastmt
from conftest import REPO, fine_tuning_config
from fastmt import objectives, train_lib
from fastmt.decoding import greedy, registry
from fastmt.errors import FastmtError

SENTENCES = ['In the beginning God created the heaven and the earth.', 'And God said, Let there be light.']


@pytest.fixture
def fresh_registries(monkeypatch):
  """The registries as fastmt ships them, restored after the test (registering is global)."""
  monkeypatch.setattr(registry, 'ALGORITHMS', dict(registry.ALGORITHMS))
  monkeypatch.setattr(registry, 'SETTING_ALGORITHMS', dict(registry.SETTING_ALGORITHMS))
  monkeypatch.setattr(registry, 'DECODES_LIKE', dict(registry.DECODES_LIKE))
  monkeypatch.setattr(objectives, 'OBJECTIVES', dict(objectives.OBJECTIVES))
  monkeypatch.setattr(objectives, 'OPTIONS_KEY', dict(objectives.OPTIONS_KEY))


def _doc_blocks():
  text = (REPO / 'docs' / 'API.md').read_text(encoding='utf-8')
  section = text.split('## Extending fastmt')[1].split('\n## ')[0]
  return re.findall(r'```(\w+)\n(.*?)```', section, re.S)


def test_the_docs_plugin_registers_an_algorithm_that_the_api_and_decode_py_use(trained_workdir, tmp_path):
  blocks = _doc_blocks()
  plugin = next(code for kind, code in blocks if code.startswith('# my_plugin.py'))
  (tmp_path / 'my_plugin.py').write_text(plugin, encoding='utf-8')
  banned = int(re.search(r'BANNED_IDS = jnp.array\(\[(\d+)\]\)', plugin).group(1))
  usage = next(code for kind, code in blocks if kind == 'python' and 'import my_plugin' in code)
  script = usage.replace("'runs/quickstart'", repr(trained_workdir)) + (
      "ids, _ = model.translator('banned_greedy').translate_ids(" + repr(SENTENCES * 4) + ")\n"
      f"assert all({banned} not in row for row in ids), ids\n")
  result = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env={**os.environ, 'PYTHONPATH': str(tmp_path)})
  assert result.returncode == 0, result.stderr[-2000:]
  source = tmp_path / 'in.txt'
  source.write_text('\n'.join(SENTENCES) + '\n', encoding='utf-8')
  decode = [sys.executable, str(REPO / 'decode.py'), '--workdir', trained_workdir, '--input', str(source),
            '--output', str(tmp_path / 'out.txt'), '--algorithm', 'banned_greedy']
  without = subprocess.run(decode, capture_output=True, text=True, cwd=REPO, timeout=300)
  assert without.returncode == 1 and "Unknown decoding algorithm 'banned_greedy'" in without.stderr
  assert '--plugins' in without.stderr and 'Traceback' not in without.stderr
  plugged = subprocess.run(decode + ['--plugins', str(tmp_path / 'my_plugin.py')], capture_output=True, text=True,
                           cwd=REPO, timeout=300)
  assert plugged.returncode == 0, plugged.stderr[-2000:]
  assert len((tmp_path / 'out.txt').read_text(encoding='utf-8').splitlines()) == 2


def test_a_registered_algorithm_decodes_and_is_built_again_when_replaced(trained_workdir, fresh_registries):
  model = fastmt.load(trained_workdir)
  ids, _ = model.translator().translate_ids(SENTENCES)
  first = int(ids[0][0])  # greedy's first token of the first sentence

  def banning(token):
    def run(step_fn, cache, batch_size, max_length, settings, draft_table, row_caps):
      def step(*args, **kwargs):
        logits, cache_out = step_fn(*args, **kwargs)
        return logits.at[..., token].set(-np.inf), cache_out
      return greedy.greedy_search(step, cache, batch_size, max_length, row_caps)
    return registry.Algorithm(run=run)

  registry.register_algorithm('banning', banning(first))
  banned, _ = model.translator('banning').translate_ids(SENTENCES)
  assert all(first not in row for row in banned) and [list(r) for r in banned] != [list(r) for r in ids]
  registry.register_algorithm('banning', banning(first + 1), replace=True)  # a notebook cell run again
  again, _ = model.translator('banning').translate_ids(SENTENCES)
  assert int(again[0][0]) == first  # the new algorithm, not the translator compiled for the old one
  # the settings it names are its own: neither warned of as ignored nor reset
  registry.register_algorithm('beamish', registry.ALGORITHMS['beam'], settings=('beam_size', 'alpha'))
  assert model.translator('beamish', beam_size=3, alpha=0.2).settings.beam_size == 3
  with pytest.raises(FastmtError, match="one of fastmt's own algorithms"):
    registry.register_algorithm('greedy', banning(first))
  with pytest.raises(FastmtError, match='registered already: pass replace=True'):
    registry.register_algorithm('banning', banning(first))
  with pytest.raises(FastmtError, match='not algorithm settings'):
    registry.register_algorithm('other', banning(first), settings=('temperature',))
  with pytest.raises(FastmtError, match='register an fastmt.decoding.registry.Algorithm'):
    registry.register_algorithm('other', lambda *args: None)


def test_a_registered_objective_trains_with_validation_bleu_and_decodes_like_at(
    trained_workdir, tiny_config, tmp_path, fresh_registries):
  def first_word_weighted(options, tokenizer, num_train_steps):
    base = objectives.get('at')
    weight = float(options.get('weight', 2.0))

    def objective(batch, step):
      out = base(batch, step)
      return out.replace(weights=out.weights.at[:, 0].multiply(weight))
    return objective

  objectives.register_objective('first_word_weighted', first_word_weighted, options_key='first_word')
  config = fine_tuning_config(tiny_config, trained_workdir, 'first_word_weighted', 'first_word', {'weight': 3.0})
  workdir = str(tmp_path / 'fw')
  train_lib.train_and_evaluate(config, workdir)  # validation BLEU with AT's greedy, at its last step
  model = fastmt.load(workdir)
  assert model.objective == 'first_word_weighted' and model.translate(SENTENCES, algorithm='pgj') == \
      model.translate(SENTENCES)
  # another process, without the module that registers it: one clear line naming the way
  result = subprocess.run([sys.executable, str(REPO / 'decode.py'), '--workdir', workdir, '--input', '/dev/null'],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
  assert result.returncode == 1 and 'needs the module that registers it imported first' in result.stderr, \
      result.stderr
  with pytest.raises(FastmtError, match="one of fastmt's own objectives"):
    objectives.register_objective('at', first_word_weighted)
  with pytest.raises(FastmtError, match='options_key must be a config key of this objective'):
    objectives.register_objective('other', first_word_weighted, options_key='hrt')
  with pytest.raises(FastmtError, match="decodes_like must be 'at'"):  # ib and hrt read records of their own
    objectives.register_objective('other', first_word_weighted, decodes_like='interleaved')


def test_a_plugin_file_already_imported_is_not_run_again_nor_takes_a_library_module_name(tmp_path, fresh_registries,
                                                                                         monkeypatch):
  """The docs let a config file import the plugin and --plugins name it too: running the file twice registered
  twice (an error); and a plugin file called json.py replaced the standard library's json in sys.modules."""
  import json  # pylint: disable=g-import-not-at-top
  from fastmt import cli  # pylint: disable=g-import-not-at-top
  plugin = tmp_path / 'json.py'
  plugin.write_text('from fastmt import objectives\n'
                    'objectives.register_objective("twice", lambda options, tokenizer, steps: None)\n')
  monkeypatch.syspath_prepend(str(tmp_path))
  cli.import_plugins([str(plugin)])
  assert sys.modules['json'] is json and 'twice' in objectives.OBJECTIVES
  cli.import_plugins([str(plugin)])  # again, as the config file and --plugins both would: no second register


def test_a_plugin_that_cannot_be_imported_is_one_clear_line(tmp_path):
  broken = tmp_path / 'broken.py'
  broken.write_text('raise ValueError("a typo in the plugin")\n')
  for plugin, message in ((str(broken), 'cannot be imported: ValueError: a typo in the plugin'),
                          (str(tmp_path / 'missing.py'), 'cannot be imported: FileNotFoundError'),
                          ('no_such_module_here', "No module named 'no_such_module_here'")):
    result = subprocess.run([sys.executable, str(REPO / 'decode.py'), '--workdir', str(tmp_path), '--plugins', plugin],
                            capture_output=True, text=True, cwd=REPO, timeout=300)
    assert result.returncode == 1 and message in result.stderr and 'Traceback' not in result.stderr, result.stderr
