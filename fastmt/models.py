"""A pre-LayerNorm encoder-decoder Transformer with tied embeddings and an explicit decoder step.

Read top to bottom: layers, then the model. The model exposes the three calls every decoding algorithm needs:

  encoded = model.encode(source)                                # [B, S, E]
  memory  = model.memory(encoded, source)                       # cross-attention K/V, computed once
  cache   = init_cache(config, batch, max_length)               # self-attention K/V slots
  logits, hidden, cache = model.decode(tokens, positions, mask, memory, cache, write_offsets)

`decode` takes any number of target positions per call, with explicit integer positions (negative ones too)
and an explicit boolean mask over the cache slots, so greedy (1 position), Jacobi (a window), interleaved
decoders (2c slots) and CMLM passes (the whole target, bidirectional) all share it.
"""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from fastmt import quantize
from fastmt.config import ModelConfig
from fastmt.data.tokenizer import PAD_ID
from fastmt.layers import (FeedForward, MultiHeadAttention, select_positions, sinusoidal_positions,
                           write_at_offsets)

# {'k': per-layer [B, M, H, D], 'v': per-layer [B, M, H, D]}, and with relative position keys
# (config.relative_key_distance) 'positions': int32 [B, M], the position each slot's token was embedded at.
Cache = dict[str, Any]
Memory = dict[str, Any]  # {'k', 'v': per-layer [B, H, D, S]; 'mask': bool [B, S]}


def causal_mask(length: int) -> jax.Array:
  """[1, T, T] lower-triangular mask (query t sees keys 0..t)."""
  return jnp.tril(jnp.ones((1, length, length), bool))


def cache_causal_mask(write_offsets: jax.Array, num_new: int, cache_length: int) -> jax.Array:
  """Mask [B, T, M] letting new position t of row b see cache slots 0..write_offsets[b] + t."""
  slots = jnp.arange(cache_length)[None, None, :]
  query_slot = write_offsets[:, None, None] + jnp.arange(num_new)[None, :, None]
  return slots <= query_slot


def init_cache(config: ModelConfig, batch_size: int, max_length: int) -> Cache:
  """Zeroed self-attention K/V slots for max_length target positions (no parameters involved)."""
  shape = (batch_size, max_length, config.num_heads, config.head_dim)
  zeros = lambda: tuple(jnp.zeros(shape, config.jnp_dtype) for _ in range(config.num_decoder_layers))
  cache = {'k': zeros(), 'v': zeros()}
  if config.relative_key_distance:  # the keys' positions, written beside them (any decoder's own positions)
    cache['positions'] = jnp.zeros((batch_size, max_length), jnp.int32)
  return cache


class EncoderLayer(nn.Module):
  config: ModelConfig

  @nn.compact
  def __call__(self, x, mask, deterministic: bool):
    cfg = self.config
    dropout = nn.Dropout(cfg.dropout_rate)
    h = nn.LayerNorm(dtype=cfg.jnp_dtype)(x)
    h, _ = MultiHeadAttention(cfg.num_heads, cfg.head_dim, cfg.emb_dim, cfg.jnp_dtype, cfg.quantization)(h, mask)
    x = x + dropout(h, deterministic=deterministic)
    h = nn.LayerNorm(dtype=cfg.jnp_dtype)(x)
    h = FeedForward(cfg.mlp_dim, cfg.emb_dim, cfg.dropout_rate, cfg.jnp_dtype, cfg.quantization)(h, deterministic)
    return x + dropout(h, deterministic=deterministic)


