"""The model's decoder step: cached == uncached, multi-position writes at per-row offsets, positions of any sign."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import random_model, tiny_model_config, with_random_relative_keys
from fastmt import layers, models


def test_sinusoidal_positions_any_sign():
  enc = layers.sinusoidal_positions(jnp.array([-3, 0, 3]), 8)
  half = 4
  np.testing.assert_allclose(enc[0, :half], -enc[2, :half], atol=1e-6)  # sin is odd
  np.testing.assert_allclose(enc[0, half:], enc[2, half:], atol=1e-6)  # cos is even
  np.testing.assert_allclose(enc[1], [0] * half + [1] * half)


def test_write_at_offsets_worked_example():
  cache = jnp.zeros((2, 5), jnp.int32)
  new = jnp.array([[1, 2], [3, 4]])
  out = layers.write_at_offsets(cache, new, jnp.array([0, 3]))
  np.testing.assert_array_equal(out, [[1, 2, 0, 0, 0], [0, 0, 0, 3, 4]])


def _full_and_memory(model, params, source, target_in):
  full = model.apply({'params': params}, source, target_in)
  encoded = model.apply({'params': params}, source, method=models.Transformer.encode)
  memory = model.apply({'params': params}, encoded, source, method=models.Transformer.memory)
  return full, memory


def _decode(model, params, tokens, positions, mask, memory, cache, offsets):
  return model.apply({'params': params}, tokens, positions, mask, memory, cache, offsets,
                     method=models.Transformer.decode)


def test_relative_key_scores_are_eq4_entry_by_entry():
  """query . R[clip(p_key - p_query, -K, K) + K], positions of any sign, written out by loops."""
  rng = np.random.default_rng(0)
  query = rng.standard_normal((2, 3, 2, 4)).astype(np.float32)  # [B, T, H, D]
  table = rng.standard_normal((5, 4)).astype(np.float32)  # K = 2
  query_positions = np.array([[0, 1, 2], [-3, 4, 9]])
  key_positions = np.array([[0, 1, 2, 3, 7], [-1, -6, 4, 9, 0]])
  got = np.asarray(layers.relative_key_scores(jnp.asarray(query), jnp.asarray(table), jnp.asarray(query_positions),
                                              jnp.asarray(key_positions)))
  assert got.shape == (2, 2, 3, 5)
  for b in range(2):
    for h in range(2):
      for t in range(3):
        for k in range(5):
          r = min(max(key_positions[b, k] - query_positions[b, t], -2), 2) + 2
          np.testing.assert_allclose(got[b, h, t, k], query[b, t, h] @ table[r], rtol=1e-5, atol=1e-5)


def _model(seed, relative_distance=0):
  """A random tiny model; with relative position keys, their tables random too (they start at zero)."""
  model, params = random_model(seed, tiny_model_config(relative_key_distance=relative_distance))
  return model, (with_random_relative_keys(params, seed) if relative_distance else params)


@pytest.mark.parametrize('seed,relative_distance', [(0, 0), (1, 0), (2, 0), (0, 3), (1, 1)])
def test_cached_step_by_step_equals_full_pass(seed, relative_distance):
  model, params = _model(seed, relative_distance)
  rng = np.random.default_rng(seed)
  source = jnp.array(np.concatenate([rng.integers(4, 40, (3, 7)), np.zeros((3, 2), int)], 1))
  target_in = jnp.array(rng.integers(4, 40, (3, 9)))
  full, memory = _full_and_memory(model, params, source, target_in)
  cache = models.init_cache(model.config, 3, 12)
  steps = []
  for t in range(9):
    offsets = jnp.full((3,), t)
    logits, _, cache = _decode(model, params, target_in[:, t:t + 1], offsets[:, None],
                               models.cache_causal_mask(offsets, 1, 12), memory, cache, offsets)
    steps.append(logits)
  np.testing.assert_allclose(jnp.concatenate(steps, 1), full, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize('relative_distance', [0, 2])
def test_multi_position_writes_at_per_row_offsets(relative_distance):
  """Rows at different offsets, several positions per call, earlier slots overwritten: still exact (with
  relative position keys, the overwritten slots' positions are rewritten with them)."""
  model, params = _model(3, relative_distance)
  rng = np.random.default_rng(3)
  source = jnp.array(rng.integers(4, 40, (2, 6)))
  target_in = jnp.array(rng.integers(4, 40, (2, 8)))
  full, memory = _full_and_memory(model, params, source, target_in)
  cache = models.init_cache(model.config, 2, 10)
  # Prefill 4 positions of both rows, with garbage in row 0's slots 2-3 (as a rejected Jacobi guess).
  # Its guessed slots at wrong positions too, which the rewrite must replace (relative keys read them).
  garbage = target_in.at[0, 2:4].set(7)
  zeros = jnp.zeros((2,), jnp.int32)
  garbage_positions = jnp.tile(jnp.arange(4), (2, 1)).at[0, 2:4].add(5)
  _, _, cache = _decode(model, params, garbage[:, :4], garbage_positions,
                        models.cache_causal_mask(zeros, 4, 10), memory, cache, zeros)
  # Then 3 positions per row at offsets [2, 4]: row 0 rewrites slots 2-4, row 1 continues at 4-6.
  offsets = jnp.array([2, 4])
  tokens = jnp.stack([target_in[0, 2:5], target_in[1, 4:7]])
  positions = offsets[:, None] + jnp.arange(3)
  logits, _, _ = _decode(model, params, tokens, positions, models.cache_causal_mask(offsets, 3, 10), memory,
                         cache, offsets)
  np.testing.assert_allclose(logits[0], full[0, 2:5], atol=1e-4, rtol=1e-4)
  np.testing.assert_allclose(logits[1], full[1, 4:7], atol=1e-4, rtol=1e-4)


def test_source_padding_does_not_change_the_encoding():
  model, params = random_model(4)
  source = jnp.array([[5, 6, 7, 1]])
  padded = jnp.array([[5, 6, 7, 1, 0, 0, 0]])
  a = model.apply({'params': params}, source, method=models.Transformer.encode)
  b = model.apply({'params': params}, padded, method=models.Transformer.encode)
  np.testing.assert_allclose(a[0], b[0, :4], atol=1e-5)


def test_deep_encoder_shallow_decoder_is_one_config_away():
  model, params = random_model(0, tiny_model_config(num_encoder_layers=4, num_decoder_layers=1))
  names = set(params)
  assert {'encoder_3', 'decoder_0'} <= names and 'decoder_1' not in names


def test_model_config_rejects_unknown_keys():
  from fastmt.config import ModelConfig
  with pytest.raises(ValueError, match='Unknown model config keys'):
    ModelConfig.from_config({'emb_dim': 32, 'num_heads': 4, 'embdim': 3}, vocab_size=10)


def test_relative_keys_start_at_zero_and_then_change_the_model():
  """A model with relative position keys at their initial zero tables computes what the same weights without
  them compute (fine-tuning into them starts from the initial model); random tables change the logits."""
  model, params = random_model(5, tiny_model_config(relative_key_distance=4))
  plain = models.Transformer(tiny_model_config())
  assert all(not np.any(params[f'decoder_{i}']['self_attention']['relative_keys']) for i in range(2))
  without = {name: ({**layer, 'self_attention': {k: v for k, v in layer['self_attention'].items()
                                                 if k != 'relative_keys'}} if 'self_attention' in layer else layer)
             for name, layer in params.items()}
  source = jnp.array([[5, 6, 7, 8, 1]])
  target = jnp.array([[2, 9, 10, 11, 12, 13]])
  np.testing.assert_allclose(model.apply({'params': params}, source, target),
                             plain.apply({'params': without}, source, target), atol=1e-5)
  changed = model.apply({'params': with_random_relative_keys(params)}, source, target)
  assert np.abs(np.asarray(changed) - np.asarray(model.apply({'params': params}, source, target))).max() > 1e-2
  assert set(models.init_cache(model.config, 2, 6)) == {'k', 'v', 'positions'}
  assert set(models.init_cache(plain.config, 2, 6)) == {'k', 'v'}  # no cache leaf a plain model does not need


def test_relative_scores_enter_before_the_scaling():
  """HRT Eq. 4: softmax(q (K^T + R) / sqrt(d)) V, the relative score scaled with the key's, written out."""
  rng = np.random.default_rng(1)
  query, key, value = (rng.standard_normal((1, 2, 1, 4)).astype(np.float32) for _ in range(3))  # [B, T, H, D]
  relative = rng.standard_normal((1, 1, 2, 2)).astype(np.float32)  # [B, H, T, K]
  mask = np.ones((1, 1, 2, 2), bool)
  got = layers.dot_product_attention(jnp.asarray(query), jnp.asarray(key), jnp.asarray(value), jnp.asarray(mask),
                                     relative_scores=jnp.asarray(relative))
  scores = (np.einsum('td,kd->tk', query[0, :, 0], key[0, :, 0]) + relative[0, 0]) / 2.0  # sqrt(4)
  weights = np.exp(scores) / np.exp(scores).sum(-1, keepdims=True)
  np.testing.assert_allclose(np.asarray(got)[0, :, 0], weights @ value[0, :, 0], rtol=1e-5, atol=1e-6)


def test_bfloat16_attention_sums_its_weighted_values_in_float32():
  """Both attention products of bfloat16 inputs are asked of XLA with float32 sums (the scores, and the
  weighted sum of values rounded once to bfloat16: XLA:CPU's AMX form), and the result is the float64 one to
  bfloat16's rounding."""
  rng = np.random.default_rng(2)
  query, key, value = (jnp.asarray(rng.standard_normal((1, 3, 2, 8)), jnp.bfloat16) for _ in range(3))
  mask = jnp.ones((1, 1, 3, 3), bool)
  attend = lambda q, k, v: layers.dot_product_attention(q, k, v, mask, dtype=jnp.bfloat16, kv_layout='bkhd')
  dots = [e for e in jax.make_jaxpr(attend)(query, key, value).jaxpr.eqns if e.primitive.name == 'dot_general']
  assert len(dots) == 2
  assert all(d.invars[0].aval.dtype == jnp.bfloat16 and d.outvars[0].aval.dtype == jnp.float32 for d in dots)
  got = attend(query, key, value)
  assert got.dtype == jnp.bfloat16
  q, k, v = (np.asarray(a.astype(jnp.float32), np.float64) for a in (query, key, value))
  scores = np.einsum('bthd,bkhd->bhtk', q, k) / np.sqrt(8)
  weights = np.exp(scores - scores.max(-1, keepdims=True))
  weights /= weights.sum(-1, keepdims=True)
  expected = np.einsum('bhtk,bkhd->bthd', weights, v)
  np.testing.assert_allclose(np.asarray(got.astype(jnp.float32)), expected, rtol=2**-6, atol=2**-7)


def test_relative_keys_in_bfloat16_follow_float32():
  """In bfloat16 activations (decode.py --dtype bfloat16) a model with relative keys decodes step by step as
  its own full pass does, and close to float32."""
  config = tiny_model_config(relative_key_distance=2)
  model, params = random_model(6, config)
  params = with_random_relative_keys(params, 6)
  half = models.Transformer(config.replace(dtype='bfloat16'))
  source = jnp.array([[5, 6, 7, 8, 1]])
  target_in = jnp.array([[2, 9, 10, 11, 12]])
  full32 = model.apply({'params': params}, source, target_in)
  full16, memory = _full_and_memory(half, params, source, target_in)
  cache = models.init_cache(half.config, 1, 5)
  for t in range(5):
    offsets = jnp.full((1,), t)
    logits, _, cache = _decode(half, params, target_in[:, t:t + 1], offsets[:, None],
                               models.cache_causal_mask(offsets, 1, 5), memory, cache, offsets)
    np.testing.assert_allclose(logits[:, 0], full16[:, t], atol=2e-2, rtol=2e-2)
  np.testing.assert_allclose(full16, full32, atol=0.1, rtol=0.05)


def test_a_cache_without_positions_is_a_clear_error_for_relative_keys():
  model, params = random_model(0, tiny_model_config(relative_key_distance=2))
  source = jnp.array([[5, 6, 1]])
  _, memory = _full_and_memory(model, params, source, jnp.array([[2, 9]]))
  cache = {key: value for key, value in models.init_cache(model.config, 1, 4).items() if key != 'positions'}
  with pytest.raises(ValueError, match="'positions'"):
    _decode(model, params, jnp.array([[2]]), jnp.zeros((1, 1), jnp.int32), models.cache_causal_mask(
        jnp.zeros((1,), jnp.int32), 1, 4), memory, cache, jnp.zeros((1,), jnp.int32))


@pytest.mark.parametrize('value', [-1, 1.5, True, '4'])
def test_relative_key_distance_must_be_a_whole_number(value):
  from fastmt.config import ModelConfig
  with pytest.raises(ValueError, match='relative_key_distance'):
    ModelConfig(vocab_size=10, relative_key_distance=value)


def test_relative_key_distance_takes_a_numpy_integer():
  from fastmt.config import ModelConfig
  config = ModelConfig(vocab_size=10, relative_key_distance=np.int64(3))
  assert config.relative_key_distance == 3 and '"relative_key_distance": 3' in config.to_json()


@pytest.mark.parametrize('relative_distance,per_row', [(0, False), (0, True), (2, False), (2, True)])
def test_query_slots_give_the_full_calls_logits_at_those_positions(relative_distance, per_row):
  """decode(query_slots=...) runs the last layer at a few positions only (HRT's stage II, the draft model):
  their logits and the cache equal the full call's, over a cache with earlier slots and a bidirectional mask."""
  model, params = _model(8, relative_distance)
  rng = np.random.default_rng(8)
  source = jnp.array(rng.integers(4, 40, (2, 5)))
  tokens = jnp.array(rng.integers(4, 40, (2, 6)))
  _, memory = _full_and_memory(model, params, source, tokens)
  zeros = jnp.zeros((2,), jnp.int32)
  _, _, cache = _decode(model, params, tokens[:, :2], jnp.tile(jnp.arange(2), (2, 1)),
                        models.cache_causal_mask(zeros, 2, 8), memory, models.init_cache(model.config, 2, 8), zeros)
  offsets = jnp.array([2, 1])
  positions = offsets[:, None] + jnp.arange(6)
  mask = jnp.broadcast_to(jnp.arange(8)[None, None, :] < (offsets + 6)[:, None, None], (2, 6, 8))
  full, _, full_cache = _decode(model, params, tokens, positions, mask, memory, cache, offsets)
  slots = jnp.array([[0, 3, 5], [4, 1, 2]]) if per_row else jnp.array([1, 3, 4])
  some, hidden, some_cache = model.apply({'params': params}, tokens, positions, mask, memory, cache, offsets,
                                         query_slots=slots, method=models.Transformer.decode)
  expected = full[:, slots] if not per_row else jnp.take_along_axis(full, slots[..., None], 1)
  assert some.shape == (2, 3, model.config.vocab_size) and hidden.shape == (2, 3, model.config.emb_dim)
  np.testing.assert_allclose(some, expected, atol=1e-4, rtol=1e-4)
  for a, b in zip(jax.tree_util.tree_leaves(some_cache), jax.tree_util.tree_leaves(full_cache)):
    np.testing.assert_allclose(a, b, atol=1e-5)
  # A mask broadcast over the queries ([B, 1, K]) selects as its widened self.
  shared = jnp.broadcast_to(jnp.arange(8) < 7, (2, 1, 8))
  full, _, _ = _decode(model, params, tokens, positions, shared, memory, cache, offsets)
  some, _, _ = model.apply({'params': params}, tokens, positions, shared, memory, cache, offsets,
                           query_slots=slots, method=models.Transformer.decode)
  expected = full[:, slots] if not per_row else jnp.take_along_axis(full, slots[..., None], 1)
  np.testing.assert_allclose(some, expected, atol=1e-4, rtol=1e-4)
