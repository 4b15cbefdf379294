"""Greedy and beam search on stub logits with exact expected outputs, and beam 1 == greedy on real models."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import VOCAB, markov_step, model_step, positional_step, random_model, stub_cache, tiny_model_config
from fastmt import models, precision, roofline
from fastmt.decoding import beam, greedy, step
from fastmt.decoding.step import BOS_ID, EOS_ID

A, B, C, D, E = 5, 6, 7, 8, 9


def test_greedy_follows_the_chain_then_pads_after_eos():
  table = np.full(VOCAB, EOS_ID)
  table[BOS_ID], table[A], table[B] = A, B, C  # BOS -> A -> B -> C -> EOS
  out = greedy.greedy_search(markov_step(table), stub_cache(2, 8), 2, 8)
  np.testing.assert_array_equal(out.tokens, [[A, B, C, EOS_ID, 0, 0, 0, 0]] * 2)
  np.testing.assert_array_equal(out.decoder_calls, [4, 4])
  assert int(out.loop_iterations) == 4


def test_greedy_stops_at_max_length_without_eos():
  table = np.arange(VOCAB)
  table[BOS_ID] = A  # A -> A -> A ... never EOS
  out = greedy.greedy_search(markov_step(table), stub_cache(1, 5), 1, 5)
  np.testing.assert_array_equal(out.tokens, [[A] * 5])
  np.testing.assert_array_equal(out.decoder_calls, [5])


def test_greedy_rows_end_at_their_own_eos():
  seqs = np.array([[A, EOS_ID, C, C, C, C], [A, B, C, D, EOS_ID, C]])
  out = greedy.greedy_search(positional_step(seqs), stub_cache(2, 6), 2, 6)
  np.testing.assert_array_equal(out.tokens, [[A, EOS_ID, 0, 0, 0, 0], [A, B, C, D, EOS_ID, 0]])
  np.testing.assert_array_equal(out.decoder_calls, [2, 5])


def test_greedy_rejects_a_small_cache():
  with pytest.raises(ValueError, match='fewer than max_length'):
    greedy.greedy_search(markov_step(np.zeros(VOCAB)), stub_cache(1, 3), 1, 5)


def markov_probs_step(probs):
  """probs [V, V]: row = input token, distribution of the next token."""
  log_probs = jnp.log(jnp.asarray(probs) + 1e-12)

  def step_fn(tokens, positions, self_mask, cache, write_offsets):
    return log_probs[tokens], cache
  return step_fn


def toy_chain():
  """Greedy takes A (0.55) then EOS (0.4): 0.22. The best sequence is B EOS: 0.45 * 0.9 = 0.405."""
  p = np.zeros((VOCAB, VOCAB))
  p[:, EOS_ID] = 1.0
  p[BOS_ID] = 0; p[BOS_ID, A], p[BOS_ID, B] = 0.55, 0.45
  p[A] = 0; p[A, EOS_ID], p[A, C], p[A, D] = 0.4, 0.3, 0.3
  p[B] = 0; p[B, EOS_ID], p[B, C] = 0.9, 0.1
  p[C] = 0; p[C, EOS_ID] = 1.0
  p[D] = 0; p[D, EOS_ID] = 1.0
  return p


def test_beam_finds_the_known_best_sequence_greedy_misses():
  step_fn = markov_probs_step(toy_chain())
  g = greedy.greedy_search(step_fn, stub_cache(1, 6), 1, 6)
  np.testing.assert_array_equal(g.tokens[0, :2], [A, EOS_ID])
  out = beam.beam_search(step_fn, stub_cache(2, 6), 1, 2, 6, alpha=0.0)
  np.testing.assert_array_equal(out.tokens, [[B, EOS_ID, 0, 0, 0, 0]])
  # Step 2 finishes A EOS and B EOS (2 = K hypotheses): the sentence took 2 decoder steps.
  np.testing.assert_array_equal(out.decoder_calls, [2])


def test_beam_batched_rows_are_independent():
  step_fn = markov_probs_step(toy_chain())
  out = beam.beam_search(step_fn, stub_cache(3 * 2, 6), 3, 2, 6, alpha=0.0)
  np.testing.assert_array_equal(out.tokens, [[B, EOS_ID, 0, 0, 0, 0]] * 3)


def test_beam_at_max_length_returns_the_best_live_hypothesis():
  """EOS has probability 0, so no hypothesis finishes: the cap returns the best live beam, A A A A."""
  p = np.zeros((VOCAB, VOCAB))
  p[BOS_ID, A], p[BOS_ID, B] = 0.6, 0.4
  p[A, A], p[A, B] = 0.6, 0.4
  p[B, B], p[B, A] = 0.6, 0.4
  out = beam.beam_search(markov_probs_step(p), stub_cache(2, 4), 1, 2, 4)
  np.testing.assert_array_equal(out.tokens, [[A, A, A, A]])


def test_beam_stopped_by_k_finished_ignores_unfinished_beams():
  """K finished hypotheses end the sentence; a longer live beam with a higher score is not returned."""
  table = np.arange(VOCAB)
  table[BOS_ID] = A  # A A A ... (score ~0) while EOS continuations (score ~-10) finish one per step
  out = beam.beam_search(markov_step(table), stub_cache(3, 6), 1, 3, 6, alpha=0.0)
  tokens = np.asarray(out.tokens[0])
  assert EOS_ID in tokens.tolist()


def test_beam_ends_a_sentence_whose_model_allows_fewer_continuations_than_beams():
  """After BOS only A and B are possible, after each only EOS (every other token -inf): 2 hypotheses for 4
  beams. Done once no live beam is left, at step 2, instead of running on to max_length (it took 12 calls)."""
  p = np.zeros((VOCAB, VOCAB))
  p[BOS_ID, A], p[BOS_ID, B] = 0.6, 0.4
  p[A, EOS_ID] = p[B, EOS_ID] = 1.0
  log_probs = jnp.log(jnp.asarray(p))  # exact zeros: -inf

  def step_fn(tokens, positions, self_mask, cache, write_offsets):
    return log_probs[tokens], cache

  out = beam.beam_search(step_fn, stub_cache(4, 12), 1, 4, 12)
  np.testing.assert_array_equal(out.tokens[0, :2], [A, EOS_ID])
  np.testing.assert_array_equal(out.decoder_calls, [2])
  _, scores = beam.beam_search_top(step_fn, stub_cache(4, 12), 1, 4, 12, top=2, alpha=0.0)
  np.testing.assert_allclose(scores, [[np.log(0.6), np.log(0.4)]], rtol=1e-6)


@pytest.mark.parametrize('seed', range(4))
def test_beam_size_one_equals_greedy_on_random_models(seed):
  model, params = random_model(seed)
  rng = np.random.default_rng(seed)
  source = jnp.array(rng.integers(4, 40, (3, 6)))
  eos_after = rng.integers(3, 12, 3)
  step_fn = model_step(model, params, source, eos_after)
  g = greedy.greedy_search(step_fn, models.init_cache(model.config, 3, 16), 3, 16)
  b = beam.beam_search(step_fn, models.init_cache(model.config, 3, 16), 3, 1, 16)
  np.testing.assert_array_equal(b.tokens, g.tokens)


@pytest.mark.parametrize('seed', range(3))
def test_beam_hypotheses_score_what_the_model_scores_them_without_a_cache(seed):
  """Beam > 1 moves each beam's cache rows to its new parent after every step: every returned hypothesis's
  log-probability is the model's own teacher-forced score of it, computed without a cache. (Beam 1 never
  reorders, and the stub steps ignore the cache: without the reorder a beam reads its sibling's keys.)"""
  model, params = random_model(seed)
  rng = np.random.default_rng(seed)
  n, k, cap = 2, 3, 9
  source = jnp.array(rng.integers(4, 40, (n, 6)))
  step_fn = model_step(model, params, jnp.repeat(source, k, axis=0))
  out, log_probs = beam.beam_search_top(step_fn, models.init_cache(model.config, n * k, cap), n, k, cap, top=k,
                                        alpha=0.0)
  tokens = np.asarray(out.tokens)
  assert all(len({tuple(row) for row in sentence}) == k for sentence in tokens)  # k different hypotheses each
  for b in range(n):
    for h in range(k):
      hypothesis = tokens[b, h]
      length = int(step.output_lengths(jnp.asarray(hypothesis[None]))[0]) if EOS_ID in hypothesis else cap
      inputs = jnp.asarray([[BOS_ID] + hypothesis[:length - 1].tolist()])
      logits = model.apply({'params': params}, source[b:b + 1], inputs)[0]
      scores = jax.nn.log_softmax(logits)[jnp.arange(length), hypothesis[:length]]
      np.testing.assert_allclose(float(scores.sum()), float(log_probs[b, h]), rtol=1e-4, atol=1e-4)


