"""Training on the tiny config: the loss falls, runs are reproducible, a crashed run resumes to the same
parameters, and workdirs from another config fail with one clear error."""

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fastmt import train_lib, workdir as workdir_lib
from fastmt.data import batching
from fastmt.errors import FastmtError


def _history(workdir):
  with open(os.path.join(workdir, 'train_history.jsonl')) as f:
    return [json.loads(line) for line in f]


def _losses(workdir):
  return [h['train_loss'] for h in _history(workdir) if 'train_loss' in h]


def test_training_lowers_the_loss_and_reports_validation(trained_workdir):
  losses = _losses(trained_workdir)
  assert losses[-1] < losses[0] - 0.5
  validation = [h for h in _history(trained_workdir) if 'valid_nll' in h]
  assert validation and all(np.isfinite(h['valid_nll']) and 'valid_bleu' in h for h in validation)
  assert all(isinstance(h['valid_outputs_at_cap'], int) and h['valid_outputs_at_cap'] >= 0 for h in validation)
  assert os.listdir(os.path.join(trained_workdir, 'tensorboard'))


def test_the_logged_learning_rate_is_the_one_the_steps_last_update_used(trained_workdir, tiny_config):
  """optax applies schedule(count) and then counts the update, so update number n runs at schedule(n - 1): the
  history logged schedule(n), the next update's rate (0 on the last line of a run that cools down to zero)."""
  import optax  # pylint: disable=g-import-not-at-top
  rates = []
  sgd = optax.sgd(lambda count: rates.append(int(count)) or 1.0)
  sgd.update({'w': jnp.ones(())}, sgd.init({'w': jnp.ones(())}))  # the first update asks for schedule(0)
  assert rates == [0]
  schedule = train_lib.learning_rate_schedule(tiny_config)
  lines = [h for h in _history(trained_workdir) if 'learning_rate' in h]
  assert lines and all(h['learning_rate'] == pytest.approx(float(schedule(h['step'] - 1))) for h in lines)
  assert lines[-1]['step'] == tiny_config.num_train_steps and lines[-1]['learning_rate'] > 0


def test_the_best_validation_checkpoint_is_kept(trained_workdir):
  scores = {h['step']: h['valid_bleu'] for h in _history(trained_workdir) if 'valid_bleu' in h}
  model_config = workdir_lib.load_model_config(trained_workdir)
  _, step = workdir_lib.restore_params(trained_workdir, model_config, checkpoint="best")
  assert scores[step] == max(scores.values())  # ties may keep either step


def test_no_best_checkpoint_is_kept_without_validation_bleu_and_the_run_says_so(tiny_config, tmp_path, caplog):
  """keep_best_checkpoint (on in the RoyalFlush configs) with eval_bleu_sentences=0 left an empty
  best_checkpoint/ without a word, and `--checkpoint best` then said only 'No checkpoint under ...'."""
  import ml_collections  # pylint: disable=g-import-not-at-top
  config = ml_collections.ConfigDict(tiny_config.to_dict())
  config.num_train_steps = config.eval_every_steps = config.checkpoint_every_steps = 2
  config.keep_best_checkpoint, config.eval_bleu_sentences = True, 0
  with caplog.at_level(logging.WARNING):
    train_lib.train_and_evaluate(config, str(tmp_path))
  assert 'No best checkpoint is kept' in caplog.text
  assert not (tmp_path / workdir_lib.BEST_CHECKPOINT_DIR).exists()
  with pytest.raises(FastmtError, match='kept no best checkpoint .*eval_bleu_sentences above 0'):
    workdir_lib.restore_params(str(tmp_path), workdir_lib.load_model_config(str(tmp_path)), checkpoint='best')


def test_two_runs_with_one_seed_give_identical_losses(trained_workdir, tiny_config, tmp_path, monkeypatch):
  """Also: dataset files named relative to where train.py runs are recorded as absolute names, so that
  decode.py, the bench and a resumed run started elsewhere read the same files."""
  import ml_collections  # pylint: disable=g-import-not-at-top
  from conftest import DATA  # pylint: disable=g-import-not-at-top
  config = ml_collections.ConfigDict(tiny_config.to_dict())
  for split in ('train', 'validation', 'test'):
    config.dataset[f'{split}_files'] = ('genesis.en', 'genesis.de')
  monkeypatch.chdir(DATA)
  train_lib.train_and_evaluate(config, str(tmp_path))
  assert _losses(str(tmp_path)) == _losses(trained_workdir)
  with open(os.path.join(tmp_path, 'config.json')) as f:
    recorded = json.load(f)['dataset']
  assert recorded['validation_files'] == [str(DATA / 'genesis.en'), str(DATA / 'genesis.de')]
  assert config.dataset.train_files == ('genesis.en', 'genesis.de')  # the caller's config is left alone


def test_config_paths_become_absolute_and_empty_ones_stay_unset(tiny_config, tmp_path, monkeypatch):
  import pathlib  # pylint: disable=g-import-not-at-top
  monkeypatch.chdir(tmp_path)
  config = tiny_config.copy_and_resolve_references()
  config.dataset.train_files = (pathlib.Path('a.en'), '~/b.de')  # a pathlib.Path used to fail in config.json
  config.dataset.test_files = ('', '')
  config.dataset.distilled_dir = 'kd'
  config.init_from = ''
  absolute = train_lib.with_absolute_paths(config)
  assert absolute.dataset.train_files == (str(tmp_path / 'a.en'), os.path.expanduser('~/b.de'))
  assert absolute.dataset.test_files == ('', '') and absolute.init_from == ''
  assert absolute.dataset.distilled_dir == str(tmp_path / 'kd')
  assert json.loads(absolute.to_json())['dataset']['train_files'][0] == str(tmp_path / 'a.en')


