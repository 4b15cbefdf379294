"""An int8 model's decoder call in one custom call (fastmt/int8_step.py, fastmt/kernels/int8_decoder_step.cc):
the same logits and cache as the XLA path (the step function of the same int8 parameters without the kernel's
packing) up to float rounding, for one and two positions per row, rows at their own offsets, and widths that
are not multiples of 16; `--drafter int8` and an int8 model's own decoders use it, and keep their outputs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import random_model, tiny_model_config
from fastmt import int8_step, kernels, models, precision, quantize, translate
from fastmt.decoding.step import causal_window_mask
from fastmt.translate import DecodeSettings, Translator

needs_kernel = pytest.mark.skipif(not kernels.available('int8_step'),
                                  reason=f"fastmt int8 decoder-call kernel: {kernels.unavailable_reason('int8_step')}")


def _int8_model(seed, **config):
  model, params = random_model(seed, tiny_model_config(**config))
  int8_config, params = precision.for_inference(model.config, params, 'int8')
  return models.Transformer(int8_config), params


def _memory(model, params, source):
  encoded = model.apply({'params': params}, source, method=models.Transformer.encode)
  return model.apply({'params': params}, encoded, source, method=models.Transformer.memory)


def _xla_step_fn(model, params, memory):
  """The step function of the same int8 weights through XLA's operations (no kernel packing: its products are
  XLA's int8 dot, the same bits as the kernel's for the same inputs)."""
  portable = quantize.without_kernel_layout(params)
  projection = translate.transposed_output_layout(portable)
  projection = {'values': projection['values'], 'scale': projection['scale']}
  assert int8_step.unsupported_reason(model.config, portable) != ''
  return translate.make_step_fn(model, portable, memory, None, projection)


def _random_cache(config, batch, slots, seed):
  """A cache with random keys and values in every slot (as stale drafts leave it): a kernel that read a slot
  the mask hides, or wrote one it should not, would show."""
  rng = np.random.default_rng(seed)
  shape = (batch, slots, config.num_heads, config.head_dim)
  layers = range(config.num_decoder_layers)
  return {'k': tuple(jnp.asarray(rng.standard_normal(shape), jnp.float32) for _ in layers),
          'v': tuple(jnp.asarray(rng.standard_normal(shape), jnp.float32) for _ in layers)}


@needs_kernel
@pytest.mark.parametrize('config', [{}, dict(emb_dim=20, num_heads=2, mlp_dim=36, vocab_size=37)],
                         ids=['tiny', 'widths-not-multiples-of-16'])
@pytest.mark.parametrize('steps', [1, 2])
def test_the_one_call_decoder_is_the_xla_decoder_call(config, steps):
  model, params = _int8_model(3, **config)
  assert int8_step.unsupported_reason(model.config, params) == ''
  source = jnp.array([[4, 5, 6, 7, 2], [9, 8, 7, 2, 0], [5, 5, 2, 0, 0]])
  batch, slots = source.shape[0], 12
  memory = _memory(model, params, source)
  projection = translate.transposed_output_layout(params)
  reference = jax.jit(_xla_step_fn(model, params, memory))
  fused = jax.jit(translate.make_step_fn(model, params, memory, None, projection))  # it picks the custom call
  assert kernels.INT8_STEP_TARGET in fused.lower(
      jnp.zeros((batch, steps), jnp.int32), jnp.zeros((batch, steps), jnp.int32),
      causal_window_mask(jnp.zeros(batch, jnp.int32), steps, slots), _random_cache(model.config, batch, slots, 0),
      jnp.zeros(batch, jnp.int32)).as_text()
  rng = np.random.default_rng(steps)
  for call, offsets in enumerate([[0, 3, 7], [5, 0, 10]]):
    offsets = jnp.array(offsets, jnp.int32)
    tokens = jnp.asarray(rng.integers(3, model.config.vocab_size, (batch, steps)), jnp.int32)
    positions = offsets[:, None] + jnp.arange(steps)[None]
    mask = causal_window_mask(offsets, steps, slots)
    cache = _random_cache(model.config, batch, slots, call)
    expected_logits, expected_cache = reference(tokens, positions, mask, cache, offsets)
    logits, new_cache = fused(tokens, positions, mask, cache, offsets)
    np.testing.assert_allclose(logits, expected_logits, rtol=1e-4, atol=1e-4)
    for part in ('k', 'v'):
      for layer in range(model.config.num_decoder_layers):
        written = np.zeros((batch, slots), bool)
        for b, offset in enumerate(offsets.tolist()):
          written[b, offset:offset + steps] = True
        got, want = np.asarray(new_cache[part][layer]), np.asarray(expected_cache[part][layer])
        np.testing.assert_allclose(got[written], want[written], rtol=1e-4, atol=1e-5, err_msg=f'{part}{layer} new')
        np.testing.assert_array_equal(got[~written], np.asarray(cache[part][layer])[~written],
                                      err_msg=f'{part}{layer}: a slot it should not write')


@needs_kernel
@pytest.mark.parametrize('directions, words', [(2, 1), (2, 2), (1, 2)], ids=['ib', 'ib_sa', 'sa'])
def test_an_interleaved_call_is_the_xla_decoder_call(directions, words):
  """The calls of `--algorithm ib` on an int8 model: z = h * c slots a step at signed positions (Eq. 7, right to
  left ones negative), under M(h, c) (the slots of a step see each other and every earlier step): the same logits
  and written cache as the XLA path."""
  from fastmt.decoding import interleaving  # pylint: disable=g-import-not-at-top
  layout = interleaving.Interleaving(directions=directions, words_per_direction=words)
  z, slots = layout.slots, 16
  model, params = _int8_model(4)
  source = jnp.array([[4, 5, 6, 7, 2], [9, 8, 2, 0, 0]])
  batch = source.shape[0]
  memory = _memory(model, params, source)
  reference = jax.jit(_xla_step_fn(model, params, memory))
  fused = jax.jit(translate.make_step_fn(model, params, memory, None, translate.transposed_output_layout(params)))
  all_positions = interleaving.positions(layout, slots // z)
  assert (all_positions < 0).any() == (directions == 2)
  rng = np.random.default_rng(z)
  for step in (0, 2):  # a step's z slots from slot step * z, as the decoder writes them
    offsets = jnp.full((batch,), step * z, jnp.int32)
    tokens = jnp.asarray(rng.integers(3, model.config.vocab_size, (batch, z)), jnp.int32)
    positions = jnp.broadcast_to(all_positions[step * z:(step + 1) * z], (batch, z))
    mask = jnp.broadcast_to(interleaving.self_mask(layout, z, slots, step * z), (batch, z, slots))
    cache = _random_cache(model.config, batch, slots, step)
    expected_logits, expected_cache = reference(tokens, positions, mask, cache, offsets)
    logits, new_cache = fused(tokens, positions, mask, cache, offsets)
    np.testing.assert_allclose(logits, expected_logits, rtol=1e-4, atol=1e-4, err_msg=f'step {step}')
    for part in ('k', 'v'):
      for layer in range(model.config.num_decoder_layers):
        written = slice(step * z, (step + 1) * z)
        np.testing.assert_allclose(np.asarray(new_cache[part][layer])[:, written],
                                   np.asarray(expected_cache[part][layer])[:, written], rtol=1e-4, atol=1e-5)


@needs_kernel
def test_a_projected_slot_and_a_row_that_sees_no_slot():
  """`project` picks positions per row as the XLA path does; a row whose mask allows no slot gets uniform
  attention over every slot, as XLA's softmax over -1e9 scores gives."""
  model, params = _int8_model(4)
  source = jnp.array([[4, 5, 6, 2], [7, 8, 2, 0]])
  memory = _memory(model, params, source)
  projection = translate.transposed_output_layout(params)
  reference = jax.jit(_xla_step_fn(model, params, memory))
  fused = jax.jit(int8_step.make_step_fn(model, params, memory, projection))
  offsets = jnp.array([2, 4], jnp.int32)
  tokens = jnp.array([[5, 6], [7, 8]])
  positions = offsets[:, None] + jnp.arange(2)[None]
  mask = causal_window_mask(offsets, 2, 10).at[1].set(False)
  cache = _random_cache(model.config, 2, 10, 5)
  project = jnp.array([[1], [0]])
  expected, _ = reference(tokens, positions, mask, cache, offsets, project)
  got, _ = fused(tokens, positions, mask, cache, offsets, project)
  assert got.shape == expected.shape == (2, 1, model.config.vocab_size)
  np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


