"""The decoding algorithms by name, with what each needs from the caller (rows, cache slots, settings).

Adding an algorithm is one entry here, or, from outside fastmt, `register_algorithm` (docs/API.md,
"Extending fastmt"); `translate.py` and `decode.py` pick it up by name. Each entry says which training
objectives (fastmt.objectives) produce a model it can decode: greedy, beam and the Jacobi family need an
autoregressive ('at') model.
"""

import dataclasses
import math
import numbers
from typing import Any, Callable

from fastmt.decoding import beam, greedy, hrt, interleaved, jacobi, repeats, step
from fastmt.errors import FastmtError


@dataclasses.dataclass(frozen=True)
class Algorithm:
  # (step_fn, cache, batch_size, max_length, settings, draft_table, row_caps) -> DecodeOutput; with
  # uses_source also source=int32 [B, S] (the source ids, for drafts that copy from them)
  run: Callable[..., Any]
  rows_per_sentence: Callable[[Any], int] = lambda settings: 1
  cache_length: Callable[[int, Any], int] = lambda max_length, settings: max_length
  expand: Callable[[Any, Any], Any] = lambda tree, settings: tree  # per-sentence -> per-row pytree
  check: Callable[[Any], None] = lambda settings: None  # raises FastmtError on bad settings
  # Training objectives whose models this algorithm decodes; HRT and self-drafting models also decode
  # autoregressively (their AT task; HRT's C_d = 1), so every left-to-right algorithm takes them.
  objectives: tuple[str, ...] = ('at', 'hrt', 'selfdraft')
  default_beam_size: int = 1  # beam size when the caller gives none
  uses_source: Callable[[Any], bool] = lambda settings: False
  # With it, run also takes recent= int32 [M]: the outputs of the sentences translated before this batch
  # (drafts.remember_outputs), for drafts that copy from them.
  uses_recent_outputs: Callable[[Any], bool] = lambda settings: False
  # With it, run also takes draft_model= a decoding.draft_model.DraftModel (a separate drafter's step and cache):
  # a drafter model the caller loads (--drafter model). spec's int8 copy also arrives as draft_model=, built by
  # the Translator itself (drafts_with_int8_copy), so this stays False for it.
  uses_draft_model: Callable[[Any], bool] = lambda settings: False


def _check_beam(settings):
  if settings.beam_size < 1:
    raise FastmtError(f'beam_size must be >= 1, got {settings.beam_size}')


def _check_hrt(settings):
  _check_beam(settings)
  if not 1 <= settings.nat_beam_size <= settings.beam_size:
    raise FastmtError(f'HRT needs 1 <= nat_beam_size <= beam_size (b_nat <= b_at), got nat_beam_size='
                      f'{settings.nat_beam_size}, beam_size={settings.beam_size}')
  if settings.chunk_size < 0:
    raise FastmtError(f'chunk_size must be >= 0 (0 = the one the model was trained with), got {settings.chunk_size}')
  if settings.max_repeats and settings.beam_size > 1:
    raise FastmtError(f'max_repeats (the repetition guard) acts on greedy stage I (beam_size 1), not on beam_size='
                      f'{settings.beam_size}')


def _hrt(step_fn, cache, batch, max_len, s, _, caps):
  if s.hrt_symbols is None:
    raise FastmtError('--algorithm hrt needs the model\'s <mask> and <bos_k> ids, resolved from its work directory')
  mask_id, bos_k_id = s.hrt_symbols
  return hrt.hrt_decode(step_fn, cache, batch, max_len, s.chunk_size, mask_id, bos_k_id, s.beam_size,
                        s.nat_beam_size, s.alpha, caps, s.max_repeats)


def _check_interleaved(settings):
  _check_beam(settings)
  if settings.dedup_ngram < 0:
    raise FastmtError(f'dedup_ngram must be >= 0 (0 = off), got {settings.dedup_ngram}')
  if settings.end_rule not in interleaved.END_RULES:
    raise FastmtError(f'end_rule must be one of {interleaved.END_RULES}, got {settings.end_rule!r}')


def _interleaved(step_fn, cache, batch, max_len, s, _, caps):
  if s.interleaving is None:
    raise FastmtError('--algorithm ib needs the model\'s interleaving (h, c), read from its work directory')
  if s.beam_size == 1:
    out = interleaved.interleaved_greedy(step_fn, cache, batch, max_len, s.interleaving, caps, s.end_rule)
  else:
    out = interleaved.interleaved_beam(step_fn, cache, batch, s.beam_size, max_len, s.interleaving, s.alpha, caps,
                                       s.end_rule)
  if s.dedup_ngram:
    out = out.replace(tokens=interleaved.dedup_repeats(out.tokens, s.dedup_ngram))
  return out


