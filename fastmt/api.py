"""fastmt as a library: load a trained work directory and translate text with any decoding algorithm.

    import fastmt
    model = fastmt.load('runs/quickstart')                                              # latest checkpoint
    model.translate(['In the beginning God created the heavens and the earth.'])        # greedy
    model.translate(sentences, algorithm='pgj', block_size=3)                           # == greedy, exact
    model.translate(sentences, algorithm='beam', beam_size=4, batch_size=64)
    model.translate(sentences, algorithm='spec', drafter='model', draft_model='runs/drafter')  # == greedy
    for line in model.translate_iter(open('big.en', newline='\n'), algorithm='hgj'):    # streamed, in order
        ...

Decoding algorithms themselves are pure functions of a decoder-step callable (fastmt.decoding), usable on
any JAX model: docs/API.md shows one wrapped around a decoder written outside fastmt.
"""

import collections
import collections.abc
import dataclasses
import os
import sys
import threading
from typing import Iterable, Iterator, Sequence
import warnings

import jax
from jax.sharding import NamedSharding, PartitionSpec

from fastmt import few_rows, precision, width, workdir as workdir_lib
from fastmt.decoding import registry
from fastmt.errors import FastmtError, MissingError
from fastmt.translate import (DecodeSettings, SharedInt8Copy, TranslationStats, Translator, local_mesh,
                              transposed_output_layout)

_SETTING_NAMES = {f.name for f in dataclasses.fields(DecodeSettings)} - {'algorithm', 'interleaving', 'hrt_symbols',
                                                                       'draft_mask_id', 'draft_model_config'}


# Translators (each with its compiled programs) a TranslationModel keeps for the settings it was asked for: the
# most recently used. Enough for every method of a bench or a notebook; a server that sends other settings with
# every request recompiles the oldest instead of growing without end.
MAX_TRANSLATORS = 16