def test_the_length_penalty_decides_between_a_short_and_a_long_hypothesis():
  """A EOS has log-probability -1.0, B C D EOS -1.1: plain log-probability (alpha 0) keeps the short one, the
  GNMT penalty with alpha 1 the long one (-1.0 / (7 / 6) = -0.857 against -1.1 / (9 / 6) = -0.733)."""
  p = np.zeros((VOCAB, VOCAB))
  p[BOS_ID, A], p[BOS_ID, B] = np.exp(-1.0), np.exp(-1.1)
  p[BOS_ID, E] = 1.0 - p[BOS_ID].sum()
  p[A, EOS_ID] = p[B, C] = p[C, D] = p[D, EOS_ID] = p[E, EOS_ID] = 1.0
  short = beam.beam_search(markov_probs_step(p), stub_cache(2, 8), 1, 2, 8, alpha=0.0)
  np.testing.assert_array_equal(short.tokens[0, :2], [A, EOS_ID])
  long = beam.beam_search(markov_probs_step(p), stub_cache(2, 8), 1, 2, 8, alpha=1.0)
  np.testing.assert_array_equal(long.tokens[0, :4], [B, C, D, EOS_ID])
  _, scores = beam.beam_search_top(markov_probs_step(p), stub_cache(2, 8), 1, 2, 8, top=2, alpha=1.0)
  np.testing.assert_allclose(scores, [[-1.1, -1.0]], atol=1e-5)  # plain log-probabilities, best (ranked) first


