"""fastmt's own CPU kernels, compiled on first use, each an XLA FFI custom call:

* int8_matmul.cc: the int8 matrix product of fastmt.quantize, on x86 CPUs with AVX-512 VNNI. XLA:CPU has no
  int8 matrix-vector product (docs/BENCHMARKS.md section 9).
* float32_matmul.cc: a float32 product for a few rows (1 to FLOAT32_MAX_ROWS), on x86 CPUs with AVX-512, for the
  decoder calls over a window of positions at small batch: XLA:CPU hands those to YNNPACK fusions that cost
  far more than the weights they read (docs/BENCHMARKS.md section 8). Opt-in: Translator(float32_kernel=True).
* int8_decoder_step.cc: a whole decoder call of an int8 model in one custom call (the int8 products of
  int8_matmul.cc, and the LayerNorms, attention and residuals between them), for every decoder of an int8 model
  (--dtype int8, and --drafter int8's copy), whose calls XLA:CPU runs as hundreds of small operations
  (fastmt.int8_step).

Both split a product's columns between the calling thread and XLA's intra-op threads (parallel_blocks.h: one
core reads memory at well below the rate two do); FASTMT_KERNEL_THREADS=N caps the threads (1: the caller alone).

The C++ sources ship with the package and are compiled with the machine's g++ into $FASTMT_CACHE/kernels the
first time they are needed (a second or two each), against the XLA FFI headers of the installed jaxlib.

Fallback, never silent: without g++, on a CPU without the instructions, off CPU, or with FASTMT_INT8_KERNEL=0,
FASTMT_FLOAT32_KERNEL=0 or FASTMT_INT8_STEP_KERNEL=0, `available(kind)` is False, the reason is logged once and
kept in `unavailable_reason(kind)`, and the model uses XLA's own operations (the same outputs up to float
rounding, slower).
"""

import ctypes
import hashlib
import logging
import os
import subprocess
import sys
import threading

import jax
import jax.numpy as jnp
import numpy as np

logger = logging.getLogger(__name__)  # named 'fastmt.<module>': users set its level or handlers by name

TARGET = 'fastmt_int8_matmul'
FLOAT32_TARGET = 'fastmt_float32_matmul'
INT8_STEP_TARGET = 'fastmt_int8_decoder_step'
BLOCK = 16  # output columns per packed block (one 512-bit register of int32 or float32)
# Rows up to which the float32 kernel is used (section 8 chose it when the kernel ran on one core: at more rows
# its multiply-adds fell behind YNNPACK's two cores; not measured again since the kernel uses both).
FLOAT32_MAX_ROWS = 8
_DIR = os.path.dirname(os.path.abspath(__file__))
# The headers the sources include: a change to one is a new build of every kernel.
_HEADERS = tuple(os.path.join(_DIR, name) for name in ('parallel_blocks.h', 'int8_blocks.h'))


class _Kind:
  def __init__(self, source, symbol, target, env, instructions):
    self.source, self.symbol, self.target = os.path.join(_DIR, source), symbol, target
    self.env, self.instructions = env, instructions


_KINDS = {
    'int8': _Kind('int8_matmul.cc', 'FastmtInt8Matmul', TARGET, 'FASTMT_INT8_KERNEL', 'AVX-512 VNNI'),
    'float32': _Kind('float32_matmul.cc', 'FastmtFloat32Matmul', FLOAT32_TARGET, 'FASTMT_FLOAT32_KERNEL',
                     'AVX-512'),
    'int8_step': _Kind('int8_decoder_step.cc', 'FastmtInt8DecoderStep', INT8_STEP_TARGET, 'FASTMT_INT8_STEP_KERNEL',
                       'AVX-512 VNNI'),
}
_lock = threading.Lock()
_state = {}  # kind -> {'available': bool, 'reason': str}


def _cache_dir() -> str:
  root = os.environ.get('FASTMT_CACHE') or os.path.join(os.path.expanduser('~'), '.cache', 'fastmt')
  return os.path.join(root, 'kernels')


