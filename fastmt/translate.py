"""Translating text with a trained model and any decoding algorithm, in input order.

This is where the model meets the model-agnostic decoders: `make_step_fn` closes a `DecoderStepFn` over the
parameters and the encoded source, and `Translator` batches sentences by length into a few static shapes,
runs one jitted function per shape, and puts every output back in its input position.

Bad input is never dropped: an empty line translates to an empty line (no decoding), a line longer than the
model's maximum is truncated (counted, with a warning), and a row that hits the output cap is counted.
"""

import dataclasses
import functools
import logging
import math

import jax
import jax.numpy as jnp
import numpy as np

from fastmt import models, projection
from fastmt.config import ModelConfig
from fastmt.data.tokenizer import EOS_ID, PAD_ID, Tokenizer
from fastmt.decoding import registry
from fastmt.decoding.greedy import DecodeOutput

SOURCE_BUCKETS = (8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)


@dataclasses.dataclass(frozen=True)
class DecodeSettings:
  algorithm: str = 'greedy'
  beam_size: int = 4
  alpha: float = 0.6  # beam search length penalty
  block_size: int = 3  # Jacobi PGJ/HGJ block size b
  parallel_length: int = 0  # HGJ parallel length l; 0 = the output cap
  output_length_ratio: float = 2.0  # output cap = min(model max_length, ratio * source bucket + 8)
  jacobi_init: str = 'pad'  # Jacobi guesses for new positions: 'pad' (the paper's) or 'bigram' (a draft table)

  def __post_init__(self):
    registry.validate(self)


@dataclasses.dataclass
class TranslationStats:
  sentences: int = 0
  empty_inputs: int = 0
  truncated_inputs: int = 0
  outputs_at_cap: int = 0  # rows that reached the output cap without EOS
  decoder_calls: int = 0  # sum over sentences of the decoder calls that sentence needed
  loop_iterations: int = 0  # sum over batches of while-loop iterations
  output_tokens: int = 0


def make_step_fn(model: models.Transformer, params, memory, clusters=None):
  """A DecoderStepFn over `model` with the encoded source `memory` closed in.

  clusters: a projection.Clusters to use the clustered output projection instead of the dense one.
  """
  def step_fn(tokens, positions, self_mask, cache, write_offsets):
    logits, hidden, cache = model.apply({'params': params}, tokens, positions, self_mask, memory, cache,
                                        write_offsets, return_logits=clusters is None,
                                        method=models.Transformer.decode)
    if clusters is not None:
      logits, _ = projection.clustered_logits(hidden, params['embed']['embedding'], clusters)
    return logits, cache
  return step_fn


def output_cap(config: ModelConfig, source_length: int, settings: DecodeSettings) -> int:
  return min(config.max_length, int(math.ceil(settings.output_length_ratio * source_length)) + 8)


def decode_source_batch(params, source, clusters=None, draft_table=None, *, config: ModelConfig,
                        settings: DecodeSettings) -> DecodeOutput:
  """Encodes source [B, S] and decodes it with settings.algorithm. Jit with config/settings static.

  clusters: optional projection.Clusters (the clustered output projection); None = dense.
  draft_table: int32 [V] next-token guesses for settings.jacobi_init='bigram' (decoding/drafts.py).
  """
  model = models.Transformer(config)
  batch = source.shape[0]
  max_len = output_cap(config, source.shape[1], settings)
  encoded = model.apply({'params': params}, source, method=models.Transformer.encode)
  memory = model.apply({'params': params}, encoded, source, method=models.Transformer.memory)
  algorithm = registry.get(settings.algorithm)
  rows = batch * algorithm.rows_per_sentence(settings)
  memory = algorithm.expand(memory, settings)
  cache = models.init_cache(config, rows, algorithm.cache_length(max_len, settings))
  return algorithm.run(make_step_fn(model, params, memory, clusters), cache, batch, max_len, settings,
                       draft_table)