class TranslationModel:
  """A trained model with its vocabulary, ready to translate with any algorithm fastmt.decoding has.

  Attributes: config (ModelConfig), params, tokenizer, objective, step (the checkpoint's), workdir, dtype (what it
  decodes in: a fastmt.precision.DTYPES value).
  One compiled decoder is kept per (algorithm settings, batch shape), so repeated calls do not recompile, for
  the MAX_TRANSLATORS settings used last (settings the algorithm ignores, such as greedy's alpha, count as the
  defaults). A model may be shared by threads.
  `params` gives the weights' tree as a copy (editing it in place changes nothing here); assigning
  `model.params = new` (the same tree and shapes) makes every algorithm decode with the new weights: each
  compiled decoder held a copy of its own, so an edit once reached only the algorithms not used yet.
  """

  def __init__(self, config, params, tokenizer, objective: str = 'at', workdir: str | None = None,
               step: int | None = None, dtype: str = 'float32', objective_options: dict | None = None,
               float32_kernel: bool = False):
    if float32_kernel and (dtype != 'float32' or config.quantization):
      raise FastmtError(f'float32_kernel runs float32 products; this model decodes in '
                        f'{config.quantization or dtype!r}')
    # Clusters are fingerprinted on the float32 weights they were fitted on (clusters_lib.fingerprint): taken
    # here, before a cast to bfloat16 or int8 changes every value, or no clusters would ever match such a model.
    self._float32_weights_fingerprint = (
        workdir_lib.weights_fingerprint(params) if dtype != 'float32' and not config.quantization else None)
    self.config, params = precision.for_inference(config, params, dtype)
    self.float32_kernel = float32_kernel  # Translator's: products of at most 8 rows through fastmt's CPU kernel
    self.tokenizer, self.objective, self.workdir, self.step = tokenizer, objective, workdir, step
    self.dtype = precision.dtype_of(self.config)  # what it decodes in: a quantized model's own, asked 'float32'
    self._drafter_dtype = dtype  # a drafter loads as asked (a float drafter is not quantized for this model)
    self.objective_options = dict(objective_options or {})
    self._draft_models = {}
    # _lock guards the translators and the weights; a new translator is built under _build_lock only, so that
    # other threads' translators (a server's other requests) are looked up meanwhile, not held up by a drafter
    # model loading or clusters being read. Builds take turns (two threads asking for one new translator build
    # it once); weights assigned during a build make it start again (_generation).
    self._lock = threading.Lock()
    self._build_lock = threading.Lock()
    self._generation = 0
    self._use_params(params)

  def _use_params(self, params) -> None:
    """These weights for every translator from now on: what was built from the old ones is dropped, and a build
    under way with them starts again."""
    with self._lock:
      self._use_params_locked(params)

  def _use_params_locked(self, params) -> None:
    if self._generation:  # new weights: the float32 ones the model was loaded from are not theirs
      self._float32_weights_fingerprint = None
    self._generation += 1
    self._params = params
    # Packed once for every Translator of this model (the Translator packs nothing more).
    self._translator_params = few_rows.with_layout(params) if self.float32_kernel else params
    self._output_layout = None  # the tied projection laid out for multi-position calls: one for every Translator
    self._translators = collections.OrderedDict()  # the most recently used last; at most MAX_TRANSLATORS
    self._clusters = {}  # loaded against the weights' fingerprint
    self._int8_copy = SharedInt8Copy(self.config, params)  # --drafter int8's, made once

  @property
  def params(self):
    return jax.tree_util.tree_map(lambda x: x, self._params)  # the containers copied: an edit stays the caller's

  @params.setter
  def params(self, new) -> None:
    shapes = lambda tree: jax.tree_util.tree_map(lambda x: (tuple(x.shape), str(x.dtype)), tree)
    if jax.tree_util.tree_structure(new) != jax.tree_util.tree_structure(self._params) or \
        shapes(new) != shapes(self._params):
      raise FastmtError('model.params = ...: give the same tree of the same shapes and dtypes as model.params '
                        '(another architecture: fastmt.load its work directory)')
    self._use_params(new)

  def translator(self, algorithm: str | None = None, clusters: str | None = None, draft_model=None,
                 **settings) -> Translator:
    """The Translator for these settings (DecodeSettings fields: beam_size, alpha, block_size,
    parallel_length, jacobi_init, output_length_ratio, drafter ...); clusters: a clusters directory
    (fastmt-clusters) for the clustered output projection; draft_model: for algorithm='spec',
    drafter='model', the drafter (a TranslationModel, or its work directory, loaded in this model's dtype).
    Its translate(texts, batch_size) returns (hypotheses, TranslationStats), where this model's translate
    returns the hypotheses. algorithm None: the model's own (greedy; ib for an interleaved model, hrt for an
    HRT one), as validation during training decodes it."""
    if algorithm is None:
      algorithm = registry.default_algorithm(self.objective)
    unknown = sorted(set(settings) - _SETTING_NAMES)
    if unknown:
      raise FastmtError(f'Unknown decoding settings {unknown}; known: {sorted(_SETTING_NAMES)}')
    decode_settings = DecodeSettings(algorithm, **settings)  # an unknown algorithm is an error before the warning
    for message in registry.ignored_settings(decode_settings, settings):
      warnings.warn(message, stacklevel=_first_frame_outside_this_module())  # the user's line
    return self._translator(decode_settings, clusters, draft_model)

  def _translator(self, decode_settings: DecodeSettings, clusters, draft_model) -> Translator:
    # Settings the algorithm ignores (greedy's alpha) are left out of the key: they would compile the same
    # program again and keep it, once per value a caller sends.
    decode_settings = registry.without_ignored_settings(decode_settings)
    clusters = self._clusters_directory(clusters)
    # The key holds the drafter (its identity stays unique; a work directory's name stands for the model
    # loaded from it) and the algorithm itself: one registered again under its name
    # (registry.register_algorithm(..., replace=True)) gets a translator of its own.
    key = (decode_settings, clusters, self._drafter_key(draft_model), registry.get(decode_settings.algorithm))
    found = self._cached_translator(key)
    if found is not None:
      return found
    with self._build_lock:
      while True:
        with self._lock:  # built by another thread while this one waited; else this build's weights
          found = self._cached_translator_locked(key)
          if found is not None:
            return found
          generation, params, translator_params = self._generation, self._params, self._translator_params
          int8_copy, clusters_cache, output_layout = self._int8_copy, self._clusters, self._output_layout
        translator, output_layout = self._build(decode_settings, clusters, draft_model, params, translator_params,
                                                int8_copy, clusters_cache, output_layout)
        with self._lock:
          if self._generation != generation:  # model.params = ... meanwhile: build again with the new weights
            continue
          if output_layout is not None:
            self._output_layout = output_layout
          self._translators[key] = translator
          while len(self._translators) > MAX_TRANSLATORS:  # a server sending a new alpha with every request
            self._translators.popitem(last=False)  # its compiled programs go with it (unless a caller holds it)
          return translator

  def _drafter_key(self, draft_model):
    if draft_model is None or isinstance(draft_model, TranslationModel):
      return draft_model
    self._check_draft_model_type(draft_model)
    return os.path.expanduser(os.fspath(draft_model))

  def _cached_translator(self, key) -> Translator | None:
    with self._lock:
      return self._cached_translator_locked(key)

  def _cached_translator_locked(self, key) -> Translator | None:
    if key in self._translators:
      self._translators.move_to_end(key)
      return self._translators[key]
    return None

  def _build(self, decode_settings, clusters, draft_model, params, translator_params, int8_copy, clusters_cache,
             output_layout) -> tuple[Translator, object]:
    """(a new Translator of these weights, the shared output layout it uses): outside _lock, with the
    weights and caches of one generation, so that a later model.params = ... neither changes nor is changed by
    what it makes."""
    from fastmt import decode_lib  # pylint: disable=g-import-not-at-top
    draft_model = self._load_draft_model(draft_model)
    draft_table = decode_lib.draft_table_for(self.workdir, decode_settings)
    clusters_array = self._load_clusters(clusters, clusters_cache, params)
    if clusters_array is None and output_layout is None:  # on the devices once: each Translator's device_put
      # of it is then a no-op, not a copy (7.8 MiB for the quickstart's, 64 MiB for 32k x 512)
      output_layout = jax.device_put(transposed_output_layout(params), NamedSharding(local_mesh(), PartitionSpec()))
    translator = Translator(self.config, translator_params, self.tokenizer, decode_settings,
                            clusters_array, draft_table, self.objective,
                            objective_options=self.objective_options, draft_model=draft_model,
                            checkpoint_step=self.step, int8_copy=int8_copy.for_settings(decode_settings),
                            float32_kernel=self.float32_kernel,
                            transposed_output=True if clusters_array is not None else output_layout)
    return translator, output_layout

  def choose_width(self, batch_size: int = 32, calibration=None, clusters: str | None = None, draft_model=None,
                   **settings) -> int:
    """The window W of algorithm='spec' (with these settings: drafter, ...) that translates fastest on this
    machine at this batch size, or 1 where greedy itself is fastest: each of fastmt.width.widths_for(drafter) and greedy
    timed on `calibration` sentences (default: the work directory's validation split; fastmt.width). The
    output is greedy's whatever W is; translate then with algorithm='spec', block_size=W (or 'greedy' for 1):
    the timed translators are kept, compiled."""
    if isinstance(calibration, str):  # one sentence, not its characters
      calibration = [calibration]
    if calibration is None:
      if self.workdir is None:
        raise FastmtError('choose_width needs calibration sentences: this model has no work directory')
      calibration = width.calibration_sentences(self.workdir)
    unknown = sorted(set(settings) - _SETTING_NAMES)
    if unknown:
      raise FastmtError(f'Unknown decoding settings {unknown}; known: {sorted(_SETTING_NAMES)}')
    spec = DecodeSettings('spec', **settings)
    # As translate() warns of them: beam_size with spec was taken without a word here
    for message in registry.ignored_settings(spec, settings):
      warnings.warn(message, stacklevel=_first_frame_outside_this_module())
    if 'block_size' in settings:
      warnings.warn(f'block_size={settings["block_size"]!r} has no effect with choose_width: it times the widths '
                    f'{list(width.widths_for(spec.drafter))} and greedy', stacklevel=_first_frame_outside_this_module())
    candidates = {w: self._translator(s, clusters, draft_model if w > 1 else None)
                  for w, s in width.candidate_settings(spec).items()}
    return width.AutoWidthTranslator(candidates, calibration).width_for(batch_size)

  @staticmethod
  def _clusters_directory(clusters):
    """clusters as one spelling of its directory: '~' expanded (as load() and draft_model do), a path object and
    its str the same key, so they share one translator."""
    if clusters is None:
      return None
    if not isinstance(clusters, (str, os.PathLike)):
      raise FastmtError(f'clusters must be a clusters directory (a str or a path; fastmt-clusters writes one), '
                        f'got {type(clusters).__name__}')
    return os.path.expanduser(os.fspath(clusters))

  @staticmethod
  def _check_draft_model_type(draft_model) -> None:
    if not isinstance(draft_model, (str, os.PathLike)):
      raise FastmtError(f'draft_model must be a TranslationModel or its work directory (a str or a path), got '
                        f'{type(draft_model).__name__}')

  def _load_draft_model(self, draft_model):
    """The drafter, a work directory loaded once (under _build_lock: builds take turns)."""
    if draft_model is None or isinstance(draft_model, TranslationModel):
      return draft_model
    self._check_draft_model_type(draft_model)
    draft_model = os.path.expanduser(os.fspath(draft_model))
    if draft_model not in self._draft_models:
      self._draft_models[draft_model] = load(draft_model, dtype=self._drafter_dtype)
    return self._draft_models[draft_model]

  def _load_clusters(self, directory, cache: dict, params):
    """The clusters of `directory` for `params`, kept in `cache` (the dict of those weights' generation: new
    weights start an empty one, and a build of the old ones still writes into the old one)."""
    if directory is None:
      return None
    if directory not in cache:
      from fastmt import clusters_lib  # pylint: disable=g-import-not-at-top
      cache[directory] = clusters_lib.load_clusters(directory, self.config, self.tokenizer, params,
                                                    self._float32_weights_fingerprint)
    return cache[directory]

  def translate(self, texts: str | Sequence[str], algorithm: str | None = None, batch_size: int = 32, *,
                clusters: str | None = None, draft_model=None, stats: TranslationStats | None = None,
                **settings) -> str | list[str]:
    """Translations in input order (one string for one string). A blank line gives an empty string. `stats`,
    a TranslationStats, receives the counts (empty and truncated inputs, outputs at the length cap, calls)."""
    single = isinstance(texts, str)
    if not single:
      _check_lines(texts)
    translator = self.translator(algorithm, clusters, draft_model, **settings)
    hypotheses, _ = translator.translate([texts] if single else [_without_line_end(t) for t in texts], batch_size,
                                         stats)
    return hypotheses[0] if single else hypotheses

  def translate_iter(self, lines: Iterable[str], algorithm: str | None = None, batch_size: int = 32, *,
                     clusters: str | None = None, draft_model=None, stats: TranslationStats | None = None,
                     **settings) -> Iterator[str]:
    """Streams translations of any iterable of lines (a file object too; trailing newlines are dropped),
    in input order, a chunk at a time: memory stays bounded however long the input is. A list or tuple is
    read in chunks of 4,096 lines; any other iterable (a generator, a file, sys.stdin, a queue's iterator)
    as its lines arrive: each chunk is the lines already there, so a line is translated without waiting for
    the next ones (fastmt.streaming). Such an iterable is read on a thread of fastmt's: a source bound to the
    thread that made it (a sqlite3 cursor) is given as lists of lines instead."""
    if isinstance(lines, str):
      raise FastmtError('translate_iter takes an iterable of lines, not one string (which it would read character '
                        'by character): translate() takes one sentence')
    _check_lines(lines)
    translator = self.translator(algorithm, clusters, draft_model, **settings)
    return translator.translate_iter((_without_line_end(line) for line in lines), batch_size, stats,
                                     stream=not isinstance(lines, collections.abc.Sequence))

  def __repr__(self):
    return (f'TranslationModel({self.workdir!r}, step={self.step}, objective={self.objective!r}, '
            f'dtype={self.dtype!r}, {self.config.num_encoder_layers}+{self.config.num_decoder_layers} layers, '
            f'vocabulary {self.config.vocab_size})')


