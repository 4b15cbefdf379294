"""fastmt's float32 kernel for a few rows (fastmt.kernels float32_matmul, fastmt.few_rows): the product against a
float64 reference, each row independent of the others, the Dense layers equal to Flax's with the same
parameters, the model's cached logits with and without it, the decoders through the Translator, and the
fallback and errors."""

import os
import re
import shutil

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import REPO, cpu_flags, random_model, tiny_model_config
from fastmt import api, few_rows, kernels, models
from fastmt.errors import FastmtError
from fastmt.translate import DecodeSettings, Translator

GENESIS = [line.rstrip('\n') for line in open(REPO / 'tests/data/genesis.en', encoding='utf-8')][:12]

needs_kernel = pytest.mark.skipif(not kernels.available('float32'),
                                  reason=f"fastmt float32 kernel: {kernels.unavailable_reason('float32')}")


@pytest.mark.skipif(not ('avx512f' in cpu_flags() and shutil.which(os.environ.get('CXX', 'g++'))),
                    reason='no AVX-512 or no C++ compiler: the fallback is the expected path')
def test_the_float32_kernel_builds_wherever_it_can_run():
  """The fallback must not hide a broken build: on an AVX-512 CPU with a compiler the kernel is in use."""
  assert kernels.available('float32'), kernels.unavailable_reason('float32')


def test_pack_float32_weights_layout_worked_example():
  """Block b holds columns 16b .. 16b+15 of every row k, in k order; columns pad to 16 with zeros."""
  w = np.arange(3 * 20, dtype=np.float32).reshape(3, 20)
  packed = kernels.pack_float32_weights(w)
  assert packed.shape == (2, 3, 16) and packed.dtype == np.float32
  np.testing.assert_array_equal(packed[0], w[:, :16])
  np.testing.assert_array_equal(packed[1, :, :4], w[:, 16:])
  assert not packed[1, :, 4:].any()


@needs_kernel
@pytest.mark.parametrize('rows', [1, 2, 3, 4, 5, 7, 8, 9, 16, 19])
@pytest.mark.parametrize('k,n', [(24, 40), (64, 16), (32, 112), (48, 200)])
def test_float32_matmul_equals_a_float64_reference_and_rows_are_independent(rng, rows, k, n):
  """Every row count (the groups of 8 and each remainder) and column count (blocks of 4, 2, 1 and a padded
  last one); and each row alone gives its result in the batch bit for bit (one multiply-add chain per output,
  whatever the grouping), which makes a window's logits those of the same rows one at a time."""
  w = rng.normal(size=(k, n)).astype(np.float32)
  bias = rng.normal(size=n).astype(np.float32)
  x = rng.normal(size=(rows, k)).astype(np.float32)
  product = jax.jit(kernels.float32_matmul)
  out = np.asarray(product(x, kernels.pack_float32_weights(w), bias))
  assert out.shape == (rows, n)
  np.testing.assert_allclose(out, x.astype(np.float64) @ w + bias, rtol=1e-5, atol=1e-5)
  for row in {0, rows - 1}:
    np.testing.assert_array_equal(np.asarray(product(x[row:row + 1], kernels.pack_float32_weights(w), bias)),
                                  out[row:row + 1])


@needs_kernel
@pytest.mark.parametrize('rows', [1, 8])
def test_float32_matmul_splits_wide_products_over_threads_with_the_same_result(rng, rows):
  """A product of 2,056 columns (129 blocks of 16, the last padded) is cut into chunks that XLA's intra-op
  threads compute (parallel_blocks.h); a slice of 64 columns is too small to be cut. Every column equals its
  slice's, bit for bit, whichever thread computed it."""
  k, n, width = 512, 2056, 64
  w = rng.normal(size=(k, n)).astype(np.float32)
  bias = rng.normal(size=n).astype(np.float32)
  x = rng.normal(size=(rows, k)).astype(np.float32)
  product = jax.jit(kernels.float32_matmul)
  out = np.asarray(product(x, kernels.pack_float32_weights(w), bias))
  np.testing.assert_allclose(out, x.astype(np.float64) @ w + bias, rtol=1e-5, atol=1e-4)
  for start in range(0, n, width):
    part = kernels.pack_float32_weights(w[:, start:start + width])
    np.testing.assert_array_equal(np.asarray(product(x, part, bias[start:start + width])),
                                  out[:, start:start + width])