class Translator:
  """Translates lists of strings; one compiled function per (batch size, source bucket)."""

  def __init__(self, config: ModelConfig, params, tokenizer: Tokenizer, settings=DecodeSettings(),
               clusters=None, draft_table=None):
    if tokenizer.vocab_size != config.vocab_size:
      raise ValueError(f'tokenizer has {tokenizer.vocab_size} pieces but the model {config.vocab_size}')
    if clusters is not None and clusters.vocab_size != config.vocab_size:
      raise ValueError(f'clusters were built for a {clusters.vocab_size}-token vocabulary, the model has '
                       f'{config.vocab_size}')
    self.config, self.params, self.tokenizer, self.settings = config, params, tokenizer, settings
    if settings.jacobi_init == 'bigram' and draft_table is None:
      raise ValueError("jacobi_init='bigram' needs a draft table (decode_lib.load_draft_table(workdir))")
    if draft_table is not None and np.shape(draft_table) != (config.vocab_size,):
      raise ValueError(f'draft table has shape {np.shape(draft_table)}, the model a {config.vocab_size} vocabulary')
    self.clusters = clusters
    self.draft_table = None if draft_table is None else jnp.asarray(draft_table, jnp.int32)
    self._decode = jax.jit(functools.partial(decode_source_batch, config=config, settings=settings))
    self.buckets = tuple(b for b in SOURCE_BUCKETS if b < config.max_length) + (config.max_length,)

  def encode_sources(self, texts, stats: TranslationStats):
    """Token ids with EOS, truncated to the model's maximum (counted)."""
    ids = []
    for i, row in enumerate(self.tokenizer.encode(texts)):
      if len(row) + 1 > self.config.max_length:
        stats.truncated_inputs += 1
        logging.warning('Input line %d has %d tokens; truncated to the model maximum %d', i + 1,
                        len(row) + 1, self.config.max_length)
        row = row[:self.config.max_length - 1]
      ids.append(np.append(row, EOS_ID).astype(np.int32))
    return ids

  def batches(self, source_ids, batch_size: int):
    """Yields (input indices, padded source [batch_size, bucket]); sentences sorted by length."""
    order = sorted(range(len(source_ids)), key=lambda i: len(source_ids[i]))
    for start in range(0, len(order), batch_size):
      indices = order[start:start + batch_size]
      bucket = next(b for b in self.buckets if b >= max(len(source_ids[i]) for i in indices))
      source = np.full((batch_size, bucket), PAD_ID, np.int32)  # fixed batch: one compile per bucket
      for row, i in enumerate(indices):
        source[row, :len(source_ids[i])] = source_ids[i]
      yield indices, source

  def decode_batch(self, source: np.ndarray) -> DecodeOutput:
    return jax.block_until_ready(self._decode(self.params, jnp.asarray(source), self.clusters, self.draft_table))

  def translate_ids(self, texts: list[str], batch_size: int = 32):
    """Output token ids per input (up to EOS, without it; empty for empty inputs), with statistics."""
    stats = TranslationStats(sentences=len(texts))
    outputs = [np.zeros((0,), np.int32)] * len(texts)
    nonempty = [i for i, t in enumerate(texts) if t.strip()]
    stats.empty_inputs = len(texts) - len(nonempty)
    source_ids = self.encode_sources([texts[i] for i in nonempty], stats)
    for indices, source in self.batches(source_ids, batch_size):
      result = self.decode_batch(source)
      tokens = np.asarray(result.tokens)[:len(indices)]
      calls = np.asarray(result.decoder_calls)[:len(indices)]
      stats.decoder_calls += int(calls.sum())
      stats.loop_iterations += int(result.loop_iterations)
      stats.outputs_at_cap += int((~(tokens == EOS_ID).any(-1)).sum())
      stats.output_tokens += int(((tokens != PAD_ID) & (tokens != EOS_ID)).sum())
      for i, row in zip(indices, tokens):
        eos = np.flatnonzero(row == EOS_ID)
        outputs[nonempty[i]] = row[:eos[0]] if len(eos) else row
    if stats.outputs_at_cap:
      logging.warning('%d outputs reached the output cap without EOS', stats.outputs_at_cap)
    return outputs, stats, source_ids, nonempty

  def translate(self, texts: list[str], batch_size: int = 32) -> tuple[list[str], TranslationStats]:
    """Translations in input order; an empty (or blank) line gives an empty line without decoding."""
    ids, stats, _, _ = self.translate_ids(texts, batch_size)
    return self.tokenizer.decode(ids), stats