def _first_frame_outside_this_module() -> int:
  """The warnings.warn stacklevel, called from the function that warns, of the first caller outside fastmt.api
  (translate and translate_iter warn through translator)."""
  frame, level = sys._getframe(1), 1  # pylint: disable=protected-access
  while frame is not None and frame.f_globals.get('__name__') == __name__:
    frame, level = frame.f_back, level + 1
  return level


def _without_line_end(line):
  """A line as translate and translate_iter both take it: a file object's line without its '\\n' or '\\r\\n'
  (translate kept it, translate_iter did not: with an 'identity'-normalised vocabulary it was an <unk>, and the
  same file translated two ways). Anything else as it is, for Translator to check."""
  return line.rstrip('\r\n') if isinstance(line, str) else line


def _check_lines(texts) -> None:
  """Sentences come as str or as an iterable of str (each item is checked as it is translated); bytes and
  non-iterables are a FastmtError here, before any work."""
  if isinstance(texts, (bytes, bytearray)):
    raise FastmtError('give text (str), not bytes: decode them first, e.g. data.decode("utf-8")')
  if not isinstance(texts, collections.abc.Iterable):
    raise FastmtError(f'give a str or an iterable of str to translate, got {type(texts).__name__}')
  if getattr(texts, 'ndim', None) == 0:  # a 0-d numpy array is Iterable by type but cannot be iterated
    raise FastmtError('give a str or a 1-d array of str to translate, got a 0-d array: pass array.item() for '
                      'one sentence')


