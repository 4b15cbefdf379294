"""The physical floor of one batch-1 greedy step on this machine, from measured bandwidth and peak FLOP/s.

Per decoder step (one new token) the decoder must read every decoder weight and the tied output embedding,
plus the cached keys/values it attends over; it does ~2 FLOPs per weight. The floor is the larger of
bytes / bandwidth and FLOPs / peak; a measured ms/token says how far an implementation is from it. The
bandwidth is measured for a working set of that many bytes read repeatedly, as decoding reads it: a small
model's weights live in the CPU caches, so main-memory bandwidth would put the floor above what runs.
"""

import collections
import functools
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from fastmt.config import ModelConfig


def median_seconds(fn, repeats: int) -> float:
  """Median wall-clock seconds of fn() after one untimed (compiling) call; each call blocked until ready."""
  jax.block_until_ready(fn())
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def measure_bandwidth_gb_s(megabytes: int = 256, repeats: int = 5) -> float:
  """Read+write bandwidth of an elementwise pass over a large float32 array (GB/s): main memory."""
  x = jnp.ones((megabytes * 2**20 // 4,), jnp.float32)
  f = jax.jit(lambda a: a * 1.0001 + 1.0)
  return 2 * x.nbytes / median_seconds(lambda: f(x), repeats) / 1e9


def measure_read_bandwidth_gb_s(num_bytes: int, passes: int = 16, repeats: int = 5) -> float:
  """Bandwidth of reading a working set of num_bytes again and again (GB/s).

  This is the bandwidth a decoder step sees: it reads the same weights every step, so a small model's
  weights stay in the CPU's caches and are read far faster than main memory allows. `passes` reads run in
  one compiled loop (each depends on the last) so that dispatch overhead does not count as memory time.
  """
  x = jnp.ones((max(1024, num_bytes // 4),), jnp.float32)

  def read_all(a):
    return jax.lax.fori_loop(0, passes, lambda i, acc: acc + jnp.sum(a * (1.0 + acc * 0.0)), jnp.float32(0.0))
  f = jax.jit(read_all)
  return passes * x.nbytes / median_seconds(lambda: f(x), repeats) / 1e9


def measure_peak_gflop_s(n: int = 2048, repeats: int = 5) -> float:
  """float32 matmul throughput (GFLOP/s), the practical compute peak of XLA on this machine."""
  a = jnp.asarray(np.random.default_rng(0).standard_normal((n, n)), jnp.float32)
  f = jax.jit(lambda x: x @ x)
  return 2 * n**3 / median_seconds(lambda: f(a), repeats) / 1e9


def decoder_step_cost(config: ModelConfig, source_length: int, target_length: int):
  """(bytes, flops) of one batch-1 greedy step: decoder weights + output embedding + K/V cache reads."""
  e, f, layers = config.emb_dim, config.mlp_dim, config.num_decoder_layers
  per_layer = 4 * e * e + 2 * e * e + 2 * e * f  # self-attention q,k,v,o; cross q,o; FFN (cross k,v precomputed)
  weights = layers * per_layer + config.vocab_size * e
  kv_values = layers * 2 * e * (source_length + target_length)  # cached cross and self keys/values
  bytes_read = 4 * (weights + kv_values)
  flops = 2 * weights + 2 * kv_values
  return bytes_read, flops


def floor_ms_per_token(config: ModelConfig, source_length: int, target_length: int, bandwidth_gb_s: float,
                       peak_gflop_s: float) -> dict:
  bytes_read, flops = decoder_step_cost(config, source_length, target_length)
  memory_ms = bytes_read / (bandwidth_gb_s * 1e9) * 1e3
  compute_ms = flops / (peak_gflop_s * 1e9) * 1e3
  return {'bytes_per_step': bytes_read, 'flops_per_step': flops, 'memory_floor_ms': memory_ms,
          'compute_floor_ms': compute_ms, 'floor_ms_per_token': max(memory_ms, compute_ms)}


@functools.lru_cache(maxsize=8)  # one compilation per model shape, for the curve and encoder_cost alike
def _encode_fn(config: ModelConfig):
  """A jitted (params, source [B, S]) -> the decoder's memory (the encoder plus the cross-attention keys and
  values that every decoder call reuses): what a sentence pays once, whatever its decoder does."""
  from fastmt import models  # pylint: disable=g-import-not-at-top
  model = models.Transformer(config)

  def encode(params, source):
    encoded = model.apply({'params': params}, source, method=models.Transformer.encode)
    return model.apply({'params': params}, encoded, source, method=models.Transformer.memory)
  return jax.jit(encode)


def encoder_cost(config: ModelConfig, params, batch_size: int = 1, source_length: int = 40,
                 repeats: int = 7) -> float:
  """Milliseconds to encode batch_size sources of source_length tokens (the memory included): the share of a
  sentence's time that no decoding algorithm changes, which the ideal speed-ups add to the decoder calls.

  The source is source_length tokens wide; a Translator pads each source to its bucket (translate.SOURCE_BUCKETS):
  at batch 1 the bench takes encoder_cost_padded, which times each source at its bucket.
  """
  encode = _encode_fn(config)
  source = jnp.full((batch_size, source_length), 5, jnp.int32)
  return 1000 * median_seconds(lambda: encode(params, source), repeats)


def encoder_cost_padded(config: ModelConfig, params, source_lengths, repeats: int = 7) -> float:
  """Mean milliseconds to encode one source at batch 1 as the Translator does: padded to its bucket
  (translate.source_buckets), over sources of the given lengths (EOS included). The ideal speed-ups take this
  as the encoder's share at batch 1. encoder_cost at the mean length underestimates it: on the test split's
  first 100 sources, the padded width is 1.18x the length on average (38.6 against 32.6 tokens)."""
  from fastmt.translate import source_buckets  # pylint: disable=g-import-not-at-top
  buckets = source_buckets(config.max_length)
  widths = collections.Counter(next(b for b in buckets if b >= min(n, config.max_length)) for n in source_lengths)
  if not widths:
    raise ValueError('encoder_cost_padded needs at least one source length')
  return sum(count * encoder_cost(config, params, 1, width, repeats)
             for width, count in sorted(widths.items())) / sum(widths.values())


def step_cost_curve(config: ModelConfig, params, widths=(1, 2, 3, 4, 5, 8, 16, 32, 64), batch_size: int = 1,
                    source_length: int = 40, calls: int = 64, repeats: int = 9,
                    cache_length: int | None = None) -> dict[int, float]:
  """Milliseconds per decoder call with n new positions (batch_size rows), inside one compiled loop.

  What the parallel decoders trade on: an iteration over a window of n costs step_cost(n), greedy pays
  step_cost(1) per token, so a window pays off when tokens accepted per call exceed step_cost(n) / step_cost(1).
  Each call is what the decoders' calls are: the Translator's step function with its output projection layout
  (translate.transposed_output_layout: E^T for calls over several positions or rows), then the best token of
  every position (decoding.step.best_tokens), which are the next call's inputs. The KV cache has the decoders'
  own length for a source of source_length tokens (translate.output_cap: every call attends over the whole
  cache, so its length sets the cost of attention and of the cache's copies), at least max(widths) + 8;
  cache_length overrides it.

  Only the calls are timed: the source is encoded once, outside the timed loop (encoder_cost measures it).
  Until 2026-11-24 every timed run also encoded the source, and each call's cost included a 32nd of the
  encoder (then 32 calls a run; about 0.045 ms on the quickstart model at batch 1, a fifth of a one-position
  call) and of the run's other fixed costs: a wide call looked cheaper against a narrow one than it is
  (docs/BENCHMARKS.md section 5). Widths are interleaved within each repeat; the median over repeats is
  reported.
  """
  from fastmt.translate import (DecodeSettings, output_cap,  # pylint: disable=g-import-not-at-top
                                transposed_output_layout)
  memory = curve_memory(config, params, batch_size, source_length)
  # On the device once, as the Translator holds it: a host array would be copied into every timed run (8 MB
  # at the quickstart's shape, about 1 ms on 2 cores), a cost that only calls over several positions paid.
  output_projection = jax.device_put(transposed_output_layout(params))
  if cache_length is None:
    cache_length = max(output_cap(config, source_length, DecodeSettings('greedy')), max(widths) + 8)

  loops = {width: step_cost_loop(config, width, batch_size, cache_length, calls) for width in widths}
  for fn in loops.values():  # compile, and run once
    jax.block_until_ready(fn(params, output_projection, memory))
  times = {width: [] for width in widths}
  for _ in range(repeats):
    for width, samples in times.items():
      start = time.perf_counter()
      jax.block_until_ready(loops[width](params, output_projection, memory))
      samples.append(time.perf_counter() - start)
  return {width: 1000 * statistics.median(samples) / calls for width, samples in times.items()}


def curve_memory(config: ModelConfig, params, batch_size: int = 1, source_length: int = 40):
  """The cross-attention memory the step-cost curve's calls read: a source of source_length tokens of one id
  (5) per row, encoded."""
  return _encode_fn(config)(params, jnp.full((batch_size, source_length), 5, jnp.int32))


def step_cost_loop(config: ModelConfig, width: int, batch_size: int, cache_length: int, calls: int):
  """The step-cost curve's timed program, jitted: (params, output_projection, memory) -> the last call's tokens,
  after `calls` calls of `width` new positions each (the Translator's step function, best_tokens of every
  position fed to the next call) at write offsets cycling through 0-7 of a cache_length-slot cache."""
  from fastmt import models  # pylint: disable=g-import-not-at-top
  from fastmt.decoding.step import best_tokens  # pylint: disable=g-import-not-at-top
  from fastmt.translate import make_step_fn  # pylint: disable=g-import-not-at-top
  model = models.Transformer(config)

  def run(params, output_projection, memory):
    step_fn = make_step_fn(model, params, memory, output_projection=output_projection)
    cache = models.init_cache(config, batch_size, cache_length)

    def body(i, carry):
      cache, tokens = carry
      offsets = jnp.full((batch_size,), i % 8, jnp.int32)
      positions = offsets[:, None] + jnp.arange(width)[None, :]
      mask = models.cache_causal_mask(offsets, width, cache_length)
      logits, cache = step_fn(tokens, positions, mask, cache, offsets)
      return cache, best_tokens(logits)  # the next call depends on this one, as in a decoder
    return jax.lax.fori_loop(0, calls, body, (cache, jnp.full((batch_size, width), 5, jnp.int32)))[1]
  return jax.jit(run)
