"""8-bit inference: post-training int8 weights, dynamically quantized int8 activations, int32 accumulation.

A trained float32 checkpoint becomes an int8 model in one pure function (`quantize_params`), no calibration
data: every matrix a decoder step reads gets symmetric per-output-channel scales (the largest magnitude of a
channel maps to 127), and at run time each row of activations entering a matrix product gets its own scale the
same way. The product is then an int8 x int8 -> int32 `dot_general`, rescaled to float32 by the two scales.
This is the scheme CTranslate2's int8 uses (per-channel weights, per-row dynamic activations), so the two are
compared on equal terms (benchmarks/ctranslate2_peer.py --fastmt_dtypes).

Where the products run (docs/BENCHMARKS.md section 9): on x86 CPUs with AVX-512 VNNI, fastmt's own kernel
(fastmt.kernels: an XLA FFI custom call compiled on first use) reads 1-byte weights packed once for
`vpdpbusd` and quantizes the activations itself; `with_kernel_layout` adds the packed weights, and
fastmt.precision.for_inference calls it. Elsewhere (other CPUs, GPU, TPU, or FASTMT_INT8_KERNEL=0) the
product is XLA's int8 x int8 -> int32 `dot_general`: on a GPU or TPU an int8 matmul unit's, on XLA:CPU
YNNPACK's int8 GEMM for two rows or more, and for a single row XLA's own loop, which widens the weights to
int32 (so int8_matmul pads a single row to two for large matrices). Why activations are quantized too: an
int8 weight converted to float32 before a float dot is loop-invariant, so XLA hoists the conversion out of
the decoding loop and every step reads float32 weights again, no faster than float32.

What stays float32: LayerNorm, biases, attention scores and softmax, the residual stream, the logits after
rescaling, and small embeddings (direction embeddings). The token embedding, tied to the output projection,
is quantized with per-token scales in 'int8' and left float32 in 'int8_layers' (both measured).

Parameter layout of a quantized Dense/DenseGeneral: {'kernel': int8 (the float kernel's shape), 'scale':
float32 (the bias's shape: one per output channel), 'bias': float32}; of the embedding: {'embedding': int8
[V, E], 'scale': float32 [V]}; with_kernel_layout adds 'packed' and 'colsum' to each Dense layer (save()
leaves them out). ModelConfig.quantization tells the model which layout to expect.
"""

import os

from flax import serialization
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from fastmt import few_rows, files, kernels
from fastmt.errors import FastmtError, MissingError

# ModelConfig.quantization values: '' = float; 'int8' = every matrix; 'int8_layers' = attention and
# feed-forward matrices, the tied embedding/output projection float32.
SCHEMES = ('', 'int8', 'int8_layers')
INT8_MAX = 127.0
# Weights (K x N) from which a single row is padded to two to reach YNNPACK's int8 GEMM on CPU (int8_matmul).
YNN_MIN_WEIGHTS = 1 << 20


def quantize_array(w, contracted_axes: tuple[int, ...]):
  """Symmetric int8 of w with one scale per index of the other axes: (int8 values, float32 scales).

  The scales have w's shape without contracted_axes; an all-zero channel gets scale 1 (and zeros)."""
  w = np.asarray(w, np.float32)
  amax = np.max(np.abs(w), axis=contracted_axes, keepdims=True)
  scale = np.where(amax > 0, amax / INT8_MAX, 1.0).astype(np.float32)
  values = np.clip(np.rint(w / scale), -INT8_MAX, INT8_MAX).astype(np.int8)
  return values, np.squeeze(scale, axis=contracted_axes)


def dequantize_array(values, scale, contracted_axes: tuple[int, ...]):
  """The float32 array quantize_array's (values, scale) stand for."""
  return jnp.asarray(values, jnp.float32) * jnp.expand_dims(jnp.asarray(scale, jnp.float32), contracted_axes)


def _is_dense(node) -> bool:  # a float Dense layer, with or without fastmt's float32 kernel packing (few_rows)
  return isinstance(node, dict) and set(node) - {few_rows.PACKED} == {'kernel', 'bias'}


def quantize_params(params, scheme: str = 'int8'):
  """A float32 parameter tree -> the tree ModelConfig(quantization=scheme) expects (a new tree; numpy leaves).

  Every Dense/DenseGeneral ({'kernel', 'bias'}) is quantized per output channel: the kernel's leading
  kernel.ndim - bias.ndim axes are its inputs. With scheme 'int8' the token embedding {'embedding'} under
  'embed' is quantized per token. Anything else is kept as it is. A tree with no Dense layer at all (not a
  fastmt Transformer's) is an error, not a silent float model.
  """
  if scheme not in SCHEMES[1:]:
    raise FastmtError(f'quantization scheme must be one of {SCHEMES[1:]}, got {scheme!r}')
  if is_quantized(params):  # it said "no Dense layers (is this a fastmt Transformer?)"
    raise FastmtError('these parameters are already quantized (int8 leaves): decode them with the config saved '
                      'beside them (quantize.load gives both), not quantize them again')
  found = 0

  def convert(node, path):
    nonlocal found
    if _is_dense(node):
      kernel, bias = np.asarray(node['kernel']), np.asarray(node['bias'])
      inputs = kernel.ndim - bias.ndim
      if inputs < 1 or kernel.shape[inputs:] != bias.shape:
        raise FastmtError(f'cannot quantize {"/".join(path)}: kernel {kernel.shape}, bias {bias.shape}')
      values, scale = quantize_array(kernel, tuple(range(inputs)))
      found += 1
      return {'kernel': values, 'scale': scale, 'bias': bias.astype(np.float32)}
    if isinstance(node, dict):
      if path == ('embed',) and scheme == 'int8':
        values, scale = quantize_array(node['embedding'], (1,))
        return {'embedding': values, 'scale': scale}
      return {key: convert(value, path + (key,)) for key, value in node.items()}
    return node

  result = convert(dict(params), ())
  if not found:
    raise FastmtError('these parameters have no Dense layers to quantize (is this a fastmt Transformer?)')
  return result