def test_pad_after_eos_and_output_lengths():
  tokens = jnp.array([[5, 1, 6, 1], [5, 6, 7, 8]])
  np.testing.assert_array_equal(step.pad_after_eos(tokens), [[5, 1, 0, 0], [5, 6, 7, 8]])
  np.testing.assert_array_equal(step.output_lengths(tokens), [2, 4])


def test_bigram_table_picks_the_most_frequent_successor():
  from fastmt.decoding import drafts  # pylint: disable=g-import-not-at-top
  # BOS 5 6 EOS / BOS 5 7 EOS / BOS 5 6 EOS / BOS 9 EOS: 5 -> 6 (twice), BOS -> 5, 6 -> EOS, 9 -> EOS.
  table = drafts.bigram_table([[5, 6], [5, 7], [5, 6], [9], []], VOCAB)
  assert table[BOS_ID] == 5 and table[5] == 6 and table[6] == EOS_ID and table[7] == EOS_ID
  assert table[11] == EOS_ID  # never seen: EOS
  tie = drafts.bigram_table([[5, 8], [5, 7]], VOCAB)
  assert tie[5] == 7  # ties go to the smaller id


# Per-row output caps (row_caps): each row stops at its own cap, and a cap of 0 marks a padding row that is
# done before the first call, so it never keeps the loop running.
NEVER_EOS = np.where(np.arange(VOCAB) == BOS_ID, A, np.arange(VOCAB))  # BOS -> A -> A -> ... never EOS


def test_greedy_row_caps_stop_each_row_at_its_own_cap():
  out = greedy.greedy_search(markov_step(NEVER_EOS), stub_cache(3, 8), 3, 8, row_caps=jnp.array([3, 6, 8]))
  np.testing.assert_array_equal(out.tokens, [[A] * 3 + [0] * 5, [A] * 6 + [0] * 2, [A] * 8])
  np.testing.assert_array_equal(out.decoder_calls, [3, 6, 8])


def test_padding_rows_are_done_from_the_start_and_do_not_extend_the_loop():
  table = np.full(VOCAB, EOS_ID)
  table[BOS_ID], table[A] = A, B  # a real row: A B EOS (3 calls); padding rows would run to the cap
  caps = jnp.array([8, 0, 0, 0])
  out = greedy.greedy_search(markov_step(table), stub_cache(4, 8), 4, 8, row_caps=caps)
  np.testing.assert_array_equal(out.tokens[1:], np.zeros((3, 8)))
  np.testing.assert_array_equal(out.decoder_calls, [3, 0, 0, 0])
  assert int(out.loop_iterations) == 3
  # With never-ending padding rows and no caps the loop would run to max_length: the caps are what stop it.
  out = greedy.greedy_search(markov_step(NEVER_EOS), stub_cache(2, 8), 2, 8, row_caps=jnp.array([2, 0]))
  assert int(out.loop_iterations) == 2