JACOBI_INITS = ('pad', 'bigram')
# The algorithms whose guesses for new positions follow jacobi_init (spec's where its drafter proposes nothing).
JACOBI_ALGORITHMS = ('pj', 'pgj', 'hgj', 'spec')


def _check_jacobi(settings):
  if settings.jacobi_init not in JACOBI_INITS:
    raise FastmtError(f'jacobi_init must be one of {JACOBI_INITS}, got {settings.jacobi_init!r}')
  # Only for the algorithms that read them (SETTING_ALGORITHMS): pj ignores both, and a value it ignores (warned
  # of, then left out) was an error that stopped the run.
  if settings.block_size < 1 and settings.algorithm in SETTING_ALGORITHMS['block_size']:
    raise FastmtError(f'block_size must be >= 1, got {settings.block_size}')
  if settings.parallel_length < 0 and settings.algorithm in SETTING_ALGORITHMS['parallel_length']:
    raise FastmtError(f'parallel_length must be >= 0 (0 = the output cap), got {settings.parallel_length}')


def _initializer(settings, draft_table):
  """The Jacobi initialiser that settings.jacobi_init names ('bigram' chains through draft_table)."""
  if settings.jacobi_init == 'pad':
    return jacobi.pad_initializer
  return jacobi.chain_initializer(draft_table)


def _hgj(step_fn, cache, batch, max_len, s, draft_table, row_caps):
  # parallel_length beyond this batch's output cap means "parallel to the end"; 0 means the cap too.
  parallel = min(s.parallel_length, max_len) if s.parallel_length else max_len
  return jacobi.hgj_decode(step_fn, cache, batch, max_len, s.block_size, parallel,
                           initializer=_initializer(s, draft_table), row_caps=row_caps)


_jacobi_cache = lambda width: (lambda max_len, s: max_len + min(width(s, max_len), max_len))

# Speculative decoding's drafters: 'self' = the model's own <mask> slots (selfdraft objective), 'ngram' =
# prompt lookup in the row's own output and its source (drafts.lookup_drafts; where nothing matches, Jacobi's
# own guesses, with the bigram chain if there is a table), 'model' = a separate small selfdraft model with the
# same vocabulary (decoding/draft_model.py; its own encoder, decoder and cache), 'int8' = the model's own int8
# copy (fastmt.quantize), drafting W - 1 tokens autoregressively at the start of every iteration (no training; it reads
# the model's encoding of the source), 'bigram' and 'pad' = PGJ's guesses (a draft table; PAD).
DRAFTERS = ('self', 'ngram', 'model', 'int8', 'bigram', 'pad')


def drafts_with_int8_copy(settings) -> bool:
  """--algorithm spec --drafter int8: the Translator builds the drafter (the model's int8 copy) itself."""
  return settings.algorithm == 'spec' and settings.drafter == 'int8'


def _check_spec(settings):
  if settings.drafter not in DRAFTERS:
    raise FastmtError(f'drafter must be one of {DRAFTERS}, got {settings.drafter!r}')
  if settings.block_size < 2:
    raise FastmtError(f'--algorithm spec needs block_size >= 2 (a window of 1 is greedy), got {settings.block_size}')
  _check_jacobi(settings)


def needs_draft_table(settings) -> bool:
  """Whether decoding with these settings follows the bigram draft table (decode_lib.load_draft_table); only the
  algorithms with Jacobi guesses read jacobi_init (greedy with jacobi_init='bigram' loads no table)."""
  return ((settings.jacobi_init == 'bigram' and settings.algorithm in JACOBI_ALGORITHMS
           and not _drafts_every_guess(settings))
          or (settings.algorithm == 'spec' and settings.drafter == 'bigram'))


def _drafts_every_guess(settings) -> bool:
  """spec with a drafter model (--drafter int8: the int8 copy; --drafter model: a selfdraft model): it drafts
  every window, the first one included (the int8 copy at the start of each iteration, jacobi.pgj_decode's
  drafts_first; a selfdraft drafter from BOS alone before the loop, then after each commit), so no Jacobi guess
  (jacobi_init's) is ever fed."""
  return settings.algorithm == 'spec' and settings.drafter in ('int8', 'model')


