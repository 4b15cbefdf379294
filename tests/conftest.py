"""Shared fixtures: stub decoder steps with known outputs, tiny random-weight models, one tiny trained workdir."""

import os
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # configs/ is imported by the tiny config

from fastmt import models  # noqa: E402
from fastmt.config import ModelConfig  # noqa: E402
from fastmt.decoding.step import EOS_ID  # noqa: E402

DATA = REPO / 'tests' / 'data'
VOCAB = 16


def cpu_flags() -> set:
  """The instruction-set flags /proc/cpuinfo lists (empty where it cannot be read): which of fastmt's CPU kernels
  must build here."""
  try:
    with open('/proc/cpuinfo', encoding='utf-8') as f:
      return set(next((line.split(':', 1)[1].split() for line in f if line.startswith('flags')), []))
  except OSError:
    return set()


def stub_cache(batch_size, cache_length):
  """A cache pytree for stub steps: leading axis batch, second axis slots (what decoders read)."""
  return {'slots': jnp.zeros((batch_size, cache_length), jnp.int32)}


def one_hot_logits(tokens, vocab=VOCAB, scale=10.0):
  return jax.nn.one_hot(tokens, vocab) * scale


def markov_step(table):
  """A step whose prediction for each position depends only on that position's input token: table[input]."""
  table = jnp.asarray(table, jnp.int32)

  def step_fn(tokens, positions, self_mask, cache, write_offsets):
    del positions, self_mask, write_offsets
    return one_hot_logits(table[tokens]), cache
  return step_fn


def positional_step(sequences):
  """A step that predicts sequences[row, position] whatever the inputs: a model with no dependencies."""
  sequences = jnp.asarray(sequences, jnp.int32)

  def step_fn(tokens, positions, self_mask, cache, write_offsets):
    del tokens, self_mask, write_offsets
    clipped = jnp.minimum(positions, sequences.shape[1] - 1)
    return one_hot_logits(jnp.take_along_axis(sequences, clipped, axis=1)), cache
  return step_fn


def tiny_model_config(**overrides):
  values = dict(vocab_size=40, emb_dim=32, num_heads=4, mlp_dim=64, num_encoder_layers=2, num_decoder_layers=2,
                max_length=48)
  values.update(overrides)
  return ModelConfig(**values)


def random_model(seed, config=None):
  config = config or tiny_model_config()
  model = models.Transformer(config)
  dummy = jnp.ones((1, 4), jnp.int32)
  params = model.init(jax.random.PRNGKey(seed), dummy, dummy)['params']
  return model, params


def with_random_relative_keys(params, seed=0, scale=0.5):
  """params with every decoder layer's relative position keys drawn at random: they start at zero, and a test
  on zero tables would not tell a model that ignores them from one that uses them."""
  rng = np.random.default_rng(seed)
  layers = {name: {**layer, 'self_attention': {**layer['self_attention'], 'relative_keys': jnp.asarray(
      scale * rng.standard_normal(layer['self_attention']['relative_keys'].shape), jnp.float32)}}
            for name, layer in params.items() if 'self_attention' in layer}
  return {**params, **layers}


def select_positions(logits, project):
  """DecoderStepFn's `project`: the same positions for every row ([P]) or per row ([B, P])."""
  return logits[:, project] if project.ndim == 1 else jnp.take_along_axis(logits, project[..., None], 1)


def source_memory(model, params, source):
  """The decoder's cross-attention memory of source [B, S]: encode, then every layer's keys and values."""
  encoded = model.apply({'params': params}, source, method=models.Transformer.encode)
  return model.apply({'params': params}, encoded, source, method=models.Transformer.memory)


def model_step(model, params, source, eos_after=None):
  """A DecoderStepFn over a random model; eos_after [B] forces EOS to win from that position on, so that
  tests control where each row ends (a function of position only: greedy and Jacobi see the same model)."""
  memory = source_memory(model, params, source)

  def step_fn(tokens, positions, self_mask, cache, write_offsets, project=None):
    logits, _, cache = model.apply({'params': params}, tokens, positions, self_mask, memory, cache, write_offsets,
                                   method=models.Transformer.decode)
    if eos_after is not None:
      boost = (positions >= jnp.asarray(eos_after)[:, None]) * 1e4
      logits = logits.at[..., EOS_ID].add(boost)
    return (logits if project is None else select_positions(logits, project)), cache
  return step_fn


def tiny_training_config():
  """configs/tiny.py on the Genesis fixture: tiny_config's value, for a subprocess to build too."""
  from fastmt.configs import tiny  # pylint: disable=g-import-not-at-top
  config = tiny.get_config()
  config.dataset.name = 'text'
  config.dataset.train_files = (str(DATA / 'genesis.en'), str(DATA / 'genesis.de'))
  config.dataset.validation_files = (str(DATA / 'genesis.en'), str(DATA / 'genesis.de'))
  config.dataset.test_files = (str(DATA / 'genesis.en'), str(DATA / 'genesis.de'))
  return config


@pytest.fixture(scope='session')
def tiny_config():
  return tiny_training_config()


def fine_tuning_config(tiny_config, init_from: str, objective: str, options_key: str, options: dict, steps: int = 4):
  """tiny_config as a short run of `objective` (its options under config.<options_key>) fine-tuned from
  init_from: a checkpoint and a validation at the last step, BLEU on 4 sentences."""
  import ml_collections  # pylint: disable=g-import-not-at-top
  config = ml_collections.ConfigDict(tiny_config.to_dict())
  config.objective = objective
  config[options_key] = ml_collections.ConfigDict(options)
  config.init_from = init_from
  config.num_train_steps, config.eval_every_steps, config.checkpoint_every_steps = steps, steps, steps
  config.eval_bleu_sentences = 4
  return config


@pytest.fixture(scope='session')
def trained_workdir(tmp_path_factory, tiny_config):
  """A tiny model trained for tiny_config.num_train_steps on the Genesis fixture (shared, read-only)."""
  from fastmt import train_lib  # pylint: disable=g-import-not-at-top
  workdir = str(tmp_path_factory.mktemp('tiny_run'))
  train_lib.train_and_evaluate(tiny_config, workdir)
  return workdir


@pytest.fixture(scope='session')
def trained_float_parts(trained_workdir):
  """(config, params, tokenizer) of trained_workdir's latest checkpoint: a Translator's first arguments."""
  from fastmt import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  config = workdir_lib.load_model_config(trained_workdir)
  params, _ = workdir_lib.restore_params(trained_workdir, config)
  return config, params, workdir_lib.load_tokenizer(trained_workdir)


@pytest.fixture
def rng():
  return np.random.default_rng(0)


os.environ.setdefault('TQDM_DISABLE', '1')