class _Layers(nn.Module):
  """A Dense and the two DenseGenerals of attention (heads out; heads and depth contracted), of few_rows' classes
  or (flax=True) Flax's own."""
  flax: bool = False

  @nn.compact
  def __call__(self, x):
    dense, general = (nn.Dense, nn.DenseGeneral) if self.flax else (few_rows.Dense, few_rows.DenseGeneral)
    y = dense(24, name='dense')(x)
    heads = general((2, 6), name='query')(y)
    return general(10, axis=(-2, -1), name='out')(heads)


def _custom_calls(fn, *args) -> int:
  return jax.jit(fn).lower(*args).compile().as_text().count(kernels.FLOAT32_TARGET)


@needs_kernel
@pytest.mark.parametrize('lead', [(1, 1), (1, 4), (2, 4), (1, 9), (3, 5)])
def test_the_dense_layers_equal_flax_and_use_the_kernel_up_to_its_rows(rng, lead):
  """Flax's parameters and initialisation (a checkpoint loads either way); with the layout the same outputs,
  through the kernel for at most FLOAT32_MAX_ROWS rows and through XLA beyond."""
  x = jnp.asarray(rng.normal(size=lead + (8,)), jnp.float32)
  params = _Layers().init(jax.random.PRNGKey(0), x)['params']
  flax_params = _Layers(flax=True).init(jax.random.PRNGKey(0), x)['params']
  assert jax.tree_util.tree_all(jax.tree_util.tree_map(lambda a, b: bool((a == b).all()), params, flax_params))
  packed = few_rows.with_layout(params)
  assert few_rows.has_layout(packed) and not few_rows.has_layout(params)
  assert packed['query'][few_rows.PACKED].shape == (1, 24, 16)  # 12 columns padded to 16
  # on the device already: a host array would be copied into every jitted call (and timed as the kernel's)
  assert isinstance(packed['query'][few_rows.PACKED], jax.Array)
  expected = _Layers(flax=True).apply({'params': flax_params}, x)
  out = _Layers().apply({'params': packed}, x)
  np.testing.assert_allclose(np.asarray(out), np.asarray(expected), rtol=1e-5, atol=1e-5)
  rows = lead[0] * lead[1]
  calls = _custom_calls(lambda p, x: _Layers().apply({'params': p}, x), packed, x)
  assert calls == (3 if rows <= kernels.FLOAT32_MAX_ROWS else 0)
  assert _custom_calls(lambda p, x: _Layers().apply({'params': p}, x), params, x) == 0  # no layout, no kernel


class _HalfLayers(nn.Module):
  """_Layers' three products in bfloat16."""

  @nn.compact
  def __call__(self, x):
    y = few_rows.Dense(24, dtype=jnp.bfloat16, name='dense')(x)
    heads = few_rows.DenseGeneral((2, 6), dtype=jnp.bfloat16, name='query')(y)
    return y, few_rows.DenseGeneral(10, axis=(-2, -1), dtype=jnp.bfloat16, name='out')(heads)


def test_bfloat16_layers_sum_in_float32_and_round_once(rng):
  """A bfloat16 layer's product is the sum of its bfloat16 inputs' products taken in float32 and rounded once to
  bfloat16 (a bfloat16 sum over 8 or 24 terms rounds at every step), asked of XLA as a float32-accumulated
  product (the form XLA:CPU runs on AMX); a float32 layer's product has no conversion in it."""
  x = jnp.asarray(rng.normal(size=(3, 4, 8)), jnp.float32)
  params = _HalfLayers().init(jax.random.PRNGKey(0), x)['params']
  y, out = _HalfLayers().apply({'params': params}, x)
  assert y.dtype == out.dtype == jnp.bfloat16 and out.shape == (3, 4, 10)
  as64 = lambda a: np.asarray(jnp.asarray(a, jnp.bfloat16).astype(jnp.float32), np.float64)
  exact = as64(x) @ as64(params['dense']['kernel']) + as64(params['dense']['bias'])
  # the product rounded once, then the bias added in bfloat16: two roundings of 2^-9 relative at most
  np.testing.assert_allclose(np.asarray(y, np.float64), exact, rtol=2**-7, atol=1e-6)
  jaxpr = jax.make_jaxpr(lambda p, x: _HalfLayers().apply({'params': p}, x))(params, x).jaxpr
  dots = [e for e in jaxpr.eqns if e.primitive.name == 'dot_general']
  assert len(dots) == 3
  for dot in dots:
    assert [v.aval.dtype for v in dot.invars] == [jnp.bfloat16] * 2 and dot.outvars[0].aval.dtype == jnp.float32
  float_params = _Layers().init(jax.random.PRNGKey(0), x)['params']
  plain = jax.make_jaxpr(lambda p, x: _Layers().apply({'params': p}, x))(float_params, x).jaxpr
  assert not [e for e in plain.eqns if e.primitive.name == 'convert_element_type']


