"""Half-precision inference: bfloat16 weights and activations where it is safe, float32 where it is not.

What stays float32, and why: LayerNorm scales and every bias (tiny, and they set the scale of activations);
the attention softmax (`layers.dot_product_attention` accumulates scores in float32); the output logits
(`Transformer.decode` projects in float32, so argmax ties and beam scores are not decided in 8 mantissa bits).
Matrices (embedding, attention and feed-forward kernels) become bfloat16: they are what a decoder step reads,
so halving them halves the bytes per step. The KV cache follows the activation dtype.
"""

import jax
import jax.numpy as jnp

from fastmt.config import ModelConfig
from fastmt.errors import FastmtError

DTYPES = ('float32', 'bfloat16')


def for_inference(config: ModelConfig, params, dtype: str):
  """(config, params) for decoding in `dtype` ('float32' leaves both unchanged)."""
  if dtype not in DTYPES:
    raise FastmtError(f'dtype must be one of {DTYPES}, got {dtype!r}')
  if dtype == 'float32':
    return config, params
  cast = lambda x: x.astype(jnp.dtype(dtype)) if x.ndim >= 2 else x  # matrices only; vectors stay float32
  return config.replace(dtype=dtype), jax.tree_util.tree_map(cast, params)