def load(workdir: str, checkpoint='latest', dtype: str = 'float32',
         float32_kernel: bool = False) -> TranslationModel:
  """A train.py work directory's checkpoint ('latest', 'best' or a step number) as a TranslationModel.

  dtype 'bfloat16' decodes in half precision (float32 softmax and logits); 'int8' / 'int8_layers' in 8 bits
  (fastmt.quantize); 'bfloat16_int8' / 'bfloat16_int8_layers' both (fastmt.precision.DTYPES). float32_kernel (float32
  only): products of at most 8 rows run through fastmt's own CPU kernel (Translator's float32_kernel). Errors (a
  missing directory or step, no best checkpoint kept, a checkpoint of another architecture) are FastmtErrors.
  """
  if not isinstance(workdir, (str, os.PathLike)) or isinstance(os.fspath(workdir), bytes):
    raise FastmtError(f'load takes a work directory (a str or a path), got {type(workdir).__name__}')
  if not isinstance(float32_kernel, bool):  # float32_kernel='no' was truthy: the kernel on
    raise FastmtError(f'float32_kernel must be True or False, got {float32_kernel!r}')
  workdir = os.path.expanduser(os.fspath(workdir))  # '~/runs/x' as a shell would read it; a pathlib.Path
  if not os.path.isdir(workdir):
    raise MissingError(f'No work directory {workdir!r}')
  config = workdir_lib.load_model_config(workdir)
  params, step = workdir_lib.restore_params(workdir, config, checkpoint)
  return TranslationModel(config, params, workdir_lib.load_tokenizer(workdir), workdir_lib.load_objective(workdir),
                          workdir, step, dtype, workdir_lib.load_objective_options(workdir), float32_kernel)