class DecoderLayer(nn.Module):
  config: ModelConfig

  def setup(self):
    cfg = self.config
    attention = lambda relative=0: MultiHeadAttention(cfg.num_heads, cfg.head_dim, cfg.emb_dim, cfg.jnp_dtype,
                                                      cfg.quantization, relative)
    self.self_norm = nn.LayerNorm(dtype=cfg.jnp_dtype)
    self.self_attention = attention(cfg.relative_key_distance)
    self.cross_norm = nn.LayerNorm(dtype=cfg.jnp_dtype)
    self.cross_attention = attention()
    self.mlp_norm = nn.LayerNorm(dtype=cfg.jnp_dtype)
    self.mlp = FeedForward(cfg.mlp_dim, cfg.emb_dim, cfg.dropout_rate, cfg.jnp_dtype, cfg.quantization)
    self.dropout = nn.Dropout(cfg.dropout_rate)

  def cross_kv(self, encoded):
    return self.cross_attention.project_memory(encoded)

  def __call__(self, x, self_mask, cross_kv, cross_mask, cache, write_offsets, deterministic: bool,
               positions=None, query_slots=None):
    """x [B, T, E] -> [B, T, E], or with query_slots [B, P, E]: only those positions go on past the
    self-attention's keys and values (Transformer.decode's last layer, where logits are wanted at a few)."""
    h, cache = self.self_attention(self.self_norm(x), self_mask, cache=cache, write_offsets=write_offsets,
                                   positions=positions, query_slots=query_slots)
    if query_slots is not None:
      x = select_positions(x, query_slots)
    x = x + self.dropout(h, deterministic=deterministic)
    h, _ = self.cross_attention(self.cross_norm(x), cross_mask, kv=cross_kv)
    x = x + self.dropout(h, deterministic=deterministic)
    h = self.mlp(self.mlp_norm(x), deterministic)
    return x + self.dropout(h, deterministic=deterministic), cache