def _build(kind: _Kind) -> str:
  """Compiles a kernel's source (once per source, jaxlib and Python) and returns the shared library's path."""
  source = b''
  for path in (kind.source,) + _HEADERS:  # a change to a header the sources include is a new build too
    with open(path, 'rb') as f:
      source += f.read()
  key = hashlib.sha256(source + jax.__version__.encode() + sys.version.encode()).hexdigest()[:16]
  name = os.path.splitext(os.path.basename(kind.source))[0]
  path = os.path.join(_cache_dir(), f'{name}-{key}.so')
  if os.path.exists(path):
    return path
  os.makedirs(_cache_dir(), exist_ok=True)
  tmp = f'{path}.{os.getpid()}.tmp'
  command = [os.environ.get('CXX', 'g++'), '-O3', '-std=c++17', '-shared', '-fPIC', f'-I{jax.ffi.include_dir()}',
             f'-I{_DIR}', kind.source, '-o', tmp]
  result = subprocess.run(command, capture_output=True, text=True, check=False)
  if result.returncode:
    raise RuntimeError(f'compiling {kind.source} failed: {result.stderr.strip()[-500:]}')
  os.replace(tmp, path)  # atomic: a concurrent process sees the whole library or none
  return path


def _load(kind: _Kind) -> str:
  """Compiles and registers a kernel; '' when it is usable, else why not."""
  if os.environ.get(kind.env, '1') == '0':
    return f'turned off by {kind.env}=0'
  if jax.default_backend() != 'cpu':
    return f'the default backend is {jax.default_backend()}, not cpu'
  try:
    library = ctypes.cdll.LoadLibrary(_build(kind))
  except (OSError, RuntimeError) as e:
    return str(e)
  if not getattr(library, f'{kind.symbol}Supported')():
    return f'this CPU has no {kind.instructions}'
  jax.ffi.register_ffi_target(kind.target, jax.ffi.pycapsule(getattr(library, kind.symbol)), platform='cpu')
  return ''


_FALLBACKS = {'int8': "int8 models run XLA's int8 dot", 'float32': "float32 products run XLA's own",
              'int8_step': "int8 models' decoder calls run as XLA operations"}


def available(kind: str = 'int8') -> bool:
  """Whether the kernel of `kind` ('int8', 'float32' or 'int8_step') runs here (compiles and registers it on
  first call)."""
  if kind not in _KINDS:
    raise ValueError(f'kernel kind must be one of {sorted(_KINDS)}, got {kind!r}')
  with _lock:
    if kind not in _state:
      reason = _load(_KINDS[kind])
      _state[kind] = {'available': not reason, 'reason': reason}
      if reason:
        logger.warning("fastmt's %s CPU kernel is not used (%s): %s", kind, reason, _FALLBACKS[kind])
  return _state[kind]['available']


def unavailable_reason(kind: str = 'int8') -> str:
  """Why available(kind) is False ('' when it is True)."""
  available(kind)
  return _state[kind]['reason']


