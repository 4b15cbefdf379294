"""Training: a pure jitted train step over a data-parallel Mesh, orbax checkpoints, resume, validation.

    train_and_evaluate(config, workdir)

A killed run resumes from its latest checkpoint with nothing lost: the batch of step s is a pure function of
(data, seed, s) (see data/batching.py) and the dropout key is fold_in(rng, step), so a resumed run takes the
same steps as an uninterrupted one. Multi-host: call `jax.distributed.initialize()` first (train.py does when
--multihost is given); each process feeds its slice of the global batch.
"""

import functools
import json
import re
import logging
import math
import numbers
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from flax.training import train_state
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding, PartitionSpec as P

from fastmt import decode_lib, files, models, objectives, progress as progress_lib, workdir as workdir_lib
from fastmt.config import ModelConfig, check_training_keys
from fastmt.errors import FastmtError
from fastmt.data import corpus, distilled, pipeline
from fastmt.data.tokenizer import NORMALIZATIONS, PAD_ID
from fastmt.decoding import registry
from fastmt.decoding.step import is_whole_number
from fastmt import translate
from fastmt.translate import DecodeSettings, TranslationStats, Translator
from fastmt.checkpoint_average import AVERAGED_FROM_FILE
from fastmt.workdir import MODEL_CONFIG_FILE, TOKENIZER_FILE, TRAIN_CONFIG_FILE

logger = logging.getLogger(__name__)  # named 'fastmt.<module>': users set its level or handlers by name


class TrainState(train_state.TrainState):
  rng: jax.Array  # base key; the step's dropout key is fold_in(rng, step)


def learning_rate_schedule(config):
  """Linear warm-up to config.learning_rate, inverse-sqrt decay, optional linear cool-down to zero.

  The cool-down (the last `cooldown_fraction` of num_train_steps) is what a fixed, short budget wants: the
  model ends at a low learning rate instead of wherever inverse-sqrt happens to be.
  """
  peak, warmup, total = config.learning_rate, config.warmup_steps, config.num_train_steps
  cooldown_start = int(total * (1 - config.cooldown_fraction))

  def schedule(step):
    step = jnp.asarray(step, jnp.float32)
    rate = peak * jnp.minimum(step / warmup, jnp.sqrt(warmup / jnp.maximum(step, warmup)))
    rate_at_cooldown = peak * jnp.sqrt(warmup / max(cooldown_start, warmup))
    cooling = rate_at_cooldown * jnp.maximum(0.0, total - step) / max(1, total - cooldown_start)
    return jnp.where(step >= cooldown_start, jnp.minimum(rate, cooling), rate)

  return schedule


def make_optimizer(config):
  return optax.chain(
      optax.clip_by_global_norm(config.grad_clip_norm),
      optax.adamw(learning_rate_schedule(config), b1=0.9, b2=0.98, eps=1e-9,
                  weight_decay=config.weight_decay))


def initial_state(model_config: ModelConfig, config) -> TrainState:
  model = models.Transformer(model_config)
  rng = jax.random.PRNGKey(config.seed)
  init_rng, dropout_rng = jax.random.split(rng)
  dummy = jnp.ones((1, 8), jnp.int32)
  params = jax.jit(model.init)(init_rng, dummy, dummy)['params']
  return TrainState.create(apply_fn=model.apply, params=params, tx=make_optimizer(config), rng=dropout_rng)


def cross_entropy(logits, targets, label_smoothing: float, weights=None):
  """Token-level label-smoothed cross entropy and accuracy, summed over non-pad targets.

  The smoothed target puts (1 - label_smoothing) on the reference and spreads label_smoothing over the other
  V - 1 tokens. Written with logsumexp and sums over the vocabulary so that no [tokens, V] one-hot or
  log-softmax tensor is materialised (a third of the step's memory traffic on CPU otherwise).
  weights: float [B, T] loss weight per prediction (the objective's); default: 1 on every non-PAD target.
  Returns dict of sums: loss, nll (unsmoothed), correct, tokens (the sum of weights).
  """
  vocab = logits.shape[-1]
  if weights is None:
    weights = (targets != PAD_ID).astype(jnp.float32)
  logits = logits.astype(jnp.float32)
  log_normaliser = jax.nn.logsumexp(logits, axis=-1)
  target_logit = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
  nll = log_normaliser - target_logit
  mean_nll_other = (vocab * log_normaliser - logits.sum(-1) - nll) / (vocab - 1)  # mean over v != target
  loss = (1.0 - label_smoothing) * nll + label_smoothing * mean_nll_other
  correct = (jnp.argmax(logits, -1) == targets).astype(jnp.float32)
  return {'loss': (loss * weights).sum(), 'nll': (nll * weights).sum(), 'correct': (correct * weights).sum(),
          'tokens': weights.sum()}


def train_step(state: TrainState, batch, label_smoothing: float, objective_fn=objectives.get('at')):
  """One optimiser step on a batch dict {source, decoder_input, target}; returns (state, metric sums).

  objective_fn (fastmt.objectives) turns the batch into the decoder's inputs, positions, mask and targets.
  """
  dropout_rng = jax.random.fold_in(state.rng, state.step)
  inputs = objective_fn(batch, state.step)

  def loss_fn(params):
    logits = state.apply_fn({'params': params}, inputs.source, inputs.decoder_input, inputs.positions,
                            inputs.self_mask, deterministic=False, directions=inputs.directions,
                            rngs={'dropout': dropout_rng})
    sums = cross_entropy(logits, inputs.target, label_smoothing, inputs.weights)
    return sums['loss'] / jnp.maximum(sums['tokens'], 1.0), sums

  grads, sums = jax.grad(loss_fn, has_aux=True)(state.params)
  new_state = state.apply_gradients(grads=grads)
  sums['grad_norm'] = optax.tree.norm(grads)
  return new_state, sums