def test_save_restore_gives_identical_parameters(trained_workdir, tiny_config, tmp_path):
  state = train_lib.train_and_evaluate(tiny_config, str(tmp_path))  # resumes at the end: no new steps
  model_config = workdir_lib.load_model_config(trained_workdir)
  params, step = workdir_lib.restore_params(trained_workdir, model_config)
  assert step == tiny_config.num_train_steps
  jax.tree_util.tree_map(np.testing.assert_array_equal, params, state.params)


class Crash(Exception):
  pass


def _crash_at(step: int, config, workdir: str, monkeypatch):
  """Trains config in workdir until the batch of `step` is asked for, then dies as a killed run would."""
  original = batching.TrainBatches.batch

  def dying_batch(self, s):
    if s == step:
      raise Crash()
    return original(self, s)

  with monkeypatch.context() as patch:
    patch.setattr(batching.TrainBatches, 'batch', dying_batch)
    with pytest.raises(Crash):
      train_lib.train_and_evaluate(config, workdir)


def test_a_crashed_run_resumes_to_the_same_parameters(trained_workdir, tiny_config, tmp_path, monkeypatch):
  """Die after step 12 (checkpoint at 10), restart: same final parameters as the uninterrupted run."""
  _crash_at(12, tiny_config, str(tmp_path), monkeypatch)
  # a save the kill cut short (SIGTERM during a save leaves one): a reader leaves it, since a run may be
  # writing it; the resumed run, which holds the lock, removes it
  checkpoints = tmp_path / workdir_lib.CHECKPOINT_DIR
  shutil.copytree(checkpoints / '10', checkpoints / '13.orbax-checkpoint-tmp')
  workdir_lib.restore_params(str(tmp_path), workdir_lib.load_model_config(str(tmp_path)))
  assert (checkpoints / '13.orbax-checkpoint-tmp').is_dir()
  resumed = train_lib.train_and_evaluate(tiny_config, str(tmp_path))
  assert not (checkpoints / '13.orbax-checkpoint-tmp').exists()
  model_config = workdir_lib.load_model_config(trained_workdir)
  reference, _ = workdir_lib.restore_params(trained_workdir, model_config)
  jax.tree_util.tree_map(np.testing.assert_array_equal, resumed.params, reference)


