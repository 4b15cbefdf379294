"""Reading a train.py work directory without the training stack: configs, tokenizer, objective, checkpoints.

A work directory holds:
  model_config.json   the ModelConfig (the architecture; a checkpoint of another config is refused)
  config.json         the whole ml_collections training config (dataset, objective, schedule ...)
  objective.json      the training objective (fastmt.objectives); absent in older work directories = 'at'
  spm.model           the SentencePiece vocabulary
  checkpoints/        orbax steps (the newest few; what resuming reads)
  best_checkpoint/    optional: the step with the best validation BLEU (config.keep_best_checkpoint)
  train.lock          locked by the train.py run that is writing the directory (an OS file lock, released when
                      the run ends or dies; the file itself stays)

Inference (fastmt.load, decode.py, bench, distill, clusters) imports this module, never fastmt.train_lib.
"""

import contextlib
import gc
import hashlib
import json
import logging
import numbers
import os
import sys
import threading
import time

import filelock
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from fastmt import files, models, quantize
from fastmt.config import ModelConfig
from fastmt.data.tokenizer import Tokenizer
from fastmt.errors import FastmtError, MissingError

MODEL_CONFIG_FILE = 'model_config.json'
TRAIN_CONFIG_FILE = 'config.json'
OBJECTIVE_FILE = 'objective.json'
TOKENIZER_FILE = 'spm.model'
CHECKPOINT_DIR = 'checkpoints'
BEST_CHECKPOINT_DIR = 'best_checkpoint'
TRAINING_LOCK_FILE = 'train.lock'
DEFAULT_OBJECTIVE = 'at'  # what every work directory trained before objectives were recorded used


def _require(workdir: str, name: str) -> str:
  path = os.path.join(workdir, name)
  if not os.path.exists(path):
    if not os.path.isdir(workdir):
      raise MissingError(f'No work directory {workdir!r}')
    raise MissingError(f'No {name} in {workdir!r}: not a train.py work directory')
  return path


def load_model_config(workdir: str) -> ModelConfig:
  path = _require(workdir, MODEL_CONFIG_FILE)
  with open(path) as f:
    return ModelConfig.from_json(f.read(), path)


def _load_json(path: str):
  """A work directory's JSON record; damaged, a FastmtError naming the file."""
  with open(path) as f:
    try:
      return json.load(f)
    except json.JSONDecodeError as e:
      raise FastmtError(f'{path} is not valid JSON ({e}): the work directory is damaged') from None


def load_train_config(workdir: str):
  """The ml_collections config a workdir was trained with."""
  import ml_collections  # pylint: disable=g-import-not-at-top
  path = _require(workdir, TRAIN_CONFIG_FILE)
  record = _load_json(path)
  if not isinstance(record, dict):
    raise FastmtError(f'{path} holds {type(record).__name__}, not a config: the work directory is damaged')
  return ml_collections.ConfigDict(record)


def load_tokenizer(workdir: str) -> Tokenizer:
  path = _require(workdir, TOKENIZER_FILE)
  try:
    return Tokenizer(path)  # a damaged file is Tokenizer's FastmtError
  except OSError as e:
    raise FastmtError(f'{path} cannot be read ({e.strerror or e})') from None


def load_objective(workdir: str) -> str:
  """The objective the workdir's model was trained with ('at' for work directories older than the record)."""
  path = os.path.join(workdir, OBJECTIVE_FILE)
  if not os.path.exists(path):
    return DEFAULT_OBJECTIVE
  record = _load_json(path)
  if not isinstance(record, dict) or 'objective' not in record:
    raise FastmtError(f'{path} records no objective: the work directory is damaged')
  return record['objective']


def load_objective_options(workdir: str) -> dict:
  """The objective's recorded options (an interleaved model's (h, c) ...); {} when it has none."""
  path = os.path.join(workdir, OBJECTIVE_FILE)
  if not os.path.exists(path):
    return {}
  record = _load_json(path)
  return record.get('options', {}) if isinstance(record, dict) else {}


def has_checkpoints(workdir: str) -> bool:
  """Whether a run has saved any checkpoint (the resumable ones or the best one): then its records bind it."""
  for name in (CHECKPOINT_DIR, BEST_CHECKPOINT_DIR):
    directory = os.path.join(workdir, name)
    if os.path.isdir(directory) and any(entry.isdigit() for entry in os.listdir(directory)):
      return True
  return False