def uses_draft_table(settings) -> bool:
  """needs_draft_table, or a drafter that uses the table when it is there: --drafter ngram guesses the positions
  entering its window with the bigram chain where it has a table, PAD where not (fastmt.load without a work
  directory)."""
  return needs_draft_table(settings) or (settings.algorithm == 'spec' and settings.drafter == 'ngram')


def _spec(step_fn, cache, batch, max_len, s, draft_table, caps, source=None, draft_model=None, recent=None):
  if s.drafter == 'model' and draft_model is None:
    raise FastmtError('--drafter model needs a drafter model (decode.py --drafter_workdir; draft_model= in fastmt)')
  if s.drafter == 'int8' and draft_model is None:
    raise FastmtError('--drafter int8 needs the model\'s int8 copy, which a Translator builds (fastmt.translate.Translator)')
  mask_id = None
  if s.drafter == 'self':
    if s.draft_mask_id is None:
      raise FastmtError("--drafter self needs the model's <mask> id, resolved from its work directory")
    mask_id = s.draft_mask_id
  use_table = needs_draft_table(s) or (s.drafter == 'ngram' and draft_table is not None)
  initializer = jacobi.chain_initializer(draft_table) if use_table else jacobi.pad_initializer
  # ngram: where a lookup finds something its drafts replace the next window's guesses; elsewhere Jacobi's own
  # guesses stand (the window's unverified predictions, shifted; the initializer's for new positions).
  drafter = jacobi.ngram_drafter(source, recent=recent) if s.drafter == 'ngram' else None
  return jacobi.pgj_decode(step_fn, cache, batch, max_len, s.block_size, initializer=initializer, row_caps=caps,
                           mask_id=mask_id, drafter=drafter, draft_model=draft_model, trajectory_pool=s.ngram_pool)


def _spec_cache(max_len, s):
  width = min(s.block_size, max_len)
  return max_len + (2 * width if s.drafter == 'self' else width)