def test_beam_row_caps_end_each_sentence_at_its_cap_and_skip_padding():
  k = 2
  out = beam.beam_search(markov_step(NEVER_EOS), stub_cache(3 * k, 8), 3, k, 8, row_caps=jnp.array([2, 5, 0]))
  np.testing.assert_array_equal(out.tokens[0], [A] * 2 + [0] * 6)
  np.testing.assert_array_equal(out.tokens[1], [A] * 5 + [0] * 3)
  np.testing.assert_array_equal(out.tokens[2], np.zeros(8))
  np.testing.assert_array_equal(out.decoder_calls, [2, 5, 0])
  assert int(out.loop_iterations) == 5


def test_best_tokens_is_jnp_argmax_with_ties_infinities_and_nans():
  from fastmt.decoding.step import best_tokens  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  logits = rng.integers(-3, 3, (4, 5, 37)).astype(np.float32)  # many ties: the first maximum must win
  logits[0, 0] = -np.inf
  logits[0, 1, 5] = np.inf
  logits[1, 0, [3, 30]] = np.nan  # the first NaN wins, as in jnp.argmax
  logits[1, 1] = np.nan
  got = best_tokens(jnp.asarray(logits))
  assert got.dtype == jnp.int32
  np.testing.assert_array_equal(got, jnp.argmax(jnp.asarray(logits), axis=-1))


@pytest.mark.parametrize('dtype, batch_size', [('float32', 1), ('float32', 2), ('int8', 1)])
def test_step_cost_curve_times_the_translators_calls(dtype, batch_size):
  """roofline.step_cost_curve (the bench's floor pass) runs the Translator's step function (E^T or the int8
  projection layout) at every width and batch size."""
  config, params = precision.for_inference(tiny_model_config(), random_model(0)[1], dtype)
  costs = roofline.step_cost_curve(config, params, widths=(1, 3), batch_size=batch_size, source_length=6,
                                   calls=2, repeats=1)
  assert set(costs) == {1, 3} and all(0 < cost < 1e4 for cost in costs.values())
  # The encoder is timed on its own (the curve's calls no longer include it): the ideal speed-ups add it.
  assert 0 < roofline.encoder_cost(config, params, batch_size=batch_size, source_length=6, repeats=1) < 1e4


def test_the_floor_pass_prices_the_baseline_rows_precision():
  """fastmt-bench --baseline greedy@int8: the floor pass's curve and encoder run the int8 model (its decoder calls
  through the one-call int8 step where that runs), so that the int8 rows' ideal speed-ups price int8 calls;
  --float32_kernel's packing goes only to a float32 baseline."""
  from fastmt import bench, few_rows, int8_step, kernels  # pylint: disable=g-import-not-at-top
  config, params = tiny_model_config(), random_model(0)[1]
  int8_config, int8_params = bench.priced_weights(config, params, 'greedy@int8', float32_kernel=True)
  assert int8_config.quantization == 'int8' and int8_config.dtype == 'float32'
  # on the device, as a Translator's: quantizing leaves host arrays, which every timed call would copy in
  assert all(isinstance(leaf, jax.Array) for leaf in jax.tree.leaves(int8_params))
  if kernels.available('int8_step'):
    assert int8_step.unsupported_reason(int8_config, int8_params) == ''
  float_config, float_params = bench.priced_weights(config, params, 'greedy')
  assert float_config == config
  jax.tree.map(np.testing.assert_array_equal, float_params, params)
  assert not few_rows.has_layout(int8_params)
  if kernels.available('float32'):  # the kernel's packed copy beside each float Dense kernel
    assert few_rows.has_layout(bench.priced_weights(config, params, 'greedy', float32_kernel=True)[1])


def test_encoder_cost_padded_times_each_source_at_its_bucket(monkeypatch):
  """The bench's encoder share at batch 1: each source at the width the Translator pads it to
  (translate.source_buckets), weighted by how many sources share it; over-long sources at max_length."""
  config = tiny_model_config()  # max_length 48: buckets 8, 16, 24, 32, 48
  timed = []

  def width_as_cost(config, params, batch_size, source_length, repeats):
    timed.append((batch_size, source_length))
    return float(source_length)
  monkeypatch.setattr(roofline, 'encoder_cost', width_as_cost)
  cost = roofline.encoder_cost_padded(config, None, [3, 9, 16, 17, 60])
  assert sorted(timed) == [(1, 8), (1, 16), (1, 24), (1, 48)]  # each width timed once
  assert cost == pytest.approx((8 + 16 + 16 + 24 + 48) / 5)
  with pytest.raises(ValueError):
    roofline.encoder_cost_padded(config, None, [])


