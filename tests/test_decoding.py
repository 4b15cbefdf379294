"""Greedy and beam search on stub logits with exact expected outputs, and beam 1 == greedy on real models."""

import jax.numpy as jnp
import numpy as np
import pytest

from conftest import VOCAB, markov_step, model_step, positional_step, random_model, stub_cache, tiny_model_config
from fastmt import models, precision, roofline
from fastmt.decoding import beam, greedy, step
from fastmt.decoding.step import BOS_ID, EOS_ID

A, B, C, D = 5, 6, 7, 8


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
