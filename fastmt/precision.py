"""Inference precision: float32, bfloat16 (below), 8-bit ('int8', 'int8_layers': fastmt.quantize), or both
('bfloat16_int8', 'bfloat16_int8_layers': int8 matrix products between bfloat16 activations).

bfloat16: weights and activations in half precision where it is safe, float32 where it is not.

What stays float32, and why: LayerNorm scales and every bias (tiny, and they set the scale of activations);
the attention softmax (`layers.dot_product_attention` accumulates scores in float32); the output logits
(`Transformer.decode` projects in float32, so argmax ties and beam scores are not decided in 8 mantissa bits).
Matrices (embedding, attention and feed-forward kernels) become bfloat16: they are what a decoder step reads,
so halving them halves the bytes per step. The KV cache follows the activation dtype. Every bfloat16 product
sums in float32 and rounds once (few_rows.accumulate_in_float32; E^T stays bfloat16 and projects to float32
logits): the form a GPU's tensor cores and a CPU's AMX unit take, which XLA:CPU runs on AMX (1.8-3.8x float32's
speed from 16 rows on a 2-core Xeon; 1.1-3.1x with AVX-512 BF16 and no AMX, on a 2-core EPYC: docs/BENCHMARKS.md
section 8) (a product summed in bfloat16 it does not).

bfloat16 + int8 is what a GPU or TPU with an int8 matrix unit wants: the int8 products of fastmt.quantize
(their int32 accumulation and float32 rescaling unchanged), with the residual stream, attention, KV cache and
every matrix left float (the embedding of 'int8_layers', direction embeddings) in bfloat16. On a CPU it buys
little: the int8 products quantize their inputs themselves, and bfloat16 only narrows what lies between them
(docs/BENCHMARKS.md section 9 measures it).
"""

import jax
import jax.numpy as jnp

from fastmt import quantize
from fastmt.config import ModelConfig
from fastmt.errors import FastmtError

# 'int8': int8 weights (the tied embedding too) and int8 activations into every matrix product; 'int8_layers':
# the same with the embedding / output projection left float. The 'bfloat16_' forms keep bfloat16 activations
# between the int8 products; the others float32 (fastmt.quantize).
DTYPES = ('float32', 'bfloat16', 'int8', 'int8_layers', 'bfloat16_int8', 'bfloat16_int8_layers')


def split_dtype(dtype: str) -> tuple[str, str]:
  """A DTYPES value -> (activation dtype, ModelConfig.quantization): 'bfloat16_int8' -> ('bfloat16', 'int8')."""
  if dtype not in DTYPES:
    raise FastmtError(f'dtype must be one of {DTYPES}, got {dtype!r}')
  if dtype in ('float32', 'bfloat16'):
    return dtype, ''
  if dtype.startswith('bfloat16_'):
    return 'bfloat16', dtype[len('bfloat16_'):]
  return 'float32', dtype


def dtype_of(config: ModelConfig) -> str:
  """The DTYPES value a (config, params) from for_inference decodes in: split_dtype's inverse. An already
  quantized model asked for 'float32' decodes as it was saved, which this names ('bfloat16_int8', say)."""
  if not config.quantization:
    return 'bfloat16' if config.dtype == 'bfloat16' else 'float32'
  return f'bfloat16_{config.quantization}' if config.dtype == 'bfloat16' else config.quantization


def _to_bfloat16(params):
  """Float weight matrices ('kernel', 'embedding' leaves) -> bfloat16; everything else (biases, LayerNorm, the
  int8 scales, whatever their rank, and int8 leaves) unchanged."""
  def cast(path, x):
    name = getattr(path[-1], 'key', None)
    if name in ('kernel', 'embedding') and jnp.issubdtype(x.dtype, jnp.floating):
      return x.astype(jnp.bfloat16)
    return x
  return jax.tree_util.tree_map_with_path(cast, params)


def for_inference(config: ModelConfig, params, dtype: str):
  """(config, params) for decoding in `dtype`. 'float32' leaves float weights as they are and computes in float32,
  also for a model trained with bfloat16 activations (config.dtype; its weights are float32).

  Already quantized (config, params) (fastmt.quantize.load) are returned as they are for 'float32', and with
  the requested activations for their own scheme ('int8' / 'bfloat16_int8' for an 'int8' model); quantizing
  them again, or to another scheme or plain bfloat16, is an error."""
  activations, scheme = split_dtype(dtype)
  if config.quantization:
    if dtype == 'float32':
      return config, quantize.with_kernel_layout(params)
    if scheme == config.quantization:
      params = quantize.with_kernel_layout(params)
      if activations == 'bfloat16':
        params = _to_bfloat16(params)
      return config.replace(dtype=activations), params
    raise FastmtError(f'this model is already quantized ({config.quantization}); it cannot decode in {dtype}')
  if scheme:
    config = config.replace(quantization=scheme)
    params = quantize.with_kernel_layout(quantize.quantize_params(params, scheme))
  if activations == 'bfloat16':
    config, params = config.replace(dtype='bfloat16'), _to_bfloat16(params)
  else:  # a model trained with bfloat16 activations decoded in bfloat16 while the report said float32
    config = config.replace(dtype=activations)
  return config, params
