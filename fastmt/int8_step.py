"""An int8 model's decoder call as one custom call (fastmt/kernels/int8_decoder_step.cc).

Every decoder of an int8 model (fastmt.quantize's 'int8' scheme: `decode.py --dtype int8`, and `--drafter int8`,
the float model's own int8 copy drafting for speculative decoding) calls the decoder once per step or window.
On XLA:CPU such a call of a Transformer-base-sized decoder at batch 1 is about 350 small operations, and its int8
products, the only part that reads many bytes, are about a third of its time (docs/BENCHMARKS.md section 7).
`make_step_fn` gives a step function that embeds the inputs as Transformer.decode does, runs every decoder layer
and the final LayerNorm in the one custom call, and projects with the int8 output projection as the XLA path
does: a few operations per call. translate.make_step_fn picks it wherever `unsupported_reason` is empty.

It is the same function as Transformer.decode on the int8 parameters, with sums taken in another order (the
kernel's header), so a logit can differ from the XLA path's in its last bits and a token on a near tie; a row's
arithmetic does not depend on the call's other rows or positions, so the exact parallel decoders still equal
the int8 model's greedy bit for bit, and drafts are verified by the float model, so `--drafter int8` keeps the
float greedy output (tests/test_int8_step.py).

Used where `unsupported_reason` is empty: the kernel runs on this CPU (kernels.available('int8_step'); off with
FASTMT_INT8_STEP_KERNEL=0), so does the int8 matmul kernel whose packed weights it reads (FASTMT_INT8_KERNEL=0
turns off both), and the model is a plain int8 decoder (float32 activations, no relative position keys or
direction embeddings, every decoder matrix packed for the int8 kernel) projected by its int8 output layout
without the clustered projection. Elsewhere the calls run through XLA as before.
"""

import jax.numpy as jnp

from fastmt import kernels, models, quantize
from fastmt.config import ModelConfig
from fastmt.layers import select_positions

# Each decoder layer's matrices in the kernel's order, as paths in its parameters.
MATRICES = (('self_attention', 'query'), ('self_attention', 'key'), ('self_attention', 'value'),
            ('self_attention', 'out'), ('cross_attention', 'query'), ('cross_attention', 'out'),
            ('mlp', 'Dense_0'), ('mlp', 'Dense_1'))
NORMS = ('self_norm', 'cross_norm', 'mlp_norm')
LAYER_NORM_EPSILON = 1e-6  # flax.linen.LayerNorm's default, which fastmt.models uses


def unsupported_reason(config: ModelConfig, params) -> str:
  """'' when the one-call decoder runs this int8 model (its parameters with the int8 kernel's packing), else why
  not."""
  if not kernels.available('int8'):  # the one call reads the int8 matmul kernel's packing (with_kernel_layout)
    return f"the weights are not packed: the int8 matmul kernel is off ({kernels.unavailable_reason('int8')})"
  if not kernels.available('int8_step'):
    return kernels.unavailable_reason('int8_step')
  if config.quantization != 'int8' or config.dtype != 'float32':
    return f'the model is {config.quantization or "float"} with {config.dtype} activations, not int8 with float32'
  if config.relative_key_distance or config.num_directions:
    return 'relative position keys and direction embeddings are not in the kernel'
  for i in range(config.num_decoder_layers):
    layer = params[f'decoder_{i}']
    for path in MATRICES:
      if 'packed' not in layer[path[0]][path[1]]:
        return f'decoder_{i}/{"/".join(path)} is not packed for the int8 kernel (input size not a multiple of 4?)'
  return ''


def _padded(vector, columns: int):
  """A matrix's per-column scale or bias, flat and padded with zeros to its packed columns (a no-op when the
  columns are a multiple of 16, as in every model of the configs)."""
  flat = jnp.reshape(vector, (-1,)).astype(jnp.float32)
  return jnp.pad(flat, (0, columns - flat.shape[0]))


def layer_weights(params, layer: int) -> list:
  """The kernel's buffers of one decoder layer's weights, in its order: the three LayerNorms' scale and bias,
  then per matrix packed, colsum, scale, bias."""
  p = params[f'decoder_{layer}']
  buffers = []
  for norm in NORMS:
    buffers += [p[norm]['scale'], p[norm]['bias']]
  for module, dense in MATRICES:
    weights = p[module][dense]
    columns = weights['colsum'].shape[0]
    buffers += [weights['packed'], weights['colsum'], _padded(weights['scale'], columns),
                _padded(weights['bias'], columns)]
  return buffers


def make_step_fn(model: models.Transformer, params, memory, output_projection):
  """A DecoderStepFn (fastmt.decoding.step) over the int8 `model`, `params` and the source's `memory`, whose
  decoder layers run in the one custom call; logits through the int8 `output_projection`
  (translate.transposed_output_layout). unsupported_reason(model.config, params) must be ''."""
  config = model.config
  layers = [layer_weights(params, i) + [memory['k'][i], memory['v'][i]] for i in range(config.num_decoder_layers)]
  final_norm = (params['decoder_norm']['scale'], params['decoder_norm']['bias'])

  def step_fn(tokens, positions, self_mask, cache, write_offsets, project=None, directions=None):
    del directions  # a model without direction embeddings ignores them (unsupported_reason: no model with them)
    batch, steps = tokens.shape
    slots = cache['k'][0].shape[1]
    x = model.apply({'params': params}, tokens, jnp.broadcast_to(positions, tokens.shape),
                    method=models.Transformer.decoder_input)
    mask = jnp.broadcast_to(self_mask, (batch, steps, slots))
    hidden, keys, values = kernels.int8_decoder_step(
        x.reshape(batch * steps, -1), jnp.broadcast_to(write_offsets, (batch,)), mask, memory['mask'], final_norm,
        layers, cache['k'], cache['v'], LAYER_NORM_EPSILON)
    hidden = hidden.reshape(batch, steps, -1)
    if project is not None:
      hidden = select_positions(hidden, project)
    return quantize.int8_product(hidden, output_projection), {'k': keys, 'v': values}
  return step_fn