def save_objective(workdir: str, objective: str, options: dict | None = None) -> None:
  """Records the objective and its options; resuming a workdir with another objective or other options is
  an error (fine-tune into a new one). A record without checkpoints (a start that failed before its first)
  is replaced."""
  path = os.path.join(workdir, OBJECTIVE_FILE)
  options = dict(options or {})
  if os.path.exists(path) and has_checkpoints(workdir):
    saved, saved_options = load_objective(workdir), load_objective_options(workdir)
    if (saved, saved_options) != (objective, options):
      raise FastmtError(f'{workdir} was trained with objective {saved!r} {saved_options}, not {objective!r} '
                        f'{options}; use a new --workdir (fine-tuning starts from the old one with '
                        '--config.init_from)')
    return
  if jax.process_index() == 0:
    record = {'objective': objective, **({'options': options} if options else {})}
    files.write_whole(path, json.dumps(record, indent=2, sort_keys=True))


@contextlib.contextmanager
def training_lock(workdir: str, wait_s: float = 0):
  """Holds workdir's training lock for the block; a second training run in the same directory is a
  FastmtError at once (or after waiting wait_s seconds for the first to end). Two runs would interleave their
  checkpoints and history and each resume from the other's steps. The lock is the operating system's (flock),
  so a killed run never leaves it held. Multi-host: process 0 takes it (the hosts of one run may share the
  directory) and every process learns whether it got it, so that a refused run stops on every host instead of
  leaving the others waiting at a barrier."""
  lock = None
  if jax.process_index() == 0:
    lock = filelock.FileLock(os.path.join(workdir, TRAINING_LOCK_FILE))
    try:
      lock.acquire(timeout=wait_s)
    except filelock.Timeout:
      lock = None
  held = lock is not None
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
    held = bool(multihost_utils.broadcast_one_to_all(np.int32(held)))
  if not held:
    raise FastmtError(f'another training run is writing {workdir} (it holds '
                      f'{os.path.join(workdir, TRAINING_LOCK_FILE)}): wait for it to end or stop it, or give this '
                      'run another --workdir. On a filesystem without OS file locks (some network mounts) the lock '
                      'is a file that a run which died on another machine can leave behind: delete it if no run '
                      'is writing there')
  try:
    yield
  finally:
    if lock is not None:
      lock.release()


def checkpoint_manager(workdir: str, max_to_keep: int | None = None, best: bool = False,
                       training: bool = False) -> ocp.CheckpointManager:
  """The keep-last-N manager that resuming uses, or (best=True) the keep-the-best-validation-BLEU one.

  Two managers, because one manager that keeps the N best could delete the latest step a resume needs.
  training=True (train.py, which holds the work directory's lock) removes the unfinished saves a killed run
  left (STEP.orbax-checkpoint-tmp*); a reader must not, since a training run may be writing one.
  """
  if best:
    # Its own barrier names: with several processes (--multihost) both managers save the same step at once,
    # and orbax names a save's barriers by its step ('Barrier _async_write_complete.2 is already ongoing').
    options = ocp.CheckpointManagerOptions(max_to_keep=1, best_fn=lambda m: m['valid_bleu'], best_mode='max',
                                           create=True, cleanup_tmp_directories=training,
                                           multiprocessing_options=ocp.options.MultiprocessingOptions(
                                               barrier_sync_key_prefix='best'))
    return ocp.CheckpointManager(os.path.abspath(os.path.join(workdir, BEST_CHECKPOINT_DIR)), options=options)
  options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True, cleanup_tmp_directories=training)
  return ocp.CheckpointManager(os.path.abspath(os.path.join(workdir, CHECKPOINT_DIR)), options=options)


def parse_checkpoint(spec) -> str | int:
  """'latest', 'best' or a step number (int or digits) -> 'latest' | 'best' | int; anything else is an error."""
  if isinstance(spec, numbers.Integral) and not isinstance(spec, bool):  # True is not step 1; np.int64 is one
    return int(spec)
  if isinstance(spec, str) and spec.isascii() and spec.isdigit():  # '²'.isdigit() too, but int() refuses it
    return int(spec)
  if spec in ('latest', 'best'):
    return spec
  raise FastmtError(f"checkpoint must be 'latest', 'best' or a step number, got {spec!r}")


def abstract_params(model_config: ModelConfig):
  """Shapes and dtypes of the model's parameters, without allocating them."""
  return jax.eval_shape(lambda: models.Transformer(model_config).init(
      jax.random.PRNGKey(0), jnp.ones((1, 8), jnp.int32), jnp.ones((1, 8), jnp.int32))['params'])


def checkpoint_error(error: Exception) -> str:
  """A failed checkpoint read in one line: the exception's type and the first line of orbax's message, without
  TensorStore's appendices (the repr of a bound method; the JSON specs of the store, 1,000 characters and more)."""
  reason = (str(error).splitlines() or [''])[0].split(' See full TensorStore details')[0].split(' [tensorstore_spec')[0]
  return f'{type(error).__name__}: {reason}'