# A model trained elsewhere has its own special ids (T5 and Marian start the decoder from their PAD; fairseq
# puts EOS at 2). Every public decoder takes them as bos_id / eos_id / pad_id.

def _relabelled(step_fn, order):
  """The same model over a relabelled vocabulary: the user's id order[v] is fastmt's id v. Inputs are mapped
  back to fastmt's ids, logits forward to the user's, so every decision is the same as step_fn's."""
  order = jnp.asarray(order)
  inverse = jnp.argsort(order)

  def user_step(tokens, positions, self_mask, cache, write_offsets):
    logits, cache = step_fn(inverse[tokens], positions, self_mask, cache, write_offsets)
    return jnp.zeros_like(logits).at[..., order].set(logits), cache
  return user_step


@pytest.mark.parametrize('seed', [0])  # one random model: 12 compiles of 6 decoders (~40 s on 2 cores)
def test_every_decoder_takes_the_models_own_special_ids(seed):
  """The relabelled model, decoded with its own ids, gives the relabelled outputs of the original: token for
  token and call for call, for greedy, beam (K = 1 and 3) and every Jacobi variant."""
  from fastmt.decoding import jacobi  # pylint: disable=g-import-not-at-top
  model, params = random_model(seed)
  rng = np.random.default_rng(seed)
  source = jnp.array(rng.integers(4, 40, (3, 6)))
  eos_after = rng.integers(2, 14, 3)
  order = rng.permutation(model.config.vocab_size)
  while {order[BOS_ID], order[EOS_ID], order[step.PAD_ID]} & {BOS_ID, EOS_ID, step.PAD_ID}:
    order = rng.permutation(model.config.vocab_size)  # the user's ids are none of fastmt's
  ids = dict(bos_id=int(order[BOS_ID]), eos_id=int(order[EOS_ID]), pad_id=int(order[step.PAD_ID]))
  # Beam search's step runs on B * K rows, sentence-major: each source repeated K times.
  steps = {k: model_step(model, params, jnp.repeat(source, k, 0), np.repeat(eos_after, k)) for k in (1, 3)}
  cache = lambda rows, slots: models.init_cache(model.config, rows, slots)
  decoders = {
      'greedy': lambda f, **k: greedy.greedy_search(f[1], cache(3, 16), 3, 16, **k),
      'beam1': lambda f, **k: beam.beam_search(f[1], cache(3, 16), 3, 1, 16, **k),
      'beam3': lambda f, **k: beam.beam_search(f[3], cache(9, 16), 3, 3, 16, alpha=0.6, **k),
      'pj': lambda f, **k: jacobi.pj_decode(f[1], cache(3, 32), 3, 16, **k),
      'pgj3': lambda f, **k: jacobi.pgj_decode(f[1], cache(3, 32), 3, 16, 3, **k),
      'hgj3': lambda f, **k: jacobi.hgj_decode(f[1], cache(3, 32), 3, 16, 3, parallel_length=5, **k),
  }
  user_steps = {k: _relabelled(f, order) for k, f in steps.items()}
  for name, run in decoders.items():
    ours, theirs = run(steps), run(user_steps, **ids)
    np.testing.assert_array_equal(theirs.tokens, order[np.asarray(ours.tokens)], err_msg=name)
    np.testing.assert_array_equal(theirs.decoder_calls, ours.decoder_calls, err_msg=name)
  # Without the ids the relabelled model is decoded with fastmt's, which here are wrong: other outputs.
  assert not np.array_equal(decoders['greedy'](user_steps).tokens, order[np.asarray(decoders['greedy'](steps).tokens)])


