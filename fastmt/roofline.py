"""The physical floor of one batch-1 greedy step on this machine, from measured bandwidth and peak FLOP/s.

Per decoder step (one new token) the decoder must read every decoder weight and the tied output embedding,
plus the cached keys/values it attends over; it does ~2 FLOPs per weight. The floor is the larger of
bytes / bandwidth and FLOPs / peak; a measured ms/token says how far an implementation is from it.
"""

import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from fastmt.config import ModelConfig


def measure_bandwidth_gb_s(megabytes: int = 256, repeats: int = 5) -> float:
  """Read+write bandwidth of an elementwise pass over a large float32 array (GB/s)."""
  x = jnp.ones((megabytes * 2**20 // 4,), jnp.float32)
  f = jax.jit(lambda a: a * 1.0001 + 1.0)
  jax.block_until_ready(f(x))
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(f(x))
    times.append(time.perf_counter() - start)
  return 2 * x.nbytes / statistics.median(times) / 1e9


def measure_peak_gflop_s(n: int = 2048, repeats: int = 5) -> float:
  """float32 matmul throughput (GFLOP/s), the practical compute peak of XLA on this machine."""
  a = jnp.asarray(np.random.default_rng(0).standard_normal((n, n)), jnp.float32)
  f = jax.jit(lambda x: x @ x)
  jax.block_until_ready(f(a))
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(f(a))
    times.append(time.perf_counter() - start)
  return 2 * n**3 / statistics.median(times) / 1e9


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
