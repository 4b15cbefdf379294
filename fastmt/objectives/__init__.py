"""Training objectives: what the decoder is taught to predict, from which inputs, under which mask.

An objective is a pure function `(batch, step) -> DecoderBatch` that runs inside the jitted train step:
`batch` is the data pipeline's dict of int32 arrays {source [B, S], decoder_input [B, T], target [B, T]}
(decoder_input = BOS + target shifted right, PAD = 0) and `step` the optimiser step (a traced scalar, for
curricula). The Transformer itself never changes: an objective only chooses the decoder's input tokens,
their positions, the self-attention mask, the targets and the loss weights.

`config.objective` names one; train.py records it in the work directory (fastmt.workdir), and decoding a
model with an algorithm it was not trained for is one clear error (fastmt.decoding.registry). Reorderings and
masks that a decoder needs as well live in fastmt/decoding/ and are imported from there, never the reverse.
An objective of one's own is added from outside fastmt with `register_objective` (docs/API.md, "Extending
fastmt").
"""

import dataclasses
import math
import numbers
from typing import Callable

import flax.struct
import jax

from fastmt.decoding import registry
from fastmt.decoding.interleaving import Interleaving
from fastmt.decoding.step import is_whole_number
from fastmt.errors import FastmtError
from fastmt.objectives import autoregressive, hrt, interleaved, selfdraft


@flax.struct.dataclass
class DecoderBatch:
  """What one training step feeds the decoder and scores, for any objective."""
  source: jax.Array  # int32 [B, S]: encoder input, PAD = 0
  decoder_input: jax.Array  # int32 [B, T]
  positions: jax.Array  # int32 [B, T]: position of each decoder input (any integers)
  self_mask: jax.Array  # bool [B or 1, T, T]: which decoder inputs each input may attend to
  target: jax.Array  # int32 [B, T]: the token to predict at each input
  weights: jax.Array  # float32 [B, T]: loss weight of each prediction (0 = not scored)
  directions: jax.Array | None = None  # int32 [B, T]: direction ids (models with direction embeddings)


Objective = Callable[[dict, jax.Array], DecoderBatch]

# name -> (options, tokenizer, num_train_steps) -> Objective. Options are the objective's own config block (config.<name>),
# recorded with the name in the work directory because decoders need them too.
OBJECTIVES: dict[str, Callable[..., Objective]] = {
    'at': lambda options, tokenizer, steps: (
        lambda batch, step: DecoderBatch(**autoregressive.left_to_right(batch))),
    'interleaved': lambda options, tokenizer, steps: _interleaved(options, tokenizer),
    'hrt': lambda options, tokenizer, steps: _hrt(options, tokenizer, steps),
    'selfdraft': lambda options, tokenizer, steps: _selfdraft(options, tokenizer),
}

# Where each objective keeps its options in a training config (config.<key>); None = it has none.
OPTIONS_KEY = {'at': None, 'interleaved': 'interleaving', 'hrt': 'hrt', 'selfdraft': 'selfdraft'}


BUILT_IN_OBJECTIVES = frozenset(OBJECTIVES)


def register_objective(name: str, build: Callable[..., Objective], options_key: str | None = None,
                       decodes_like: str = 'at', replace: bool = False) -> None:
  """Adds a training objective under `name`, for train.py's config.objective = name.

  build(options: dict, tokenizer, num_train_steps) -> Objective: options are the run's config.<options_key>
  block as a dict ({} without one; recorded in the work directory with the name), tokenizer the run's
  Tokenizer (its reserved symbols: Tokenizer.special_id), num_train_steps the run's budget (for a curriculum).
  The Objective maps (batch, step) to a DecoderBatch; autoregressive.left_to_right(batch) gives the plain
  left-to-right fields to start from. decodes_like: the built-in objective whose models this one's decode
  like: 'at' (greedy, beam, the Jacobi family and spec), the only one so far (the interleaved and HRT
  decoders read records of their own objectives); validation BLEU and every decoding tool use its algorithms.
  The module that registers it is imported wherever its models train or decode: in the config file, or by
  the tools' --plugins. The built-in names cannot be replaced.
  """
  if not isinstance(name, str) or not name.isidentifier():
    raise FastmtError(f'an objective\'s name is an identifier (config.objective), got {name!r}')
  if not callable(build):
    raise FastmtError(f'build must be a function (options, tokenizer, num_train_steps) -> Objective, got '
                      f'{type(build).__name__}')
  if name in BUILT_IN_OBJECTIVES:
    raise FastmtError(f'{name!r} is one of fastmt\'s own objectives: register yours under another name')
  if name in OBJECTIVES and not replace:
    raise FastmtError(f'an objective {name!r} is registered already: pass replace=True to replace it')
  if decodes_like != 'at':  # the others' decoders read their own records (interleaving, HRT symbols) by name
    raise FastmtError(f"decodes_like must be 'at' (a registered objective's models decode left to right), got "
                      f'{decodes_like!r}')
  taken = {key for other, key in OPTIONS_KEY.items() if key and other != name}
  if options_key is not None and (not isinstance(options_key, str) or not options_key.isidentifier() or
                                  options_key in taken):
    raise FastmtError(f'options_key must be a config key of this objective\'s own (not one of {sorted(taken)}), '
                      f'got {options_key!r}')
  OBJECTIVES[name] = build
  OPTIONS_KEY[name] = options_key
  registry.DECODES_LIKE[name] = decodes_like