def test_decoders_on_a_t5_style_stub_start_from_pad_and_pad_after_eos():
  """BOS == PAD (T5's decoder start), EOS = 9: the chain 4 -> A -> B -> 9, with exact outputs."""
  from fastmt.decoding import jacobi  # pylint: disable=g-import-not-at-top
  table = np.full(VOCAB, 9)
  table[4], table[A], table[B] = A, B, 9
  ids = dict(bos_id=4, eos_id=9, pad_id=4)
  expected = [[A, B, 9, 4, 4, 4, 4, 4]] * 2
  out = greedy.greedy_search(markov_step(table), stub_cache(2, 8), 2, 8, **ids)
  np.testing.assert_array_equal(out.tokens, expected)
  np.testing.assert_array_equal(out.decoder_calls, [3, 3])
  out = beam.beam_search(markov_step(table), stub_cache(4, 8), 2, 2, 8, **ids)
  np.testing.assert_array_equal(out.tokens, expected)
  out = jacobi.pgj_decode(markov_step(table), stub_cache(2, 16), 2, 8, 3, **ids)
  np.testing.assert_array_equal(out.tokens, expected)
  np.testing.assert_array_equal(out.decoder_calls, [3, 3])  # a Markov chain: one token per call, as greedy


@pytest.mark.parametrize('ids, message', [
    (dict(eos_id=0, pad_id=0), 'must differ'),
    (dict(eos_id=VOCAB), 'must be below the vocabulary size 16'),  # never predicted: every row to its cap
    (dict(eos_id=-1), 'eos_id must be a token id'),
    (dict(bos_id=True), 'bos_id must be a token id'),
    (dict(pad_id=2.0), 'pad_id must be a token id'),
])
def test_bad_special_ids_are_clear_errors(ids, message):
  from fastmt.decoding import jacobi  # pylint: disable=g-import-not-at-top
  step_fn = markov_step(np.zeros(VOCAB, int))
  for run in (lambda: greedy.greedy_search(step_fn, stub_cache(1, 8), 1, 8, **ids),
              lambda: beam.beam_search(step_fn, stub_cache(2, 8), 1, 2, 8, **ids),
              lambda: jacobi.pgj_decode(step_fn, stub_cache(1, 16), 1, 8, 3, **ids)):
    with pytest.raises(ValueError, match=message):
      run()


def _every_decoder(step_fn, cache_fn, batch=1, max_length=8, **kwargs):
  """greedy, beam (K = 1) and PGJ (W = 3) over one step function: {name: thunk}."""
  from fastmt.decoding import jacobi  # pylint: disable=g-import-not-at-top
  return {'greedy': lambda: greedy.greedy_search(step_fn, cache_fn(batch, max_length), batch, max_length, **kwargs),
          'beam': lambda: beam.beam_search(step_fn, cache_fn(batch, max_length), batch, 1, max_length, **kwargs),
          'pgj': lambda: jacobi.pgj_decode(step_fn, cache_fn(batch, 2 * max_length), batch, max_length, 3, **kwargs)}


@pytest.mark.parametrize('cache_fn, message', [
    # Flax's decode=True cache: a scalar index beside the K/V (its first leaf in tree order).
    (lambda b, m: {'cache_index': jnp.int32(0), 'k': jnp.zeros((b, m, 4))}, r"leaf \['cache_index'\] has shape \(\)"),
    (lambda b, m: {'count': jnp.zeros((b,), jnp.int32), 'k': jnp.zeros((b, m, 4))}, r"leaf \['count'\] has shape"),
    (lambda b, m: {'k': jnp.zeros((b + 1, m, 4))}, 'rows = 1'),
    # The encoder's keys beside the self-attention slots: read as the slot count, they made a wrong mask.
    (lambda b, m: {'cross': jnp.zeros((b, 5, 4)), 'self': jnp.zeros((b, m, 4))}, 'different numbers of slots'),
    (lambda b, m: {}, 'holds no arrays'),
])
def test_a_cache_outside_the_contract_is_a_clear_error(cache_fn, message):
  step_fn = markov_step(np.full(VOCAB, EOS_ID))
  for name, run in _every_decoder(step_fn, cache_fn).items():
    with pytest.raises(ValueError, match=message):
      run()


@pytest.mark.parametrize('wrong, message', [
    (lambda logits, cache: (logits[:, -1], cache), r'logits of shape \(1, 16\)'),  # the last position only
    (lambda logits, cache: (cache, logits), 'logits of shape None'),
    (lambda logits, cache: logits, 'must return \\(logits, cache\\)'),
])
def test_a_step_function_returning_the_wrong_shape_is_a_clear_error(wrong, message):
  inner = markov_step(np.full(VOCAB, EOS_ID))
  step_fn = lambda *args: wrong(*inner(*args))
  for name, run in _every_decoder(step_fn, stub_cache).items():
    with pytest.raises(ValueError, match=message):
      run()