def pack_weights(values):
  """int8 [K, N] -> (packed int8 [N'/16, K/4, 64], column sums int32 [N']) for the kernel; N' = N rounded up to
  16 (zero columns, cut off after the product). K must be a multiple of 4."""
  values = np.asarray(values, np.int8)
  k, n = values.shape
  if k % 4:
    raise ValueError(f'the int8 kernel needs K divisible by 4, got {k}')
  padded = -(-n // BLOCK) * BLOCK
  w = np.zeros((k, padded), np.int8)
  w[:, :n] = values
  # [K, N'] -> [K/4, 4, N'/16, 16] -> [N'/16, K/4, 16, 4]: per block and group, 16 columns x 4 inputs.
  packed = w.reshape(k // 4, 4, padded // BLOCK, BLOCK).transpose(2, 0, 3, 1).reshape(padded // BLOCK, k // 4, 64)
  return np.ascontiguousarray(packed), w.astype(np.int32).sum(0)


def int8_matmul(x, packed, colsum, scale):
  """x [M, K] float -> float32 [M, N]: fastmt.quantize.int8_matmul's result, through the custom call.

  scale float32 [N] (N <= the packed columns); available() must be True."""
  n = scale.shape[0]
  padded = colsum.shape[0]
  full_scale = jnp.pad(scale.astype(jnp.float32), (0, padded - n))  # a no-op when N is a multiple of 16
  out = jax.ffi.ffi_call(TARGET, jax.ShapeDtypeStruct((x.shape[0], padded), jnp.float32),
                         vmap_method='sequential')(x.astype(jnp.float32), packed, colsum, full_scale)
  return out if n == padded else out[:, :n]


def pack_float32_weights(values):
  """float32 [K, N] -> packed float32 [N'/16, K, 16] for the float32 kernel: per block of 16 output columns, its K
  rows in k order; N' = N rounded up to 16 (zero columns, cut off after the product)."""
  values = np.asarray(values, np.float32)
  k, n = values.shape
  padded = -(-n // BLOCK) * BLOCK
  w = np.zeros((k, padded), np.float32)
  w[:, :n] = values
  return np.ascontiguousarray(w.reshape(k, padded // BLOCK, BLOCK).transpose(1, 0, 2))


def float32_matmul(x, packed, bias):
  """x [M, K] float -> float32 [M, N] = x @ W + bias through the float32 custom call (W packed by
  pack_float32_weights; bias float32 [N], N <= the packed columns); available('float32') must be True.

  Each row's result is the same whatever the other rows of the call (one multiply-add chain per output)."""
  n = bias.shape[0]
  padded = packed.shape[0] * BLOCK
  full_bias = jnp.pad(bias.astype(jnp.float32), (0, padded - n))  # a no-op when N is a multiple of 16
  out = jax.ffi.ffi_call(FLOAT32_TARGET, jax.ShapeDtypeStruct((x.shape[0], padded), jnp.float32),
                         vmap_method='sequential')(x.astype(jnp.float32), packed, full_bias)
  return out if n == padded else out[:, :n]


def int8_decoder_step(x, offsets, mask, memory_mask, final_norm, layers, cache_keys, cache_values,
                      epsilon: float = 1e-6):
  """One decoder call of an int8 model through int8_decoder_step.cc (its header: what it computes, and the
  buffers' order); available('int8_step') must be True.

  Args:
    x: float32 [B * T, E], the embedded inputs; offsets: int32 [B]; mask: bool [B, T, M]; memory_mask: bool
      [B, S]; final_norm: (scale, bias) float32 [E].
    layers: per decoder layer, the flat list of its buffers in the kernel's order (fastmt.int8_step builds it).
    cache_keys, cache_values: per layer, float32 [B, M, H, D]; the results alias them (updated in place).
  Returns:
    (hidden float32 [B * T, E], new cache keys, new cache values): the new positions' keys and values written
    at each row's offset, every other slot as it was.
  """
  num_layers = len(layers)
  cache = list(cache_keys) + list(cache_values)
  args = [x.astype(jnp.float32), offsets.astype(jnp.int32), mask, memory_mask, *final_norm]
  for layer in layers:
    args.extend(layer)
  first_cache = len(args)
  args.extend(cache)
  shapes = [jax.ShapeDtypeStruct(x.shape, jnp.float32)] + [jax.ShapeDtypeStruct(c.shape, c.dtype) for c in cache]
  outputs = jax.ffi.ffi_call(INT8_STEP_TARGET, shapes, vmap_method='sequential',
                             input_output_aliases={first_cache + i: 1 + i for i in range(len(cache))})(
      *args, num_layers=np.int64(num_layers), epsilon=np.float32(epsilon))
  return outputs[0], tuple(outputs[1:1 + num_layers]), tuple(outputs[1 + num_layers:])