def eval_step(params, batch, step, apply_fn, objective_fn=objectives.get('at')):
  inputs = objective_fn(batch, step)
  logits = apply_fn({'params': params}, inputs.source, inputs.decoder_input, inputs.positions, inputs.self_mask,
                    directions=inputs.directions)
  return cross_entropy(logits, inputs.target, 0.0, inputs.weights)


def check_or_save_model_config(workdir: str, model_config: ModelConfig):
  """The workdir's model config must match: resuming another architecture's checkpoint is an error."""
  path = os.path.join(workdir, MODEL_CONFIG_FILE)
  if not os.path.exists(path) and workdir_lib.has_checkpoints(workdir):  # writing this run's would mislabel them
    raise FastmtError(f'{workdir} holds checkpoints but no {MODEL_CONFIG_FILE}: the work directory is damaged '
                      f'(put back the {MODEL_CONFIG_FILE} it was trained with, or use a new --workdir)')
  if os.path.exists(path) and workdir_lib.has_checkpoints(workdir):
    with open(path) as f:
      saved = ModelConfig.from_json(f.read(), path)
    if saved != model_config:
      diff = {k: (v, getattr(model_config, k)) for k, v in saved.__dict__.items()
              if getattr(model_config, k) != v}
      raise FastmtError(f'{workdir} holds a checkpoint of another model config; differing fields '
                       f'(saved, requested): {diff}. Use a new --workdir or the saved config.')
  elif jax.process_index() == 0:  # new, or left by a start that failed before its first checkpoint
    files.write_whole(path, model_config.to_json())


def validation_bleu(params, model_config, tokenizer, validation, num_sentences: int, objective: str = 'at',
                    objective_options=None, stats=None, tokenize: str = '13a'):
  """Greedy BLEU on the first validation sentences (ParallelText.head: of every direction of a multilingual
  dataset), with the objective's own decoder (greedy or ib).

  stats (a fastmt.TranslationStats) receives the counts, e.g. the outputs that reached the cap without EOS;
  the Translator's warning about those is not logged here. tokenize: sacreBLEU's tokenizer
  (config.eval_bleu_tokenize).
  """
  # Each process decodes on its own devices: the training state's replicated arrays span every process's
  # (--multihost), which device_put onto this process's mesh cannot move ('cross-host device transfers'); the
  # copy on this process's first device is the whole array.
  params = jax.tree_util.tree_map(
      lambda x: x.addressable_data(0) if isinstance(x, jax.Array) and not x.is_fully_addressable else x, params)
  translator = Translator(model_config, params, tokenizer, DecodeSettings(registry.default_algorithm(objective)),
                          objective=objective, objective_options=objective_options)
  # A multilingual split's lines in turn from each direction: its first lines alone were all of one.
  sample = validation.head(num_sentences)
  sources, references = sample.sources, sample.targets
  # The per-call warnings came at every evaluation without naming the split (an undertrained model repeats
  # itself); the history's valid_outputs_at_cap counts the outputs at the cap instead.
  with translate.quiet_repeated_warnings():
    hypotheses, _ = translator.translate(sources, batch_size=32, stats=stats)
  return decode_lib.bleu_metric(tokenize).corpus_score(hypotheses, [references]).score


def _metric_writer(workdir, start_step: int):
  """TensorBoard events; those past start_step, left by a run killed after its last checkpoint, are dropped
  (the resumed run logs those steps again)."""
  if jax.process_index() != 0:
    return None
  from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
  return SummaryWriter(os.path.join(workdir, 'tensorboard'), purge_step=start_step + 1)


def with_absolute_paths(config):
  """A copy of config whose file and directory names are absolute (os.PathLike ones as str; '' stays unset).

  The work directory records the config (config.json), and decode.py, fastmt-bench, fastmt-distill and a
  resumed run read its dataset files from there: a relative name would be read from wherever those run,
  another file or none.
  """
  config = config.copy_and_resolve_references()
  if 'init_from' in config:
    with config.ignore_type():
      config.init_from = corpus.absolute_path(config.init_from)
  dataset = config.get('dataset')
  if dataset is not None:
    absolute = corpus.with_absolute_paths(dataset.to_dict())
    with dataset.ignore_type():
      for key, value in absolute.items():
        if value != dataset[key]:
          dataset[key] = value
  return config


def _newest_checkpoint_step(workdir: str) -> int:
  """The step of workdir's newest checkpoint, 0 if none; writes nothing (a refused run leaves no trace)."""
  if not os.path.isdir(os.path.join(workdir, workdir_lib.CHECKPOINT_DIR)):
    return 0
  manager = workdir_lib.checkpoint_manager(workdir)
  try:
    return manager.latest_step() or 0
  finally:
    manager.close()


FINISHED_RUN_LOCK_WAIT_S = 600  # how long resuming a finished run waits for another process holding its lock


