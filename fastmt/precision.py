"""Inference precision: float32, bfloat16 (below), or 8-bit ('int8', 'int8_layers': fastmt.quantize).

bfloat16: weights and activations in half precision where it is safe, float32 where it is not.

What stays float32, and why: LayerNorm scales and every bias (tiny, and they set the scale of activations);
the attention softmax (`layers.dot_product_attention` accumulates scores in float32); the output logits
(`Transformer.decode` projects in float32, so argmax ties and beam scores are not decided in 8 mantissa bits).
Matrices (embedding, attention and feed-forward kernels) become bfloat16: they are what a decoder step reads,
so halving them halves the bytes per step. The KV cache follows the activation dtype.
"""

import jax
import jax.numpy as jnp

from fastmt import quantize
from fastmt.config import ModelConfig
from fastmt.errors import FastmtError

# 'int8': int8 weights (the tied embedding too) and int8 activations into every matrix product; 'int8_layers':
# the same with the embedding / output projection left float32. Both keep float32 elsewhere (fastmt.quantize).
DTYPES = ('float32', 'bfloat16', 'int8', 'int8_layers')


def for_inference(config: ModelConfig, params, dtype: str):
  """(config, params) for decoding in `dtype` ('float32' leaves both unchanged).

  Already quantized (config, params) (fastmt.quantize.load_model) are returned as they are for 'float32' or
  their own dtype; quantizing them again, or to bfloat16, is an error."""
  if dtype not in DTYPES:
    raise FastmtError(f'dtype must be one of {DTYPES}, got {dtype!r}')
  if config.quantization:
    if dtype in ('float32', config.quantization):
      return config, quantize.with_kernel_layout(params)
    raise FastmtError(f'this model is already quantized ({config.quantization}); it cannot decode in {dtype}')
  if dtype == 'float32':
    return config, params
  if dtype in quantize.SCHEMES:
    return config.replace(quantization=dtype), quantize.with_kernel_layout(quantize.quantize_params(params, dtype))
  cast = lambda x: x.astype(jnp.dtype(dtype)) if x.ndim >= 2 else x  # matrices only; vectors stay float32
  return config.replace(dtype=dtype), jax.tree_util.tree_map(cast, params)
