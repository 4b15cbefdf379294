"""Clustered vocabulary projection: exact where it must be, the paper's worked example, fallbacks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import DATA
from fastmt import clusters_lib, projection, workdir as workdir_lib
from fastmt.data.tokenizer import EOS_ID
from fastmt.layers import NEG_INF
from fastmt.translate import DecodeSettings, Translator

V, E = 12, 8


def _weights(seed=0):
  rng = np.random.default_rng(seed)
  return jnp.asarray(rng.standard_normal((V, E)), jnp.float32), jnp.asarray(rng.standard_normal((5, E)), jnp.float32)


def test_one_cluster_holding_every_token_equals_dense():
  embedding, hidden = _weights()
  clusters = projection.build_clusters(hidden, np.tile(np.arange(V), (5, 1)), hidden[:1], V)
  logits, overflowed = projection.clustered_logits(hidden, embedding, clusters)
  assert not bool(overflowed)
  dense = projection.dense_logits(hidden, embedding)
  np.testing.assert_allclose(logits, dense, atol=1e-5)  # a gathered matmul may re-associate sums
  np.testing.assert_array_equal(jnp.argmax(logits, -1), jnp.argmax(dense, -1))


def test_paper_worked_example_union_of_active_sets():
  """Clusters {2,4,6}, {2,8,9}, {1,3} all hit: columns {1,2,3,4,6,8,9} (EOS = 1 is always active)."""
  centroids = jnp.eye(3, E)
  active = jnp.array([[2, 4, 6], [2, 8, 9], [1, 3, V]])
  clusters = projection.Clusters(centroids, (centroids**2).sum(-1), active, V, capacity=8)
  hidden = centroids * 5.0  # each state nearest to its own centroid
  indices, count = projection.active_columns(hidden, clusters)
  assert int(count) == 7
  np.testing.assert_array_equal(indices, [1, 2, 3, 4, 6, 8, 9, V])
  embedding, _ = _weights()
  logits, _ = projection.clustered_logits(hidden, embedding, clusters)
  dense = projection.dense_logits(hidden, embedding)
  on = np.zeros(V, bool)
  on[[1, 2, 3, 4, 6, 8, 9]] = True
  np.testing.assert_allclose(np.asarray(logits)[:, on], np.asarray(dense)[:, on], atol=1e-5)
  assert (np.asarray(logits)[:, ~on] == NEG_INF).all()


def test_overflow_falls_back_to_dense():
  embedding, hidden = _weights(1)
  clusters = projection.build_clusters(hidden, np.tile(np.arange(V), (5, 1)), hidden[:1], V, capacity=4)
  logits, overflowed = projection.clustered_logits(hidden, embedding, clusters)
  assert bool(overflowed)
  np.testing.assert_allclose(logits, projection.dense_logits(hidden, embedding), rtol=1e-6)


def test_an_empty_active_set_still_gives_a_valid_token():
  embedding, hidden = _weights(2)
  clusters = projection.Clusters(hidden[:1], (hidden[:1]**2).sum(-1), jnp.full((1, 3), V), V, capacity=4)
  logits, _ = projection.clustered_logits(hidden, embedding, clusters)
  assert np.isfinite(np.asarray(jax.nn.softmax(logits))).all()
  np.testing.assert_array_equal(jnp.argmax(logits, -1), [EOS_ID] * 5)


def test_kmeans_recovers_separated_clusters():
  rng = np.random.default_rng(0)
  centres = np.array([[10.0, 0], [0, 10.0], [-10.0, -10.0]])
  points = np.concatenate([c + rng.standard_normal((50, 2)) for c in centres])
  for batch_size in (None, 64):
    found = np.asarray(projection.fit_kmeans(points, 3, iterations=30, batch_size=batch_size, seed=1))
    nearest = np.linalg.norm(found[:, None] - centres[None], axis=-1).min(0)
    assert (nearest < 1.0).all(), (batch_size, found)


def test_clusters_round_trip_and_drop_in_decoding(trained_workdir, tmp_path, caplog):
  """Build clusters offline for the tiny model, save, load; with every token active, output == dense."""
  sources = open(DATA / 'genesis.en', encoding='utf-8').read().splitlines()[:8]  # one batch: one shape per decoder
  model_config = workdir_lib.load_model_config(trained_workdir)
  params, _ = workdir_lib.restore_params(trained_workdir, model_config)
  tokenizer = workdir_lib.load_tokenizer(trained_workdir)
  dense = Translator(model_config, params, tokenizer)
  hidden, top = clusters_lib.record_states(dense, sources, top_k=2)
  assert hidden.shape[0] == top.shape[0] > len(sources) and top.shape[1] == 2
  all_tokens = np.tile(np.arange(model_config.vocab_size), (len(hidden), 1))
  clusters = projection.build_clusters(hidden, all_tokens, projection.fit_kmeans(hidden, 4), model_config.vocab_size)
  fp = clusters_lib.fingerprint(model_config, tokenizer, params)
  clusters_lib.save_clusters(str(tmp_path / 'c'), clusters, {'fingerprint': fp})
  loaded = clusters_lib.load_clusters(str(tmp_path / 'c'), model_config, tokenizer, params)
  np.testing.assert_array_equal(loaded.active_sets, clusters.active_sets)
  expected, _ = dense.translate(sources, 8)
  got, _ = Translator(model_config, params, tokenizer, clusters=loaded).translate(sources, 8)
  assert got == expected
  # The clustered projection sits in the decoder step, so every algorithm gets it: beam and PGJ too.
  for settings in (DecodeSettings('beam', beam_size=3), DecodeSettings('pgj', block_size=3)):
    expected, _ = Translator(model_config, params, tokenizer, settings).translate(sources, 8)
    caplog.clear()
    with caplog.at_level('WARNING'):
      got, _ = Translator(model_config, params, tokenizer, settings, clusters=loaded).translate(sources, 8)
    assert got == expected, settings.algorithm
    # PGJ's calls project its window, guesses included, whose clusters join the union: said, not hidden.
    said = '--algorithm pgj with the clustered projection: its output can differ from clustered greedy' in caplog.text
    assert said == (settings.algorithm == 'pgj')
  # ... and with narrow clusters every algorithm's outputs stay inside the active set.
  # Every cluster activates only rare pieces (the highest ids), which dense decoding hardly uses.
  allowed = np.arange(model_config.vocab_size - 60, model_config.vocab_size)
  dense_tokens = {t for row in dense.translate_ids(sources, 8)[0] for t in row}
  assert dense_tokens - set(allowed.tolist()) - {EOS_ID}  # so the check below can fail
  narrow = projection.build_clusters(hidden, np.tile(allowed, (len(hidden), 1)), projection.fit_kmeans(hidden, 4),
                                     model_config.vocab_size)
  for settings in (DecodeSettings('greedy'), DecodeSettings('beam', beam_size=3), DecodeSettings('pgj', block_size=3)):
    outputs = Translator(model_config, params, tokenizer, settings, clusters=narrow).translate_ids(sources, 8)[0]
    tokens = {t for row in outputs for t in row} - {EOS_ID}
    assert tokens and tokens <= set(allowed.tolist()), (settings.algorithm, sorted(tokens - set(allowed.tolist())))
  with pytest.raises(ValueError, match='built for model/vocabulary'):
    clusters_lib.load_clusters(str(tmp_path / 'c'), model_config.replace(emb_dim=64, num_heads=4), tokenizer,
                               params)
  # Same shape and vocabulary, other weights (another checkpoint or another training run): also refused.
  other_weights = jax.tree_util.tree_map(lambda x: x * 1.01, params)
  with pytest.raises(ValueError, match='rebuild them'):
    clusters_lib.load_clusters(str(tmp_path / 'c'), model_config, tokenizer, other_weights)


def test_clusters_load_for_a_model_cast_to_bfloat16_or_int8_through_the_api(trained_workdir, tmp_path, monkeypatch):
  """fastmt.load(..., dtype='bfloat16' or 'int8') fingerprinted the cast weights, which no clusters (built on
  the float32 ones) match: translate(clusters=...) always failed, telling the user to rebuild them, while
  decode.py --dtype bfloat16 --projection clustered worked. New weights assigned still need their own."""
  import fastmt  # pylint: disable=g-import-not-at-top
  sources = open(DATA / 'genesis.en', encoding='utf-8').read().splitlines()[:4]
  model_config = workdir_lib.load_model_config(trained_workdir)
  params, _ = workdir_lib.restore_params(trained_workdir, model_config)
  tokenizer = workdir_lib.load_tokenizer(trained_workdir)
  hidden, _ = clusters_lib.record_states(Translator(model_config, params, tokenizer), sources, top_k=2)
  every_token = np.tile(np.arange(model_config.vocab_size), (len(hidden), 1))
  # capacity = the vocabulary: with the default (half of it) a union of every token overflows and every step is
  # dense, so the comparison below would not reach the clustered projection of the cast weights.
  clusters = projection.build_clusters(hidden, every_token, projection.fit_kmeans(hidden, 4), model_config.vocab_size,
                                       capacity=model_config.vocab_size)
  assert clusters.widths[-1] >= model_config.vocab_size
  clusters_lib.save_clusters(str(tmp_path / 'c'), clusters,
                             {'fingerprint': clusters_lib.fingerprint(model_config, tokenizer, params)})
  for dtype in ('bfloat16', 'int8', 'int8_layers'):
    model = fastmt.load(trained_workdir, dtype=dtype)
    clustered = model.translator(clusters=str(tmp_path / 'c')).translate_ids(sources)[0]  # raised 'rebuild them'
    dense = model.translator().translate_ids(sources)[0]
    # Ids, not text: the tiny model's pieces may detokenise to nothing, which would make any two outputs equal.
    assert any(len(row) for row in dense), dtype
    assert [row.tolist() for row in clustered] == [row.tolist() for row in dense], dtype  # every token active
  # '~' is the home directory, as in load() and draft_model (it was a directory named '~'), and a path object and
  # its str are one translator, not two compiled.
  monkeypatch.setenv('HOME', str(tmp_path))
  same = model.translator(clusters=str(tmp_path / 'c'))
  assert model.translator(clusters='~/c') is same and model.translator(clusters=tmp_path / 'c') is same
  with pytest.raises(ValueError, match='clusters must be a clusters directory'):
    model.translator(clusters=123)
  model.params = jax.tree_util.tree_map(lambda x: x, model.params)  # weights of their own, from now on
  with pytest.raises(ValueError, match='rebuild them'):
    model.translate(sources, clusters=str(tmp_path / 'c'))


def test_the_reduced_width_always_holds_the_union():
  """Unions just below, at and above each width (128, 256, 512 = capacity): every active column is kept,
  exact; every other column is NEG_INF; above the capacity the call is dense."""
  vocab, dim = 1100, 8
  rng = np.random.default_rng(3)
  embedding = jnp.asarray(rng.standard_normal((vocab, dim)), jnp.float32)
  hidden = jnp.asarray(rng.standard_normal((2, dim)), jnp.float32)
  dense = np.asarray(projection.dense_logits(hidden, embedding))
  for count in (1, 127, 128, 129, 256, 257, 511, 512, 513):
    tokens = np.concatenate([[EOS_ID], rng.choice(np.arange(2, vocab), count - 1, replace=False)])
    active = np.full((1, 600), vocab, np.int32)
    active[0, :count] = tokens
    clusters = projection.Clusters(hidden[:1], (hidden[:1]**2).sum(-1), jnp.asarray(active), vocab, capacity=512)
    assert clusters.widths == (128, 256, 512)
    logits, overflowed = projection.clustered_logits(hidden, embedding, clusters)
    logits = np.asarray(logits)
    assert bool(overflowed) == (count > 512)
    if count > 512:
      np.testing.assert_allclose(logits, dense, rtol=1e-6)
      continue
    on = np.zeros(vocab, bool)
    on[tokens] = True
    np.testing.assert_allclose(logits[:, on], dense[:, on], rtol=1e-5, atol=1e-5)
    assert (logits[:, ~on] == NEG_INF).all(), count


def test_recording_states_skips_blank_lines_but_its_warnings_name_the_input_lines(trained_workdir, caplog):
  """fastmt-clusters' input with blank lines: the states are those of the other lines, and the output-cap
  warning names lines of the input as given (it named them as if the blank lines were not there)."""
  sources = open(DATA / 'genesis.en', encoding='utf-8').read().splitlines()[:3]
  model_config = workdir_lib.load_model_config(trained_workdir)
  params, _ = workdir_lib.restore_params(trained_workdir, model_config)
  tokenizer = workdir_lib.load_tokenizer(trained_workdir)
  capped = Translator(model_config, params, tokenizer, DecodeSettings(output_length_ratio=0.01))  # all at the cap
  hidden, top = clusters_lib.record_states(capped, sources, top_k=2)
  caplog.clear()
  with_blanks, top_with_blanks = clusters_lib.record_states(capped, ['', sources[0], '  ', *sources[1:]], top_k=2)
  np.testing.assert_array_equal(with_blanks, hidden)
  np.testing.assert_array_equal(top_with_blanks, top)
  assert '(input lines 2, 4, 5)' in caplog.text


def test_a_batch_s_padding_rows_do_not_change_its_clustered_translations():
  """A static batch's padding rows (all-PAD sources, cap 0) put their nearest clusters' active sets into every
  call's union: 3 sentences decoded in the 4-row batch Translator uses (batch_rows(3, 32) == 4) translated
  otherwise than the same 3 rows alone, in 10 of 10 random batches."""
  from conftest import random_model, tiny_model_config  # pylint: disable=g-import-not-at-top
  from fastmt import translate  # pylint: disable=g-import-not-at-top
  config = tiny_model_config(vocab_size=40, max_length=24)
  _, params = random_model(3, config)
  rng = np.random.default_rng(0)
  centroids = jnp.asarray(rng.standard_normal((30, config.emb_dim)), jnp.float32)
  active = np.stack([np.sort(rng.choice(np.arange(3, 40), 2, replace=False)) for _ in range(30)]).astype(np.int32)
  clusters = projection.Clusters(centroids, (centroids**2).sum(-1), jnp.asarray(active), config.vocab_size, 40)
  assert translate.batch_rows(3, 32) == 4
  for _ in range(3):
    source = np.concatenate([rng.integers(3, 40, (3, 7)), np.ones((3, 1), int)], 1).astype(np.int32)
    padded = np.concatenate([source, np.zeros((1, 8), np.int32)])
    three, four = (translate.decode_source_batch(params, jnp.asarray(s), jnp.asarray(caps, jnp.int32), clusters,
                                                 config=config, settings=DecodeSettings('greedy')).tokens[:3]
                   for s, caps in ((source, [20] * 3), (padded, [20] * 3 + [0])))
    np.testing.assert_array_equal(three, four)