def train_and_evaluate(config, workdir: str) -> TrainState:
  """Trains config's model in workdir, resuming from its latest checkpoint; returns the final state."""
  workdir = os.fspath(workdir)
  if not workdir:  # an unset shell variable (`--workdir=$RUN`): makedirs('') was a raw FileNotFoundError
    raise FastmtError('the work directory is empty: give --workdir a path')
  config = with_absolute_paths(config)
  check_training_keys(config, [key for key in objectives.OPTIONS_KEY.values() if key])  # typos, first
  objective_name = config.get('objective', workdir_lib.DEFAULT_OBJECTIVE)
  objective_options = objectives.options_of(config, objective_name)  # bad names and keys fail here, first
  # The architecture too (unknown keys, dtype, shapes), before the corpus loads or anything is written: a
  # mistyped override costs nothing and leaves no half-made work directory behind.
  _check_objective_fits_model(objective_name, objective_options, ModelConfig.from_config(config.model, 1))
  check_training_settings(config)
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    raise FastmtError(f'--workdir {workdir} is a file, not a directory')
  if os.path.exists(os.path.join(workdir, AVERAGED_FROM_FILE)):  # its checkpoint holds parameters only
    raise FastmtError(f'{workdir} holds averaged parameters (fastmt-average; no optimiser state): decode it, or '
                      'fine-tune from it with --config.init_from and a new --workdir')
  try:
    os.makedirs(workdir, exist_ok=True)
  except (FileExistsError, NotADirectoryError) as e:
    raise FastmtError(f'cannot make the work directory {workdir}: {e.strerror} ({e.filename})') from None
  # A finished run (its newest checkpoint at num_train_steps) only restores and returns, in seconds: a second
  # process resuming it at the same time (notebooks 02-05 each resume 01's model; scripts sharing one base
  # model) waits for the lock instead of failing. A run with steps left to train is refused at once.
  finished = _refuse_a_run_past(workdir, config.num_train_steps) >= config.num_train_steps
  with workdir_lib.training_lock(workdir, wait_s=FINISHED_RUN_LOCK_WAIT_S if finished else 0):
    # Again once the lock is held: the run it waited for may have trained past this config's count meanwhile
    # (resumed with a higher num_train_steps), and this one would record the lower count over its checkpoints.
    _refuse_a_run_past(workdir, config.num_train_steps)
    return _train_in(config, workdir, objective_name, objective_options)


def _with_curriculum_length(workdir: str, objective_name: str, options: dict, num_train_steps: int) -> dict:
  """An hrt run's options with its curriculum's T (curriculum_steps 0: the run's num_train_steps) made explicit
  at its first start, so that objective.json records it and a resume keeps it. Filled in again at every start,
  a run trained to 2400 steps and continued to 4000 fell back from p_k = 1 to 0.6: 40% of its rows went back
  to the chunk-size-1 tasks. A run recorded before T was kept (0 in its record) goes on as it did, stretched
  to the new count (warned of)."""
  if objective_name != 'hrt' or options.get('curriculum_steps') or not options.get('curriculum', True):
    return options
  if not workdir_lib.has_checkpoints(workdir) or workdir_lib.load_objective(workdir) != 'hrt':
    return {**options, 'curriculum_steps': int(num_train_steps)}
  recorded = workdir_lib.load_objective_options(workdir)
  kept = recorded.get('curriculum_steps') or 0
  if kept:
    if kept != num_train_steps:
      logger.info('%s keeps its HRT curriculum of %d steps (p_k = 1 from step %d on), recorded at its start; '
                  'config.hrt.curriculum_steps in a new --workdir sets another', workdir, kept, kept)
    return {**options, 'curriculum_steps': kept}
  try:
    trained_to = workdir_lib.load_train_config(workdir).get('num_train_steps')
  except FastmtError:
    trained_to = None
  if trained_to is not None and trained_to != num_train_steps:
    logger.warning('%s records its HRT curriculum as num_train_steps (from before fastmt kept the count): it '
                   'stretches from %s to %d steps, so p_k falls back from the resumed step on', workdir,
                   trained_to, num_train_steps)
  return options


def _refuse_a_run_past(workdir: str, num_train_steps: int) -> int:
  """The work directory's newest checkpoint step, or an error where it is past num_train_steps (such a run
  printed 'Resumed from step N', trained nothing and recorded the lower count)."""
  newest = _newest_checkpoint_step(workdir)
  if newest > num_train_steps:
    raise FastmtError(f'{workdir} holds a run at step {newest}, past config.num_train_steps={num_train_steps}: '
                      'nothing to train (decode it as it is, raise num_train_steps to go on, or give a new --workdir)')
  return newest