def test_a_run_killed_with_sigkill_resumes_to_the_same_parameters(trained_workdir, tiny_config, tmp_path,
                                                                  monkeypatch):
  """A real kill -9 of a training process (no exception, no clean-up, no finishing save), once its checkpoint
  of step 5 is on disk; the next start resumes from the last checkpoint and ends with the uninterrupted run's
  parameters and losses. (The test above stops a run by an exception, which lets its pending save finish.)"""
  workdir = str(tmp_path / 'killed')
  runner = subprocess.Popen(
      [sys.executable, '-c', 'import sys; sys.path.insert(0, sys.argv[1])\n'
       'from conftest import tiny_training_config\nfrom fastmt import train_lib\n'
       'train_lib.train_and_evaluate(tiny_training_config(), sys.argv[2])',
       os.path.dirname(__file__), workdir], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
  checkpoints = os.path.join(workdir, workdir_lib.CHECKPOINT_DIR)
  try:
    deadline = time.monotonic() + 300
    while not os.path.isdir(os.path.join(checkpoints, '5')) and runner.poll() is None:
      assert time.monotonic() < deadline, 'no checkpoint of step 5 in 300 s'
      time.sleep(0.02)
    runner.kill()  # SIGKILL
    runner.wait()
  finally:
    runner.kill()
    runner.wait()
  assert runner.returncode == -signal.SIGKILL, runner.stderr.read().decode()[-2000:]
  assert not os.path.isdir(os.path.join(checkpoints, str(tiny_config.num_train_steps)))  # killed mid-run
  saved = max(int(name) for name in os.listdir(checkpoints) if name.isdigit())
  asked, original = [], batching.TrainBatches.batch
  monkeypatch.setattr(batching.TrainBatches, 'batch', lambda self, s: asked.append(s) or original(self, s))
  resumed = train_lib.train_and_evaluate(tiny_config, workdir)
  # From the last checkpoint on, not from scratch (which would end with the same parameters and history:
  # training is deterministic and a start rewrites the history from its step).
  assert min(asked) == saved >= 5
  reference, _ = workdir_lib.restore_params(trained_workdir, workdir_lib.load_model_config(trained_workdir))
  jax.tree_util.tree_map(np.testing.assert_array_equal, resumed.params, reference)
  assert _losses(workdir) == _losses(trained_workdir)  # each step logged once


def test_a_run_resumed_with_another_batch_plan_says_so(trained_workdir, tiny_config, tmp_path, caplog):
  """Rows per batch are rounded to a multiple of the device count: a run resumed on another number of devices
  draws other batches than the uninterrupted run, which nothing showed. The plan is recorded and compared."""
  workdir = str(tmp_path / 'run')
  shutil.copytree(trained_workdir, workdir)
  plan_path = os.path.join(workdir, train_lib.BATCH_PLAN_FILE)
  with open(plan_path, encoding='utf-8') as f:
    plan = json.load(f)
  assert plan['devices'] == 1 and plan['batches_per_epoch'] > 0 and plan['rows_per_batch']
  with caplog.at_level(logging.WARNING):
    train_lib.train_and_evaluate(tiny_config, workdir)  # the same plan: nothing to say
  assert 'plans its training batches' not in caplog.text
  # A plan another run recorded (16 rows for bucket 64 where this run has 8). The plans decide, not the device
  # counts alone: the tiny config's plan is the same on 1 device and on 8, and then nothing is said.
  eight = {**plan, 'devices': 8, 'rows_per_batch': {**plan['rows_per_batch'], '64': 16}}
  with open(plan_path, 'w', encoding='utf-8') as f:
    json.dump(eight, f)
  with caplog.at_level(logging.WARNING):
    train_lib.train_and_evaluate(tiny_config, workdir)
  assert 'This run plans its training batches for 1 device(s)' in caplog.text and 'a plan for 8' in caplog.text
  assert 'the epoch under way sees some pairs twice and others not at all' in caplog.text
  with open(plan_path, encoding='utf-8') as f:
    assert json.load(f) == plan  # this run's plan is the record now


def test_a_resumed_run_logs_each_step_once(trained_workdir, tiny_config, tmp_path, monkeypatch):
  """Checkpoints every 10 steps, killed at step 17 after logging step 15: the resumed run takes steps 11-20
  again, and the history keeps the steps it had logged before step 10 and the resumed run's, each once."""
  config = tiny_config.copy_and_resolve_references()
  config.checkpoint_every_steps = 10
  _crash_at(17, config, str(tmp_path), monkeypatch)
  assert [h['step'] for h in _history(str(tmp_path))][-1] == 15
  with open(tmp_path / 'train_history.jsonl', 'a') as f:
    f.write('{"step": 16, "train_lo')  # a line cut short by the kill
  train_lib.train_and_evaluate(config, str(tmp_path))
  steps = lambda workdir: [(h['step'], sorted(h)) for h in _history(workdir)]
  assert steps(str(tmp_path)) == steps(trained_workdir)
  assert _losses(str(tmp_path)) == _losses(trained_workdir)  # the windows start at logged steps: the same sums
  # A checkpoint off the log's grid: the first line after the resume averages fewer steps, and says how many
  # (it read as if it were a whole window's loss).
  config.checkpoint_every_steps = 3
  other = str(tmp_path / 'other')
  _crash_at(19, config, other, monkeypatch)  # last checkpoint: step 18
  train_lib.train_and_evaluate(config, other)
  assert {h['step']: h['train_window_steps'] for h in _history(other) if 'train_loss' in h} == {
      5: 5, 10: 5, 15: 5, 20: 2}


def test_a_second_training_run_in_one_work_directory_is_refused(trained_workdir, tiny_config, tmp_path):
  with workdir_lib.training_lock(str(tmp_path)):  # as another process's run would hold it
    with pytest.raises(FastmtError, match='another training run is writing'):
      train_lib.train_and_evaluate(tiny_config, str(tmp_path))
  assert sorted(os.listdir(tmp_path)) == [workdir_lib.TRAINING_LOCK_FILE]  # nothing written
  train_lib.train_and_evaluate(tiny_config, str(tmp_path))  # free again once that run has ended
  assert _losses(str(tmp_path)) == _losses(trained_workdir)


def test_resuming_a_finished_run_waits_for_another_process_resuming_it(trained_workdir, tiny_config, tmp_path):
  """Notebooks 02-05 each resume notebook 01's finished model, two at a time under `make notebooks`: the second
  waits for the lock (a finished run only restores, in seconds) instead of failing as a second training run
  does."""
  workdir = str(tmp_path / 'finished')
  shutil.copytree(trained_workdir, workdir)
  holder = subprocess.Popen(  # another process resuming it, holding the lock for 3 s
      [sys.executable, '-c', 'import time; from fastmt import workdir\n'
       f'with workdir.training_lock({workdir!r}):\n  print("held", flush=True); time.sleep(3)'],
      stdout=subprocess.PIPE, text=True)
  try:
    assert 'held' in holder.stdout.readline()
    state = train_lib.train_and_evaluate(tiny_config, workdir)
    assert holder.poll() is not None  # it ran once the other process had let go
  finally:
    holder.kill()
    holder.wait()
  assert int(state.step) == tiny_config.num_train_steps
  assert _losses(workdir) == _losses(trained_workdir)  # nothing trained or logged again


def test_a_run_trained_past_this_configs_steps_while_it_waited_for_the_lock_is_refused(trained_workdir,
                                                                                       tiny_config, tmp_path):
  """The finished-run check came before the lock only: the run it waited for (resumed with a higher
  num_train_steps) trained on meanwhile, and this one then 'resumed' it and recorded its lower count."""
  workdir = str(tmp_path / 'finished')
  shutil.copytree(trained_workdir, workdir)
  steps = os.path.join(workdir, workdir_lib.CHECKPOINT_DIR)
  last, later = tiny_config.num_train_steps, tiny_config.num_train_steps + 5
  with open(os.path.join(workdir, workdir_lib.TRAIN_CONFIG_FILE), 'rb') as f:
    recorded = f.read()
  holder = subprocess.Popen(  # the other run: holds the lock while its newest step becomes a later one
      [sys.executable, '-c', 'import os, time; from fastmt import workdir\n'
       f'with workdir.training_lock({workdir!r}):\n  print("held", flush=True); time.sleep(2)\n'
       f'  os.rename(os.path.join({steps!r}, "{last}"), os.path.join({steps!r}, "{later}"))'],
      stdout=subprocess.PIPE, text=True)
  try:
    assert 'held' in holder.stdout.readline()
    with pytest.raises(FastmtError, match=f'holds a run at step {later}, past config.num_train_steps={last}'):
      train_lib.train_and_evaluate(tiny_config, workdir)
    assert holder.wait(timeout=60) == 0  # it ran to its end before the refusal
  finally:
    holder.kill()
    holder.wait()
  with open(os.path.join(workdir, workdir_lib.TRAIN_CONFIG_FILE), 'rb') as f:
    assert f.read() == recorded  # the other run's record stands


def test_a_killed_run_leaves_no_lock_held(tmp_path):
  holder = subprocess.Popen(
      [sys.executable, '-c', 'import sys, time; from fastmt import workdir\n'
       f'with workdir.training_lock({str(tmp_path)!r}):\n  print("held", flush=True); time.sleep(600)'],
      stdout=subprocess.PIPE, text=True)
  deadline = threading.Timer(120, holder.kill)  # a holder that hangs before it prints ends the read (EOF)
  deadline.start()
  try:
    assert 'held' in holder.stdout.readline()
    with pytest.raises(FastmtError, match='another training run'):
      with workdir_lib.training_lock(str(tmp_path)):
        pass
  finally:
    deadline.cancel()
    holder.kill()
    holder.wait()
  with workdir_lib.training_lock(str(tmp_path)):
    pass


def test_a_workdir_of_another_config_is_one_clear_error(trained_workdir, tiny_config):
  other = tiny_config.copy_and_resolve_references()
  other.model.emb_dim = 48
  with pytest.raises(ValueError, match='another model config.*emb_dim'):
    train_lib.train_and_evaluate(other, trained_workdir)


def test_restoring_into_another_model_is_one_clear_error(trained_workdir):
  model_config = workdir_lib.load_model_config(trained_workdir)
  with pytest.raises(ValueError, match='does not match its model config'):
    workdir_lib.restore_params(trained_workdir, model_config.replace(mlp_dim=128))


def test_a_missing_checkpoint_is_one_clear_error(tmp_path):
  with pytest.raises(FileNotFoundError, match='not a train.py work directory'):
    workdir_lib.load_model_config(str(tmp_path))


def test_a_bad_architecture_fails_before_anything_is_written(tiny_config, tmp_path):
  bad = tiny_config.copy_and_resolve_references()
  bad.model.dtype = 'bf16'
  with pytest.raises(ValueError, match="dtype must be a floating-point dtype.*'bf16'"):
    train_lib.train_and_evaluate(bad, str(tmp_path / 'run'))
  assert not (tmp_path / 'run').exists()  # no half-made work directory to refuse the corrected run


def test_a_model_config_left_by_a_start_that_never_checkpointed_is_replaced(trained_workdir, tmp_path):
  from fastmt.config import ModelConfig  # pylint: disable=g-import-not-at-top
  config = workdir_lib.load_model_config(trained_workdir)
  workdir = tmp_path / 'run'
  workdir.mkdir()
  (workdir / 'model_config.json').write_text(config.replace(mlp_dim=8).to_json())
  train_lib.check_or_save_model_config(str(workdir), config)  # no checkpoint: nothing was trained with it
  assert ModelConfig.from_json((workdir / 'model_config.json').read_text()) == config
  workdir_lib.save_objective(str(workdir), 'hrt', {'chunk_size': 2})  # the failed start's objective record
  workdir_lib.save_objective(str(workdir), 'at')  # replaced: nothing was trained with it
  assert workdir_lib.load_objective(str(workdir)) == 'at'
  (workdir / 'best_checkpoint' / '5').mkdir(parents=True)  # a best checkpoint binds the run too
  with pytest.raises(ValueError, match='another model config'):
    train_lib.check_or_save_model_config(str(workdir), config.replace(mlp_dim=8))
  with pytest.raises(ValueError, match="trained with objective 'at'"):
    workdir_lib.save_objective(str(workdir), 'hrt', {'chunk_size': 2})


@pytest.mark.parametrize('damage', ['empty step directory', 'truncated files', 'zeroed array files',
                                    'deleted array files'])
def test_a_damaged_latest_checkpoint_resumes_from_the_step_before(trained_workdir, tiny_config, tmp_path, damage,
                                                                   caplog):
  """The latest step does not read: set aside (20.unreadable) and the run goes on from the step before, to the
  same parameters as the uninterrupted run (it used to stop with orbax's traceback). Deleted array files gave
  the warning 1,000 characters of TensorStore specs (and ~190 'Event loop is closed' tracebacks above it:
  test_a_failed_restores_stray_event_loop_reports_are_dropped_and_every_other_one_kept)."""
  import shutil  # pylint: disable=g-import-not-at-top
  workdir = tmp_path / 'copy'
  shutil.copytree(trained_workdir, workdir)
  latest = workdir / workdir_lib.CHECKPOINT_DIR / str(tiny_config.num_train_steps)
  assert latest.is_dir() and (workdir / workdir_lib.CHECKPOINT_DIR / '10').is_dir()
  if damage == 'empty step directory':
    shutil.rmtree(latest)
    latest.mkdir()
  elif damage == 'truncated files':
    for path in latest.rglob('*'):
      if path.is_file():
        path.write_bytes(path.read_bytes()[:len(path.read_bytes()) // 3])
  else:  # the arrays' data files: a TensorStore error (its appendix: test_checkpoint_errors_are_one_clean_line)
    for path in latest.rglob('*'):
      if path.is_file() and path.parent.name == 'd':
        path.write_bytes(b'\0' * 10) if damage == 'zeroed array files' else path.unlink()
  with caplog.at_level(logging.WARNING):
    resumed = train_lib.train_and_evaluate(tiny_config, str(workdir))
  assert (latest.parent / f'{latest.name}.unreadable').is_dir() and (latest.parent / '10').is_dir()
  warning, = [r.getMessage() for r in caplog.records if 'cannot be read' in r.getMessage()]
  assert 'set aside as' in warning and 'TensorStore details' not in warning, warning  # one clean line
  assert 'tensorstore_spec' not in warning, warning
  reference, _ = workdir_lib.restore_params(trained_workdir, workdir_lib.load_model_config(trained_workdir))
  jax.tree_util.tree_map(np.testing.assert_array_equal, resumed.params, reference)


def test_a_failed_restores_stray_event_loop_reports_are_dropped_and_every_other_one_kept(monkeypatch):
  """TensorStore's reads still under way when orbax's restore fails report 'Event loop is closed' through
  sys.unraisablehook, up to ~30 ms after the failure, ~190 tracebacks for the tiny model. They are dropped; any
  other report reaches the hook there was; and the quiet is counted from the failure, not from the start of a
  restore that took longer than it (a large teacher's)."""
  import threading  # pylint: disable=g-import-not-at-top
  seen = []
  monkeypatch.setattr(sys, 'unraisablehook', lambda unraisable: seen.append(str(unraisable.exc_value)))

  class Stray:
    def __init__(self, message):
      self.message = message

    def __del__(self):
      raise RuntimeError(self.message)

  def report_later(message):
    time.sleep(0.1)
    Stray(message)  # collected at once: its __del__ raises, an unraisable exception

  with pytest.raises(ValueError, match='damaged'):
    with workdir_lib.closed_loop_tracebacks_dropped():
      time.sleep(0.3)  # a restore longer than the quiet period
      for message in ('Event loop is closed', 'something else', 'Event loop is closed'):
        threading.Thread(target=report_later, args=(message,)).start()
      raise ValueError('damaged')
  ours = lambda: [m for m in seen if m in ('something else', 'Event loop is closed')]  # not an earlier test's
  assert ours() == ['something else']
  Stray('Event loop is closed')  # outside a failed restore: not ours to drop
  assert ours() == ['something else', 'Event loop is closed']
  # orbax's unfinished read coroutines report their own failure when collected, as late as the exit (22,000
  # lines after an interrupted decode.py): dropped for the rest of the process, and nothing else is
  Stray('Encountered error while reading array index: (slice(0, 4, 1),). See full TensorStore details: ...')
  Stray('something else again')
  assert [m[:20] for m in seen if m.startswith(('Encountered', 'something else again'))] == ['something else again']


def test_an_interrupt_inside_a_checkpoint_read_is_an_interrupt_not_a_damaged_step(trained_workdir, monkeypatch):
  """Ctrl-C while orbax reads reached decode.py as 'cannot be read (...); is it damaged?': orbax wraps what
  its reads raised in its own Exception."""
  def interrupted_read(directory, step):
    try:
      raise KeyboardInterrupt
    except KeyboardInterrupt as e:
      raise Exception('Encountered error while reading array index: ()') from e  # pylint: disable=broad-except
  monkeypatch.setattr(workdir_lib, '_restore_on_this_device', interrupted_read)
  with pytest.raises(KeyboardInterrupt):
    workdir_lib.restore_params(trained_workdir)
  monkeypatch.setattr(workdir_lib, '_restore_on_this_device', lambda *_: (_ for _ in ()).throw(OSError('bad')))
  with pytest.raises(FastmtError, match='cannot be read .*damaged'):
    workdir_lib.restore_params(trained_workdir)


def test_checkpoint_errors_are_one_clean_line():
  """orbax's message for an unreadable array can end in TensorStore's appendix (the repr of a bound method),
  and span lines; training's set-aside warning and decode's error keep the type and the first line."""
  error = ValueError('DATA_LOSS: Error reading "params.x/.zarray" See full TensorStore details: <bound method '
                     'Spec.to_json of Spec({...})>\n  more TensorStore detail')
  assert workdir_lib.checkpoint_error(error) == 'ValueError: DATA_LOSS: Error reading "params.x/.zarray"'
  error = ValueError('NOT_FOUND: Error reading "rng/.zarray" in OCDBT database at local file "/r/4/default/" '
                     '[tensorstore_spec[1]=\'{"base":{"driver":"zarr"}}\'] [tensorstore_spec=\'{"context":{}}\']')
  assert workdir_lib.checkpoint_error(error) == ('ValueError: NOT_FOUND: Error reading "rng/.zarray" in OCDBT '
                                                 'database at local file "/r/4/default/"')


def test_a_validation_bleu_of_chinese_targets_under_13a_is_warned_of(tiny_config, tmp_path, caplog):
  """The validation BLEU of every evaluation scores Chinese targets about 0 under BLEU's default 13a tokenizer;
  decode.py warned of that, training did not."""
  english = tmp_path / 'valid.en'
  english.write_text('In the beginning God created the heaven and the earth.\n' * 10, encoding='utf-8')
  chinese = tmp_path / 'valid.zh'
  chinese.write_text('起初神创造天地。\n地是空虚混沌。\n' * 5, encoding='utf-8')
  config = tiny_config.copy_and_resolve_references()
  config.dataset.validation_files = (str(english), str(chinese))
  config.num_train_steps, config.eval_every_steps, config.checkpoint_every_steps = 2, 2, 2
  config.eval_bleu_sentences, config.keep_best_checkpoint = 2, False
  with caplog.at_level(logging.WARNING):
    train_lib.train_and_evaluate(config, str(tmp_path / 'run'))
  assert 'mostly Chinese, Japanese or Korean' in caplog.text and 'config.eval_bleu_tokenize=zh' in caplog.text


def test_a_warm_up_longer_than_the_run_is_named(caplog):
  """The quickstart's 200 warm-up steps in a 100-step run: the rate never reached its peak, without a word."""
  from fastmt.configs import quickstart  # pylint: disable=g-import-not-at-top
  config = quickstart.get_config()
  with caplog.at_level(logging.WARNING):
    train_lib.check_training_settings(config)
  assert 'never exceeds' not in caplog.text
  config.num_train_steps = 100
  with caplog.at_level(logging.WARNING):
    train_lib.check_training_settings(config)
  assert 'The learning rate never exceeds 0.00088, 44% of config.learning_rate=0.002: warmup_steps=200' in caplog.text


def test_resuming_a_work_directory_with_a_damaged_vocabulary_is_a_fastmt_error(trained_workdir, tiny_config, tmp_path):
  """sentencepiece's RuntimeError ('could not parse ModelProto') came out as a traceback; decode.py said one line."""
  workdir = tmp_path / 'run'
  shutil.copytree(trained_workdir, workdir)
  (workdir / workdir_lib.TOKENIZER_FILE).write_bytes(b'garbage\n')
  more = tiny_config.copy_and_resolve_references()
  more.num_train_steps = tiny_config.num_train_steps + 2
  with pytest.raises(FastmtError, match='spm.model is not a SentencePiece model'):
    train_lib.train_and_evaluate(more, str(workdir))


def test_a_run_past_num_train_steps_is_refused_and_its_records_kept(trained_workdir, tiny_config, tmp_path):
  """Resuming a run at step N with num_train_steps below N said 'Resumed from step N', trained nothing and
  rewrote config.json to the lower count."""
  workdir = tmp_path / 'run'
  shutil.copytree(trained_workdir, workdir)
  recorded = (workdir / train_lib.TRAIN_CONFIG_FILE).read_text()
  fewer = tiny_config.copy_and_resolve_references()
  fewer.num_train_steps = tiny_config.num_train_steps - 1
  with pytest.raises(FastmtError, match=f'holds a run at step {tiny_config.num_train_steps}, past config.num_train'):
    train_lib.train_and_evaluate(fewer, str(workdir))
  assert (workdir / train_lib.TRAIN_CONFIG_FILE).read_text() == recorded


@pytest.mark.parametrize('key, value', [('warmup_steps', 0), ('checkpoint_every_steps', 0), ('eval_every_steps', -1),
                                        ('log_every_steps', 0), ('tokens_per_batch', 0), ('num_train_steps', 0),
                                        ('max_checkpoints_to_keep', 0)])
def test_training_counts_are_checked_before_anything_is_written(tiny_config, tmp_path, key, value):
  """warmup_steps=0 trained NaN weights (0 / 0 in the schedule), a zero interval died after the first step."""
  bad = tiny_config.copy_and_resolve_references()
  bad[key] = value
  with pytest.raises(FastmtError, match=f'config.{key} must be a whole number >= 1'):
    train_lib.train_and_evaluate(bad, str(tmp_path / 'run'))
  assert not (tmp_path / 'run').exists()


@pytest.mark.parametrize('key, value, message', [
    ('learning_rate', -1.0, 'config.learning_rate must be a number > 0'),
    ('learning_rate', 0.0, 'config.learning_rate must be a number > 0'),
    ('weight_decay', -0.1, 'config.weight_decay must be a number >= 0'),
    ('grad_clip_norm', float('nan'), 'config.grad_clip_norm must be a number > 0'),
    ('label_smoothing', 1.0, 'config.label_smoothing must be below 1'),
    ('cooldown_fraction', -0.5, 'config.cooldown_fraction must be a number >= 0'),
    ('cooldown_fraction', 1.5, 'config.cooldown_fraction must be at most 1'),
    # a raw TypeError / AttributeError from the optimiser, after the vocabulary and configs were written
    ('learning_rate', None, 'config.learning_rate is missing'),
    ('weight_decay', 'deleted', 'config.weight_decay is missing'),
    ('cooldown_fraction', 'deleted', 'config.cooldown_fraction is missing'),
    ('model.dropout_rate', 1.5, 'dropout_rate must be a number in \\[0, 1\\)'),
    ('init_from', '/nonexistent/run', "config.init_from '/nonexistent/run' is no work directory"),
    ('dataset.name', 'bible/en_xx', "unknown Bible pair 'en_xx'"),  # left the directory and its lock
    ('dataset.name', 'wmt14', "Unknown dataset.name 'wmt14'"),
    # validation BLEU on all but the last 3 sentences, without a word
    ('eval_bleu_sentences', -3, 'config.eval_bleu_sentences must be a whole number >= 0'),
    # a ZeroDivisionError, a TypeError in the batch plan, after the vocabulary was trained and written
    ('bucket_lengths', (0, 8), 'config.bucket_lengths must be distinct whole numbers >= 1'),
    ('bucket_lengths', (16, 16.5), 'config.bucket_lengths must be distinct whole numbers >= 1'),
    ('bucket_lengths', ('a',), 'config.bucket_lengths must be distinct whole numbers >= 1'),
    ('bucket_lengths', (16, 16), 'config.bucket_lengths must be distinct whole numbers >= 1'),
    ('seed', -1, 'config.seed must be a whole number >= 0'),  # numpy's error, after the vocabulary was written
    ('dataset.p_raw', 1.5, r'config.dataset.p_raw must be a number in \[0, 1\]'),
    # a raw FileNotFoundError for its spm.model
    ('dataset.distilled_dir', '/nonexistent/kd', "config.dataset.distilled_dir '/nonexistent/kd' is no directory"),
    ('dataset.distilled_dir', os.path.dirname(os.path.abspath(__file__)), 'a directory without spm.model or manifest'),
])
def test_bad_rates_and_a_missing_initial_model_are_refused_before_anything_is_written(tiny_config, tmp_path, key,
                                                                                      value, message):
  """dropout_rate=1.5 trained (flax zeroes every activation) and a negative learning rate trained away from the
  data without a word; a missing init_from was a FileNotFoundError traceback from the tokenizer."""
  bad = tiny_config.copy_and_resolve_references()
  if value == 'deleted':
    del bad[key]
  elif key.startswith(('model.', 'dataset.')):
    bad[key.split('.')[0]][key.split('.')[1]] = value
  else:
    bad[key] = value
  with pytest.raises(FastmtError, match=message):
    train_lib.train_and_evaluate(bad, str(tmp_path / 'run'))
  assert not (tmp_path / 'run').exists()
  if key == 'init_from':
    (tmp_path / 'empty').mkdir()
    bad.init_from = str(tmp_path / 'empty')
    with pytest.raises(FastmtError, match='is a directory without checkpoints'):
      train_lib.train_and_evaluate(bad, str(tmp_path / 'run'))


def test_an_initial_model_of_another_shape_is_refused_before_anything_is_written(tiny_config, trained_workdir,
                                                                                   tmp_path):
  """init_from of another architecture was refused only after the work directory held the initial model's
  vocabulary, configs and checkpoint folders, so that the next start without init_from trained on that
  vocabulary without a word (tests/test_data.py: it now trains its own)."""
  bad = tiny_config.copy_and_resolve_references()
  bad.init_from = trained_workdir
  bad.model.mlp_dim = bad.model.mlp_dim * 2
  with pytest.raises(FastmtError, match='holds another model config.*mlp_dim'):
    train_lib.train_and_evaluate(bad, str(tmp_path / 'run'))
  assert not (tmp_path / 'run').exists()
  fine = tiny_config.copy_and_resolve_references()
  fine.init_from = trained_workdir
  train_lib.check_training_settings(fine)  # the same shape passes


def test_an_initial_model_whose_latest_step_is_damaged_is_one_line_with_advice_train_py_can_follow(
    tiny_config, trained_workdir, tmp_path):
  """It said 'Try another --checkpoint', a flag train.py does not have, after 1,000 characters of specs."""
  damaged = tmp_path / 'damaged'
  shutil.copytree(trained_workdir, damaged)
  latest = damaged / workdir_lib.CHECKPOINT_DIR / str(tiny_config.num_train_steps)
  for path in latest.rglob('*'):
    if path.is_file() and path.parent.name == 'd':
      path.unlink()
  config = tiny_config.copy_and_resolve_references()
  config.init_from = str(damaged)
  with pytest.raises(FastmtError) as error:
    train_lib.train_and_evaluate(config, str(tmp_path / 'run'))
  message = str(error.value)
  assert message.startswith('config.init_from: Checkpoint step') and 'cannot be read' in message, message
  assert 'fastmt-average' in message and '--checkpoint STEP' in message and 'tensorstore_spec' not in message
  assert 'another --checkpoint' not in message
  # NaN weights (a diverged run): the same advice, not decode.py's
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  diverged = tmp_path / 'diverged'
  shutil.copytree(trained_workdir, diverged)
  params, step = workdir_lib.restore_params(str(diverged))
  params = jax.tree_util.tree_map(lambda x: np.full_like(x, np.nan), params)
  manager = workdir_lib.checkpoint_manager(str(diverged))
  manager.save(step + 1, args=ocp.args.StandardSave({'params': params}))
  manager.wait_until_finished()
  manager.close()
  config.init_from = str(diverged)
  with pytest.raises(FastmtError) as error:
    train_lib.train_and_evaluate(config, str(tmp_path / 'run2'))
  message = str(error.value)
  assert 'NaN or Inf weights' in message and 'fastmt-average' in message and 'another --checkpoint' not in message


def test_fine_tuning_may_add_dropout_a_longer_max_length_and_bfloat16(tiny_config, trained_workdir, tmp_path):
  """No parameter's shape depends on them; each was refused as 'another model config'."""
  import fastmt  # pylint: disable=g-import-not-at-top
  config = tiny_config.copy_and_resolve_references()
  config.init_from, config.num_train_steps, config.eval_every_steps = trained_workdir, 2, 2
  config.model.dropout_rate, config.model.max_length, config.model.dtype = 0.1, 2 * config.model.max_length, 'bfloat16'
  train_lib.train_and_evaluate(config, str(tmp_path / 'run'))
  model = fastmt.load(str(tmp_path / 'run'))
  assert (model.config.dropout_rate, model.config.max_length) == (0.1, config.model.max_length)
  config.model.num_heads = 1  # a shape: still refused
  with pytest.raises(FastmtError, match='holds another model config.*num_heads'):
    train_lib.check_training_settings(config)


def test_a_work_directory_that_cannot_be_resumed_is_refused_as_it_is(trained_workdir, tiny_config, tmp_path):
  """Checkpoints without their model_config.json: the run wrote this run's config beside them (the next decode
  refused the good checkpoint as another model's). An averaged work directory (parameters only): orbax's 'tree
  structures do not match', after config.json and batch_plan.json had been rewritten."""
  from fastmt import checkpoint_average  # pylint: disable=g-import-not-at-top
  more = tiny_config.copy_and_resolve_references()
  more.num_train_steps = tiny_config.num_train_steps + 2
  lost = tmp_path / 'lost'
  shutil.copytree(trained_workdir, lost)
  (lost / workdir_lib.MODEL_CONFIG_FILE).unlink()
  with pytest.raises(FastmtError, match='holds checkpoints but no model_config.json'):
    train_lib.train_and_evaluate(more, str(lost))
  assert not (lost / workdir_lib.MODEL_CONFIG_FILE).exists()
  averaged = tmp_path / 'averaged'
  params, steps = checkpoint_average.average_last_checkpoints(trained_workdir, last=2)
  checkpoint_average.write_averaged_workdir(trained_workdir, str(averaged), params, steps)
  before = sorted(p.name for p in averaged.iterdir()), (averaged / train_lib.TRAIN_CONFIG_FILE).read_text()
  with pytest.raises(FastmtError, match='holds averaged parameters'):
    train_lib.train_and_evaluate(more, str(averaged))
  assert (sorted(p.name for p in averaged.iterdir()), (averaged / train_lib.TRAIN_CONFIG_FILE).read_text()) == before


def test_settings_that_always_worked_still_pass_the_checks(tiny_config):
  """max_checkpoints_to_keep=None is orbax's 'keep every checkpoint'; a cool-down over the whole run is a
  schedule like any other."""
  config = tiny_config.copy_and_resolve_references()
  config.max_checkpoints_to_keep, config.cooldown_fraction, config.label_smoothing = None, 1.0, 0
  config.bucket_lengths, config.eval_bleu_sentences = (), 0  # one bucket, model.max_length; loss only
  train_lib.check_training_settings(config)
  config.eval_bleu_tokenize = 'zh'  # Chinese targets: validation BLEU per character
  train_lib.check_training_settings(config)
  config.eval_bleu_tokenize = 'chinese'
  with pytest.raises(FastmtError, match='BLEU tokenizer must be one of'):
    train_lib.check_training_settings(config)


def test_a_training_split_reaching_into_the_test_set_is_refused_before_anything_is_written(tiny_config, tmp_path):
  bad = tiny_config.copy_and_resolve_references()
  bad.dataset.train_split = 'test'
  with pytest.raises(FastmtError, match='dataset.train_split must be the training split'):
    train_lib.train_and_evaluate(bad, str(tmp_path / 'run'))
  assert not (tmp_path / 'run').exists()


def test_a_work_directory_that_is_a_file_is_one_clear_error(tiny_config, tmp_path):
  (tmp_path / 'afile').write_text('x')
  for workdir in (tmp_path / 'afile', tmp_path / 'afile' / 'sub'):
    with pytest.raises(FastmtError, match='afile'):
      train_lib.train_and_evaluate(tiny_config, str(workdir))


def test_a_corpus_with_no_usable_pair_is_one_clear_error(tiny_config, tmp_path):
  bad = tiny_config.copy_and_resolve_references()
  bad.model.max_length = 4  # every Genesis verse is longer
  with pytest.raises(FastmtError, match=r'no training pair can be used: of \d+, 0 have an empty side and \d+ are '
                                        'longer than 4 tokens'):
    train_lib.train_and_evaluate(bad, str(tmp_path / 'run'))


def test_resuming_with_another_corpus_warns_that_the_vocabulary_stays(trained_workdir, tiny_config, tmp_path, caplog):
  import shutil  # pylint: disable=g-import-not-at-top
  workdir = tmp_path / 'copy'
  shutil.copytree(trained_workdir, workdir)
  same = tiny_config.copy_and_resolve_references()
  with caplog.at_level('WARNING'):
    train_lib.train_and_evaluate(same, str(workdir))  # at its last step already: nothing to train
  assert 'changed since its recorded config' not in caplog.text
  other = tiny_config.copy_and_resolve_references()
  other.dataset.train_files = tuple(reversed(tiny_config.dataset.train_files))
  other.vocab_size = tiny_config.vocab_size + 1
  with caplog.at_level('WARNING'):
    train_lib.train_and_evaluate(other, str(workdir))
  assert 'with dataset.train_files, vocab_size changed since its recorded config' in caplog.text
  assert 'num_train_steps' not in caplog.text
  # a run resumed under another budget or rate (a script's STEPS changed after a kill): a hybrid, said so
  longer = other.copy_and_resolve_references()
  longer.num_train_steps, longer.learning_rate = other.num_train_steps + 2, other.learning_rate / 2
  caplog.clear()
  with caplog.at_level('WARNING'):
    train_lib.train_and_evaluate(longer, str(workdir))
  assert (f'resumes from its checkpoint with num_train_steps {other.num_train_steps} -> {longer.num_train_steps}, '
          f'learning_rate {other.learning_rate!r} -> {longer.learning_rate!r}') in caplog.text
  assert 'seed' not in caplog.text
  # another seed reorders the batches from the resumed step; another coverage does not touch the vocabulary
  reseeded = longer.copy_and_resolve_references()
  reseeded.num_train_steps += 2
  reseeded.seed, reseeded.vocab_character_coverage = longer.seed + 7, 0.9
  reseeded.dataset.p_raw = 0.5  # each pair's target (raw or distilled) from here on: said like a schedule's change
  caplog.clear()
  with caplog.at_level('WARNING'):
    train_lib.train_and_evaluate(reseeded, str(workdir))
  assert 'dataset.p_raw 0.0 -> 0.5' in caplog.text
  assert 'dataset.p_raw changed since' not in caplog.text  # not the vocabulary's warning
  assert f'with seed {longer.seed} -> {reseeded.seed}: from here on its batches come in the new seed' in caplog.text
  assert 'with vocab_character_coverage changed since its recorded config: it keeps its vocabulary' in caplog.text


def test_when_no_checkpoint_reads_nothing_is_renamed(trained_workdir, tiny_config, tmp_path):
  """An environment that cannot read any step (not damage) must not rename a run's every checkpoint."""
  import shutil  # pylint: disable=g-import-not-at-top
  workdir = tmp_path / 'copy'
  shutil.copytree(trained_workdir, workdir)
  steps = workdir / workdir_lib.CHECKPOINT_DIR
  names = sorted(p.name for p in steps.iterdir() if p.is_dir())
  assert len(names) >= 2
  for name in names:
    shutil.rmtree(steps / name)
    (steps / name).mkdir()
  records = {name: (workdir / name).read_bytes() for name in (workdir_lib.TRAIN_CONFIG_FILE,
                                                                train_lib.BATCH_PLAN_FILE)}
  other = tiny_config.copy_and_resolve_references()  # other settings: they were recorded before the refusal
  other.num_train_steps, other.learning_rate, other.tokens_per_batch = 40, 1e-4, 2 * tiny_config.tokens_per_batch
  with pytest.raises(FastmtError, match='no checkpoint step of .* can be read .*nothing was renamed'):
    train_lib.train_and_evaluate(other, str(workdir))
  assert sorted(p.name for p in steps.iterdir() if p.is_dir()) == names
  assert {name: (workdir / name).read_bytes() for name in records} == records  # as the checkpoints' run left them


def test_a_work_directory_with_checkpoints_but_no_vocabulary_is_one_clear_error(trained_workdir, tiny_config,
                                                                                tmp_path):
  """A vocabulary trained afresh (another coverage, or another sentencepiece version) gave the checkpoint's
  ids other pieces, and the run resumed on it without a word."""
  workdir = tmp_path / 'copy'
  shutil.copytree(trained_workdir, workdir)
  (workdir / workdir_lib.TOKENIZER_FILE).unlink()
  longer = tiny_config.copy_and_resolve_references()
  longer.num_train_steps += 2
  with pytest.raises(FastmtError, match='holds checkpoints but no spm.model: the work directory is damaged'):
    train_lib.train_and_evaluate(longer, str(workdir))
  assert not (workdir / workdir_lib.TOKENIZER_FILE).exists()


def test_p_raw_without_distilled_data_is_said_to_do_nothing(tiny_config, caplog):
  config = tiny_config.copy_and_resolve_references()
  config.dataset.p_raw = 0.5  # configs/hrt.py's, trained on raw data
  with caplog.at_level('WARNING'):
    train_lib.check_training_settings(config)
  assert 'config.dataset.distilled_dir is not set: this run trains on the raw targets only' in caplog.text
  config.dataset.p_raw = 0.0
  caplog.clear()
  with caplog.at_level('WARNING'):
    train_lib.check_training_settings(config)
  assert 'p_raw' not in caplog.text