@needs_kernel
def test_models_the_kernel_does_not_take_are_named():
  model, params = _int8_model(5)
  float_model, float_params = random_model(5)
  assert 'not int8' in int8_step.unsupported_reason(float_model.config, float_params)
  relative = model.config.replace(relative_key_distance=4)
  assert 'relative position keys' in int8_step.unsupported_reason(relative, params)
  assert 'not packed' in int8_step.unsupported_reason(model.config, quantize.without_kernel_layout(params))


@needs_kernel
def test_the_int8_drafter_uses_the_one_call_decoder_and_keeps_greedys_output(trained_float_parts):
  """Translator's spec with --drafter int8: its drafter's calls go through the custom call, and the output is
  greedy's line for line at batch 2 and 1."""
  texts = ['And God said, Let there be light.', 'God', 'And the evening and the morning were the first day.', 'x']
  ids = lambda translator, batch: [row.tolist() for row in translator.translate_ids(texts, batch)[0]]
  greedy_ids = ids(Translator(*trained_float_parts), 2)
  spec = Translator(*trained_float_parts, DecodeSettings('spec', block_size=4, drafter='int8'))
  assert ids(spec, 2) == greedy_ids
  assert ids(spec, 1) == greedy_ids
  lowered = spec._decode.lower(spec.params, jnp.zeros((1, 8), jnp.int32), jnp.full((1,), 8, jnp.int32),
                               spec.clusters, spec.draft_table, spec.output_projection, spec.drafter, None)
  assert kernels.INT8_STEP_TARGET in lowered.as_text()