def _train_in(config, workdir: str, objective_name: str, objective_options) -> TrainState:
  """train_and_evaluate's run, once the settings are checked and the work directory is this run's alone."""
  mesh = jax.make_mesh((jax.device_count(),), ('data',), axis_types=(jax.sharding.AxisType.Auto,))
  data_sharding = NamedSharding(mesh, P('data'))
  replicated = NamedSharding(mesh, P())
  data = pipeline.load_training_data(config, workdir, batch_multiple=jax.device_count())
  model_config = ModelConfig.from_config(config.model, data.tokenizer.vocab_size)
  check_or_save_model_config(workdir, model_config)
  objective_options = _with_curriculum_length(workdir, objective_name, objective_options, config.num_train_steps)
  objective_fn = objectives.build(objective_name, objective_options, data.tokenizer, config.num_train_steps)
  _check_objective_fits_model(objective_name, objective_options, model_config)
  workdir_lib.save_objective(workdir, objective_name, objective_options)
  _warn_of_a_changed_corpus(workdir, config)
  if config.get('eval_bleu_sentences'):  # the validation BLEU of every evaluation would be about 0 for nothing
    decode_lib.warn_of_13a_on_cjk(data.validation.head(config.eval_bleu_sentences).targets,
                                  config.get('eval_bleu_tokenize', '13a'), 'config.eval_bleu_tokenize=')
  state = jax.device_put(initial_state(model_config, config), replicated)
  manager = workdir_lib.checkpoint_manager(workdir, config.max_checkpoints_to_keep, training=True)
  keep_best = config.get('keep_best_checkpoint') and config.get('eval_bleu_sentences')
  if config.get('keep_best_checkpoint') and not keep_best:  # the RoyalFlush configs keep one by default
    logger.warning('No best checkpoint is kept: config.keep_best_checkpoint chooses by validation BLEU, which '
                   'config.eval_bleu_sentences=0 does not compute (decode the latest checkpoint)')
  best_manager = workdir_lib.checkpoint_manager(workdir, best=True, training=True) if keep_best else None

  def said(line):  # once for the run (process 0), not once per host
    if jax.process_index() == 0:
      print(line, file=sys.stderr)

  if manager.all_steps():
    state, manager = _restore_newest_readable(manager, state, workdir, config.max_checkpoints_to_keep)
    said(f'Resumed from step {int(state.step)} of {workdir}')
  elif config.get('init_from'):
    state = state.replace(params=replicated_from_host(_initial_params(config.init_from, model_config), replicated))
    said(f'Fine-tuning from {config.init_from}')
  # Recorded once the state has been restored (or made): a refused resume (no checkpoint step reads) leaves the
  # records of the run its checkpoints come from.
  _record_batch_plan(workdir, data.train_batches)
  if jax.process_index() == 0:  # whole or not at all: a half-written record would hide the next run's changes
    files.write_whole(os.path.join(workdir, TRAIN_CONFIG_FILE), config.to_json(indent=2))
  start_step = int(state.step)
  _forget_history_after(workdir, start_step)

  jit_train_step = jax.jit(functools.partial(train_step, label_smoothing=config.label_smoothing,
                                             objective_fn=objective_fn), donate_argnums=(0,))
  jit_eval_step = jax.jit(functools.partial(eval_step, apply_fn=state.apply_fn, objective_fn=objective_fn))
  rows_per_process = lambda x: x[jax.process_index()::jax.process_count()]

  def to_device(batch):
    arrays = {'source': batch.source, 'decoder_input': batch.decoder_input, 'target': batch.target}
    return {k: jax.make_array_from_process_local_data(data_sharding, rows_per_process(v))
            for k, v in arrays.items()}

  writer = _metric_writer(workdir, start_step)
  progress = progress_lib.progress(total=config.num_train_steps, initial=start_step, unit='step', desc='train',
                                  disable=jax.process_index() != 0)
  window = {'loss': 0.0, 'tokens': 0.0, 'correct': 0.0, 'real_tokens': 0, 'steps': 0, 'start': time.perf_counter()}
  try:
    for step in range(start_step, config.num_train_steps):
      batch = data.train_batches.batch(step)
      state, sums = jit_train_step(state, to_device(batch))
      window['real_tokens'] += batch.num_tokens
      window['steps'] += 1
      for k in ('loss', 'tokens', 'correct'):
        window[k] += sums[k]  # device scalars: no host sync until logged
      done = step + 1
      progress.update(1)
      if done % config.log_every_steps == 0 or done == config.num_train_steps:
        jax.block_until_ready(state)  # steps run asynchronously: time them only once they have finished
        elapsed = time.perf_counter() - window['start']
        metrics = {'train_loss': float(window['loss'] / window['tokens']),
                   'train_accuracy': float(window['correct'] / window['tokens']),
                   'tokens_per_s': window['real_tokens'] / elapsed,
                   'steps_per_s': window['steps'] / elapsed,
                   # the rate of this line's last update: optax applies schedule(count), then counts it, so
                   # update number `done` ran at schedule(done - 1) (the first at 0: it moves Adam's moments)
                   'learning_rate': float(learning_rate_schedule(config)(done - 1)),
                   # the steps the loss and accuracy average: fewer than log_every_steps in the first line
                   # after a resume (the steps before it, since the last line, ran in the killed run)
                   'train_window_steps': window['steps']}
        progress.set_postfix(loss=f"{metrics['train_loss']:.3f}", tok_s=f"{metrics['tokens_per_s']:.0f}")
        _write(writer, done, metrics)
        _append_history(workdir, {'step': done, **metrics})
        window = {'loss': 0.0, 'tokens': 0.0, 'correct': 0.0, 'real_tokens': 0, 'steps': 0,
                  'start': time.perf_counter()}
      if done % config.eval_every_steps == 0 or done == config.num_train_steps:
        val = _validation_metrics(state.params, state.step, jit_eval_step, data, to_device, model_config, config,
                                  (objective_name, objective_options))
        progress.write(f'step {done}: ' + ', '.join(f'{k} {v:.3f}' if isinstance(v, float) else f'{k} {v}'
                                                    for k, v in val.items()))
        _write(writer, done, val)
        _append_history(workdir, {'step': done, **val})
        if best_manager is not None and 'valid_bleu' in val:
          best_manager.save(done, args=ocp.args.StandardSave(state), metrics=val)
        window['start'] = time.perf_counter()  # validation time is not training throughput
      if done % config.checkpoint_every_steps == 0 or done == config.num_train_steps:
        manager.save(done, args=ocp.args.StandardSave(state))
  finally:  # a run that dies (an exception in a notebook or test) still lets its last save finish
    manager.wait_until_finished()
    if best_manager is not None:
      best_manager.wait_until_finished()
    progress.close()
  return state


