"""8-bit inference (fastmt.quantize): the int8 scheme against a numpy reference, the quantized model against
its float self, cached == uncached, every decoding algorithm through the Translator (the exact ones equal
int8 greedy), clear errors, and a saved quantized model reloading to identical outputs."""

import os
import shutil
import threading

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import REPO, cpu_flags, random_model, tiny_model_config
import fastmt
from fastmt import int8_step, kernels, models, precision, quantize, workdir as workdir_lib
from fastmt.config import ModelConfig
from fastmt.errors import FastmtError
from fastmt.translate import DecodeSettings, Translator

GENESIS = [line for line in open(REPO / 'tests/data/genesis.en', encoding='utf-8')][:10]
GENESIS_40 = [line.rstrip('\n') for line in open(REPO / 'tests/data/genesis.en', encoding='utf-8')][:40]


def test_quantize_array_is_symmetric_per_channel_within_half_a_step(rng):
  w = rng.normal(size=(24, 3, 5)).astype(np.float32)
  w[:, 1, 2] = 0.0  # an all-zero output channel
  values, scale = quantize.quantize_array(w, (0,))
  assert values.dtype == np.int8 and scale.shape == (3, 5)
  assert np.abs(values).max() == 127 and values.min() >= -127
  assert scale[1, 2] == 1.0 and not values[:, 1, 2].any()
  error = np.abs(np.asarray(quantize.dequantize_array(values, scale, (0,))) - w)
  assert (error <= scale / 2 + 1e-7).all()


def _reference_int8_matmul(x, values, scale):
  """The scheme in numpy: per-row symmetric int8 activations, exact integer products, float rescale."""
  amax = np.abs(x).max(-1, keepdims=True)
  row_scale = np.where(amax > 0, amax / 127.0, 1.0)
  q = np.clip(np.round(x / row_scale), -127, 127).astype(np.int64)
  return (q @ values.astype(np.int64)).astype(np.float32) * row_scale * scale