class Transformer(nn.Module):
  """Encoder-decoder Transformer; source and target share one embedding, tied to the output projection."""
  config: ModelConfig

  def setup(self):
    cfg = self.config
    if cfg.quantization == 'int8':  # the int8 table and its per-token scales (fastmt.quantize)
      self.embed = quantize.Int8Embed(cfg.vocab_size, cfg.emb_dim)
    else:
      self.embed = nn.Embed(cfg.vocab_size, cfg.emb_dim,
                            embedding_init=nn.initializers.normal(stddev=cfg.emb_dim**-0.5))
    self.encoder_layers = [EncoderLayer(cfg, name=f'encoder_{i}') for i in range(cfg.num_encoder_layers)]
    self.encoder_norm = nn.LayerNorm(dtype=cfg.jnp_dtype)
    self.decoder_layers = [DecoderLayer(cfg, name=f'decoder_{i}') for i in range(cfg.num_decoder_layers)]
    self.decoder_norm = nn.LayerNorm(dtype=cfg.jnp_dtype)
    self.dropout = nn.Dropout(cfg.dropout_rate)
    if cfg.num_directions:
      self.direction_embed = nn.Embed(cfg.num_directions, cfg.emb_dim,
                                      embedding_init=nn.initializers.normal(stddev=cfg.emb_dim**-0.5))

  def _embed(self, tokens, positions, deterministic, directions=None):
    cfg = self.config
    x = self.embed(tokens) * jnp.sqrt(cfg.emb_dim).astype(jnp.float32)
    x = x + sinusoidal_positions(positions, cfg.emb_dim)
    if directions is not None:
      x = x + self.direction_embed(directions) * jnp.sqrt(cfg.emb_dim).astype(jnp.float32)
    return self.dropout(x.astype(cfg.jnp_dtype), deterministic=deterministic)

  def _decoder_directions(self, tokens, directions):
    """The direction ids the decoder embeds: required by a model with direction embeddings, else ignored."""
    if not self.config.num_directions:
      return None
    if directions is None and self.is_initializing():
      return jnp.zeros_like(tokens)  # model.init(rng, source, target) builds the table too
    if directions is None:
      raise ValueError(f'this model has {self.config.num_directions} direction embeddings: decoder calls need '
                       'directions [B, T]')
    return directions

  def decoder_input(self, tokens, positions, directions=None, deterministic: bool = True):
    """What the first decoder layer reads: tokens int [B, T] embedded at positions [B, T] -> [B, T, E] (decode
    starts from it; so does fastmt.int8_step's decoder call in one custom call)."""
    return self._embed(tokens, positions, deterministic, self._decoder_directions(tokens, directions))

  def encode(self, source, deterministic: bool = True):
    """source int [B, S] (PAD=0) -> encoded [B, S, E]."""
    positions = jnp.broadcast_to(jnp.arange(source.shape[1]), source.shape)
    x = self._embed(source, positions, deterministic)
    mask = (source != PAD_ID)[:, None, :]  # [B, 1, S]: every query sees every real source token
    for layer in self.encoder_layers:
      x = layer(x, mask, deterministic)
    return self.encoder_norm(x)

  def memory(self, encoded, source) -> Memory:
    """Cross-attention keys/values of every decoder layer, computed once per source batch."""
    kvs = [layer.cross_kv(encoded) for layer in self.decoder_layers]
    return {'k': tuple(k for k, _ in kvs), 'v': tuple(v for _, v in kvs), 'mask': source != PAD_ID}

  def decode(self, tokens, positions, self_mask, memory: Memory, cache: Cache | None = None,
             write_offsets=None, deterministic: bool = True, return_logits: bool = True, directions=None,
             query_slots=None):
    """One decoder call over T target positions.

    Args:
      tokens: int [B, T]; positions: int [B, T] (any integers).
      self_mask: bool [B, T, K], K = M cache slots (with a cache) or T (without).
      memory: from `memory()`.
      cache: optional self-attention cache; tokens' keys/values are written at write_offsets [B].
      return_logits: False skips the tied output projection (logits None) for callers that project the
        hidden states themselves (the clustered projection).
      directions: int [B, T] direction ids, for models with direction embeddings (config.num_directions).
      query_slots: optional int [P] (every row) or [B, P] (per row): logits and hidden only at these of the T
        positions. Every position still goes through every layer as a key and value (and into the cache);
        the last layer computes the rest of its work (queries, cross-attention, FFN) only at these, so a
        call that needs a few positions' logits, as HRT's stage II, pays less for the others.
    Returns:
      logits float32 [B, T, V], hidden [B, T, E] (final-LayerNorm output), updated cache (or None); [B, P, ...]
      with query_slots.
    """
    x = self.decoder_input(tokens, positions, directions, deterministic)
    cross_mask = memory['mask'][:, None, :]
    relative, key_positions = None, None
    if self.config.relative_key_distance:
      if cache is not None and 'positions' not in cache:
        raise ValueError('a model with relative position keys needs a cache from init_cache, which keeps each '
                         "slot's position ('positions'); this one has only " + ', '.join(sorted(cache)))
      positions = jnp.broadcast_to(positions, tokens.shape).astype(jnp.int32)
      key_positions = positions if cache is None else \
          write_at_offsets(cache['positions'], positions, write_offsets)
      relative = (positions, key_positions)
    new_k, new_v = [], []
    last = len(self.decoder_layers) - 1
    for i, layer in enumerate(self.decoder_layers):
      layer_cache = None if cache is None else (cache['k'][i], cache['v'][i])
      x, layer_cache = layer(x, self_mask, (memory['k'][i], memory['v'][i]), cross_mask, layer_cache,
                             write_offsets, deterministic, relative, query_slots if i == last else None)
      if layer_cache is not None:
        new_k.append(layer_cache[0])
        new_v.append(layer_cache[1])
    hidden = self.decoder_norm(x)
    logits = self.project(hidden) if return_logits else None
    new_cache = None
    if cache is not None:
      new_cache = {'k': tuple(new_k), 'v': tuple(new_v)}
      if key_positions is not None:
        new_cache['positions'] = key_positions
    return logits, hidden, new_cache

  def project(self, hidden):
    """The tied output projection: hidden [..., E] (decode's) -> logits float32 [..., V]."""
    return self.embed.attend(hidden.astype(jnp.float32))

  def __call__(self, source, decoder_input, positions=None, self_mask=None, deterministic: bool = True,
               directions=None):
    """Teacher-forced training pass: logits [B, T, V] for decoder_input [B, T].

    positions int [B, T] and self_mask bool [B or 1, T, T] come from the training objective
    (fastmt.objectives); by default 0 .. T-1 and causal (the autoregressive objective).
    """
    encoded = self.encode(source, deterministic)
    memory = self.memory(encoded, source)
    if positions is None:
      positions = jnp.broadcast_to(jnp.arange(decoder_input.shape[1]), decoder_input.shape)
    if self_mask is None:
      self_mask = causal_mask(decoder_input.shape[1])
    logits, _, _ = self.decode(decoder_input, positions, self_mask, memory, deterministic=deterministic,
                               directions=directions)
    return logits