def check_training_settings(config) -> None:
  """The loop's counts, before anything is loaded or written: a zero interval used to stop the run with a
  ZeroDivisionError after its first compiled step, warmup_steps=0 to train NaN weights (0 / 0 in the
  schedule) without a word."""
  for name in ('num_train_steps', 'warmup_steps', 'tokens_per_batch', 'log_every_steps', 'eval_every_steps',
               'checkpoint_every_steps', 'max_checkpoints_to_keep'):
    value = config.get(name)
    if name == 'max_checkpoints_to_keep' and value is None:  # orbax's max_to_keep=None: keep every checkpoint
      continue
    if not is_whole_number(value) or value < 1:
      why = {'warmup_steps': ' (the inverse-square-root decay is measured from it)',
             'max_checkpoints_to_keep': ' (0 kept none: the run would end with nothing to decode or resume)'}
      raise FastmtError(f'config.{name} must be a whole number >= 1, got {value!r}{why.get(name, "")}')
  # The optimiser's rates: a negative learning rate trains away from the data, without a word.
  for name, lowest, above in (('learning_rate', 0, True), ('weight_decay', 0, False), ('grad_clip_norm', 0, True),
                              ('label_smoothing', 0, False), ('cooldown_fraction', 0, False)):
    value = config.get(name)
    if value is None:  # the optimiser reads every one: a missing one was a raw AttributeError
      raise FastmtError(f'config.{name} is missing (or None): every training config sets it, as '
                        'configs/quickstart.py does')
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or \
        value < lowest or (above and value == lowest):
      raise FastmtError(f'config.{name} must be a number {">" if above else ">="} {lowest}, got {value!r}')
  if (config.get('label_smoothing') or 0) >= 1:
    raise FastmtError(f'config.label_smoothing must be below 1, got {config.get("label_smoothing")!r}')
  if (config.get('cooldown_fraction') or 0) > 1:  # 1: warm-up, then a linear decay over the whole run
    raise FastmtError(f'config.cooldown_fraction must be at most 1, got {config.get("cooldown_fraction")!r}')
  if config.get('vocab_normalization', 'nmt_nfkc') not in NORMALIZATIONS:  # before anything is written
    raise FastmtError(f'config.vocab_normalization must be one of {NORMALIZATIONS}, got '
                      f'{config.get("vocab_normalization")!r}')
  # A warm-up past the cool-down's start (the quickstart's 200 warm-up steps with num_train_steps=100): the rate
  # never reaches config.learning_rate (44% of it there; with warmup_steps=100000, a few millionths), legal but
  # seldom meant. Below half the peak is named.
  highest = float(jnp.max(learning_rate_schedule(config)(jnp.arange(1, config.num_train_steps + 1))))
  if highest < 0.5 * config.learning_rate:
    logger.warning('The learning rate never exceeds %.3g, %.0f%% of config.learning_rate=%g: warmup_steps=%d is '
                   'longer than this run of %d steps before its cool-down (cooldown_fraction=%g); lower '
                   'warmup_steps for a short run', highest, 100 * highest / config.learning_rate,
                   config.learning_rate, config.warmup_steps, config.num_train_steps, config.cooldown_fraction)
  # Validation BLEU's sentences: a negative count sliced the split from its end (all but the last N).
  eval_bleu_sentences = config.get('eval_bleu_sentences', 0)
  if not is_whole_number(eval_bleu_sentences) or eval_bleu_sentences < 0:
    raise FastmtError(f'config.eval_bleu_sentences must be a whole number >= 0 (0: validation loss only), got '
                      f'{eval_bleu_sentences!r}')
  # The batch plan's seed and mixed distillation's share of raw targets: numpy refused a negative seed, and
  # TrainBatches a p_raw outside [0, 1], after the vocabulary had been trained and written.
  seed = config.get('seed', 0)
  if not is_whole_number(seed) or seed < 0:
    raise FastmtError(f'config.seed must be a whole number >= 0, got {seed!r}')
  p_raw = config.dataset.get('p_raw', 0.0)
  if isinstance(p_raw, bool) or not isinstance(p_raw, numbers.Real) or not 0 <= p_raw <= 1:
    raise FastmtError(f'config.dataset.p_raw must be a number in [0, 1] (the share of raw targets in mixed '
                      f'distillation), got {p_raw!r}')
  if p_raw and not config.dataset.get('distilled_dir'):  # configs/hrt.py's 0.5, trained on raw data
    logger.warning('config.dataset.p_raw=%g mixes raw targets into distilled ones, but config.dataset.distilled_dir '
                   'is not set: this run trains on the raw targets only', p_raw)
  # The training buckets' padded lengths (a bucket of 0 divided by zero, a fraction failed the batch plan,
  # both after the vocabulary had been trained and written).
  buckets = config.get('bucket_lengths', ())
  if not isinstance(buckets, (tuple, list)) or any(not is_whole_number(b) or b < 1 for b in buckets) or \
      len(set(buckets)) != len(buckets):
    raise FastmtError(f'config.bucket_lengths must be distinct whole numbers >= 1 (padded lengths of the '
                      f'training batches; model.max_length is added), got {buckets!r}')
  init_from = config.get('init_from')
  if init_from and not workdir_lib.has_checkpoints(init_from):
    what = 'no work directory' if not os.path.isdir(init_from) else 'a directory without checkpoints'
    raise FastmtError(f'config.init_from {init_from!r} is {what}: it names the train.py work directory whose '
                      'latest checkpoint (and vocabulary) fine-tuning starts from')
  if init_from:  # its shape too, before anything is written (the run takes its vocabulary, so not vocab_size)
    init_config = workdir_lib.load_model_config(init_from)
    _check_fine_tunable(init_from, init_config, ModelConfig.from_config(config.model, init_config.vocab_size))
  distilled_dir = config.dataset.get('distilled_dir')
  if distilled_dir:  # its vocabulary is read before its manifest: a wrong path was a raw FileNotFoundError
    missing = [name for name in (TOKENIZER_FILE, distilled.MANIFEST_FILE)
               if not os.path.isfile(os.path.join(distilled_dir, name))]
    if missing:
      what = 'no directory' if not os.path.isdir(distilled_dir) else f'a directory without {" or ".join(missing)}'
      raise FastmtError(f'config.dataset.distilled_dir {distilled_dir!r} is {what}: it names a python -m '
                        'fastmt.distill output directory (the teacher\'s translations of the training sources)')
  corpus.training_split(config.dataset)  # a split reaching into validation or test is refused here
  decode_lib.check_bleu_tokenize(config.get('eval_bleu_tokenize', '13a'))