@pytest.mark.parametrize('rows', [1, 2, 7])
def test_int8_matmul_equals_the_numpy_reference(rng, rows, monkeypatch):
  x = rng.normal(size=(rows, 48)).astype(np.float32)
  x[0] = 0.0  # an all-zero row
  values, scale = quantize.quantize_array(rng.normal(size=(48, 20)).astype(np.float32), (0,))
  expected = _reference_int8_matmul(x, values, scale)
  for padded in (0, 1 << 30):  # every single row padded to two, or none
    monkeypatch.setattr(quantize, 'YNN_MIN_WEIGHTS', padded)
    out = np.asarray(jax.jit(quantize.int8_matmul)(x, values, scale))
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize('features, axis, in_shape', [((4, 8), -1, (32,)), (32, (-2, -1), (4, 8)), (64, -1, (32,))])
def test_int8_dense_general_is_the_float_layer_on_quantized_weights_and_inputs(rng, features, axis, in_shape):
  x = jnp.asarray(rng.normal(size=(3, 5) + in_shape), jnp.float32)
  float_layer = nn.DenseGeneral(features, axis=axis)
  params = float_layer.init(jax.random.PRNGKey(0), x)['params']
  params = {'kernel': params['kernel'], 'bias': jnp.asarray(rng.normal(size=params['bias'].shape), jnp.float32)}
  quantized = quantize.quantize_params({'layer': params})['layer']
  assert quantized['kernel'].dtype == np.int8 and quantized['scale'].shape == params['bias'].shape
  out = quantize.Int8DenseGeneral(features, axis=axis).apply({'params': quantized}, x)
  reference = float_layer.apply({'params': params}, x)
  assert out.shape == reference.shape
  # Two 8-bit roundings: about 1% of the output's scale.
  np.testing.assert_allclose(out, reference, atol=0.03 * float(jnp.abs(reference).max()))
  k = int(np.prod(in_shape))
  exact = _reference_int8_matmul(np.asarray(x).reshape(-1, k), quantized['kernel'].reshape(k, -1),
                                 quantized['scale'].reshape(-1)) + quantized['bias'].reshape(-1)
  np.testing.assert_allclose(np.asarray(out).reshape(exact.shape), exact, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('dtype', ['int8', 'int8_layers', 'bfloat16_int8', 'bfloat16_int8_layers'])
def test_quantized_model_is_close_to_float_and_cached_equals_uncached(rng, dtype):
  config = tiny_model_config()
  model, params = random_model(0, config)
  q_config, q_params = precision.for_inference(config, params, dtype)
  activations, scheme = precision.split_dtype(dtype)
  assert (q_config.quantization, q_config.dtype) == (scheme, activations)
  embedding = q_params['embed']['embedding']
  assert embedding.dtype == (np.int8 if scheme == 'int8' else activations)
  assert q_params['encoder_norm']['scale'].dtype == np.float32  # vectors stay float32 in every mode
  # bfloat16 activations: the int8 products stay exact, the float ops between them round to 8 bits.
  tolerance = 1e-4 if activations == 'float32' else 2e-2
  q_model = models.Transformer(q_config)
  source = jnp.asarray(np.concatenate([rng.integers(4, 40, (2, 7)), np.zeros((2, 2), int)], 1))
  target = jnp.asarray(rng.integers(4, 40, (2, 9)))
  full = model.apply({'params': params}, source, target)
  q_full = q_model.apply({'params': q_params}, source, target)
  np.testing.assert_allclose(q_full, full, atol=0.08 * float(jnp.abs(full).max()))
  encoded = q_model.apply({'params': q_params}, source, method=models.Transformer.encode)
  memory = q_model.apply({'params': q_params}, encoded, source, method=models.Transformer.memory)
  cache = models.init_cache(q_config, 2, 12)
  steps = []
  for t in range(9):
    offsets = jnp.full((2,), t)
    logits, _, cache = q_model.apply({'params': q_params}, target[:, t:t + 1], offsets[:, None],
                                     models.cache_causal_mask(offsets, 1, 12), memory, cache, offsets,
                                     method=models.Transformer.decode)
    steps.append(logits)
  np.testing.assert_allclose(jnp.concatenate(steps, 1), q_full, atol=tolerance * float(jnp.abs(q_full).max()),
                             rtol=tolerance)


@pytest.fixture(scope='session')  # once a worker (test_multidevice's eight_devices says why not module)
def int8_parts(trained_workdir):
  config = workdir_lib.load_model_config(trained_workdir)
  params, _ = workdir_lib.restore_params(trained_workdir, config)
  q_config, q_params = precision.for_inference(config, params, 'int8')
  return q_config, q_params, workdir_lib.load_tokenizer(trained_workdir)


@pytest.mark.parametrize('algorithm, options', [('pgj', {'block_size': 3}), ('hgj', {'parallel_length': 6}),
                                                ('spec', {'drafter': 'pad', 'block_size': 3})])
def test_exact_parallel_decoders_equal_int8_greedy(int8_parts, algorithm, options):
  """The int8 products are exact integers, but the float attention between them may differ in the last bit
  between a window call and a one-position call, and int8 rounding of the next activations can turn that
  bit into a different token (a near tie): pgj:3@int8 equals greedy@int8 on 999 of 1,007 quickstart test
  sentences (993 with XLA's int8 dot; docs/BENCHMARKS.md section 9), float32 on all. Hence at most one of ten may differ here."""
  greedy, _ = Translator(*int8_parts).translate(GENESIS, batch_size=4)
  parallel, _ = Translator(*int8_parts, DecodeSettings(algorithm, **options)).translate(GENESIS, batch_size=4)
  assert len(parallel) == len(greedy)
  assert sum(p != g for p, g in zip(parallel, greedy)) <= 1


def test_the_int8_drafter_gives_the_float_models_greedy_output(trained_float_parts, monkeypatch):
  """--drafter int8: the model's own int8 copy drafts, the float model verifies, so the output is the float
  model's greedy output token for token, at batch 4 and 1, in fewer calls. The tiny run repeats one token on
  every line, where float and int8 agree; so the wiring is also checked with another model's int8 copy as
  the drafter, whose own greedy output differs: the output is still the float model's (the verifier is not the
  drafter's weights)."""
  from fastmt import translate  # pylint: disable=g-import-not-at-top
  config, params, tokenizer = trained_float_parts
  ids = lambda translator, batch_size: [row.tolist() for row in translator.translate_ids(GENESIS_40, batch_size)[0]]
  greedy_translator = Translator(*trained_float_parts)
  greedy = ids(greedy_translator, 4)
  greedy_calls = greedy_translator.translate_ids(GENESIS_40, batch_size=4)[1].decoder_calls
  own_copy_calls = None
  for width in (2, 3):
    translator = Translator(*trained_float_parts, DecodeSettings('spec', drafter='int8', block_size=width))
    assert translator.settings.draft_model_config.quantization == 'int8'
    assert ids(translator, 4) == greedy and ids(translator, 1) == greedy, f'W={width}'
    own_copy_calls = translator.translate_ids(GENESIS_40, batch_size=4)[1].decoder_calls
    assert own_copy_calls < greedy_calls / (0.8 * width)
  other = random_model(7, config)[1]
  assert ids(Translator(config, other, tokenizer), 4) != greedy
  real_copy = translate.int8_drafter_of
  monkeypatch.setattr(translate, 'int8_drafter_of', lambda config, params: real_copy(config, other))
  translator = Translator(*trained_float_parts, DecodeSettings('spec', drafter='int8', block_size=3))
  assert ids(translator, 4) == greedy  # (batch 1 is checked with the model's own copy above)
  # the other copy's drafts are what the calls were fed: worse drafts, more calls
  assert translator.translate_ids(GENESIS_40, batch_size=4)[1].decoder_calls > own_copy_calls


def test_the_int8_drafter_of_a_bfloat16_model_gives_its_bfloat16_greedy_output(trained_float_parts):
  """A bfloat16 model's int8 copy is quantized from its bfloat16 weights; the bfloat16 model verifies."""
  config, params = precision.for_inference(*trained_float_parts[:2], 'bfloat16')
  tokenizer = trained_float_parts[2]
  ids = lambda translator: [row.tolist() for row in translator.translate_ids(GENESIS, batch_size=4)[0]]
  spec = Translator(config, params, tokenizer, DecodeSettings('spec', drafter='int8', block_size=3))
  assert spec.settings.draft_model_config.quantization == 'int8'
  assert ids(spec) == ids(Translator(config, params, tokenizer))


def test_the_int8_drafter_of_an_int8_model_or_with_a_drafter_model_is_a_clear_error(int8_parts, trained_float_parts):
  with pytest.raises(FastmtError, match="already int8: decode it with greedy, or spec with drafter 'ngram'"):
    Translator(*int8_parts, DecodeSettings('spec', drafter='int8'))
  with pytest.raises(FastmtError, match="drafts for algorithm 'spec' with drafter 'model' only"):
    Translator(*trained_float_parts, DecodeSettings('spec', drafter='int8'), draft_model=object())


def test_the_translators_of_one_model_share_its_int8_copy(trained_workdir, trained_float_parts, monkeypatch):
  """spec:auto+int8 (and choose_width(drafter='int8')) builds a translator per width: the model is quantized
  once, in the library and in the bench, not once per width; a copy of another shape is a clear error."""
  import fastmt  # pylint: disable=g-import-not-at-top
  from fastmt import bench, decode_lib, translate  # pylint: disable=g-import-not-at-top
  real_copy, made = translate.int8_drafter_of, []

  def counted(config, params):
    made.append(config)
    return real_copy(config, params)
  monkeypatch.setattr(translate, 'int8_drafter_of', counted)
  model = fastmt.load(trained_workdir)
  translators = [model.translator('spec', drafter='int8', block_size=w) for w in (2, 3, 4)]
  assert len(made) == 1 and len({id(t) for t in translators}) == 3
  assert model.translate(GENESIS[:4], algorithm='spec', drafter='int8', block_size=3) == model.translate(GENESIS[:4])
  made.clear()
  built, _, _ = bench.build_translators(trained_workdir, ['spec:auto+int8', 'spec:3+int8'])
  assert set(built) == {'spec:auto+int8', 'spec:3+int8'} and len(made) == 2  # one per method, not per width
  made.clear()  # decode.py --block_size auto: decode_lib's loaded model builds a translator per width
  loaded = decode_lib.load_model(trained_workdir, ['spec'])
  for w in (2, 3, 4):
    loaded.translator(DecodeSettings('spec', drafter='int8', block_size=w))
  assert len(made) == 1
  config, params, tokenizer = trained_float_parts
  with pytest.raises(FastmtError, match='int8 copy of a model of another shape'):
    Translator(config, params, tokenizer, DecodeSettings('spec', drafter='int8'),
               int8_copy=real_copy(config.replace(mlp_dim=2 * config.mlp_dim), random_model(
                   3, config.replace(mlp_dim=2 * config.mlp_dim))[1]))
  with pytest.raises(FastmtError, match="int8_copy drafts for algorithm 'spec' with drafter 'int8' only"):
    Translator(config, params, tokenizer, int8_copy=real_copy(config, params))


@pytest.mark.parametrize('transposed_output', [True, False])
def test_int8_greedy_and_beam_translate_every_line_at_any_batch(int8_parts, transposed_output):
  for settings in (DecodeSettings('greedy'), DecodeSettings('beam', beam_size=2)):
    translator = Translator(*int8_parts, settings, transposed_output=transposed_output)
    at_4, stats = translator.translate(GENESIS + [''], batch_size=4)
    at_1, _ = translator.translate(GENESIS + [''], batch_size=1)
    assert len(at_4) == len(GENESIS) + 1 and at_4[-1] == '' and stats.empty_inputs == 1
    assert at_4 == at_1  # integer products: no batch-shape float drift in the matrices


def test_int8_with_the_clustered_projection(trained_workdir, rng):
  """int8_layers keeps the float embedding: clusters holding every token give its dense outputs exactly.
  int8 dequantizes the table for the gathered rows: narrow clusters keep every output inside them."""
  from fastmt import projection  # pylint: disable=g-import-not-at-top
  from fastmt.data.tokenizer import EOS_ID  # pylint: disable=g-import-not-at-top
  config = workdir_lib.load_model_config(trained_workdir)
  params, _ = workdir_lib.restore_params(trained_workdir, config)
  tokenizer = workdir_lib.load_tokenizer(trained_workdir)
  hidden = rng.normal(size=(64, config.emb_dim)).astype(np.float32)
  centroids = projection.fit_kmeans(hidden, 4)
  every = projection.build_clusters(hidden, np.tile(np.arange(config.vocab_size), (64, 1)), centroids,
                                    config.vocab_size)
  layers = precision.for_inference(config, params, 'int8_layers')
  dense, _ = Translator(*layers, tokenizer).translate(GENESIS, batch_size=4)
  clustered, _ = Translator(*layers, tokenizer, clusters=every).translate(GENESIS, batch_size=4)
  assert clustered == dense
  allowed = np.arange(config.vocab_size - 60, config.vocab_size)
  narrow = projection.build_clusters(hidden, np.tile(allowed, (64, 1)), centroids, config.vocab_size)
  full = precision.for_inference(config, params, 'int8')
  for settings in (DecodeSettings('greedy'), DecodeSettings('beam', beam_size=2)):
    outputs = Translator(*full, tokenizer, settings, clusters=narrow).translate_ids(GENESIS, 4)[0]
    tokens = {t for row in outputs for t in row} - {EOS_ID}
    assert tokens and tokens <= set(allowed.tolist())


def test_quantized_model_saved_and_reloaded_translates_identically(int8_parts, tmp_path):
  config, params, tokenizer = int8_parts
  quantize.save(str(tmp_path / 'int8'), config, params)
  loaded_config, loaded = quantize.load(str(tmp_path / 'int8'))
  assert loaded_config == config
  portable = quantize.without_kernel_layout(params)  # save() leaves the kernel's packing out; load adds it back
  jax.tree_util.tree_map(np.testing.assert_array_equal, loaded, jax.tree_util.tree_map(np.asarray, portable))
  before, _ = Translator(config, params, tokenizer).translate(GENESIS, batch_size=4)
  after, _ = Translator(*precision.for_inference(loaded_config, loaded, 'int8'), tokenizer).translate(
      GENESIS, batch_size=4)
  assert after == before


def test_quantize_load_and_fastmt_load_name_the_other_s_directories(int8_parts, trained_workdir, tmp_path):
  """quantize.load of a work directory was a raw FileNotFoundError, and fastmt.load of a quantize.save
  directory (the same model_config.json) said only 'No checkpoint'."""
  config, params, _ = int8_parts
  with pytest.raises(FastmtError, match="not a directory written by quantize.save: it is a train.py work "
                                        "directory.*fastmt.load"):
    quantize.load(trained_workdir)
  with pytest.raises(FastmtError, match='No model_config.json in .*not a directory written by quantize.save$'):
    quantize.load(tmp_path)
  quantize.save(str(tmp_path / 'int8'), config, params)
  with pytest.raises(FastmtError, match='written by quantize.save, which fastmt.quantize.load'):
    workdir_lib.restore_params(str(tmp_path / 'int8'), config)


def test_a_saved_int8_model_decodes_with_bfloat16_activations(int8_parts, tmp_path):
  config, params, tokenizer = int8_parts
  quantize.save(str(tmp_path / 'int8'), config, params)
  loaded = quantize.load(str(tmp_path / 'int8'))
  bf16_config, bf16_params = precision.for_inference(*loaded, 'bfloat16_int8')
  assert (bf16_config.dtype, bf16_config.quantization) == ('bfloat16', 'int8')
  assert all(leaf.dtype == jnp.bfloat16 for leaf in jax.tree_util.tree_leaves(models.init_cache(bf16_config, 1, 4)))
  assert precision.for_inference(bf16_config, bf16_params, 'int8')[0].dtype == 'float32'  # the request decides
  assert precision.for_inference(bf16_config, bf16_params, 'float32')[0].dtype == 'bfloat16'  # 'as it is'
  outputs, stats = Translator(bf16_config, bf16_params, tokenizer).translate(GENESIS + [''], batch_size=4)
  assert len(outputs) == len(GENESIS) + 1 and outputs[-1] == '' and stats.empty_inputs == 1
  int8_outputs, _ = Translator(config, params, tokenizer).translate(GENESIS, batch_size=4)
  # Not identical by design (8-bit activations between the products), but the same model: most lines agree.
  assert sum(a == b for a, b in zip(outputs, int8_outputs)) >= len(GENESIS) // 2


def test_a_model_says_the_precision_it_decodes_in(trained_workdir, int8_parts):
  """TranslationModel.dtype: an already quantized model asked for 'float32' decodes as it was saved (with
  bfloat16 activations, say) and said 'float32'."""
  config = workdir_lib.load_model_config(trained_workdir)
  params, _ = workdir_lib.restore_params(trained_workdir, config)
  for dtype in precision.DTYPES:
    assert precision.dtype_of(precision.for_inference(config, params, dtype)[0]) == dtype
  q_config, q_params, tokenizer = int8_parts
  saved_bf16 = precision.for_inference(q_config, q_params, 'bfloat16_int8')
  assert fastmt.TranslationModel(*saved_bf16, tokenizer).dtype == 'bfloat16_int8'
  assert fastmt.TranslationModel(q_config, q_params, tokenizer).dtype == 'int8'
  assert fastmt.TranslationModel(config, params, tokenizer, dtype='int8_layers').dtype == 'int8_layers'


def test_bad_quantization_requests_are_clear_errors(int8_parts, tmp_path):
  config, params, _ = int8_parts
  with pytest.raises(FastmtError, match='already quantized'):
    precision.for_inference(config, params, 'bfloat16')
  with pytest.raises(FastmtError, match='already quantized'):
    precision.for_inference(config, params, 'bfloat16_int8_layers')
  with pytest.raises(FastmtError, match='dtype must be one of'):
    precision.for_inference(config, params, 'int4')
  with pytest.raises(FastmtError, match='no Dense layers'):
    quantize.quantize_params({'embed': {'embedding': np.ones((4, 2), np.float32)}})
  # quantized weights again, or with their float config: it said "is this a fastmt Transformer?"
  with pytest.raises(FastmtError, match='already quantized .*quantize.load'):
    quantize.quantize_params(params)
  with pytest.raises(FastmtError, match='already quantized .*quantize.load'):
    precision.for_inference(config.replace(quantization=''), params, 'int8')
  with pytest.raises(FastmtError, match='quantize first'):
    quantize.save(str(tmp_path / 'x'), config.replace(quantization=''), params)
  with pytest.raises(FastmtError, match='decode.py --dtype int8'):
    ModelConfig.from_config({'quantization': 'int8'}, vocab_size=40)
  with pytest.raises(FastmtError, match='quantization'):
    ModelConfig(vocab_size=40, quantization='int4')


def test_decode_cli_offers_every_precision():
  from fastmt.commands import translate as translate_command  # pylint: disable=g-import-not-at-top
  assert translate_command.DTYPES == list(precision.DTYPES)
  from fastmt import decode_lib  # pylint: disable=g-import-not-at-top
  assert translate_command.BLEU_TOKENIZERS == list(decode_lib.BLEU_TOKENIZERS)


def test_decode_cli_int8(trained_workdir, tmp_path):
  from test_translate import decode_cli  # pylint: disable=g-import-not-at-top
  source = tmp_path / 'in.en'
  source.write_text(''.join(GENESIS[:4]), encoding='utf-8')
  result = decode_cli(['--workdir', trained_workdir, '--input', str(source), '--output', str(tmp_path / 'out'),
                       '--dtype', 'int8', '--progress=false'])
  assert result.returncode == 0, result.stderr
  assert len((tmp_path / 'out').read_text(encoding='utf-8').splitlines()) == 4


needs_kernel = pytest.mark.skipif(not kernels.available(), reason=f'fastmt int8 kernel: {kernels.unavailable_reason()}')


def _cpu_has_vnni() -> bool:
  return {'avx512f', 'avx512bw', 'avx512_vnni'} <= cpu_flags()


@pytest.mark.skipif(not (_cpu_has_vnni() and shutil.which(os.environ.get('CXX', 'g++'))),
                    reason='no AVX-512 VNNI or no C++ compiler: the fallback is the expected path')
def test_the_kernel_builds_wherever_it_can_run():
  """The fallback must not hide a broken build: on a VNNI CPU with a compiler the kernel is in use (and the
  skips of the kernel tests below cannot happen here)."""
  assert kernels.available(), kernels.unavailable_reason()


def test_pack_weights_layout_worked_example():
  """Block b, group g holds w[4g .. 4g+3, 16b .. 16b+15] column by column; columns pad to 16 with zeros."""
  values = np.arange(8 * 20).reshape(8, 20).astype(np.int8)
  packed, colsum = kernels.pack_weights(values)
  assert packed.shape == (2, 2, 64) and colsum.shape == (32,)
  np.testing.assert_array_equal(packed[1, 1].reshape(16, 4)[:4], values[4:8, 16:20].T)
  assert not packed[1, 1].reshape(16, 4)[4:].any()
  np.testing.assert_array_equal(colsum[:20], values.astype(np.int32).sum(0))
  with pytest.raises(ValueError, match='divisible by 4'):
    kernels.pack_weights(np.ones((6, 16), np.int8))


@needs_kernel
@pytest.mark.parametrize('rows, k, n', [(1, 64, 40), (3, 128, 32), (5, 36, 16), (6, 64, 16), (32, 64, 48)])
def test_the_cpu_kernel_computes_what_xla_computes(rng, rows, k, n):
  x = rng.normal(size=(rows, k)).astype(np.float32)
  x[0] = 0.0
  x[-1, :3] = [0.5, -0.5, 1.5]  # exact halves on the rounding path
  values, scale = quantize.quantize_array(rng.normal(size=(k, n)).astype(np.float32), (0,))
  packed, colsum = kernels.pack_weights(values)
  out = np.asarray(jax.jit(kernels.int8_matmul)(x, packed, colsum, scale))
  np.testing.assert_allclose(out, _reference_int8_matmul(x, values, scale), rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(out, np.asarray(jax.jit(quantize.int8_matmul)(x, values, scale)), rtol=1e-6, atol=1e-6)


@needs_kernel
@pytest.mark.parametrize('rows', [1, 3, 32])
def test_the_kernel_splits_wide_products_over_threads_with_the_same_result(rng, rows):
  """A product of 4,136 columns (259 blocks of 16, the last padded) is cut into chunks that XLA's intra-op
  threads compute (parallel_blocks.h); a slice of 256 columns is too small to be cut. Every column equals its
  slice's, bit for bit, whichever thread computed it, and the product is the numpy reference's."""
  k, n, width = 512, 4136, 256
  x = rng.normal(size=(rows, k)).astype(np.float32)
  values, scale = quantize.quantize_array(rng.normal(size=(k, n)).astype(np.float32), (0,))
  product = jax.jit(kernels.int8_matmul)
  out = np.asarray(product(x, *kernels.pack_weights(values), scale))
  np.testing.assert_allclose(out, _reference_int8_matmul(x, values, scale), rtol=1e-6, atol=1e-6)
  for start in range(0, n, width):
    part = values[:, start:start + width]
    np.testing.assert_array_equal(np.asarray(product(x, *kernels.pack_weights(part), scale[start:start + width])),
                                  out[:, start:start + width])


@needs_kernel
def test_the_kernel_is_safe_to_call_from_several_threads(rng):
  """Translators decode from several Python threads (a server); the kernel's chunks and XLA's pool must not mix
  calls up: each thread's products equal the same products made alone."""
  k, n = 256, 4096
  values, scale = quantize.quantize_array(rng.normal(size=(k, n)).astype(np.float32), (0,))
  packed, colsum = kernels.pack_weights(values)
  product = jax.jit(kernels.int8_matmul)
  inputs = [rng.normal(size=(2, k)).astype(np.float32) for _ in range(4)]
  expected = [np.asarray(product(x, packed, colsum, scale)) for x in inputs]
  for x, out in zip(inputs, expected):
    np.testing.assert_allclose(out, _reference_int8_matmul(x, values, scale), rtol=1e-6, atol=1e-6)
  results = {}

  def work(i):
    results[i] = [np.asarray(product(inputs[i], packed, colsum, scale)) for _ in range(20)]
  threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
  for t in threads:
    t.start()
  for t in threads:
    t.join(timeout=120)
  assert not any(t.is_alive() for t in threads)
  for i, outs in results.items():
    for out in outs:
      np.testing.assert_array_equal(out, expected[i])
  assert len(results) == 4


@needs_kernel
def test_the_kernel_and_xla_translate_the_same(int8_parts):
  config, params, tokenizer = int8_parts
  assert 'packed' in params['decoder_0']['mlp']['Dense_0']  # for_inference added the kernel's layout
  portable = quantize.without_kernel_layout(params)
  for settings in (DecodeSettings('greedy'), DecodeSettings('beam', beam_size=2)):
    with_kernel, _ = Translator(config, params, tokenizer, settings).translate(GENESIS, batch_size=4)
    xla_only, _ = Translator(config, portable, tokenizer, settings, transposed_output=False).translate(
        GENESIS, batch_size=4)
    assert sum(a != b for a, b in zip(with_kernel, xla_only)) <= 1  # near ties only (see above)


def test_without_the_kernel_the_fallback_is_said_once(monkeypatch, caplog):
  monkeypatch.setattr(kernels, '_state', {})
  monkeypatch.setenv('FASTMT_INT8_KERNEL', '0')
  with caplog.at_level('WARNING'):
    assert not kernels.available() and not kernels.available()
  assert kernels.unavailable_reason() == 'turned off by FASTMT_INT8_KERNEL=0'
  assert sum('not used' in r.message for r in caplog.records) == 1
  config, params = precision.for_inference(tiny_model_config(), random_model(0)[1], 'int8')
  assert 'packed' not in params['decoder_0']['mlp']['Dense_0']
  # The one-call decoder reads this kernel's packing, so it is off too, and says why (it blamed the input size).
  assert int8_step.unsupported_reason(config, params) == (
      'the weights are not packed: the int8 matmul kernel is off (turned off by FASTMT_INT8_KERNEL=0)')