KERNEL_LEAVES = ('packed', 'colsum')  # with_kernel_layout's additions, dropped by save()


def with_kernel_layout(params):
  """Adds the packed weights of fastmt's int8 CPU kernel (fastmt.kernels) to every quantized Dense layer
  whose input size it takes (a multiple of 4), when the kernel is available here; the parameters as they
  are otherwise. The products then run through the kernel: the same outputs as XLA's int8 dot, faster."""
  if not kernels.available():
    return params

  def convert(node):
    if isinstance(node, dict) and {'kernel', 'scale', 'bias'} <= set(node) and 'packed' not in node:
      kernel = np.asarray(node['kernel'])
      k = int(np.prod(kernel.shape[:kernel.ndim - np.ndim(node['bias'])]))
      if kernel.dtype == np.int8 and k % 4 == 0:
        packed, colsum = kernels.pack_weights(kernel.reshape(k, -1))
        return {**node, 'packed': packed, 'colsum': colsum}
      return node
    if isinstance(node, dict):
      return {key: convert(value) for key, value in node.items()}
    return node
  return convert(dict(params))


def without_kernel_layout(params):
  """params without with_kernel_layout's leaves (what save() writes: the portable layout)."""
  if isinstance(params, dict):
    return {key: without_kernel_layout(value) for key, value in params.items() if key not in KERNEL_LEAVES}
  return params


def is_quantized(params) -> bool:
  """Whether a parameter tree holds int8 matrices (saved by a quantized model)."""
  return any(getattr(leaf, 'dtype', None) == np.int8 for leaf in jax.tree_util.tree_leaves(params))


def quantize_rows(x, axes: tuple[int, ...]):
  """Dynamic symmetric int8 of activations: one scale per index of the axes not in `axes`.

  Returns (int8 values, float32 scales with `axes` kept as size-1 dims). An all-zero row gets scale 1."""
  x = x.astype(jnp.float32)
  amax = jnp.max(jnp.abs(x), axis=axes, keepdims=True)
  scale = jnp.where(amax > 0, amax / INT8_MAX, 1.0)
  return jnp.clip(jnp.round(x / scale), -INT8_MAX, INT8_MAX).astype(jnp.int8), scale


def int8_matmul(x, values, scale):
  """x [..., K] float -> [..., N] float32 ~ x @ (values * scale), values int8 [K, N], scale [N].

  The rows of x are quantized on the fly and multiplied in int8 with int32 accumulation. On CPU a single row
  times a large matrix is padded to two rows: XLA:CPU gives a matrix-vector product to its own loop code,
  which widens int8 to int32 and is no faster than float32, and only a matrix-matrix product reaches
  YNNPACK's int8 GEMM. That pays for the output projection (256 x 8000: 34 vs 48 µs per call) but not for
  the layers' 256 x 1024 matrices, hence YNN_MIN_WEIGHTS (docs/BENCHMARKS.md section 8).
  """
  lead, k = x.shape[:-1], x.shape[-1]
  rows = x.reshape(-1, k)
  single = rows.shape[0] == 1 and values.size >= YNN_MIN_WEIGHTS and jax.default_backend() == 'cpu'
  if single:
    rows = jnp.concatenate([rows, jnp.zeros_like(rows)])
  q, row_scale = quantize_rows(rows, (1,))
  acc = jax.lax.dot_general(q, values, (((1,), (0,)), ((), ())), preferred_element_type=jnp.int32)
  out = acc.astype(jnp.float32) * row_scale * scale
  if single:
    out = out[:1]
  return out.reshape(*lead, values.shape[1])