BATCH_PLAN_FILE = 'batch_plan.json'  # the training batches' shapes, beside config.json


def _record_batch_plan(workdir: str, batches) -> None:
  """Writes the training batches' plan (rows per batch for each bucket length, batches per epoch, devices), and
  warns first where a resumed run's plan differs from the recorded one: rows per batch are rounded to a
  multiple of the device count, so a run resumed on another number of devices (a GPU run resumed on a CPU, a
  pre-empted job on another slice) draws other batches from its step on than the uninterrupted run would
  have, without any other sign: the epoch under way finishes with the new plan's batches of that epoch (some
  of its pairs then never seen, others twice: 46 of 186 unseen in a simulation of 3 devices then 2); every
  later epoch sees each pair once, in another grouping."""
  plan = {'devices': jax.device_count(), 'batches_per_epoch': batches.batches_per_epoch,
          'rows_per_batch': {str(length): rows for length, rows in sorted(batches.rows_per_batch.items())}}
  path = os.path.join(workdir, BATCH_PLAN_FILE)
  if workdir_lib.has_checkpoints(workdir) and os.path.isfile(path):
    try:
      with open(path, encoding='utf-8') as f:
        recorded = json.load(f)
    except (OSError, ValueError):
      recorded = None
    if isinstance(recorded, dict) and {k: v for k, v in recorded.items() if k != 'devices'} != \
        {k: v for k, v in plan.items() if k != 'devices'}:
      logger.warning('This run plans its training batches for %d device(s) (%d batches an epoch), the '
                     'checkpoints were trained with a plan for %s (%s batches an epoch): another device count, '
                     'or another tokens_per_batch or bucket_lengths. From here on the batches differ from an '
                     'uninterrupted run\'s, and the epoch under way sees some pairs twice and others not at all '
                     '(%s records the plans)', plan['devices'],
                     plan['batches_per_epoch'], recorded.get('devices'), recorded.get('batches_per_epoch'), path)
  if jax.process_index() == 0:
    files.write_whole(path, json.dumps(plan, indent=2))


# What the vocabulary (spm.model) was trained with: a resumed run keeps it, whatever these say now.
VOCABULARY_KEYS = ('vocab_size', 'vocab_character_coverage', 'vocab_normalization')

# What shapes the steps still to train (their learning rates, their updates): changed on a resume, the run is
# a hybrid of two settings.
RESUME_SCHEDULE_KEYS = ('num_train_steps', 'learning_rate', 'warmup_steps', 'cooldown_fraction', 'weight_decay',
                        'grad_clip_norm', 'label_smoothing')