@needs_kernel
def test_the_transformers_cached_logits_are_the_same_with_the_kernel(rng):
  """A decoder call over 1-4 positions at batch 1 and 2 (the windows of the parallel decoders) with the
  kernel's layout gives the logits of the model without it, to float32 rounding, and so does a next call that
  reads the keys and values the first wrote to the cache (equal to the uncached pass too); the encoder too."""
  model, params = random_model(3)
  packed = few_rows.with_layout(params)
  config = tiny_model_config()
  source = jnp.asarray(rng.integers(3, config.vocab_size, size=(2, 7)), jnp.int32)
  for batch in (1, 2):
    src = source[:batch]
    encoded = [model.apply({'params': p}, src, method=models.Transformer.encode) for p in (params, packed)]
    np.testing.assert_allclose(np.asarray(encoded[1]), np.asarray(encoded[0]), rtol=1e-4, atol=1e-5)
    for width in (1, 2, 4):
      tokens = jnp.asarray(rng.integers(3, config.vocab_size, size=(batch, width)), jnp.int32)
      positions = jnp.broadcast_to(jnp.arange(width), (batch, width))
      following = jnp.asarray(rng.integers(3, config.vocab_size, size=(batch, 1)), jnp.int32)
      logits, next_logits = [], []
      for p in (params, packed):
        memory = model.apply({'params': p}, encoded[0], src, method=models.Transformer.memory)
        cache = models.init_cache(config, batch, 16)
        mask = jnp.broadcast_to(jnp.arange(16)[None, :] <= jnp.arange(width)[:, None], (batch, width, 16))
        out, _, cache = model.apply({'params': p}, tokens, positions, mask, memory, cache,
                                    jnp.zeros(batch, jnp.int32), method=models.Transformer.decode)
        logits.append(np.asarray(out))
        # One more position that reads the keys and values this call wrote to the cache.
        out, _, _ = model.apply({'params': p}, following, jnp.full((batch, 1), width),
                                jnp.broadcast_to(jnp.arange(16) <= width, (batch, 1, 16)), memory, cache,
                                jnp.full((batch,), width, jnp.int32), method=models.Transformer.decode)
        next_logits.append(np.asarray(out))
      np.testing.assert_allclose(logits[1], logits[0], rtol=1e-4, atol=1e-5)
      np.testing.assert_allclose(next_logits[1], next_logits[0], rtol=1e-4, atol=1e-5)
      uncached = model.apply({'params': params}, src, jnp.concatenate([tokens, following], axis=1))
      np.testing.assert_allclose(next_logits[1], np.asarray(uncached[:, width:]), rtol=1e-4, atol=1e-4)


@needs_kernel
def test_translators_with_the_kernel_translate_as_without_and_stay_exact(trained_float_parts):
  """A trained model: greedy, beam, Jacobi and speculative decoding with the kernel give the outputs of the same
  decoders without it, and the exact ones equal greedy with it (no near tie on these sentences)."""
  greedy, _ = Translator(*trained_float_parts).translate(GENESIS, batch_size=4)
  for settings in (DecodeSettings('greedy'), DecodeSettings('beam', beam_size=3),
                   DecodeSettings('pgj', block_size=3), DecodeSettings('spec', drafter='int8', block_size=3),
                   DecodeSettings('spec', drafter='ngram', block_size=4)):
    plain = Translator(*trained_float_parts, settings)
    kernel = Translator(*trained_float_parts, settings, float32_kernel=True)
    assert kernel.float32_kernel and not plain.float32_kernel
    for batch_size in (1, 4):
      with_kernel, _ = kernel.translate(GENESIS, batch_size=batch_size)
      assert with_kernel == plain.translate(GENESIS, batch_size=batch_size)[0], (settings.algorithm, batch_size)
      if settings.algorithm != 'beam':
        assert with_kernel == greedy, (settings.algorithm, batch_size)
    # pylint: disable=protected-access
    assert any(kernels.FLOAT32_TARGET in c.as_text() for c in kernel._compiled.values()), settings.algorithm
    assert not any(kernels.FLOAT32_TARGET in c.as_text() for c in plain._compiled.values()), settings.algorithm


