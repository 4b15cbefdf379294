"""An int8 model's decoder call as one custom call (fastmt/kernels/int8_decoder_step.cc), for `--drafter int8`.

Speculative decoding with the model's own int8 copy as its drafter (fastmt.decoding.draft_model) makes W - 1
drafter calls per iteration, one or two positions each. On XLA:CPU such a call of a Transformer-base-sized
decoder is about 350 small operations, and its int8 products, the only part that reads many bytes, are about
a third of its time (docs/BENCHMARKS.md section 7). `make_step_fn` gives the drafter a step function that
embeds the inputs as Transformer.decode does, runs every decoder layer and the final LayerNorm in the one
custom call, and projects with the int8 output projection as the XLA path does: a few operations per call.

It is the same function as Transformer.decode on the int8 parameters, with sums taken in another order
(the kernel's header), so a draft can differ from the XLA path's on a near tie; drafts are only proposals that
the float model verifies, so translations do not change (tests/test_int8_step.py).

Used where `unsupported_reason` is empty: the kernel runs on this CPU (kernels.available('int8_step'); off with
FASTMT_INT8_STEP_KERNEL=0) and the model is a plain int8 decoder (float32 activations, no relative position
keys or direction embeddings, every decoder matrix packed for the int8 kernel). Elsewhere the drafter runs
through XLA as before.
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
    if directions is not None:
      raise ValueError('the int8 decoder call has no direction embeddings')
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