def _warn_of_a_changed_corpus(workdir: str, config) -> None:
  """A resumed run keeps its vocabulary (spm.model) whatever the config says now: warn when the dataset or the
  vocabulary size differs from the recorded config.json, which this run then overwrites (text in characters
  the old vocabulary lacks would train as <unk> without a word)."""
  path = os.path.join(workdir, TRAIN_CONFIG_FILE)
  if not workdir_lib.has_checkpoints(workdir) or not os.path.isfile(path):
    return
  try:
    with open(path, encoding='utf-8') as f:
      recorded = json.load(f)
  except (OSError, ValueError):
    return  # nothing to compare with; the record is rewritten below
  if not isinstance(recorded, dict):
    return
  current = json.loads(config.to_json())  # tuples as lists, as the record holds them
  old, new = recorded.get('dataset') or {}, current.get('dataset') or {}
  old.setdefault('train_split', 'train')  # recorded before the field existed: the whole split
  old = corpus.with_absolute_paths(old)  # recorded before they were made absolute: as this run would read them
  changed = [f'dataset.{k}' for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k) and k != 'p_raw']
  changed += [k for k in VOCABULARY_KEYS if k in recorded and recorded[k] != current.get(k)]
  if changed:
    logger.warning('%s resumes from its checkpoint with %s changed since its recorded config: it keeps its '
                   'vocabulary (%s) and its steps so far (text in characters the vocabulary lacks trains as '
                   '<unk>; a new --workdir with init_from starts afresh)',
                   workdir, ', '.join(changed), workdir_lib.TOKENIZER_FILE)
  # A run killed under one budget and resumed under another (a script's STEPS changed between the two) is a
  # hybrid that the rewritten config.json would not show: said here, with the values before and after.
  schedule = [f'{k} {recorded[k]!r} -> {current.get(k)!r}' for k in RESUME_SCHEDULE_KEYS
              if k in recorded and recorded[k] != current.get(k)]
  # p_raw chooses each pair's target (raw or distilled) at every step from here on, like a schedule's values.
  if old.get('p_raw', 0.0) != new.get('p_raw', 0.0):
    schedule.append(f"dataset.p_raw {old.get('p_raw', 0.0)!r} -> {new.get('p_raw', 0.0)!r}")
  if schedule:
    logger.warning('%s resumes from its checkpoint with %s: its steps so far were trained with the recorded '
                   'values, the rest train with these (config.json now records only these)', workdir,
                   ', '.join(schedule))
  # The seed orders the batches of every epoch (dropout's key is the checkpoint's): another one reorders them
  # from the resumed step on, in the middle of an epoch.
  if 'seed' in recorded and recorded['seed'] != current.get('seed'):
    logger.warning('%s resumes from its checkpoint with seed %r -> %r: from here on its batches come in the new '
                   'seed\'s order, so the epoch under way sees some pairs twice and others not at all (dropout '
                   'keeps the checkpoint\'s key)', workdir, recorded['seed'], current.get('seed'))


def _restore_newest_readable(manager, state, workdir: str, max_to_keep):
  """(state, manager) restored from the newest checkpoint step that reads.

  A newer step that does not (a damaged file, an empty step directory) is set aside as STEP.unreadable, with a
  warning, once an older one has read: a resume loses the steps since that one instead of stopping with a
  traceback, and the set-aside directory stays for inspection, out of the way of the step that training will
  save again under its number. If no step reads (an environment that cannot read any, not damage), nothing is
  renamed and the newest step's error is reported.
  """
  failures = []  # (step, error) of the newer steps that did not read
  for step in sorted(manager.all_steps(), reverse=True):
    try:
      with workdir_lib.closed_loop_tracebacks_dropped():
        restored = manager.restore(step, args=ocp.args.StandardRestore(state))
    except Exception as e:  # pylint: disable=broad-except  (orbax raises many kinds for a damaged step)
      failures.append((step, e))
      manager.close()  # a manager that failed a restore fails the next one too: a fresh one per try
      manager = workdir_lib.checkpoint_manager(workdir, max_to_keep, training=True)
      continue
    if not failures:
      return restored, manager
    manager.close()
    if jax.process_index() == 0:
      for bad, error in failures:
        directory = os.path.join(workdir, workdir_lib.CHECKPOINT_DIR, str(bad))
        aside, n = f'{directory}.unreadable', 1
        while os.path.exists(aside):  # the same step failed before
          aside, n = f'{directory}.unreadable{n}', n + 1
        os.replace(directory, aside)
        logger.warning('checkpoint step %d of %s cannot be read (%s); set aside as %s, resuming from '
                       'step %d', bad, workdir, workdir_lib.checkpoint_error(error), os.path.basename(aside), step)
    if jax.process_count() > 1:
      multihost_utils.sync_global_devices('fastmt: unreadable checkpoints set aside')
    return restored, workdir_lib.checkpoint_manager(workdir, max_to_keep, training=True)  # re-reads the steps
  step, error = failures[0]
  raise FastmtError(f'no checkpoint step of {workdir} can be read (the newest, {step}: '
                    f'{workdir_lib.checkpoint_error(error)}); nothing was renamed') from error


# Model config fields that no parameter's shape depends on: a fine-tuned model may add dropout, take a longer
# max_length (positions are sinusoidal; relative keys are sized by their distance) or train in bfloat16.
FREE_WHEN_FINE_TUNING = ('dropout_rate', 'max_length', 'dtype')


def _check_fine_tunable(init_from: str, init_config: ModelConfig, model_config: ModelConfig) -> tuple[bool, bool]:
  """An error unless model_config is init_config, or it with what _initial_params fills in: a vocabulary grown
  by reserved symbols, direction embeddings or relative position keys the initial model lacks; and the fields
  no parameter's shape depends on (FREE_WHEN_FINE_TUNING) may differ. Returns whether it adds (direction
  embeddings, relative position keys)."""
  adds_directions = model_config.num_directions > 0 and init_config.num_directions == 0
  adds_relative = model_config.relative_key_distance > 0 and init_config.relative_key_distance == 0
  free = {name: getattr(model_config, name) for name in FREE_WHEN_FINE_TUNING}
  fillable = init_config.replace(vocab_size=model_config.vocab_size, **free,
                                 num_directions=model_config.num_directions if adds_directions
                                 else init_config.num_directions,
                                 relative_key_distance=model_config.relative_key_distance if adds_relative
                                 else init_config.relative_key_distance)
  if model_config.vocab_size < init_config.vocab_size or fillable != model_config:
    diff = {k: (v, getattr(model_config, k)) for k, v in init_config.__dict__.items() if getattr(model_config, k) != v}
    raise FastmtError(f'init_from {init_from} holds another model config; differing fields (there, here): {diff}')
  return adds_directions, adds_relative