def _interleaved(options, tokenizer) -> Objective:
  layout = interleaving_from(options)
  layout = layout.with_start_ids(tokenizer) if tokenizer is not None else layout
  return lambda batch, step: DecoderBatch(**interleaved.reordered_batch(batch, layout))


def _hrt(options, tokenizer, num_train_steps) -> Objective:
  hrt_options = hrt_from(options)
  if not hrt_options.curriculum_steps:  # p_k reaches 1 at the end of this training run
    hrt_options = dataclasses.replace(hrt_options, curriculum_steps=int(num_train_steps or 1))
  if tokenizer is None:
    raise FastmtError('the hrt objective needs the tokenizer (its <mask> and <bos_k> ids)')
  mask_id, bos_k_id = hrt.special_ids(hrt_options, tokenizer)
  return lambda batch, step: DecoderBatch(**hrt.hrt_batch(batch, step, hrt_options, mask_id, bos_k_id))


def _selfdraft(options, tokenizer) -> Objective:
  draft_options = selfdraft_from(options)
  if tokenizer is None:
    raise FastmtError('the selfdraft objective needs the tokenizer (its <mask> id)')
  mask_id = selfdraft.mask_id_of(tokenizer)
  return lambda batch, step: DecoderBatch(**selfdraft.draft_batch(batch, step, draft_options, mask_id))


def _check_types(cls, name: str, options: dict) -> None:
  """Each option of the type its field declares: a chunk_size of '2' or 2.5 was a TypeError deep in the
  objective or 'no <bos_2.5> symbol', a draft_weight of nan trained without a word."""
  for field in dataclasses.fields(cls):
    if field.name not in options:
      continue
    value, kind = options[field.name], field.type if isinstance(field.type, str) else field.type.__name__
    wrong = {'int': lambda v: not is_whole_number(v),
             'float': lambda v: isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v),
             'bool': lambda v: not isinstance(v, bool),
             'str': lambda v: not isinstance(v, str)}.get(kind)
    if wrong is not None and wrong(value):
      what = {'int': 'a whole number', 'float': 'a finite number', 'bool': 'True or False',
              'str': 'a string'}[kind]
      raise FastmtError(f'{name} {field.name} must be {what}, got {value!r}')


def _options(cls, name: str, options):
  """cls(**options) for an options dict (a config block or the record); unknown keys are an error."""
  options = dict(options or {})
  known = {f.name for f in dataclasses.fields(cls)}
  unknown = sorted(set(options) - known)
  if unknown:
    raise FastmtError(f'Unknown {name} keys {unknown}; known keys: {sorted(known)}')
  _check_types(cls, name, options)
  return cls(**options)


def selfdraft_from(options) -> selfdraft.SelfDraftOptions:
  """The SelfDraftOptions of an options dict (config.selfdraft or the record); unknown keys are an error."""
  return _options(selfdraft.SelfDraftOptions, 'selfdraft', options)


def hrt_from(options) -> hrt.HrtOptions:
  """The HrtOptions of an options dict (config.hrt or the record); unknown keys are an error."""
  return _options(hrt.HrtOptions, 'hrt', options)


def interleaving_from(options) -> Interleaving:
  """The Interleaving of an options dict (config.interleaving or the record); unknown keys are an error."""
  options = dict(options or {})
  known = set(Interleaving().record())
  unknown = sorted(set(options) - known)
  if unknown:
    raise FastmtError(f'Unknown interleaving keys {unknown}; known keys: {sorted(known)}')
  _check_types(Interleaving, 'interleaving', options)
  return Interleaving(**options)


def check_name(name: str) -> None:
  if name not in OBJECTIVES:
    raise FastmtError(f'Unknown training objective {name!r}; choose one of {sorted(OBJECTIVES)}')


def options_of(config, name: str) -> dict:
  """The objective's options from a training config, as a plain dict (checked by building them)."""
  check_name(name)
  key = OPTIONS_KEY[name]
  if key is None:
    return {}
  options = dict(config.get(key) or {})
  if name == 'interleaved':
    options = interleaving_from(options).record()  # validated, defaults filled in
  if name == 'hrt':
    options = dataclasses.asdict(hrt_from(options))
  if name == 'selfdraft':
    options = dataclasses.asdict(selfdraft_from(options))
  return options


def build(name: str, options: dict | None = None, tokenizer=None, num_train_steps: int = 0) -> Objective:
  """The objective `name` with its options; tokenizer resolves reserved symbols where needed;
  num_train_steps is the T of a curriculum that options leave at 0."""
  check_name(name)
  return OBJECTIVES[name](options, tokenizer, num_train_steps)


def get(name: str) -> Objective:
  """An objective without options (the autoregressive one)."""
  return build(name)