def test_turned_off_the_drafter_runs_through_xla_with_the_same_output(trained_float_parts, monkeypatch):
  """FASTMT_INT8_STEP_KERNEL=0 (or a CPU without the instructions, or another backend): the reason is said, and
  the int8 drafter's calls are XLA's operations again, with greedy's output."""
  monkeypatch.setattr(kernels, '_state', {})
  monkeypatch.setenv('FASTMT_INT8_STEP_KERNEL', '0')
  model, params = _int8_model(6)
  assert int8_step.unsupported_reason(model.config, params) == 'turned off by FASTMT_INT8_STEP_KERNEL=0'
  texts = ['And God said, Let there be light.', 'God']
  ids = lambda translator: [row.tolist() for row in translator.translate_ids(texts, 2)[0]]
  spec = Translator(*trained_float_parts, DecodeSettings('spec', block_size=3, drafter='int8'))
  assert ids(spec) == ids(Translator(*trained_float_parts))
  lowered = spec._decode.lower(spec.params, jnp.zeros((1, 8), jnp.int32), jnp.full((1,), 8, jnp.int32),
                               spec.clusters, spec.draft_table, spec.output_projection, spec.drafter, None)
  assert kernels.INT8_STEP_TARGET not in lowered.as_text()


@needs_kernel
@pytest.mark.parametrize('settings', [DecodeSettings('greedy'), DecodeSettings('beam', beam_size=3),
                                      DecodeSettings('pgj', block_size=3)], ids=['greedy', 'beam', 'pgj'])
def test_an_int8_models_own_decoders_make_their_calls_in_one_custom_call(trained_float_parts, settings):
  """A model loaded in int8 (fastmt.precision.for_inference, as decode.py --dtype int8 does) decodes through the
  custom call with every algorithm whose calls it can make; PGJ still equals its greedy bit for bit (each row's
  arithmetic in the kernel does not depend on the call's other rows)."""
  config, params, tokenizer = trained_float_parts
  int8_config, int8_params = precision.for_inference(config, params, 'int8')
  translator = Translator(int8_config, int8_params, tokenizer, settings)
  lowered = translator._decode.lower(translator.params, jnp.zeros((2, 8), jnp.int32), jnp.full((2,), 8, jnp.int32),
                                     translator.clusters, translator.draft_table, translator.output_projection,
                                     translator.drafter, None)
  assert kernels.INT8_STEP_TARGET in lowered.as_text()
  if settings.algorithm == 'pgj':
    texts = ['And God said, Let there be light.', 'God', 'And the evening and the morning were the first day.']
    greedy_ids = Translator(int8_config, int8_params, tokenizer).translate_ids(texts, 2)[0]
    pgj_ids = translator.translate_ids(texts, 2)[0]
    assert [row.tolist() for row in pgj_ids] == [row.tolist() for row in greedy_ids]