@pytest.mark.parametrize('kwargs, message', [
    (dict(batch_size=2.0), 'batch_size must be a whole number'),
    (dict(max_length=0), 'max_length must be a whole number >= 1'),
    (dict(max_length=True), 'max_length must be a whole number'),
])
def test_bad_counts_are_clear_errors(kwargs, message):
  from fastmt.decoding import jacobi  # pylint: disable=g-import-not-at-top
  step_fn = markov_step(np.full(VOCAB, EOS_ID))
  args = dict(batch_size=1, max_length=4)
  args.update(kwargs)
  for run in (lambda: greedy.greedy_search(step_fn, stub_cache(1, 8), **args),
              lambda: beam.beam_search(step_fn, stub_cache(1, 8), beam_size=1, **args),
              lambda: jacobi.pgj_decode(step_fn, stub_cache(1, 8), block_size=2, **args)):
    with pytest.raises(ValueError, match=message):
      run()
  with pytest.raises(ValueError, match='block_size must be a whole number'):
    jacobi.pgj_decode(step_fn, stub_cache(1, 16), 1, 4, 2.5)
  with pytest.raises(ValueError, match='beam_size must be a whole number'):
    beam.beam_search(step_fn, stub_cache(1, 8), 1, 0, 4)
  for alpha in (float('nan'), -0.5):
    with pytest.raises(ValueError, match='alpha'):
      beam.beam_search(step_fn, stub_cache(1, 8), 1, 1, 4, alpha=alpha)


def test_row_caps_of_the_wrong_length_are_an_error_and_negative_caps_are_padding_rows():
  table = np.full(VOCAB, EOS_ID)
  table[BOS_ID] = A
  for name, run in _every_decoder(markov_step(table), stub_cache, batch=2, row_caps=jnp.array([4, 4, 4])).items():
    with pytest.raises(ValueError, match=r'one cap per row, shape \(2,\)'):
      run()
  for name, run in _every_decoder(markov_step(table), stub_cache, batch=2, row_caps=np.array([3.5, 4.0])).items():
    with pytest.raises(ValueError, match='row_caps must be integers'):  # 3.5 was a cap of 3, without a word
      run()
  for name, run in _every_decoder(markov_step(table), stub_cache, batch=2, row_caps=jnp.array([-3, 4])).items():
    out = run()
    np.testing.assert_array_equal(out.tokens[:, :2], [[0, 0], [A, EOS_ID]], err_msg=name)
    np.testing.assert_array_equal(out.decoder_calls, [0, 2], err_msg=name)  # greedy said -3 before


@pytest.mark.parametrize('bad, chosen', [({C: float('nan')}, C), ({C: float('inf')}, C),
                                         ({C: float('inf'), D: float('nan')}, D),  # a NaN wins over +inf
                                         ({v: -float('inf') for v in range(VOCAB)}, 0),  # all -inf: the first
                                         ({v: float('nan') for v in range(VOCAB)}, 0)])  # all NaN: the first
def test_beam_takes_greedys_token_where_the_logits_hold_nan_or_inf(bad, chosen):
  """Such a row has no distribution (its log-softmax is NaN): beam used to finish nothing and return PAD."""
  table = np.full(VOCAB, EOS_ID)
  table[BOS_ID], table[A] = A, B
  override = np.full(VOCAB, np.float32(0))
  is_bad = np.zeros(VOCAB, bool)
  for token, value in bad.items():
    override[token], is_bad[token] = value, True

  def step_fn(tokens, positions, self_mask, cache, write_offsets):
    logits, cache = markov_step(table)(tokens, positions, self_mask, cache, write_offsets)
    return jnp.where((tokens == A)[..., None] & is_bad, override, logits), cache  # the logits after A

  g = greedy.greedy_search(step_fn, stub_cache(1, 6), 1, 6)
  np.testing.assert_array_equal(g.tokens[0, :2], [A, chosen])
  np.testing.assert_array_equal(beam.beam_search(step_fn, stub_cache(1, 6), 1, 1, 6).tokens, g.tokens)
  wider = np.asarray(beam.beam_search(step_fn, stub_cache(3, 6), 1, 3, 6).tokens[0])
  # greedy's token at any beam size (with every token of such a row at log-probability 0, a beam of 3 took
  # EOS among them), and a finished hypothesis, not an empty one
  assert wider[0] == A and wider[1] == chosen and EOS_ID in wider, wider