def weights_fingerprint(params) -> str:
  """sha256 (16 hex digits) of every parameter's path and float32 values: tells two checkpoints apart where the
  path and step number are the same (a run trained or averaged again)."""
  weights = hashlib.sha256()
  for path, leaf in sorted(jax.tree_util.tree_leaves_with_path(params), key=lambda x: jax.tree_util.keystr(x[0])):
    weights.update(jax.tree_util.keystr(path).encode())
    weights.update(np.ascontiguousarray(np.asarray(leaf, np.float32)).tobytes())
  return weights.hexdigest()[:16]


def restore_params(workdir: str, model_config: ModelConfig | None = None, checkpoint='latest'):
  """Parameters of a workdir's checkpoint ('latest', 'best' or a step), checked against its model config.

  Returns (params, step). A missing work directory, step or best checkpoint, a damaged step and a checkpoint
  of another architecture are FastmtErrors with one clear message.
  """
  model_config = model_config or load_model_config(workdir)
  checkpoint = parse_checkpoint(checkpoint)
  best = checkpoint == 'best'
  directory = os.path.join(workdir, BEST_CHECKPOINT_DIR if best else CHECKPOINT_DIR)
  if not os.path.isdir(directory):
    if best:
      raise MissingError(f'{workdir!r} kept no best checkpoint (train with --config.keep_best_checkpoint=True and '
                         'config.eval_bleu_sentences above 0); use --checkpoint latest or a step')
    if os.path.isfile(os.path.join(workdir, quantize.PARAMS_FILE)):  # same model_config.json name as ours
      raise MissingError(f'No checkpoint under {directory}: {workdir!r} holds a model written by quantize.save, '
                         'which fastmt.quantize.load(directory) reads')
    raise MissingError(f'No checkpoint under {directory}')
  manager = checkpoint_manager(workdir, best=best)
  steps = sorted(manager.all_steps())
  if not steps:
    raise MissingError(f'No checkpoint under {directory}')
  step = steps[-1] if isinstance(checkpoint, str) else checkpoint
  if step not in steps:
    raise MissingError(f'{workdir!r} has no checkpoint step {step}; it has steps {steps}')
  try:
    restored = _restore_on_this_device(manager.directory, step)  # the stored tree: checked below
  except Exception as e:  # orbax raises many types for a damaged step; the user needs to know which step
    interrupt = _interrupt_behind(e)
    if interrupt is not None:  # Ctrl-C or a termination signal met inside orbax's reads: not a damaged step
      raise interrupt from None
    raise FastmtError(f'Checkpoint step {step} in {directory} cannot be read ({checkpoint_error(e)}); is it '
                      'damaged? Try another --checkpoint') from e
  finally:
    manager.close()  # its background threads end here, not as the interpreter exits (tracebacks then)
  params = restored.get('params') if isinstance(restored, dict) else None
  abstract = abstract_params(model_config)
  expected = jax.tree_util.tree_map(lambda x: x.shape, abstract)
  found = None if params is None else jax.tree_util.tree_map(lambda x: tuple(x.shape), params)
  if found is None or jax.tree_util.tree_structure(expected) != jax.tree_util.tree_structure(found) or \
      expected != found:
    raise FastmtError(f'Checkpoint step {step} in {workdir} does not match its model config (another model?)')
  # Flipped bytes that still parse, or a run that diverged, give NaN or Inf weights: every translation would
  # then come out empty or at the length cap with nothing said, so the step is refused here.
  non_finite = [jax.tree_util.keystr(path) for path, x in jax.tree_util.tree_flatten_with_path(params)[0]
                if not np.isfinite(np.asarray(x)).all()]
  if non_finite:
    raise FastmtError(f'Checkpoint step {step} in {directory} has NaN or Inf weights in {len(non_finite)} '
                      f'array(s), e.g. {non_finite[0]}: damaged, or saved after training diverged; try another '
                      '--checkpoint')
  # Float parameters stored in another precision (fastmt-average --dtype bfloat16, to carry a model) load as
  # the model's own dtypes: every caller sees the parameters a model of this config has.
  return jax.tree_util.tree_map(_in_dtype_of, params, abstract), step


# A failed checkpoint read leaves TensorStore's other reads under way after orbax has closed its event loop:
# each one's completion then meets 'RuntimeError: Event loop is closed', which Python reports through
# sys.unraisablehook as a traceback (186 of them, 1,100 lines, above one set-aside warning for a damaged step
# of the tiny model). They are noise about a failure already reported; only they are dropped.
_CLOSED_LOOP_QUIET_S = 0.2  # they come within ~30 ms of the failure; this long without one, and they are over
_CLOSED_LOOP_WAIT_S = 2.0
_unraisable_lock = threading.Lock()


