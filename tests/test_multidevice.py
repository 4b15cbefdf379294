"""Data parallel over a Mesh of devices: 8 host devices (in a subprocess, so the rest of the suite keeps
one) give the same training losses (float tolerance) and the same translations as one device."""

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from conftest import DATA, REPO
from fastmt import api, clusters_lib, train_lib, workdir as workdir_lib


# One worker runs this module's tests under `make test` (--dist loadgroup), so the 8-device subprocess (minutes on 2
# cores) runs once.
pytestmark = pytest.mark.xdist_group('eight_devices')


# Session, not module: a module fixture is built again each time a worker comes back to its module from another
# one's tests; this one is built once a worker whatever the order.
@pytest.fixture(scope='session')
def eight_devices(trained_workdir, tmp_path_factory):
  out = tmp_path_factory.mktemp('multidevice')
  env = {**os.environ, 'XLA_FLAGS': '--xla_force_host_platform_device_count=8', 'JAX_PLATFORMS': 'cpu'}
  result = subprocess.run([sys.executable, str(REPO / 'tests' / 'multidevice_worker.py'), str(out / 'train'),
                           trained_workdir, str(out / 'result.json')], env=env, cwd=REPO / 'tests',
                          capture_output=True, text=True, timeout=900)
  assert result.returncode == 0, result.stderr[-3000:]
  return {**json.loads((out / 'result.json').read_text()), 'train_workdir': str(out / 'train')}


def test_the_module_runs_on_one_worker_under_make_test(request):
  """make test's --dist loadgroup sends an xdist_group to one worker by adding the group to each test's id;
  pytest 9.2 no longer takes that id from where pytest-xdist 3.8 writes it, and every module fixture of a group
  (the 8-device run here, test_interleaved's model) was then built once per worker (requirements.lock)."""
  if not getattr(request.config.option, 'loadgroup', False):  # set in a pytest-xdist worker under --dist loadgroup
    pytest.skip('checks make test\'s --dist loadgroup; this run has no groups to keep')
  assert request.node.nodeid.endswith('@eight_devices'), (
      f'{request.node.nodeid}: pytest-xdist\'s loadgroup is ignored by this pytest (requirements.lock pins one '
      'where it holds)')


def test_eight_devices_train_with_the_same_losses_as_one(eight_devices, tiny_config, tmp_path):
  assert eight_devices['devices'] == 8
  config = tiny_config.copy_and_resolve_references()
  config.num_train_steps = 10
  train_lib.train_and_evaluate(config, str(tmp_path))
  one = {str(r['step']): r['train_loss'] for r in map(json.loads, open(tmp_path / 'train_history.jsonl'))
         if 'train_loss' in r}
  assert set(one) == set(eight_devices['train_loss']) and len(one) >= 2
  for step, loss in one.items():
    np.testing.assert_allclose(eight_devices['train_loss'][step], loss, rtol=2e-4)
  # The validation loss too: its batches are rounded up to 8 rows with all-PAD rows, weighed 0 (repeated
  # rows, as before, counted some pairs twice on 8 devices).
  valid = {str(r['step']): r['valid_nll'] for r in map(json.loads, open(tmp_path / 'train_history.jsonl'))
           if 'valid_nll' in r}
  assert set(valid) == set(eight_devices['valid_nll']) and valid
  for step, nll in valid.items():
    np.testing.assert_allclose(eight_devices['valid_nll'][step], nll, rtol=2e-4)


def test_eight_devices_translate_like_one(eight_devices, trained_workdir):
  model = api.load(trained_workdir)
  sentences = [line.rstrip('\n') for line in open(DATA / 'genesis.en', encoding='utf-8')][:20]
  as_lists = lambda outputs: [ids.tolist() for ids in outputs]
  assert eight_devices['greedy'] == as_lists(model.translator('greedy').translate_ids(sentences, 32)[0])
  assert eight_devices['pgj'] == eight_devices['greedy']  # exact on 8 devices too
  assert eight_devices['beam'] == as_lists(model.translator('beam', beam_size=2).translate_ids(sentences, 32)[0])
  assert eight_devices['greedy_batch_1'] == eight_devices['greedy'][:3]
  # A lone sentence (and 3 at batch 32) on the first device alone: 1 and 4 rows, not 8 rows of padding on 8
  # devices that agree after every step; the 20 sentences at batch 32 still split over all 8.
  assert eight_devices['three_at_batch_32'] == eight_devices['greedy'][:3]
  assert eight_devices['rows_compiled'] == [1, 4, 32], eight_devices['rows_compiled']
  assert eight_devices['beam_batch_1'] == eight_devices['beam'][:2]
  assert eight_devices['spec_int8_batch_1'] == eight_devices['greedy'][:3]  # its int8 drafter's weights too
  int8 = api.load(trained_workdir, dtype='int8').translator('greedy').translate_ids(sentences, 32)[0]
  assert eight_devices['greedy_int8'] == as_lists(int8)
  hidden, _ = clusters_lib.record_states(model.translator('greedy'), sentences[:5], top_k=2, batch_size=4)
  np.testing.assert_allclose(eight_devices['recorded_states'], hidden, rtol=1e-4, atol=1e-5)


def test_a_model_trained_on_eight_devices_decodes_on_one(eight_devices):
  # Trained on a TPU's 8 cores or several GPUs, translated on a one-device CPU: its checkpoints hold a sharding
  # over 8 device ids, which orbax's default restore refused here as a topology mismatch.
  params, step = workdir_lib.restore_params(eight_devices['train_workdir'])
  assert step == 10 and all(leaf.dtype == np.float32 for leaf in jax.tree_util.tree_leaves(params))
  hypotheses = api.load(eight_devices['train_workdir']).translate(['In the beginning God created the heavens.'])
  assert len(hypotheses) == 1