def test_the_kernel_is_for_float32_models_only(trained_float_parts):
  config, params, tokenizer = trained_float_parts
  with pytest.raises(FastmtError, match='float32_kernel runs a float32'):
    Translator(config.replace(dtype='bfloat16'), params, tokenizer, float32_kernel=True)
  with pytest.raises(FastmtError, match='float32_kernel runs float32 products'):
    api.TranslationModel(config, params, tokenizer, dtype='int8', float32_kernel=True)
  with pytest.raises(FastmtError, match='float32_kernel runs float32 products'):
    api.TranslationModel(config.replace(quantization='int8'), params, tokenizer, float32_kernel=True)


def test_without_the_float32_kernel_the_fallback_is_said_once(monkeypatch, caplog, trained_float_parts):
  """FASTMT_FLOAT32_KERNEL=0 (or a CPU without AVX-512, or another backend): XLA's products, said once; the
  Translator still translates and reports that it does not use the kernel."""
  monkeypatch.setattr(kernels, '_state', {})
  monkeypatch.setenv('FASTMT_FLOAT32_KERNEL', '0')
  with caplog.at_level('WARNING'):
    assert not kernels.available('float32') and not kernels.available('float32')
  assert kernels.unavailable_reason('float32') == 'turned off by FASTMT_FLOAT32_KERNEL=0'
  assert sum('float32 CPU kernel is not used' in r.message for r in caplog.records) == 1
  params = random_model(0)[1]
  assert few_rows.with_layout(params) is params
  translator = Translator(*trained_float_parts, float32_kernel=True)
  assert not translator.float32_kernel
  assert translator.translate(GENESIS[:3])[0] == Translator(*trained_float_parts).translate(GENESIS[:3])[0]
  with pytest.raises(ValueError, match='kernel kind'):
    kernels.available('float16')


def test_decode_py_refuses_the_kernel_with_another_dtype(trained_workdir, tmp_path):
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  (tmp_path / 'in.txt').write_text('In the beginning\n', encoding='utf-8')
  result = subprocess.run([sys.executable, str(REPO / 'decode.py'), '--workdir', str(trained_workdir), '--dtype',
                           'int8', '--float32_kernel', '--input', str(tmp_path / 'in.txt'), '--output',
                           str(tmp_path / 'out.txt')], capture_output=True, text=True, check=False)
  assert result.returncode != 0
  assert re.search(r'--float32_kernel runs float32 products; --dtype is int8', result.stderr)
  assert not (tmp_path / 'out.txt').exists()


@needs_kernel
def test_a_models_translators_share_one_packed_copy(trained_float_parts, monkeypatch):
  """fastmt.TranslationModel packs its weights once for all its Translators (spec:auto's candidates among them);
  a Translator given packed weights without float32_kernel drops the packing (and the kernel)."""
  config, params, tokenizer = trained_float_parts
  calls = []
  pack = few_rows.with_layout
  monkeypatch.setattr(few_rows, 'with_layout', lambda p: calls.append(1) or pack(p))
  model = api.TranslationModel(config, params, tokenizer, float32_kernel=True)
  translators = [model.translator('greedy'), model.translator('spec', drafter='int8', block_size=2),
                 model.translator('spec', drafter='int8', block_size=3)]
  assert len(calls) == 1 and all(t.float32_kernel and few_rows.has_layout(t.params) for t in translators)
  assert model.translate(GENESIS[:4], algorithm='spec', drafter='int8', block_size=3) == model.translate(GENESIS[:4])
  plain = Translator(config, pack(params), tokenizer)
  assert not plain.float32_kernel and not few_rows.has_layout(plain.params)
  plain.translate(GENESIS[:2])
  compiled = plain._compiled.values()  # pylint: disable=protected-access
  assert compiled and all(kernels.FLOAT32_TARGET not in c.as_text() for c in compiled)


@needs_kernel
def test_packed_weights_quantize_as_the_plain_ones():
  """The int8 copy (--drafter int8) made from packed weights is the one made from the plain weights."""
  from fastmt import quantize  # pylint: disable=g-import-not-at-top
  params = random_model(0)[1]
  plain, packed = quantize.quantize_params(params), quantize.quantize_params(few_rows.with_layout(params))
  assert jax.tree_util.tree_structure(plain) == jax.tree_util.tree_structure(packed)
  assert all((np.asarray(a) == np.asarray(b)).all() for a, b in zip(jax.tree_util.tree_leaves(plain),
                                                                     jax.tree_util.tree_leaves(packed)))
