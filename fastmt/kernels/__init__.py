"""fastmt's own CPU kernels, compiled on first use: the int8 matrix product of fastmt.quantize (int8_matmul.cc).

XLA:CPU has no int8 matrix-vector product (docs/BENCHMARKS.md section 9), so on x86 CPUs with AVX-512 VNNI
an int8 model's products run through an XLA FFI custom call instead. The C++ source ships with the package and
is compiled with the machine's g++ into $FASTMT_CACHE/kernels the first time it is needed (a second or two),
against the XLA FFI headers of the installed jaxlib.

Fallback, never silent: without g++, on a CPU without AVX-512 VNNI, off CPU, or with FASTMT_INT8_KERNEL=0,
`available()` is False, the reason is logged once and kept in `unavailable_reason()`, and int8 models use
XLA's own int8 dot (the same outputs, slower).
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

TARGET = 'fastmt_int8_matmul'
BLOCK = 16  # output columns per packed block (one 512-bit accumulator of int32)
_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'int8_matmul.cc')
_lock = threading.Lock()
_state = {}  # 'available': bool, 'reason': str


def _cache_dir() -> str:
  root = os.environ.get('FASTMT_CACHE') or os.path.join(os.path.expanduser('~'), '.cache', 'fastmt')
  return os.path.join(root, 'kernels')


def _build() -> str:
  """Compiles int8_matmul.cc (once per source, jaxlib and Python) and returns the shared library's path."""
  with open(_SOURCE, 'rb') as f:
    source = f.read()
  key = hashlib.sha256(source + jax.__version__.encode() + sys.version.encode()).hexdigest()[:16]
  path = os.path.join(_cache_dir(), f'int8_matmul-{key}.so')
  if os.path.exists(path):
    return path
  os.makedirs(_cache_dir(), exist_ok=True)
  tmp = f'{path}.{os.getpid()}.tmp'
  command = [os.environ.get('CXX', 'g++'), '-O3', '-std=c++17', '-shared', '-fPIC', f'-I{jax.ffi.include_dir()}',
             _SOURCE, '-o', tmp]
  result = subprocess.run(command, capture_output=True, text=True, check=False)
  if result.returncode:
    raise RuntimeError(f'compiling {_SOURCE} failed: {result.stderr.strip()[-500:]}')
  os.replace(tmp, path)  # atomic: a concurrent process sees the whole library or none
  return path


def _load():
  if os.environ.get('FASTMT_INT8_KERNEL', '1') == '0':
    return 'turned off by FASTMT_INT8_KERNEL=0'
  if jax.default_backend() != 'cpu':
    return f'the default backend is {jax.default_backend()}, not cpu'
  try:
    library = ctypes.cdll.LoadLibrary(_build())
  except (OSError, RuntimeError) as e:
    return str(e)
  if not library.FastmtInt8MatmulSupported():
    return 'this CPU has no AVX-512 VNNI'
  jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(library.FastmtInt8Matmul), platform='cpu')
  return ''


def available() -> bool:
  """Whether int8 products can run through fastmt's kernel here (compiles and registers it on first call)."""
  with _lock:
    if 'available' not in _state:
      reason = _load()
      _state['available'], _state['reason'] = not reason, reason
      if reason:
        logging.warning("fastmt's int8 CPU kernel is not used (%s): int8 models run XLA's int8 dot", reason)
  return _state['available']


def unavailable_reason() -> str:
  """Why available() is False ('' when it is True)."""
  available()
  return _state['reason']


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
