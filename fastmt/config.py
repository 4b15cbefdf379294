"""The model's hyper-parameters as one frozen dataclass, built from the `model` block of a config file."""

import dataclasses
import difflib
import json
import numbers

import jax
import jax.numpy as jnp

from fastmt.errors import FastmtError


# The keys a training config may hold (configs/quickstart.py sets and explains each), besides `model` (ModelConfig's
# fields) and the objectives' option blocks. A key outside them is a typo that would otherwise train with the
# default in its place ('objectve', 'dataset.distiled_dir'), so it is refused, as on the command line.
TRAINING_KEYS = frozenset((
    'bucket_lengths', 'checkpoint_every_steps', 'cooldown_fraction', 'dataset', 'eval_bleu_sentences',
    'eval_bleu_tokenize', 'eval_every_steps', 'grad_clip_norm', 'init_from', 'keep_best_checkpoint',
    'label_smoothing', 'learning_rate', 'log_every_steps', 'max_checkpoints_to_keep', 'model', 'num_train_steps',
    'objective', 'seed', 'tokens_per_batch', 'vocab_character_coverage', 'vocab_normalization', 'vocab_size',
    'warmup_steps', 'weight_decay'))
DATASET_KEYS = frozenset(('data_dir', 'distilled_dir', 'name', 'p_raw', 'reverse', 'test_files', 'train_files',
                          'train_split', 'validation_files'))


def check_training_keys(config, option_blocks) -> None:
  """A FastmtError naming each key of config (top level, or its dataset block) that fastmt does not read, with
  the nearest known key; option_blocks: the objectives' option block names (config.hrt, ...), also known."""
  for where, keys, known in (('config', config.keys(), TRAINING_KEYS | set(option_blocks)),
                             ('config.dataset', (config.get('dataset') or {}).keys(), DATASET_KEYS)):
    unknown = sorted(set(keys) - known)
    if unknown:
      hints = [f"{where}.{key}" + (f" (did you mean {where}.{close[0]}?)"
                                   if (close := difflib.get_close_matches(key, known, n=1)) else '')
               for key in unknown]
      raise FastmtError(f'Unknown training config key{"s" * (len(unknown) > 1)} {", ".join(hints)}; '
                        f'{where} knows {sorted(known)}')


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  vocab_size: int
  emb_dim: int = 256
  num_heads: int = 4
  mlp_dim: int = 1024
  num_encoder_layers: int = 4
  num_decoder_layers: int = 2
  dropout_rate: float = 0.0
  max_length: int = 128  # longest source or target in tokens, EOS included
  dtype: str = 'float32'  # activation dtype; parameters stay float32
  # Learned direction embeddings added to the decoder inputs (IMDecoder, Eq. 10): the number of directions,
  # 0 = none (every other model; checkpoints from before the field load unchanged).
  num_directions: int = 0
  # Relative position keys in decoder self-attention (HRT Eq. 4, after Shaw et al. 2018): 2K + 1 learned
  # vectors per layer, shared by the heads, added to the keys by the clipped distance between a key's and a
  # query's positions; the clipping distance K, 0 = none (checkpoints from before the field load unchanged).
  relative_key_distance: int = 0
  # Inference only, set by fastmt.precision.for_inference (decode.py --dtype int8): '' = float weights;
  # 'int8' / 'int8_layers' = the int8 parameter layout of fastmt.quantize.
  quantization: str = ''

  def __post_init__(self):
    for name in ('vocab_size', 'emb_dim', 'num_heads', 'mlp_dim', 'num_encoder_layers', 'num_decoder_layers',
                 'max_length'):
      value = getattr(self, name)
      lowest = 2 if name == 'max_length' else 1  # a token and EOS
      if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < lowest:
        raise FastmtError(f'{name} must be a whole number >= {lowest}, got {value!r}')
      object.__setattr__(self, name, int(value))  # a numpy int: JSON-able
    if self.emb_dim % self.num_heads or self.emb_dim % 2:
      raise FastmtError(f'emb_dim {self.emb_dim} must be even and divisible by num_heads {self.num_heads}')
    if self.num_directions < 0:
      raise FastmtError(f'num_directions must be >= 0, got {self.num_directions}')
    if isinstance(self.relative_key_distance, bool) or not isinstance(self.relative_key_distance, numbers.Integral) or \
        self.relative_key_distance < 0:
      raise FastmtError(f'relative_key_distance must be an integer >= 0, got {self.relative_key_distance!r}')
    object.__setattr__(self, 'relative_key_distance', int(self.relative_key_distance))  # a numpy int: JSON-able
    if isinstance(self.dropout_rate, bool) or not isinstance(self.dropout_rate, (int, float)) or \
        not 0 <= self.dropout_rate < 1:  # flax's Dropout zeroes everything at a rate of 1 or more, without a word
      raise FastmtError(f'dropout_rate must be a number in [0, 1), got {self.dropout_rate!r}')
    try:
      floating = jnp.issubdtype(jnp.dtype(self.dtype), jnp.floating)
    except TypeError:
      floating = False
    if not floating:
      raise FastmtError(f"dtype must be a floating-point dtype such as 'float32' or 'bfloat16', got {self.dtype!r}")
    if self.quantization not in ('', 'int8', 'int8_layers'):
      raise FastmtError(f"quantization must be '', 'int8' or 'int8_layers', got {self.quantization!r}")

  @property
  def head_dim(self) -> int:
    return self.emb_dim // self.num_heads

  @property
  def jnp_dtype(self):
    return jnp.dtype(self.dtype)

  @classmethod
  def from_config(cls, model_config, vocab_size: int) -> 'ModelConfig':
    """From an ml_collections `config.model` block; an unknown key is an error, not a silent default."""
    values = dict(model_config)
    known = {f.name for f in dataclasses.fields(cls)} - {'vocab_size', 'quantization'}
    unknown = sorted(set(values) - known)
    if unknown:
      hint = ' (int8 is for inference: decode.py --dtype int8)' if 'quantization' in unknown else ''
      raise FastmtError(f'Unknown model config keys {unknown}; known keys: {sorted(known)}{hint}')
    config = cls(vocab_size=vocab_size, **values)
    if jnp.dtype(config.dtype).itemsize > 4 and not jax.config.jax_enable_x64:  # JAX would compute in float32
      raise FastmtError(f'config.model.dtype {config.dtype!r} needs JAX_ENABLE_X64=1 (without it JAX trains in '
                        "float32 while the work directory would record float64); 'float32' or 'bfloat16'")
    return config

  def to_json(self) -> str:
    return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

  @classmethod
  def from_json(cls, text: str, name: str = 'model config') -> 'ModelConfig':
    """From to_json's text; damaged JSON or a key this version does not know is a FastmtError naming `name`."""
    try:
      values = json.loads(text)
    except json.JSONDecodeError as e:
      raise FastmtError(f'{name} is not valid JSON ({e})') from None
    if not isinstance(values, dict):
      raise FastmtError(f'{name} holds {type(values).__name__}, not an object')
    unknown = sorted(set(values) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
      raise FastmtError(f'{name} has keys this version of fastmt does not know: {unknown} (written by a newer '
                        'version?)')
    missing = sorted(f.name for f in dataclasses.fields(cls)
                     if f.name not in values and f.default is dataclasses.MISSING)
    if missing:
      raise FastmtError(f'{name} lacks {missing}: the work directory is damaged')
    try:
      return cls(**values)
    except FastmtError as e:
      raise FastmtError(f'{name}: {e} (the work directory is damaged?)') from None

  def replace(self, **changes) -> 'ModelConfig':
    return dataclasses.replace(self, **changes)