class Int8DenseGeneral(nn.Module):
  """flax.linen.DenseGeneral (and Dense) with an int8 kernel: same features/axis, same parameter names plus
  'scale'. Inference only: its parameters come from quantize_params, not from training."""
  features: int | tuple[int, ...]
  axis: int | tuple[int, ...] = -1
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x):
    features = (self.features,) if isinstance(self.features, int) else tuple(self.features)
    axes = (self.axis,) if isinstance(self.axis, int) else tuple(self.axis)
    axes = tuple(sorted(a % x.ndim for a in axes))
    if axes != tuple(range(x.ndim - len(axes), x.ndim)):
      raise ValueError(f'Int8DenseGeneral contracts trailing axes only, got axis={self.axis}')
    in_shape = tuple(x.shape[a] for a in axes)
    kernel = self.param('kernel', nn.initializers.zeros, in_shape + features, jnp.int8)
    scale = self.param('scale', nn.initializers.ones, features, jnp.float32)
    bias = self.param('bias', nn.initializers.zeros, features, jnp.float32)
    lead = x.shape[:x.ndim - len(axes)]
    k, n = int(np.prod(in_shape)), int(np.prod(features))
    rows = x.reshape(-1, k)
    weights = {'values': kernel.reshape(k, n), 'scale': scale.reshape(n)}
    if self.has_variable('params', 'packed'):  # fastmt's own CPU kernel (with_kernel_layout)
      weights.update(packed=self.get_variable('params', 'packed'), colsum=self.get_variable('params', 'colsum'))
    out = int8_product(rows, weights)
    return (out.reshape(*lead, *features) + bias).astype(self.dtype)


class Int8Embed(nn.Module):
  """flax.linen.Embed with an int8 table and one scale per token: lookup dequantizes the rows it reads;
  attend (the tied output projection) is an int8 product with the table."""
  num_embeddings: int
  features: int

  def setup(self):
    self.embedding = self.param('embedding', nn.initializers.zeros, (self.num_embeddings, self.features),
                                jnp.int8)
    self.scale = self.param('scale', nn.initializers.ones, (self.num_embeddings,), jnp.float32)

  def __call__(self, tokens):
    rows = jnp.take(self.embedding, tokens, axis=0).astype(jnp.float32)
    return rows * jnp.take(self.scale, tokens, axis=0)[..., None]

  def attend(self, query):
    """query [..., E] -> float32 [..., V]; the table read as [E, V] (a transpose XLA makes once, outside the
    decoding loop)."""
    return int8_matmul(query, self.embedding.T, self.scale)


def dense_class(quantization: str):
  """The Dense module class a model with this ModelConfig.quantization builds."""
  return Int8DenseGeneral if quantization else few_rows.DenseGeneral


def float_embedding(params):
  """The token embedding [V, E] as float32, dequantized if it is int8 (for the clustered projection, which
  gathers rows of it)."""
  embed = params['embed']
  if 'scale' in embed:
    return dequantize_array(embed['embedding'], embed['scale'], (1,))
  return embed['embedding']


CONFIG_FILE = 'model_config.json'
PARAMS_FILE = 'params.msgpack'


def save(directory: str, config, params) -> None:
  """Writes a quantized (config, params) to directory (a quarter of the float32 model's bytes for the
  matrices; without the kernel layout, which fastmt.precision.for_inference adds back where the kernel runs);
  load() gives them back bit for bit."""
  if not config.quantization:
    raise FastmtError('save() writes quantized models: quantize first (fastmt.precision.for_inference)')
  os.makedirs(directory, exist_ok=True)
  files.write_whole(os.path.join(directory, CONFIG_FILE), config.to_json())
  files.write_whole(os.path.join(directory, PARAMS_FILE),
                    serialization.msgpack_serialize(jax.tree_util.tree_map(np.asarray, without_kernel_layout(params))))


def load(directory: str):
  """(ModelConfig, params) written by save()."""
  from fastmt.config import ModelConfig  # pylint: disable=g-import-not-at-top
  directory = os.fspath(directory)
  for name in (CONFIG_FILE, PARAMS_FILE):
    if not os.path.isfile(os.path.join(directory, name)):
      hint = ''
      if os.path.isdir(os.path.join(directory, 'checkpoints')):  # workdir.CHECKPOINT_DIR (workdir imports us)
        hint = (": it is a train.py work directory, whose float checkpoints fastmt.load(directory, dtype='int8') "
                'quantizes')
      raise MissingError(f'No {name} in {directory!r}: not a directory written by quantize.save{hint}')
  with open(os.path.join(directory, CONFIG_FILE)) as f:
    config = ModelConfig.from_json(f.read())
  with open(os.path.join(directory, PARAMS_FILE), 'rb') as f:
    params = serialization.msgpack_restore(f.read())
  if not config.quantization or not is_quantized(params):
    raise FastmtError(f'{directory} does not hold a quantized model')
  return config, params


def int8_product(x, weights):
  """x [..., K] float -> float32 [..., N] times {'values': int8 [K, N], 'scale': [N]}: through fastmt's CPU
  kernel when the weights carry its packing ('packed', 'colsum': with_kernel_layout, kernels.pack_weights),
  else XLA's int8 dot (int8_matmul). The one place that chooses; the same outputs either way."""
  if 'packed' not in weights:
    return int8_matmul(x, weights['values'], weights['scale'])
  lead = x.shape[:-1]
  out = kernels.int8_matmul(x.reshape(-1, x.shape[-1]), weights['packed'], weights['colsum'], weights['scale'])
  return out.reshape(*lead, out.shape[-1])