def _is_closed_loop_error(unraisable) -> bool:
  return isinstance(unraisable.exc_value, RuntimeError) and str(unraisable.exc_value) == 'Event loop is closed'


def _is_failed_read_report(unraisable) -> bool:
  """orbax's own read coroutines, left unfinished by a failed (or interrupted) restore, report their failure
  when collected, as late as the interpreter's exit (350 tracebacks, 22,000 lines of TensorStore specs after
  an interrupted decode.py)."""
  return str(unraisable.exc_value).startswith('Encountered error while reading array index')


def _interrupt_behind(error: BaseException) -> BaseException | None:
  """The KeyboardInterrupt or SystemExit (a termination signal's, fastmt.cli) that an orbax error wraps, as its
  cause or context at any depth; None for any other failure."""
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    if isinstance(error, (KeyboardInterrupt, SystemExit)):
      return error
    error = error.__cause__ or error.__context__
  return None


class _NeverRetrieved(logging.Filter):

  def filter(self, record):
    return 'exception was never retrieved' not in record.getMessage()


@contextlib.contextmanager
def closed_loop_tracebacks_dropped():
  """Around an orbax restore: where it fails, the stray 'Event loop is closed' reports of its unfinished reads
  are dropped (waiting until they stop, at most _CLOSED_LOOP_WAIT_S) and the failure is raised as it was;
  every other unraisable exception goes to the hook there was. A read that succeeds costs nothing."""
  with _unraisable_lock:
    previous, last_dropped = sys.unraisablehook, [time.monotonic()]

    def hook(unraisable):
      if _is_closed_loop_error(unraisable) or _is_failed_read_report(unraisable):
        last_dropped[0] = time.monotonic()
      else:
        previous(unraisable)

    def after_failure(unraisable):  # for the rest of the process: the failed reads' own late reports
      if not _is_failed_read_report(unraisable):
        previous(unraisable)

    sys.unraisablehook = hook
    failed = False
    try:
      yield
    except BaseException:
      failed = True
      last_dropped[0] = deadline = time.monotonic()  # the quiet is counted from the failure, not the start
      deadline += _CLOSED_LOOP_WAIT_S
      while time.monotonic() < deadline and time.monotonic() - last_dropped[0] < _CLOSED_LOOP_QUIET_S:
        time.sleep(0.02)
      # The reads' own tasks hold the same error; collected later (at exit), asyncio would log each one as
      # 'Task exception was never retrieved'. Collected now, without that log.
      asyncio_log = logging.getLogger('asyncio')
      never_retrieved = _NeverRetrieved()
      asyncio_log.addFilter(never_retrieved)
      try:
        gc.collect()
      finally:
        asyncio_log.removeFilter(never_retrieved)
      raise
    finally:
      if sys.unraisablehook is hook:  # a hook another hand set meanwhile stays
        sys.unraisablehook = after_failure if failed else previous


def _restore_on_this_device(directory, step: int):
  """The whole stored tree of a checkpoint step, every array on this process's first device, whatever devices
  wrote it: a checkpoint saved on 8 TPU cores or several GPUs (a sharding over their ids) restores on a
  one-device CPU, which orbax's default (the saved sharding) refuses as a topology mismatch. Shapes and dtypes
  are the stored ones, read from the step's metadata."""
  manager = ocp.CheckpointManager(directory, options=ocp.CheckpointManagerOptions(create=False),
                                  item_handlers=ocp.StandardCheckpointHandler())
  try:
    with closed_loop_tracebacks_dropped():
      return manager.restore(step, args=ocp.args.StandardRestore(on_this_device(manager.item_metadata(step))))
  finally:
    manager.close()


def on_this_device(stored):
  """A restore target for orbax's metadata of a stored tree (CheckpointManager.item_metadata,
  StandardCheckpointer.metadata): the stored shapes and dtypes, every array on this process's first device,
  whatever devices saved them (orbax's default restores the saved sharding, and refuses one over devices this
  machine lacks)."""
  stored = getattr(stored, 'item_metadata', stored)  # StandardCheckpointer.metadata wraps the tree once more
  here = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
  return jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=here),
                                getattr(stored, 'tree', stored))


def _in_dtype_of(value, abstract):
  """value cast to abstract's dtype where both are floating point and differ; else value itself."""
  if value.dtype != abstract.dtype and jnp.issubdtype(value.dtype, jnp.floating) and \
      jnp.issubdtype(abstract.dtype, jnp.floating):
    return np.asarray(value).astype(abstract.dtype)
  return value
