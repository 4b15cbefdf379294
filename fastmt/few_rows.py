"""Float32 products of a few rows through fastmt's own CPU kernel (fastmt.kernels, float32_matmul.cc), and the
float32 sums of bfloat16 products (accumulate_in_float32): fastmt's Dense layers.

A decoder call over a window of positions at small batch (a speculative or Jacobi window, an interleaved step,
a batch of up to 8) multiplies 2 to 8 rows by each weight matrix. XLA:CPU hands every such product
to YNNPACK fusions which, inside a decoder step, cost 1.6-2.7x the one-row product for the same weights plus a
wait on YNNPACK's thread pool (docs/BENCHMARKS.md sections 5 and 8). fastmt's kernel reads each weight once for
all the rows on the calling thread. It runs one-row products too (as fast as XLA's matrix-vector product), so
that a row gets the same layer outputs whether its call has one row or eight.

Opt-in, for inference: `with_layout(params)` adds each float32 Dense layer's weights packed for the kernel
(one more copy of the layers' weights in memory), and the model's Dense layers (these subclasses of Flax's,
the same parameters and initialisation) run every product of at most kernels.FLOAT32_MAX_ROWS rows through it;
more rows, training, bfloat16 and int8 models keep XLA's products. The results equal XLA's up to float32
rounding (another order of the same sums), so an exact decoder's output is still its greedy output where no
near tie is decided differently (tests/test_few_rows.py). Translator(float32_kernel=True), decode.py
--float32_kernel.
"""

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from fastmt import kernels

PACKED = 'float32_packed'  # the parameter leaf with_layout adds to a Dense layer


def _product(module: nn.Module, x, axes, features):
  """module's product through the kernel, or None where XLA's is to be used."""
  if module.is_initializing() or not module.has_variable('params', PACKED):
    return None
  axes = tuple(sorted(a % x.ndim for a in axes))
  lead = x.shape[:x.ndim - len(axes)]
  rows = math.prod(lead)
  if (axes != tuple(range(len(lead), x.ndim)) or rows > kernels.FLOAT32_MAX_ROWS or x.dtype != jnp.float32
      or module.dtype not in (None, jnp.float32) or getattr(module, 'batch_dims', ())):
    return None
  k = math.prod(x.shape[a] for a in axes)
  bias = module.get_variable('params', 'bias').reshape(-1)
  out = kernels.float32_matmul(x.reshape(rows, k), module.get_variable('params', PACKED), bias)
  return out.reshape(*lead, *features)


def accumulate_in_float32(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None):
  """lax.dot_general that sums half-precision products in float32 and rounds the result once to the inputs'
  dtype: a bfloat16 layer's product. The same dtype out as a plain bfloat16 product, a more accurate sum, and on
  XLA:CPU the fast one: a bfloat16 product asked for float32 runs on the CPU's matrix unit (AMX) where one asked
  for bfloat16 does not (docs/BENCHMARKS.md section 8, a 2-core Xeon: 1.8-3.8x float32's speed from 16 rows, 0.5-2x
  at 1-4 rows). Float32 inputs: lax.dot_general itself."""
  half = lhs.dtype in (jnp.bfloat16, jnp.float16) and preferred_element_type is None
  out = jax.lax.dot_general(lhs, rhs, dimension_numbers, precision=precision,
                            preferred_element_type=jnp.float32 if half else preferred_element_type)
  return out.astype(lhs.dtype) if half else out


class Dense(nn.Dense):
  """flax.linen.Dense, through fastmt's float32 kernel for a few rows when the parameters carry its layout."""
  dot_general: Any = accumulate_in_float32

  def __call__(self, x):
    out = _product(self, x, (-1,), (self.features,))
    return super().__call__(x) if out is None else out


class DenseGeneral(nn.DenseGeneral):
  """flax.linen.DenseGeneral (trailing contracted axes), the same way as Dense."""
  dot_general: Any = accumulate_in_float32

  def __call__(self, x):
    axes = (self.axis,) if isinstance(self.axis, int) else tuple(self.axis)
    features = (self.features,) if isinstance(self.features, int) else tuple(self.features)
    out = _product(self, x, axes, features)
    return super().__call__(x) if out is None else out


def _is_float_dense(node) -> bool:
  return (isinstance(node, dict) and set(node) == {'kernel', 'bias'}
          and np.asarray(node['kernel']).dtype == np.float32)


def with_layout(params):
  """params with every float32 Dense layer's kernel also packed for fastmt's float32 kernel (kernels.
  pack_float32_weights, on the default device), when the kernel runs here; the parameters as they are otherwise
  (the reason is logged once by kernels.available)."""
  if not kernels.available('float32'):
    return params

  def convert(node):
    if _is_float_dense(node):
      kernel = np.asarray(node['kernel'])
      k = math.prod(kernel.shape[:kernel.ndim - np.ndim(node['bias'])])
      # On the device once: a host array passed to a jitted function is copied in at every call (16 MB for the
      # quickstart's layers), a cost the caller would time as the kernel's.
      return {**node, PACKED: jax.device_put(kernels.pack_float32_weights(kernel.reshape(k, -1)))}
    if isinstance(node, dict):
      return {key: convert(value) for key, value in node.items()}
    return node
  return convert(dict(params))


def has_layout(params) -> bool:
  """Whether with_layout added the kernel's packing to these parameters."""
  if isinstance(params, dict):
    return PACKED in params or any(has_layout(value) for value in params.values())
  return False


def without_layout(params):
  """params without with_layout's packed leaves (XLA's products again)."""
  if isinstance(params, dict):
    return {key: without_layout(value) for key, value in params.items() if key != PACKED}
  return params