ALGORITHMS = {
    'greedy': Algorithm(
        run=lambda step_fn, cache, batch, max_len, s, _, caps: greedy.greedy_search(
            step_fn, cache, batch, max_len, caps, max_repeats=s.max_repeats)),
    'beam': Algorithm(
        run=lambda step_fn, cache, batch, max_len, s, _, caps: beam.beam_search(
            step_fn, cache, batch, s.beam_size, max_len, s.alpha, caps),
        rows_per_sentence=lambda s: s.beam_size,
        expand=lambda tree, s: beam.expand_to_beams(tree, s.beam_size),
        check=_check_beam, default_beam_size=4),
    # Interleaved models (IBDecoder, SA, IB+SA, IMDecoder): greedy at beam_size 1, Algorithm 1 above it.
    'ib': Algorithm(
        run=_interleaved,
        rows_per_sentence=lambda s: s.beam_size,
        cache_length=lambda max_len, s: -(-max_len // s.interleaving.slots) * s.interleaving.slots,
        expand=lambda tree, s: beam.expand_to_beams(tree, s.beam_size) if s.beam_size > 1 else tree,
        check=_check_interleaved, objectives=('interleaved',)),
    # HRT models: Skip-AT (greedy, or beam b_at) then one Skip-CMLM pass over the top b_nat hypotheses.
    'hrt': Algorithm(
        run=_hrt,
        rows_per_sentence=lambda s: s.beam_size,
        expand=lambda tree, s: beam.expand_to_beams(tree, s.beam_size) if s.beam_size > 1 else tree,
        # Stage I uses max_len // k slots, stage II (max_len // k) * k <= max_len (at least k).
        cache_length=lambda max_len, s: max(max_len, s.chunk_size or 1),
        check=_check_hrt, objectives=('hrt',)),
    'pj': Algorithm(
        run=lambda step_fn, cache, batch, max_len, s, table, caps: jacobi.pj_decode(
            step_fn, cache, batch, max_len, initializer=_initializer(s, table), row_caps=caps),
        cache_length=_jacobi_cache(lambda s, max_len: max_len),
        check=_check_jacobi),
    'pgj': Algorithm(
        run=lambda step_fn, cache, batch, max_len, s, table, caps: jacobi.pgj_decode(
            step_fn, cache, batch, max_len, s.block_size, initializer=_initializer(s, table), row_caps=caps),
        cache_length=_jacobi_cache(lambda s, max_len: s.block_size),
        check=_check_jacobi),
    'hgj': Algorithm(run=_hgj, cache_length=_jacobi_cache(lambda s, max_len: s.block_size),
                     check=_check_jacobi),
    # Exact speculative decoding: the drafter's guesses verified by Jacobi's commit rule (= greedy's output).
    'spec': Algorithm(run=_spec, cache_length=_spec_cache, check=_check_spec,
                      uses_source=lambda s: s.drafter == 'ngram', uses_draft_model=lambda s: s.drafter == 'model',
                      uses_recent_outputs=lambda s: s.drafter == 'ngram' and s.ngram_memory > 0),
}


BUILT_IN_ALGORITHMS = frozenset(ALGORITHMS)


def get(name: str) -> Algorithm:
  if not isinstance(name, str) or name not in ALGORITHMS:
    raise FastmtError(f'Unknown decoding algorithm {name!r}; choose one of {sorted(ALGORITHMS)} (one registered '
                      'outside fastmt needs its module imported first: decode.py --plugins)')
  return ALGORITHMS[name]


def register_algorithm(name: str, algorithm: Algorithm, settings=(), replace: bool = False) -> None:
  """Adds a decoding algorithm under `name`, for fastmt.load(...).translate(algorithm=name), decode.py
  --algorithm name (with --plugins naming the module that registers it) and the bench.

  algorithm: an Algorithm; its run(step_fn, cache, batch_size, max_length, settings, draft_table, row_caps)
  returns a DecodeOutput, and any decoder of fastmt.decoding can do the work (greedy_search with a step
  function that masks or samples the logits, say). Options of its own live in its closure: DecodeSettings has
  a fixed set of fields. settings: the DecodeSettings fields it reads besides output_length_ratio (say
  'beam_size'), so that they are neither warned of as ignored nor reset to their defaults. replace=True
  registers again under a name of one's own (a notebook cell run twice); a TranslationModel then builds
  new translators for it. The built-in names cannot be replaced.
  """
  if not isinstance(name, str) or not name.isidentifier():
    raise FastmtError(f'an algorithm\'s name is an identifier (decode.py --algorithm NAME), got {name!r}')
  if not isinstance(algorithm, Algorithm):
    raise FastmtError(f'register an fastmt.decoding.registry.Algorithm, got {type(algorithm).__name__}')
  if name in BUILT_IN_ALGORITHMS:
    raise FastmtError(f'{name!r} is one of fastmt\'s own algorithms: register yours under another name')
  if name in ALGORITHMS and not replace:
    raise FastmtError(f'an algorithm {name!r} is registered already: pass replace=True to replace it')
  unknown = sorted(set(settings) - set(SETTING_ALGORITHMS))
  if unknown:
    raise FastmtError(f'settings {unknown} are not algorithm settings; those are {sorted(SETTING_ALGORITHMS)}')
  ALGORITHMS[name] = algorithm
  for setting, algorithms in SETTING_ALGORITHMS.items():
    SETTING_ALGORITHMS[setting] = tuple(a for a in algorithms if a != name) + ((name,) if setting in settings else ())


_WHOLE_NUMBER_SETTINGS = ('beam_size', 'block_size', 'parallel_length', 'dedup_ngram', 'chunk_size', 'nat_beam_size',
                          'ngram_memory', 'ngram_pool', 'max_repeats')
_NAME_SETTINGS = ('algorithm', 'jacobi_init', 'drafter', 'end_rule')


def check_whole_number(name: str, value) -> None:
  """A count (a batch or beam size ...) must be an int: 2.5 or '4' is a clear error here, not a TypeError deep
  inside JAX. numpy integers count; bools do not."""
  if not step.is_whole_number(value):
    hint = ''
    if name == 'block_size' and isinstance(value, str) and value.strip() == 'auto':  # decode.py's spelling
      hint = (': in Python, model.choose_width(batch_size, drafter=...) times the widths and returns the fastest, '
              'to translate with as block_size')
    raise FastmtError(f'{name} must be a whole number, got {value!r} ({type(value).__name__}){hint}')


# Decoders whose output is greedy's, token for token (the Jacobi decoders and speculative decoding).
EXACT_DECODERS = ('pj', 'pgj', 'hgj', 'spec')


def validate(settings) -> None:
  for name in _NAME_SETTINGS:
    if not isinstance(getattr(settings, name), str):
      raise FastmtError(f'{name} must be a string, got {getattr(settings, name)!r}')
  for name in _WHOLE_NUMBER_SETTINGS:
    check_whole_number(name, getattr(settings, name))
  ratio = settings.output_length_ratio
  if isinstance(ratio, bool) or not isinstance(ratio, numbers.Real) or not math.isfinite(ratio) or ratio <= 0:
    raise FastmtError(f'output_length_ratio must be > 0, got {settings.output_length_ratio!r}')
  alpha = settings.alpha
  if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not math.isfinite(alpha) or alpha < 0:
    raise FastmtError(f'alpha (the beam search length penalty) must be a number >= 0, got {alpha!r}')
  if settings.ngram_memory < 0:
    raise FastmtError(f'ngram_memory must be >= 0 (0 = off), got {settings.ngram_memory}')
  if settings.ngram_memory and not (settings.algorithm == 'spec' and settings.drafter == 'ngram'):
    raise FastmtError(f'ngram_memory ({settings.ngram_memory} tokens of earlier outputs) drafts for --algorithm spec '
                      f'--drafter ngram only, not --algorithm {settings.algorithm}'
                      + (f' --drafter {settings.drafter}' if settings.algorithm == 'spec' else ''))
  if settings.ngram_pool not in (0, 1, 2):
    raise FastmtError(f'ngram_pool keys the trajectory pool on 1 or 2 tokens (0 = off), got {settings.ngram_pool}')
  if settings.ngram_pool and not (settings.algorithm == 'spec' and settings.drafter in ('ngram', 'bigram', 'pad')):
    raise FastmtError('ngram_pool (the trajectory pool) drafts for --algorithm spec with --drafter ngram, bigram or '
                      f'pad, not --algorithm {settings.algorithm}'
                      + (f' --drafter {settings.drafter}' if settings.algorithm == 'spec' else ''))
  try:
    repeats.check_max_repeats(settings.max_repeats)
  except ValueError as e:
    raise FastmtError(str(e)) from None
  if settings.max_repeats and settings.algorithm not in ('greedy', 'hrt'):
    raise FastmtError(f'max_repeats (the repetition guard) changes the output, so it acts on --algorithm greedy and '
                      f'hrt only, not {settings.algorithm}'
                      + (' (an exact decoder: its output is greedy\'s)' if settings.algorithm in EXACT_DECODERS
                         else ''))
  get(settings.algorithm).check(settings)


# The algorithms each decoding setting acts on (the others ignore it): a setting given with another algorithm is
# said (decode.py: a warning per flag; fastmt.api: a UserWarning), not silently ignored.
SETTING_ALGORITHMS = {'beam_size': ('beam', 'ib', 'hrt'), 'alpha': ('beam', 'ib', 'hrt'),
                      'block_size': ('pgj', 'hgj', 'spec'), 'parallel_length': ('hgj',),
                      'jacobi_init': ('pj', 'pgj', 'hgj', 'spec'), 'dedup_ngram': ('ib',), 'end_rule': ('ib',),
                      'chunk_size': ('hrt',), 'nat_beam_size': ('hrt',), 'drafter': ('spec',),
                      'ngram_memory': ('spec',), 'ngram_pool': ('spec',), 'max_repeats': ('greedy', 'hrt')}


# Algorithms whose beam_size 1 is a greedy search: one hypothesis is never ranked against another, so the length
# penalty does nothing (beam's: a hypothesis ending in EOS finishes only as the top candidate, which ends the row).
_GREEDY_AT_BEAM_1 = ('beam', 'ib', 'hrt')


def ignored_settings(settings, names, flag_prefix: str = '') -> list[str]:
  """For each of `names` (settings given explicitly) that these DecodeSettings ignore: a sentence saying so.
  flag_prefix '--': the sentence names command-line flags (decode.py's --alpha, --algorithm)."""
  algorithm, p = settings.algorithm, flag_prefix
  acts_on = f'{p}algorithm ' if p else ''  # decode.py: '(it acts on --algorithm beam, ib)'; library: '(... on beam, ib)'
  messages = [f'{p}{name} has no effect with {p}algorithm {algorithm} (it acts on {acts_on}'
              f'{", ".join(SETTING_ALGORITHMS[name])})'
              for name in names if name in SETTING_ALGORITHMS and algorithm not in SETTING_ALGORITHMS[name]]
  if 'alpha' in names and algorithm in _GREEDY_AT_BEAM_1 and settings.beam_size == 1:
    messages.append(f'{p}alpha has no effect with {p}algorithm {algorithm} at {p}beam_size 1, a greedy search (the '
                    f'length penalty ranks the hypotheses of {p}beam_size 2 or more)')
  if 'jacobi_init' in names and _drafts_every_guess(settings):
    drafter = 'the int8 copy' if settings.drafter == 'int8' else 'the drafter model'
    messages.append(f'{p}jacobi_init has no effect with {p}drafter {settings.drafter} ({drafter} drafts every '
                    'window, the first included)')
  if ('jacobi_init' in names and settings.algorithm == 'spec' and settings.drafter == 'bigram'
      and settings.jacobi_init == 'pad'):  # _spec: the bigram drafter is the table's chain, whatever jacobi_init
    messages.append(f'{p}jacobi_init pad has no effect with {p}drafter bigram (the bigram table guesses every new '
                    f'position; {p}drafter pad guesses PAD)')
  return messages


def without_ignored_settings(settings):
  """The same DecodeSettings with every setting its algorithm ignores (ignored_settings' cases) at its default:
  what decodes identically compiles and is kept once (TranslationModel's translators are keyed on this)."""
  defaults = {f.name: f.default for f in dataclasses.fields(settings)}
  reset = {name: defaults[name] for name, algorithms in SETTING_ALGORITHMS.items()
           if settings.algorithm not in algorithms and getattr(settings, name) != defaults[name]}
  if settings.algorithm in _GREEDY_AT_BEAM_1 and settings.beam_size == 1 and settings.alpha != defaults['alpha']:
    reset['alpha'] = defaults['alpha']
  if _drafts_every_guess(settings) and settings.jacobi_init != defaults['jacobi_init']:
    reset['jacobi_init'] = defaults['jacobi_init']
  return dataclasses.replace(settings, **reset) if reset else settings


# The algorithm that validation BLEU and a plain decode use for each objective's models.
DEFAULT_ALGORITHM = {'at': 'greedy', 'interleaved': 'ib', 'hrt': 'hrt', 'selfdraft': 'greedy'}

# Objectives registered outside fastmt (fastmt.objectives.register_objective) -> the built-in objective whose
# models theirs decode like: every algorithm of that one decodes them.
DECODES_LIKE: dict[str, str] = {}


def _decoded_as(objective: str) -> str:
  return DECODES_LIKE.get(objective, objective)


def default_algorithm(objective: str) -> str:
  """The algorithm a model of `objective` decodes with when none is named (greedy for an unknown one)."""
  return DEFAULT_ALGORITHM.get(_decoded_as(objective), 'greedy')


def _drafter_fits(settings, objective: str) -> bool:
  """--drafter self drafts with the model's <mask> slots: only a selfdraft model has learnt to fill them."""
  return not (settings.algorithm == 'spec' and settings.drafter == 'self') or _decoded_as(objective) == 'selfdraft'


def decodes(settings, objective: str) -> bool:
  """Whether these settings can decode a model trained with `objective` (algorithm and drafter)."""
  return _decoded_as(objective) in get(settings.algorithm).objectives and _drafter_fits(settings, objective)


def check_drafter(settings, objective: str) -> None:
  """A clear error where _drafter_fits does not hold."""
  if not _drafter_fits(settings, objective):
    raise FastmtError(f"drafter 'self' (--drafter self) needs a model trained with the selfdraft objective "
                      f"(configs/selfdraft.py); this model was trained with {objective!r}: use drafter 'ngram' (any "
                      "model, no training), 'int8' (its own int8 copy, no training), 'model' (a separate drafter: "
                      "draft_model= in Python, --drafter_workdir in decode.py), 'bigram' or 'pad'")


def check_objective(algorithm: str, objective: str) -> None:
  """Decoding a model with an algorithm it was not trained for is one clear error, before any work."""
  supported = get(algorithm).objectives
  if _decoded_as(objective) not in supported:
    usable = sorted(name for name in ALGORITHMS if _decoded_as(objective) in get(name).objectives)
    hint = f'; its algorithms: {", ".join(usable)}' if usable else ''
    if objective not in DEFAULT_ALGORITHM and objective not in DECODES_LIKE:
      hint += ('; an objective registered outside fastmt needs the module that registers it imported first '
               '(the tools\' --plugins, fastmt.objectives.register_objective)')
    raise FastmtError(f'algorithm {algorithm!r} (--algorithm {algorithm}) decodes models trained with objective '
                      f'{" or ".join(supported)}; this model was trained with {objective!r}{hint}')