def replicated_from_host(tree, sharding: NamedSharding):
  """Arrays this process holds (the same in every process) as global arrays replicated over `sharding`'s
  devices. With several processes (--multihost) device_put cannot put one process's array on another's
  devices; each process gives its own devices their copy instead."""
  if jax.process_count() == 1:
    return jax.device_put(tree, sharding)
  return jax.tree_util.tree_map(
      lambda x: jax.make_array_from_callback(np.shape(x), sharding, lambda index, x=np.asarray(x): x[index]), tree)


def _initial_params(init_from: str, model_config: ModelConfig):
  """The parameters of another work directory's latest checkpoint (fine-tuning: a fresh optimiser, step 0).

  Two differences of model config are what fine-tuning into another objective needs, and are filled in:
  - a vocabulary extended with reserved symbols (pipeline.get_tokenizer) adds rows to the tied embedding,
    initialised like the others;
  - direction embeddings the initial model lacks (an AT model fine-tuned into IMDecoder) start at zero, so
    that the fine-tuned model starts as the initial one;
  - so do relative position keys the initial model lacks (an AT model fine-tuned into HRT with them, HRT Eq. 4).
  Every other difference is an error.
  """
  init_config = workdir_lib.load_model_config(init_from)
  adds_directions, adds_relative = _check_fine_tunable(init_from, init_config, model_config)
  grown = model_config.vocab_size - init_config.vocab_size
  try:
    params, _ = workdir_lib.restore_params(init_from, init_config, 'latest')
  except FastmtError as e:  # its advice (decode.py's --checkpoint) is no flag of train.py
    if 'another --checkpoint' not in str(e):
      raise
    reason = re.split(r';? (?:is it damaged\? )?[Tt]ry another --checkpoint', str(e))[0]
    raise FastmtError(f'config.init_from: {reason}. init_from starts from the latest step; to start from an '
                      'earlier one, make it a work directory of its own: fastmt-average '
                      f'--workdir {init_from} --last 1 --checkpoint STEP --output DIR, then init_from=DIR') from None
  if grown:
    table = params['embed']['embedding']
    rows = jax.random.normal(jax.random.PRNGKey(0), (grown, table.shape[1]), table.dtype) * table.shape[1]**-0.5
    params = {**params, 'embed': {**params['embed'], 'embedding': jnp.concatenate([table, rows])}}
  if adds_directions:
    table = params['embed']['embedding']
    params = {**params, 'direction_embed': {
        'embedding': jnp.zeros((model_config.num_directions, table.shape[1]), table.dtype)}}
  if adds_relative:  # a table of its own per layer: the train step donates its buffers, each once
    shape = (2 * model_config.relative_key_distance + 1, model_config.head_dim)
    params = {**params, **{
        f'decoder_{i}': {**params[f'decoder_{i}'], 'self_attention': {
            **params[f'decoder_{i}']['self_attention'], 'relative_keys': jnp.zeros(shape, jnp.float32)}}
        for i in range(model_config.num_decoder_layers)}}
  return params


def _check_objective_fits_model(name, options, model_config):
  """Direction embeddings exist in the model exactly when the interleaving uses them (IMDecoder)."""
  wanted = options.get('directions', 0) if options.get('direction_embeddings') else 0
  if model_config.num_directions != wanted:
    raise FastmtError(f'objective {name!r} with {options} needs config.model.num_directions={wanted}, the '
                      f'model has {model_config.num_directions}')


def _validation_metrics(params, step, jit_eval_step, data, to_device, model_config, config, objective):
  totals = {'nll': 0.0, 'tokens': 0.0, 'correct': 0.0}
  for batch in data.validation_batches:
    sums = jit_eval_step(params, to_device(batch), step)
    for k in totals:
      totals[k] += float(sums[k])
  metrics = {'valid_nll': totals['nll'] / totals['tokens'], 'valid_accuracy': totals['correct'] / totals['tokens']}
  if config.eval_bleu_sentences:
    stats = TranslationStats()
    metrics['valid_bleu'] = validation_bleu(params, model_config, data.tokenizer, data.validation,
                                            config.eval_bleu_sentences, *objective, stats=stats,
                                            tokenize=config.get('eval_bleu_tokenize', '13a'))
    metrics['valid_outputs_at_cap'] = stats.outputs_at_cap  # outputs without EOS: the model repeats itself
  return metrics


def _forget_history_after(workdir, step: int):
  """Drops the history's records past `step`, the checkpoint a run resumes from (or 0 for a fresh start): a
  run killed after its last checkpoint logged steps that the resumed run takes, and logs, again."""
  path = os.path.join(workdir, 'train_history.jsonl')
  if jax.process_index() != 0 or not os.path.exists(path):
    return
  with open(path) as f:
    lines = f.readlines()
  kept = [line for line in lines if _logged_step(line) <= step]
  if len(kept) < len(lines):
    files.write_whole(path, ''.join(kept))


def _logged_step(line: str) -> float:
  """A history line's step; a line that does not parse (a write cut short by the kill) counts as past every step."""
  try:
    return json.loads(line)['step']
  except (json.JSONDecodeError, KeyError, TypeError):
    return float('inf')


def _append_history(workdir, record):
  """One JSON line per logged step in workdir/train_history.jsonl (written as it happens: a killed run keeps it)."""
  if jax.process_index() == 0:
    with open(os.path.join(workdir, 'train_history.jsonl'), 'a') as f:
      f.write(json.dumps(record) + '\n')


def _write(writer, step, metrics):
  if writer is None:
    return
  for k, v in metrics.items():
    writer.add_scalar(k, v, step)
  writer.flush()
