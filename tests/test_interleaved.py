"""Interleaved decoders (IBDecoder, SA, IB+SA, IMDecoder): layouts against the paper's equations, the objective,
greedy and Algorithm 1 beam search on stub logits with exact outputs, and cached == uncached on a real model."""

import json
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import (REPO, VOCAB, one_hot_logits, random_model, source_memory, stub_cache, tiny_model_config,
                      with_random_relative_keys)
from fastmt import models
from fastmt.decoding import interleaving as order
from fastmt.decoding.interleaved import interleaved_beam, interleaved_greedy, prune_outer_sum
from fastmt.decoding.step import EOS_ID, PAD_ID
from fastmt.errors import FastmtError
from fastmt.objectives import interleaved as objective

FACTORISATIONS = [(1, 1), (2, 1), (1, 2), (2, 2), (4, 1), (1, 3), (2, 3), (6, 1), (4, 2), (8, 1)]
STARTS = lambda z: tuple(range(20, 20 + z))  # stand-in start symbol ids (not in the stub vocabulary's words)


def layout_of(h, c, **kw):
  return order.Interleaving(h, c, start_ids=STARTS(h * c), **kw)


@pytest.mark.parametrize('h,c', FACTORISATIONS)
def test_recover_inverts_reorder_for_every_length(h, c):
  layout = layout_of(h, c)
  lengths = np.arange(0, 41)
  words = np.tile(np.arange(100, 141), (len(lengths), 1))  # row n: its first n entries are the sentence
  steps = layout.steps_for(41)
  reordered = order.reorder(layout, jnp.asarray(words), jnp.asarray(lengths), steps)
  # Every sentence's last step holds an EOS and nothing after it is a word.
  assert ((np.asarray(reordered) == EOS_ID).reshape(len(lengths), steps, -1).any(-1).sum(-1) == 1).all()
  recovered = np.asarray(order.recover(layout, reordered, 45))
  for n in lengths:
    assert list(recovered[n]) == list(range(100, 100 + n)) + [EOS_ID] + [PAD_ID] * (44 - n), (h, c, n)


def test_ib_order_is_eq6_and_positions_eq7():
  layout = layout_of(2, 1)
  y = jnp.arange(11, 16)[None]  # y1 .. y5
  assert np.asarray(order.reorder(layout, y, jnp.array([5]), 3)).tolist() == [[11, 15, 12, 14, 13, EOS_ID]]
  assert np.asarray(order.reorder(layout, y, jnp.array([4]), 3)).tolist() == [[11, 14, 12, 13, EOS_ID, EOS_ID]]
  eq7 = [(-1)**(t - 1) * math.ceil(t / 2) for t in range(1, 11)]
  assert np.asarray(order.positions(layout, 5)).tolist() == eq7


def test_im_order_is_eq9_and_positions_eq10():
  layout = layout_of(4, 1, positions='step', direction_embeddings=True)
  y = jnp.arange(11, 20)[None]  # 9 words: segments [y1..y5] and [y6..y9], each IB-reordered
  assert np.asarray(order.reorder(layout, y, jnp.array([9]), 3)).tolist() == [
      [11, 15, 16, 19, 12, 14, 17, 18, 13, EOS_ID, EOS_ID, EOS_ID]]
  h = 4
  assert np.asarray(order.positions(layout, 3)).tolist() == [(t - 1) // h for t in range(1, 13)]
  assert np.asarray(order.directions(layout, 3)).tolist() == [(t - 1) % h for t in range(1, 13)]


def test_sa_keeps_the_natural_order_c_words_a_step_with_natural_positions():
  """SA (h = 1, c > 1, Wang et al. 2018): one left-to-right direction, c words a step; the last step holds the
  remaining words, then EOS. A permutation that recover() undid would pass the round trip; not this."""
  y = jnp.arange(11, 16)[None]  # y1 .. y5
  sa2, sa3 = layout_of(1, 2), layout_of(1, 3)
  assert np.asarray(order.reorder(sa2, y, jnp.array([5]), 3)).tolist() == [[11, 12, 13, 14, 15, EOS_ID]]
  assert np.asarray(order.reorder(sa2, y, jnp.array([4]), 3)).tolist() == [[11, 12, 13, 14, EOS_ID, EOS_ID]]
  assert np.asarray(order.reorder(sa3, y, jnp.array([5]), 2)).tolist() == [[11, 12, 13, 14, 15, EOS_ID]]
  assert np.asarray(order.reorder(sa3, y, jnp.array([2]), 2)).tolist() == [[11, 12, EOS_ID, PAD_ID, PAD_ID, PAD_ID]]
  assert np.asarray(order.positions(sa2, 3)).tolist() == [1, 2, 3, 4, 5, 6]  # Eq. 7 with one direction


def test_sa_keeps_neighbours_together():
  layout = layout_of(2, 2)  # IB+SA: two words per direction per step
  y = jnp.arange(11, 20)[None]
  assert np.asarray(order.reorder(layout, y, jnp.array([9]), 3)).tolist() == [
      [11, 12, 19, 18, 13, 14, 17, 16, 15, EOS_ID, EOS_ID, EOS_ID]]
  assert np.asarray(order.positions(layout, 2)).tolist() == [1, 2, -1, -2, 3, 4, -3, -4]


@pytest.mark.parametrize('h,c', [(1, 1), (2, 1), (1, 2), (2, 2), (4, 1), (2, 3)])
def test_mask_equals_eq4_entry_by_entry(h, c):
  layout = layout_of(h, c)
  size = 4 * h * c + 3
  mask = np.asarray(order.self_mask(layout, size, size))
  for i, j in itertools.product(range(1, size + 1), repeat=2):
    assert mask[i - 1, j - 1] == (math.ceil(i / (h * c)) >= math.ceil(j / (h * c))), (i, j)
  causal = np.asarray(order.self_mask(layout_of(h, c, mask='causal'), size, size))
  assert (causal == np.tril(np.ones((size, size), bool))).all()


@pytest.mark.parametrize('h,c', [(3, 1), (5, 2), (0, 1), (2, 0), (4, 4)])
def test_invalid_factorisations_are_clear_errors(h, c):
  with pytest.raises(FastmtError):
    order.Interleaving(h, c)


def test_objective_shifts_by_one_step_and_scores_up_to_the_eos_step():
  layout = layout_of(2, 1)
  target = jnp.array([[11, 12, 13, 14, 15, EOS_ID, PAD_ID], [11, EOS_ID, PAD_ID, PAD_ID, PAD_ID, PAD_ID, PAD_ID],
                      [PAD_ID] * 7])
  batch = {'source': jnp.ones((3, 4), jnp.int32), 'decoder_input': target, 'target': target}
  fields = objective.reordered_batch(batch, layout)
  assert fields['target'].shape == (3, 8)  # ceil(7 / 2) * 2
  assert np.asarray(fields['target'][0]).tolist() == [11, 15, 12, 14, 13, EOS_ID, PAD_ID, PAD_ID]
  assert np.asarray(fields['decoder_input'][0]).tolist() == [20, 21, 11, 15, 12, 14, 13, EOS_ID]
  assert np.asarray(fields['target'][1]).tolist() == [11, EOS_ID] + [PAD_ID] * 6
  assert np.asarray(fields['weights']).tolist() == [[1] * 6 + [0, 0], [1, 1] + [0] * 6, [0] * 8]
  assert 'directions' not in fields


def test_one_word_target_and_targets_shorter_than_z():
  layout = layout_of(2, 2)  # z = 4
  for n in range(0, 5):
    y = jnp.arange(11, 11 + max(n, 1))[None]
    reordered = order.reorder(layout, y, jnp.array([n]), 3)
    # The whole row of 8: the n words, EOS, then PAD (recover pads every row to output_length).
    assert np.asarray(order.recover(layout, reordered, 8))[0].tolist() == (
        list(range(11, 11 + n)) + [EOS_ID] + [PAD_ID] * (7 - n))


def oracle_step(layout, reordered):
  """A stub decoder that predicts the given reordered rows [B, S * z] at each call's slots (from the offsets)."""
  reordered = jnp.asarray(reordered, jnp.int32)
  z = layout.slots

  def step_fn(tokens, positions, self_mask, cache, write_offsets, directions=None):
    del tokens, positions, self_mask, directions
    index = write_offsets[:, None] + jnp.arange(z)[None, :]
    index = jnp.minimum(index, reordered.shape[1] - 1)
    return one_hot_logits(jnp.take_along_axis(reordered, index, axis=1)), cache
  return step_fn


def natural_rows(lengths, max_length):
  rows = np.full((len(lengths), max_length), PAD_ID, np.int32)
  for b, n in enumerate(lengths):
    rows[b, :n] = 5 + (np.arange(n) * 3 + b) % (VOCAB - 5)
    rows[b, n] = EOS_ID
  return rows


@pytest.mark.parametrize('end_rule', ['any', 'layout'])
@pytest.mark.parametrize('h,c', [(1, 1), (2, 1), (1, 2), (2, 2), (4, 1)])
def test_greedy_returns_the_oracle_sentence_and_each_row_stops_on_its_own(h, c, end_rule):
  layout = layout_of(h, c)
  z, max_length = h * c, 20
  lengths = [0, 1, 3, 7, 12]
  natural = natural_rows(lengths, max_length)
  steps = layout.steps_for(max_length)
  reordered = order.reorder(layout, jnp.asarray(natural), jnp.asarray(lengths), steps)
  out = interleaved_greedy(oracle_step(layout, reordered), stub_cache(5, steps * z), 5, max_length, layout,
                           end_rule=end_rule)
  assert (np.asarray(out.tokens) == natural).all()
  assert np.asarray(out.decoder_calls).tolist() == [n // z + 1 for n in lengths]
  assert int(out.loop_iterations) == max(lengths) // z + 1


def test_greedy_row_caps_and_padding_rows():
  layout = layout_of(2, 1)
  natural = natural_rows([9, 9, 9], 20)
  reordered = order.reorder(layout, jnp.asarray(natural), jnp.array([9, 9, 9]), 10)
  out = interleaved_greedy(oracle_step(layout, reordered), stub_cache(3, 20), 3, 20, layout,
                           row_caps=jnp.array([20, 4, 0]))
  tokens = np.asarray(out.tokens)
  assert (tokens[0] == natural[0]).all()
  assert np.asarray(out.decoder_calls).tolist() == [5, 2, 0]
  assert (tokens[2] == PAD_ID).all()
  # Capped after 2 calls: the words of both directions so far, cut to the 4-token cap, no EOS.
  assert EOS_ID not in tokens[1] and (tokens[1] != PAD_ID).sum() == 4


def test_eos_first_in_either_direction_or_both_slots():
  layout = layout_of(2, 1)
  # Each direction keeps its words before its own first EOS; any EOS ends the hypothesis at that step.
  cases = {(7, EOS_ID): [7, EOS_ID], (EOS_ID, 7): [7, EOS_ID], (EOS_ID, EOS_ID): [EOS_ID]}
  for (left, right), expected in cases.items():
    reordered = jnp.array([[left, right, 9, 9, 9, 9]])
    out = interleaved_greedy(oracle_step(layout, reordered), stub_cache(1, 6), 1, 6, layout)
    # The whole row of max_length 6: after the EOS, PAD (the later steps' 9s are never read).
    assert np.asarray(out.tokens)[0].tolist() == expected + [PAD_ID] * (6 - len(expected))
    assert int(out.decoder_calls[0]) == 1


def test_prune_outer_sum_is_the_exact_top_b():
  rng = np.random.default_rng(0)
  for z, k in [(2, 3), (3, 2), (4, 3)]:
    scores = -np.abs(rng.normal(size=(z, k))).astype(np.float32)
    words = rng.integers(0, 50, size=(z, k)).astype(np.int32)
    got_scores, got_words = prune_outer_sum(jnp.asarray(scores), jnp.asarray(words), k)
    combos = sorted(((sum(scores[j, i] for j, i in enumerate(idx)), tuple(words[j, i] for j, i in enumerate(idx)))
                     for idx in itertools.product(range(k), repeat=z)), reverse=True)[:k]
    np.testing.assert_allclose(np.asarray(got_scores), [s for s, _ in combos], rtol=1e-6)
    assert [tuple(w) for w in np.asarray(got_words).tolist()] == [w for _, w in combos]


def _layout_combinations(log_probs, k):
  """Brute force: the k best combinations that end as a training target can (words, then only EOS), each
  slot's words limited to its k best other than EOS (the search proposes no others), best first."""
  z, vocab = log_probs.shape
  candidates = [[w for w in np.argsort(-log_probs[j], kind='stable') if w != EOS_ID][:k] + [EOS_ID]
                for j in range(z)]
  combos = []
  for words in itertools.product(*candidates):
    first_eos = words.index(EOS_ID) if EOS_ID in words else z
    if all(w == EOS_ID for w in words[first_eos:]):
      combos.append((sum(log_probs[j, w] for j, w in enumerate(words)), tuple(int(w) for w in words)))
  return sorted(combos, key=lambda c: -c[0])[:k]


def test_prune_outer_sum_under_the_layout_end_rule_is_the_exact_top_b():
  rng = np.random.default_rng(1)
  for _ in range(60):
    z, k, vocab = int(rng.integers(1, 5)), int(rng.integers(1, 4)), 6
    log_probs = np.log(rng.dirichlet(np.full(vocab, 0.5), size=z)).astype(np.float32)
    top = np.argsort(-log_probs, axis=-1, kind='stable')[:, :k + 1]  # k + 1, as interleaved_beam asks
    got_scores, got_words = prune_outer_sum(jnp.asarray(np.take_along_axis(log_probs, top, -1)),
                                            jnp.asarray(top, jnp.int32), k, jnp.asarray(log_probs[:, EOS_ID]))
    expected = _layout_combinations(log_probs, k)
    np.testing.assert_allclose(np.asarray(got_scores)[:len(expected)], [s for s, _ in expected], rtol=1e-5)
    assert [tuple(w) for w in np.asarray(got_words)[:len(expected)].tolist()] == [w for _, w in expected]
  # With leading dimensions [sentences, beams], as interleaved_beam calls it: each row on its own.
  z, k, vocab = 3, 2, 6
  log_probs = np.log(rng.dirichlet(np.full(vocab, 0.5), size=(2, 3, z))).astype(np.float32)
  top = np.argsort(-log_probs, axis=-1, kind='stable')[..., :k + 1]
  got_scores, got_words = prune_outer_sum(jnp.asarray(np.take_along_axis(log_probs, top, -1)),
                                          jnp.asarray(top, jnp.int32), k, jnp.asarray(log_probs[..., EOS_ID]))
  for row in itertools.product(range(2), range(3)):
    expected = _layout_combinations(log_probs[row], k)
    np.testing.assert_allclose(np.asarray(got_scores)[row], [s for s, _ in expected], rtol=1e-5)
    assert [tuple(w) for w in np.asarray(got_words)[row].tolist()] == [w for _, w in expected]


def test_layout_end_rule_never_ends_with_a_word_after_an_eos():
  """Slot 0 says EOS (p .6), slot 1 a word (p .9): Algorithm 1 ends with [EOS, 7] and keeps 7 (the right-to-
  left word); the layout rule weighs [EOS, EOS] (.6 x .1) against [5, EOS] (.4 x .1) and [5, 7] (.4 x .9)."""
  layout = layout_of(2, 1)

  def step_fn(tokens, positions, self_mask, cache, write_offsets, directions=None):
    rows = tokens.shape[0]
    first = jnp.full((rows, 2, VOCAB), -30.0)
    first = first.at[:, 0, EOS_ID].set(math.log(.6)).at[:, 0, 5].set(math.log(.4))
    first = first.at[:, 1, 7].set(math.log(.9)).at[:, 1, EOS_ID].set(math.log(.1))
    then = jnp.full((rows, 2, VOCAB), -30.0).at[:, :, EOS_ID].set(0.0)
    return jnp.where((write_offsets == 0)[:, None, None], first, then), cache

  paper = interleaved_greedy(step_fn, stub_cache(1, 8), 1, 8, layout)
  assert np.asarray(paper.tokens)[0].tolist()[:2] == [7, EOS_ID]
  for out in (interleaved_greedy(step_fn, stub_cache(1, 8), 1, 8, layout, end_rule='layout'),
              interleaved_beam(step_fn, stub_cache(3, 8), 1, 3, 8, layout, alpha=0.0, end_rule='layout')):
    assert np.asarray(out.tokens)[0].tolist()[:3] == [5, 7, EOS_ID]  # .36 beats .06 and .04
  with pytest.raises(ValueError, match='end_rule'):
    interleaved_greedy(step_fn, stub_cache(1, 8), 1, 8, layout, end_rule='first')
  from fastmt.decoding import registry  # pylint: disable=g-import-not-at-top
  from fastmt.translate import DecodeSettings  # pylint: disable=g-import-not-at-top
  with pytest.raises(FastmtError, match='end_rule'):
    DecodeSettings('ib', end_rule='first')
  assert registry.ignored_settings(DecodeSettings('greedy'), ['end_rule'])  # said, not silently ignored


def test_alpha_at_beam_size_1_is_said_to_have_no_effect():
  """beam, ib and hrt at beam_size 1 are greedy searches: a length penalty given there does nothing, and is said
  so (beam 1 == greedy is tested in test_decoding and test_api)."""
  from fastmt.decoding import registry  # pylint: disable=g-import-not-at-top
  from fastmt.translate import DecodeSettings  # pylint: disable=g-import-not-at-top
  for algorithm in ('beam', 'ib', 'hrt'):
    assert registry.ignored_settings(DecodeSettings(algorithm, beam_size=1, alpha=1.0), ['alpha'], '--') == [
        f'--alpha has no effect with --algorithm {algorithm} at --beam_size 1, a greedy search (the length penalty '
        'ranks the hypotheses of --beam_size 2 or more)']
    assert not registry.ignored_settings(DecodeSettings(algorithm, beam_size=3, alpha=1.0), ['alpha'])
  assert not registry.ignored_settings(DecodeSettings('beam', alpha=1.0), ['alpha'])  # beam_size 4
  assert not registry.ignored_settings(DecodeSettings('ib'), ['beam_size'])


@pytest.mark.parametrize('end_rule', ['any', 'layout'])
@pytest.mark.parametrize('h,c,beam', [(2, 1, 2), (2, 1, 4), (2, 2, 3), (4, 1, 2)])
def test_beam_finds_the_oracle_sentence(h, c, beam, end_rule):
  layout = layout_of(h, c)
  z, max_length = h * c, 16
  lengths = [0, 2, 5, 11]
  natural = natural_rows(lengths, max_length)
  steps = layout.steps_for(max_length)
  reordered = order.reorder(layout, jnp.asarray(natural), jnp.asarray(lengths), steps)
  rows = np.repeat(np.asarray(reordered), beam, axis=0)
  out = interleaved_beam(oracle_step(layout, rows), stub_cache(4 * beam, steps * z), 4, beam, max_length, layout,
                         row_caps=jnp.array([16, 16, 16, 0]), end_rule=end_rule)
  tokens = np.asarray(out.tokens)
  assert (tokens[:3] == natural[:3]).all()
  assert (tokens[3] == PAD_ID).all()


def test_beam_prefers_the_better_sum_over_the_greedy_first_slot():
  """Two slots: the greedy pick of slot 0 makes slot 1 unlikely; beam search finds the better pair."""
  layout = layout_of(2, 1)

  def step_fn(tokens, positions, self_mask, cache, write_offsets, directions=None):
    rows = tokens.shape[0]
    # Step 0: slot 0 prefers 5 (p .6) over 6 (p .4); slot 1 prefers 7. Step 1 logits depend on step 0's
    # slot-0 word fed back: after 5 both slots are uniform-ish, after 6 both say EOS with certainty.
    first = jnp.log(jnp.array([0.6, 0.4]))
    logits0 = jnp.full((rows, 2, VOCAB), -30.0)
    logits0 = logits0.at[:, 0, 5].set(first[0]).at[:, 0, 6].set(first[1]).at[:, 1, 7].set(0.0)
    after5 = jnp.full((rows, 2, VOCAB), 0.0)  # uniform: log(1/16) per slot
    after6 = jnp.full((rows, 2, VOCAB), -30.0).at[:, :, EOS_ID].set(0.0)
    later = jnp.where((tokens[:, :1] == 6)[..., None], after6, after5)
    return jnp.where((write_offsets == 0)[:, None, None], logits0, later), cache

  greedy = interleaved_greedy(step_fn, stub_cache(1, 8), 1, 8, layout, row_caps=jnp.array([4]))
  assert np.asarray(greedy.tokens)[0, 0] == 5
  beam = interleaved_beam(step_fn, stub_cache(2, 8), 1, 2, 8, layout, alpha=0.0, row_caps=jnp.array([4]))
  assert np.asarray(beam.tokens)[0].tolist()[:3] == [6, 7, EOS_ID]


@pytest.mark.parametrize('bad', [{13: np.nan}, {13: np.inf}, {13: np.inf, 15: np.nan}])
def test_beam_takes_greedys_token_where_a_slots_logits_hold_nan_or_inf(bad):
  """As beam search does (docs/API.md): a slot whose logits hold NaN or +inf has no distribution; its
  log-softmax was NaN in every entry, and the beam lost the sentence. Now greedy's token at any beam size."""
  layout = layout_of(2, 1)
  override = np.zeros(VOCAB, np.float32)
  for token, value in bad.items():
    override[token] = value

  def step_fn(tokens, positions, self_mask, cache, write_offsets, directions=None):
    rows = tokens.shape[0]
    step = (write_offsets // 2)[:, None, None]
    words = one_hot_logits(jnp.array([[11, 12], [0, 14], [EOS_ID, EOS_ID]]))  # [step, slot, V]
    logits = jnp.where(step == 0, words[0], jnp.where(step == 1, words[1], words[2]))
    logits = logits.at[:, 0].set(jnp.where(step[:, 0] == 1, jnp.asarray(override), logits[:, 0]))
    return jnp.broadcast_to(logits, (rows, 2, VOCAB)), cache

  greedy = interleaved_greedy(step_fn, stub_cache(1, 8), 1, 8, layout)
  chosen = int(np.argmax(np.isnan(override)) if np.isnan(override).any() else np.argmax(override))  # argmax's
  assert np.asarray(greedy.tokens)[0, :5].tolist() == [11, chosen, 14, 12, EOS_ID]
  for beam_size in (2, 3):
    beam = interleaved_beam(step_fn, stub_cache(beam_size, 8), 1, beam_size, 8, layout)
    np.testing.assert_array_equal(beam.tokens, greedy.tokens)


# (h, c, positions, direction embeddings, relative key distance): IBDecoder, IB+SA, IMDecoder, SA with vanilla
# positions, and IB+SA with relative position keys over negative positions
LAYOUT_CASES = [(2, 1, 'signed', False, 0), (2, 2, 'signed', False, 0), (4, 1, 'step', True, 0),
                (1, 2, 'vanilla', False, 0), (2, 2, 'signed', False, 3)]
TWO_SOURCES = jnp.array([[5, 6, 7, 8, EOS_ID], [9, 10, EOS_ID, PAD_ID, PAD_ID]])


def random_interleaved_model(seed, h, c, positions, embeddings, relative):
  """(config, layout with start ids 10.., model, params) of a random model for one of LAYOUT_CASES."""
  config = tiny_model_config(num_directions=h if embeddings else 0, relative_key_distance=relative)
  layout = order.Interleaving(h, c, positions=positions, direction_embeddings=embeddings,
                              start_ids=tuple(range(10, 10 + h * c)))
  model, params = random_model(seed, config)
  return config, layout, model, with_random_relative_keys(params) if relative else params


@pytest.mark.parametrize('h,c,positions,embeddings,relative', LAYOUT_CASES)
def test_cached_interleaved_decoding_equals_the_training_pass(h, c, positions, embeddings, relative):
  """The decoder's per-step calls with the KV cache give the training pass's logits slot for slot."""
  config, layout, model, params = random_interleaved_model(3, h, c, positions, embeddings, relative)
  source = TWO_SOURCES
  target = jnp.array([[11, 12, 13, 14, 15, 16, 17, EOS_ID], [18, 19, 20, EOS_ID, 0, 0, 0, 0]])
  fields = objective.reordered_batch({'source': source, 'decoder_input': target, 'target': target}, layout)
  full = model.apply({'params': params}, source, fields['decoder_input'], fields['positions'], fields['self_mask'],
                     directions=fields.get('directions'))
  memory = source_memory(model, params, source)
  z, total = h * c, fields['target'].shape[1]
  cache = models.init_cache(config, 2, total)
  step_positions, step_directions = order.positions(layout, total // z), order.directions(layout, total // z)
  for step in range(total // z):
    sl = slice(step * z, step * z + z)
    mask = order.self_mask(layout, z, total, query_offset=step * z)
    logits, _, cache = model.apply({'params': params}, fields['decoder_input'][:, sl],
                                   jnp.broadcast_to(step_positions[sl], (2, z)), jnp.broadcast_to(mask, (2, z, total)),
                                   memory, cache, jnp.full((2,), step * z, jnp.int32),
                                   directions=jnp.broadcast_to(step_directions[sl], (2, z)) if embeddings else None,
                                   method=models.Transformer.decode)
    np.testing.assert_allclose(np.asarray(logits), np.asarray(full[:, sl]), atol=2e-4)


@pytest.mark.parametrize('h,c,positions,embeddings,relative', LAYOUT_CASES)
def test_the_greedy_decoders_calls_are_the_training_layouts(h, c, positions, embeddings, relative):
  """interleaved_greedy on a real model (EOS masked, so every row runs 3 full steps): each of its decoder calls
  gives the training pass's logits for the words it returns, given them as the target, slot for slot. So the
  decoder feeds every call the positions, mask, directions and cache offsets of the objective's layout (the
  test above builds those calls itself). The calls' logits are recorded from inside the loop: a random model
  mostly copies its input token, so comparing argmaxes alone would not see a wrong mask or position."""
  config, layout, model, params = random_interleaved_model(4, h, c, positions, embeddings, relative)
  source = TWO_SOURCES
  memory = source_memory(model, params, source)
  no_eos = lambda logits: logits.at[..., EOS_ID].set(-1e9)
  calls = {}

  def record(offsets, logits):
    calls[int(offsets[0])] = np.asarray(logits)

  def step_fn(tokens, positions, self_mask, cache, write_offsets, directions=None):
    logits, _, cache = model.apply({'params': params}, tokens, positions, self_mask, memory, cache, write_offsets,
                                   directions=directions, method=models.Transformer.decode)
    jax.debug.callback(record, write_offsets, logits, ordered=True)
    return no_eos(logits), cache
  z = h * c
  length = 3 * z
  out = interleaved_greedy(step_fn, models.init_cache(config, 2, length), 2, length, layout)
  words = np.asarray(out.tokens)
  assert (words > EOS_ID).all() and np.asarray(out.decoder_calls).tolist() == [3, 3]
  target = jnp.asarray(np.concatenate([words, np.full((2, 1), EOS_ID)], axis=1))
  fields = objective.reordered_batch({'source': source, 'decoder_input': target, 'target': target}, layout)
  full = np.asarray(model.apply({'params': params}, source, fields['decoder_input'], fields['positions'],
                                fields['self_mask'], directions=fields.get('directions')))
  assert sorted(calls) == [0, z, 2 * z]
  for offset, logits in calls.items():
    np.testing.assert_allclose(logits, full[:, offset:offset + z], atol=2e-4)
  predicted = np.asarray(jnp.argmax(no_eos(jnp.asarray(full)), axis=-1))[:, :length]
  np.testing.assert_array_equal(predicted, np.asarray(fields['target'])[:, :length])


@pytest.mark.parametrize('h,c,seed', [(2, 1, 0), (2, 2, 1)])
def test_the_beams_winning_path_reads_its_own_cache(h, c, seed):
  """interleaved_beam moves each beam's cache rows to its new parent after every step. The cache here carries
  one more leaf, each row's decoder inputs so far (written at the call's offsets, gathered with the keys and
  values): at every step some row holds exactly the winning hypothesis's inputs, and its logits are the
  training pass's for that hypothesis. Without the reorder the rows keep the inputs of the beams they held."""
  from fastmt.layers import write_at_offsets  # pylint: disable=g-import-not-at-top
  config = tiny_model_config()
  z, k, steps = h * c, 3, 4
  layout = order.Interleaving(h, c, start_ids=tuple(range(10, 10 + z)))
  model, params = random_model(seed, config)
  source = jnp.array([[5, 6, 7, 8, EOS_ID], [9, 10, 11, EOS_ID, PAD_ID]])
  rows_source = jnp.repeat(source, k, axis=0)
  memory = source_memory(model, params, rows_source)
  no_eos = lambda logits: logits.at[..., EOS_ID].set(-1e9)
  calls = []

  def step_fn(tokens, positions, self_mask, cache, write_offsets, directions=None):
    inputs = write_at_offsets(cache['inputs'], tokens, write_offsets)
    logits, _, kv = model.apply({'params': params}, tokens, positions, self_mask, memory,
                                {'k': cache['k'], 'v': cache['v']}, write_offsets, method=models.Transformer.decode)
    jax.debug.callback(lambda o, i, x: calls.append((int(o[0]), np.asarray(i), np.asarray(x))), write_offsets,
                       inputs, logits, ordered=True)
    return no_eos(logits), {**kv, 'inputs': inputs}
  length = steps * z
  cache = {**models.init_cache(config, 2 * k, length), 'inputs': jnp.zeros((2 * k, length), jnp.int32)}
  out = interleaved_beam(step_fn, cache, 2, k, length, layout, alpha=0.0)
  words = np.asarray(out.tokens)
  assert (words > EOS_ID).all() and [offset for offset, _, _ in calls] == [s * z for s in range(steps)]
  target = jnp.asarray(np.concatenate([words, np.full((2, 1), EOS_ID)], axis=1))
  fields = objective.reordered_batch({'source': source, 'decoder_input': target, 'target': target}, layout)
  full = np.asarray(model.apply({'params': params}, source, fields['decoder_input'], fields['positions'],
                                fields['self_mask']))
  wanted = np.asarray(fields['decoder_input'])
  moved = False  # a row whose history is not its own earlier one: the reorder had something to do
  for step, (offset, inputs, logits) in enumerate(calls):
    for b in range(2):
      rows = [r for r in range(b * k, b * k + k) if (inputs[r, :offset + z] == wanted[b, :offset + z]).all()]
      assert rows, (step, b)
      np.testing.assert_allclose(logits[rows[0]], full[b, offset:offset + z], atol=2e-4)
    if step:
      moved |= any((inputs[r, :offset] != calls[step - 1][1][r, :offset]).any() for r in range(2 * k))
  assert moved


def test_direction_embeddings_are_off_by_default_and_required_when_on():
  assert tiny_model_config().num_directions == 0
  model, params = random_model(0)
  assert 'direction_embed' not in params
  config = tiny_model_config(num_directions=4)
  model = models.Transformer(config)
  dummy = jnp.ones((1, 4), jnp.int32)
  params = model.init(jax.random.PRNGKey(0), dummy, dummy)['params']
  assert params['direction_embed']['embedding'].shape == (4, 32)
  with pytest.raises(ValueError, match='direction'):
    model.apply({'params': params}, dummy, dummy)


@pytest.fixture(scope='session')  # once a worker (test_multidevice's eight_devices says why not module)
def interleaved_workdir(tmp_path_factory, tiny_config):
  """A tiny IB+SA (2, 2) model trained for a few steps on the Genesis fixture."""
  import ml_collections  # pylint: disable=g-import-not-at-top
  from fastmt import train_lib  # pylint: disable=g-import-not-at-top
  config = ml_collections.ConfigDict(tiny_config.to_dict())
  config.objective = 'interleaved'
  config.interleaving = ml_collections.ConfigDict(dict(directions=2, words_per_direction=2, start='slot'))
  config.num_train_steps, config.eval_every_steps, config.checkpoint_every_steps = 6, 6, 6
  config.eval_bleu_sentences = 4
  workdir = str(tmp_path_factory.mktemp('ib_run'))
  train_lib.train_and_evaluate(config, workdir)
  return workdir, config


@pytest.mark.xdist_group('interleaved_model')
def test_an_int8_interleaved_model_decodes_through_the_one_call_int8_decoder(interleaved_workdir):
  """`--algorithm ib --dtype int8` (the bench's ib@int8): every step's call of an interleaved model goes through
  the one-call int8 decoder where it runs (tests/test_int8_step.py checks an interleaved call's logits against
  XLA's), greedy and beam alike, and translates every line."""
  import fastmt  # pylint: disable=g-import-not-at-top
  from fastmt import kernels  # pylint: disable=g-import-not-at-top
  workdir, _ = interleaved_workdir
  model = fastmt.load(workdir, dtype='int8')
  texts = ['And God said, Let there be light.', 'God', '']
  for beam_size in (1, 3):
    translator = model.translator('ib', beam_size=beam_size)
    lowered = translator._decode.lower(translator.params, jnp.zeros((2, 8), jnp.int32), jnp.full((2,), 8, jnp.int32),
                                       translator.clusters, translator.draft_table, translator.output_projection,
                                       translator.drafter, None)
    assert (kernels.INT8_STEP_TARGET in lowered.as_text()) == kernels.available('int8_step'), beam_size
    hypotheses, stats = translator.translate(texts, 2)
    assert len(hypotheses) == 3 and hypotheses[2] == '' and stats.decoder_calls > 0


@pytest.mark.xdist_group('interleaved_model')  # one worker trains the module's model (--dist loadgroup)
def test_trained_interleaved_model_translates_with_ib_and_refuses_other_algorithms(interleaved_workdir,
                                                                                   trained_workdir):
  import fastmt  # pylint: disable=g-import-not-at-top
  from fastmt import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  workdir, _ = interleaved_workdir
  assert workdir_lib.load_objective(workdir) == 'interleaved'
  assert workdir_lib.load_objective_options(workdir)['words_per_direction'] == 2
  model = fastmt.load(workdir)
  long_line = ' '.join(['And God saw the light, that it was good.'] * 20)  # beyond max_length: truncated
  texts = ['In the beginning God created the heaven and the earth.', '', long_line]
  greedy, stats = model.translator('ib').translate(texts)
  assert len(greedy) == 3 and greedy[1] == '' and stats.truncated_inputs == 1
  beam, _ = model.translator('ib', beam_size=3).translate(texts)
  assert len(beam) == 3 and beam[1] == ''
  assert model.translator('ib').settings.beam_size == 1  # --algorithm ib alone is greedy
  int8 = fastmt.load(workdir, dtype='int8')  # 8-bit (fastmt.quantize): the interleaved decoders too
  assert [len(int8.translate(texts, algorithm='ib', **o)) for o in ({}, {'beam_size': 3})] == [3, 3]
  assert model.translator('ib').settings.interleaving.slots == 4  # (h, c) read from the work directory
  kernel = fastmt.load(workdir, float32_kernel=True)  # fastmt's float32 kernel (XLA's where it cannot run)
  assert kernel.translate(texts, algorithm='ib') == greedy
  assert kernel.translate(texts, algorithm='ib', beam_size=3) == beam
  assert model.translate(texts) == greedy  # no algorithm: the model's own, ib (was an error naming greedy)
  with pytest.raises(FastmtError, match="trained with 'interleaved'; its algorithms: ib"):
    model.translate(texts, algorithm='greedy')
  with pytest.raises(FastmtError, match='objective .* its algorithms: beam, greedy'):
    fastmt.load(trained_workdir).translate(texts, algorithm='ib')


@pytest.mark.xdist_group('interleaved_model')
def test_decode_py_without_an_algorithm_translates_an_interleaved_model_with_ib(interleaved_workdir, tmp_path):
  """decode.py's default algorithm is the model's own, as the library's (it was greedy, which an interleaved model
  refuses: a user's first decode.py of an IB model was an error)."""
  import fastmt  # pylint: disable=g-import-not-at-top
  from test_translate import decode_cli  # pylint: disable=g-import-not-at-top
  workdir, _ = interleaved_workdir
  texts = ['In the beginning God created the heaven and the earth.', 'And God saw the light.']
  source = tmp_path / 'in.en'
  source.write_text(''.join(t + '\n' for t in texts), encoding='utf-8')
  result = decode_cli(['--workdir', workdir, '--input', str(source), '--output', str(tmp_path / 'out'),
                       '--progress=false', '--metrics_json', str(tmp_path / 'metrics.json')])
  assert result.returncode == 0, result.stderr
  assert (tmp_path / 'out').read_text(encoding='utf-8').splitlines() == fastmt.load(workdir).translate(texts)
  recorded = json.loads((tmp_path / 'metrics.json').read_text())['settings']
  assert recorded['algorithm'] == 'ib'
  # the model's own factorisation, read from its work directory (an IB and an IB+SA run both read null)
  assert recorded['interleaving'] == {'directions': 2, 'words_per_direction': 2, 'positions': 'signed',
                                      'mask': 'interleaved', 'direction_embeddings': False, 'start': 'slot'}


@pytest.mark.xdist_group('interleaved_model')
def test_clusters_of_an_interleaved_model_are_refused_as_what_they_are(interleaved_workdir, tmp_path):
  """fastmt-clusters fits clusters to greedy's decoder states: for an interleaved model the refusal named
  '--algorithm greedy', a flag fastmt-clusters does not have, and never said that clusters are not for it."""
  from fastmt import clusters_lib  # pylint: disable=g-import-not-at-top
  workdir, _ = interleaved_workdir
  with pytest.raises(FastmtError, match=r"clusters are fitted to the decoder states of greedy decoding, which a model "
                     r"trained with objective 'interleaved' does not decode with \(it decodes with ib\)") as error:
    clusters_lib.build_for_workdir(workdir, 'en_de', ['God'], num_clusters=1, top_k=1)
  assert '--algorithm' not in str(error.value)
  # an objective this process does not know (its plugin not imported): the registry's message, which says so
  import shutil  # pylint: disable=g-import-not-at-top
  unknown = tmp_path / 'plugin_run'
  unknown.mkdir()
  shutil.copy(f'{workdir}/model_config.json', unknown)
  (unknown / 'objective.json').write_text('{"objective": "someone_elses"}', encoding='utf-8')
  with pytest.raises(FastmtError, match='needs the module that registers it imported first'):
    clusters_lib.build_for_workdir(str(unknown), 'en_de', ['God'], num_clusters=1, top_k=1)


@pytest.mark.xdist_group('interleaved_model')
def test_an_interleaved_teacher_distils_with_ib_and_a_refused_one_leaves_no_directory(interleaved_workdir,
                                                                                        tmp_path):
  """fastmt-distill's teacher searches with the algorithm its objective has: beam (greedy at beam 1) for the
  left-to-right decoders, ib for an interleaved one (it searched with beam or greedy, which an interleaved model
  refuses, after making the output directory)."""
  import fastmt  # pylint: disable=g-import-not-at-top
  from fastmt import distill  # pylint: disable=g-import-not-at-top
  from fastmt.translate import DecodeSettings  # pylint: disable=g-import-not-at-top
  workdir, _ = interleaved_workdir
  assert distill.teacher_settings('interleaved', 1, 0.6) == DecodeSettings('ib')
  assert distill.teacher_settings('interleaved', 4, 0.6) == DecodeSettings('ib', beam_size=4, alpha=0.6)
  assert distill.teacher_settings('hrt', 1, 1.0) == DecodeSettings('greedy')
  assert distill.teacher_settings('at', 4, 1.0) == DecodeSettings('beam', beam_size=4, alpha=1.0)
  sources = ['In the beginning God created the heaven and the earth.', '', 'And God saw the light.']
  refused = tmp_path / 'refused'
  with pytest.raises(FastmtError, match="trained with 'interleaved'; its algorithms: ib"):
    distill.distill(workdir, sources, str(refused), DecodeSettings('greedy'))
  assert not refused.exists()
  output = tmp_path / 'kd'
  result = distill.distill(workdir, sources, str(output), distill.teacher_settings('interleaved', 2, 0.6),
                           batch_size=2, chunk_sentences=2)
  assert (result.total, result.empty_sources) == (3, 1)
  written = (output / distill.DISTILLED_FILE).read_text(encoding='utf-8').split('\n')[:-1]
  assert written == [distill.one_line(t) for t in fastmt.load(workdir).translate(sources, beam_size=2)]


def test_fine_tuning_an_at_model_into_ib_and_im(trained_workdir, tiny_config, tmp_path):
  """An AT model fine-tunes into IBDecoder (the same parameters) and into IMDecoder, whose direction embeddings
  it lacks: they start at zero, every other parameter as the AT model's, and the result translates with ib."""
  import fastmt  # pylint: disable=g-import-not-at-top
  from conftest import fine_tuning_config  # pylint: disable=g-import-not-at-top
  from fastmt import train_lib, workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  at_params, _ = workdir_lib.restore_params(trained_workdir, workdir_lib.load_model_config(trained_workdir), 'latest')
  texts = ['In the beginning God created the heaven and the earth.', '']
  for name, options in [('ib', dict(directions=2, words_per_direction=1)),
                        ('im', dict(directions=4, words_per_direction=1, positions='step', direction_embeddings=True))]:
    config = fine_tuning_config(tiny_config, trained_workdir, 'interleaved', 'interleaving', options, steps=2)
    if name == 'im':
      config.model.num_directions = 4
      start = train_lib._initial_params(trained_workdir, workdir_lib.load_model_config(trained_workdir).replace(
          num_directions=4))  # pylint: disable=protected-access
      assert not np.any(start.pop('direction_embed')['embedding'])
      jax.tree_util.tree_map(np.testing.assert_array_equal, start, at_params)
    workdir = str(tmp_path / name)
    train_lib.train_and_evaluate(config, workdir)
    assert workdir_lib.load_objective_options(workdir)['directions'] == options['directions']
    translations = fastmt.load(workdir).translate(texts, algorithm='ib')
    assert len(translations) == 2 and translations[1] == ''


@pytest.mark.parametrize('field,there,here,vocab_there,allowed', [
    ('num_directions', 0, 0, 40, True), ('num_directions', 0, 4, 40, True), ('num_directions', 4, 4, 40, True),
    ('num_directions', 0, 4, 36, True),  # same, directions added, vocab grown
    ('num_directions', 4, 0, 40, False), ('num_directions', 4, 2, 40, False),  # directions dropped or changed
    ('num_directions', 0, 0, 44, False),  # vocab shrunk
    ('relative_key_distance', 0, 3, 40, True), ('relative_key_distance', 3, 3, 40, True),  # added, same
    ('relative_key_distance', 3, 0, 40, False), ('relative_key_distance', 3, 2, 40, False)])  # dropped, changed
def test_initial_params_fill_only_what_fine_tuning_adds(monkeypatch, field, there, here, vocab_there, allowed):
  """init_from fills a grown vocabulary, and direction embeddings or relative position keys (HRT Eq. 4) an AT
  model lacks, at zero; a model with them fine-tunes into one with the same number (IM -> IM), and every other
  difference is a clear error."""
  from fastmt import train_lib, workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  initial = tiny_model_config(**{field: there}, vocab_size=vocab_there)
  params = random_model(7, initial)[1]  # another seed than any fresh init here: a copy is told from a draw
  monkeypatch.setattr(workdir_lib, 'load_model_config', lambda _: initial)
  monkeypatch.setattr(workdir_lib, 'restore_params', lambda *_: (params, 0))
  target = tiny_model_config(**{field: here})
  if not allowed:
    with pytest.raises(FastmtError, match='another model config'):
      train_lib._initial_params('/somewhere', target)  # pylint: disable=protected-access
    return
  start = train_lib._initial_params('/somewhere', target)  # pylint: disable=protected-access
  expected = jax.tree_util.tree_map(jnp.shape, random_model(0, target)[1])
  assert jax.tree_util.tree_map(jnp.shape, start) == expected  # the new model's tree, leaf for leaf
  # An array of its own per leaf: the train step donates the parameters, and a buffer given twice is an error
  # at the first step (one zero table shared by two layers' relative keys was).
  leaves = jax.tree_util.tree_leaves(start)
  assert len({id(leaf) for leaf in leaves}) == len(leaves)
  # Every parameter the initial model has is carried over (a grown vocabulary's first rows included), not drawn.
  for path, leaf in jax.tree_util.tree_leaves_with_path(params):
    got = start
    for key in path:
      got = got[key.key]
    np.testing.assert_array_equal(np.asarray(got)[tuple(slice(0, n) for n in leaf.shape)], np.asarray(leaf))
  if here and not there:
    added = ([start['direction_embed']['embedding']] if field == 'num_directions' else
             [start[f'decoder_{i}']['self_attention']['relative_keys'] for i in range(target.num_decoder_layers)])
    assert not any(np.any(table) for table in added)


@pytest.mark.xdist_group('interleaved_model')  # one worker trains the module's model (--dist loadgroup)
def test_resuming_with_another_factorisation_is_an_error(interleaved_workdir):
  import ml_collections  # pylint: disable=g-import-not-at-top
  from fastmt import train_lib  # pylint: disable=g-import-not-at-top
  workdir, config = interleaved_workdir
  config = ml_collections.ConfigDict(config.to_dict())
  config.interleaving.words_per_direction = 1
  config.num_train_steps = 7
  with pytest.raises(FastmtError, match='objective'):
    train_lib.train_and_evaluate(config, workdir)


def test_bad_interleaving_configs_fail_before_training(tiny_config, tmp_path):
  import ml_collections  # pylint: disable=g-import-not-at-top
  from fastmt import objectives, train_lib  # pylint: disable=g-import-not-at-top
  config = ml_collections.ConfigDict(tiny_config.to_dict())
  config.objective = 'interleaved'
  config.interleaving = ml_collections.ConfigDict(dict(directions=3, words_per_direction=1))
  with pytest.raises(FastmtError, match='even'):
    train_lib.train_and_evaluate(config, str(tmp_path / 'odd'))
  config.interleaving = ml_collections.ConfigDict(dict(directions=2, word_per_direction=1))
  with pytest.raises(FastmtError, match='Unknown interleaving keys'):
    objectives.options_of(config, 'interleaved')
  config.interleaving = ml_collections.ConfigDict(dict(directions=4, direction_embeddings=True))
  with pytest.raises(FastmtError, match='num_directions'):
    train_lib.train_and_evaluate(config, str(tmp_path / 'im'))


def test_interleaved_configs_build():
  from fastmt.configs import interleaved as configs  # pylint: disable=g-import-not-at-top
  assert configs.get_config('at').objective == 'at'
  im = configs.get_config('im,e6d1')
  assert (im.interleaving.directions, im.model.num_directions, im.model.num_encoder_layers) == (4, 4, 6)
  assert configs.get_config('ib_vanilla_mask').interleaving.mask == 'causal'
  deep = configs.get_config('ib_sa,e6d6')  # the one-GPU table's shape: the paper's 6-layer decoder
  assert (deep.model.num_decoder_layers, deep.interleaving.words_per_direction) == (6, 2)
  with pytest.raises(ValueError):
    configs.get_config('ib,e99')


def test_every_objective_option_can_be_set_from_the_command_line():
  """A config block's keys are locked: an option it lacks cannot be overridden (docs/API.md's start='slot' was
  'the config has no key start' from --config.interleaving.start=slot)."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  from fastmt.configs import hrt as hrt_configs, interleaved, selfdraft as selfdraft_configs  # pylint: disable=g-import-not-at-top
  from fastmt.objectives import hrt, selfdraft  # pylint: disable=g-import-not-at-top
  assert set(interleaved.get_config('ib').interleaving) == set(order.Interleaving().record())
  assert set(hrt_configs.get_config('k2').hrt) == {f.name for f in dataclasses.fields(hrt.HrtOptions)}
  assert set(selfdraft_configs.get_config('w4').selfdraft) == {
      f.name for f in dataclasses.fields(selfdraft.SelfDraftOptions)}


def test_dedup_removes_immediately_repeated_ngrams():
  from fastmt.decoding.interleaved import dedup_repeats  # pylint: disable=g-import-not-at-top
  rows = jnp.array([[5, 5, 6, 7, 6, 7, 8, EOS_ID, 0, 0], [5, 6, 5, 6, 5, 6, 9, 9, 9, 0],
                    [5, 6, 7, 5, 6, 8, EOS_ID, 9, 9, 0]])
  assert np.asarray(dedup_repeats(rows, 1)).tolist() == [
      [5, 6, 7, 6, 7, 8, EOS_ID, 0, 0, 0], [5, 6, 5, 6, 5, 6, 9, 0, 0, 0], [5, 6, 7, 5, 6, 8, EOS_ID, 0, 0, 0]]
  assert np.asarray(dedup_repeats(rows, 2)).tolist() == [
      [5, 6, 7, 8, EOS_ID, 0, 0, 0, 0, 0], [5, 6, 9, 0, 0, 0, 0, 0, 0, 0], [5, 6, 7, 5, 6, 8, EOS_ID, 0, 0, 0]]


def test_start_symbols_default_to_algorithm_1s_bos_copies():
  assert order.Interleaving(2, 2).with_start_ids(None).start_ids == (2, 2, 2, 2)  # BOS_ID x z, any vocabulary

  class OldVocabulary:  # a vocabulary trained before the reserved symbols
    def special_id(self, symbol):
      raise FastmtError(f'no {symbol} symbol')
  with pytest.raises(FastmtError, match='bos_dir_1'):
    order.Interleaving(2, 1, start='slot').with_start_ids(OldVocabulary())
  with pytest.raises(FastmtError, match='start'):
    order.Interleaving(2, 1, start='eos')


def test_bench_method_names_of_the_new_decoders():
  from fastmt.bench import parse_method  # pylint: disable=g-import-not-at-top
  assert parse_method('ib')[1].beam_size == 1
  settings = parse_method('ib:4+dedup2')[1]
  assert (settings.algorithm, settings.beam_size, settings.dedup_ngram) == ('ib', 4, 2)
  settings = parse_method('hrt:5:1')[1]
  assert (settings.algorithm, settings.beam_size, settings.nat_beam_size) == ('hrt', 5, 1)
  assert parse_method('beam')[1].beam_size == 4
  with pytest.raises(FastmtError, match='dedup'):
    parse_method('ib+bigram')


def test_the_bench_without_methods_runs_each_models_own(tmp_path):
  """fastmt-bench without --methods on an interleaved model ran the AT list, none of which decodes it: an error.
  Each model now brings its objective's methods, and every default method parses and decodes its objective."""
  from fastmt import bench, workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  from fastmt.decoding import registry  # pylint: disable=g-import-not-at-top
  dirs = {}
  for name in ('at', 'interleaved', 'hrt', 'selfdraft'):
    dirs[name] = str(tmp_path / name)
    (tmp_path / name).mkdir()
    workdir_lib.save_objective(dirs[name], name)
  (tmp_path / 'old').mkdir()  # a work directory from before objectives were recorded: autoregressive
  assert bench.default_methods([str(tmp_path / 'old')]) == list(bench.DEFAULT_METHODS)
  assert bench.default_methods([dirs['interleaved']]) == ['ib', 'ib:4']
  assert bench.default_methods([dirs['at'], dirs['interleaved'], dirs['at']]) == [*bench.DEFAULT_METHODS, 'ib', 'ib:4']
  assert 'hrt' in bench.default_methods([dirs['hrt']]) and 'spec:3' in bench.default_methods([dirs['selfdraft']])
  for name, workdir in dirs.items():
    assert all(registry.decodes(bench.parse_method(m)[1], name) for m in bench.default_methods([workdir]))


def test_the_bench_says_why_an_interleaved_models_speed_ups_are_blank():
  """The speed-up columns are relative to --workdir's greedy, which an interleaved model has not: the bench says
  so, and how to get them, instead of leaving blank columns unexplained."""
  from fastmt import bench  # pylint: disable=g-import-not-at-top
  assert bench.no_baseline_note(['greedy', 'beam:4', 'ib_small/ib']) is None
  assert '--workdir AT --compare THIS' in bench.no_baseline_note(['ib', 'ib:4'])
  assert 'at_small/greedy' in bench.no_baseline_note(['ib', 'at_small/greedy', 'at_small/beam:4'])
  # --baseline greedy@int8: the int8 rows against int8 greedy
  assert bench.no_baseline_note(['greedy@int8', 'ib_small/ib@int8'], 'greedy@int8') is None
  assert 'greedy@int8 row' in bench.no_baseline_note(['greedy', 'ib_small/ib@int8'], 'greedy@int8')
  assert 'at_small/greedy@int8' in bench.no_baseline_note(['ib@int8', 'at_small/greedy@int8'], 'greedy@int8')


def test_the_table_reads_each_rows_factorisation_from_results_json(tmp_path):
  """benchmarks/interleaved_table.py rebuilds the table from results.json alone (a GPU run's export comes back
  without its work directories): fastmt.bench records each row's objective; older files fall back to the run
  directory, else to '?'."""
  import importlib.util  # pylint: disable=g-import-not-at-top
  spec = importlib.util.spec_from_file_location('interleaved_table', REPO / 'benchmarks/interleaved_table.py')
  table = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(table)
  environment = {'objectives': {'ib_sa_kd_avg5': {'objective': 'interleaved',
                                                  'options': {'directions': 2, 'words_per_direction': 2}},
                                'at_kd_avg5': {'objective': 'at', 'options': {}}}}
  assert table.slots_of(str(tmp_path), 'ib_sa_kd', environment) == (2, 2)
  assert table.slots_of(str(tmp_path), 'at_kd', environment) == (1, 1)
  # the baseline's own rows are recorded under '' (a compared directory may share its base name)
  shadowed = {'objectives': {'at_kd_avg5': environment['objectives']['ib_sa_kd_avg5'],
                             '': environment['objectives']['at_kd_avg5']}}
  assert table.slots_of(str(tmp_path), 'at_kd', shadowed, baseline=True) == (1, 1)
  assert table.slots_of(str(tmp_path), 'at_kd', shadowed) == (2, 2)
  assert table.slots_of(str(tmp_path), 'im_kd', environment) is None
  (tmp_path / 'im_kd_avg5').mkdir()
  (tmp_path / 'im_kd_avg5' / 'objective.json').write_text(
      '{"objective": "interleaved", "options": {"directions": 4, "words_per_direction": 1}}')
  assert table.slots_of(str(tmp_path), 'im_kd', {}) == (4, 1)
  # the ideal: AT's encoder + calls at step_cost(1) over the model's encoder + calls at step_cost(z)
  assert table.ideal_speedup(1.0, 30, 15, {1: 0.2, 2: 0.3}, 2) == pytest.approx((1 + 6) / (1 + 4.5))
  # its calls are those of the timed sentences where results.json has them, else the whole split's
  assert table.timed_calls({'decoder_calls_per_sentence': 30.0, 'decoder_calls_per_sentence_b1_timed': 28.5}) == 28.5
  assert table.timed_calls({'decoder_calls_per_sentence': 30.0, 'decoder_calls_per_sentence_b1_timed': math.nan}) == 30
  assert table.timed_calls({'decoder_calls_per_sentence': 30.0}) == 30.0


def _table_module():
  import importlib.util  # pylint: disable=g-import-not-at-top
  spec = importlib.util.spec_from_file_location('interleaved_table', REPO / 'benchmarks/interleaved_table.py')
  table = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(table)
  return table


def test_the_table_of_int8_rows_prices_them_with_the_curve_of_their_precision(tmp_path, monkeypatch, capsys):
  """A bench run with --baseline greedy@int8 (every row in int8, the floor pass's curve and encoder int8's):
  interleaved_table.py --baseline_method greedy@int8 reads the @int8 rows and their ideal from that curve, and
  refuses a run whose curve priced another row (the float curve would price int8 calls)."""
  table = _table_module()
  def row(method, calls, speedup):
    return {'method': method, 'bleu': 9.0, 'chrf': 30.0, 'length_ratio': 1.0, 'decoder_calls_per_sentence': calls,
            'decoder_calls_per_sentence_b1_timed': calls, 'speedup_b1': speedup, 'speedup_large': 1.0,
            'ms_per_sentence_b1': 5.0}
  results = [row('greedy', 30, 0.5), row('greedy@int8', 30, 1.0), row('ib_kd_avg5/ib', 15, 0.6),
             row('ib_kd_avg5/ib@int8', 16, 1.5)]
  floor = {'priced_row': 'greedy@int8', 'encoder_ms_b1': 1.0, 'step_cost_ms_b1': {'1': 0.1, '2': 0.15}}
  environment = {'greedy_floor': floor, 'objectives': {
      'ib_kd_avg5': {'objective': 'interleaved', 'options': {'directions': 2, 'words_per_direction': 1}},
      '': {'objective': 'at', 'options': {}}}}
  (tmp_path / 'results.json').write_text(json.dumps({'results': results, 'environment': environment}))
  argv = ['interleaved_table.py', '--runs', str(tmp_path), '--eval_dir', str(tmp_path)]
  monkeypatch.setattr('sys.argv', argv + ['--baseline_method', 'greedy@int8'])
  table.main()
  ideal = (1 + 30 * 0.1) / (1 + 16 * 0.15)
  ib_line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith('| ib_kd |'))
  cells = [cell.strip() for cell in ib_line.split('|')]
  assert cells[8:12] == ['16.00', '1.50', f'{ideal:.2f}', f'{1.5 / ideal:.2f}'], cells
  monkeypatch.setattr('sys.argv', argv)  # the float rows, but the curve is int8's
  with pytest.raises(SystemExit, match='priced greedy@int8, not greedy'):
    table.main()


@pytest.mark.xdist_group('interleaved_model')
def test_the_iteration_cost_scripts_bare_loop_makes_the_decoders_own_calls(interleaved_workdir, trained_workdir):
  """benchmarks/iteration_cost.py's bare loop (BENCHMARKS section 5) stands for a decoder's calls and nothing
  else: after n calls its inputs are what the decoder feeds its (n + 1)-th call, greedy's n-th token and ib's
  n-th step of z words in the reordered layout."""
  import importlib.util  # pylint: disable=g-import-not-at-top
  from fastmt import bench  # pylint: disable=g-import-not-at-top
  from fastmt.translate import TranslationStats  # pylint: disable=g-import-not-at-top
  spec = importlib.util.spec_from_file_location('iteration_cost', REPO / 'benchmarks/iteration_cost.py')
  script = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(script)
  line = 'And God called the light Day, and the darkness he called Night.'
  for workdir, method in ((trained_workdir, 'greedy'), (interleaved_workdir[0], 'ib')):
    translator = bench.build_translators(workdir, [method])[0][method]
    ids = translator.encode_sources([line], TranslationStats())[0]
    source = script.padded(translator, ids)
    out = translator.decode_batch(source, np.array([translator.row_cap(len(ids))], np.int32))
    calls, tokens = int(out.loop_iterations), np.asarray(out.tokens[0])
    loop = script.bare_loop(translator, source.shape[1])
    if method == 'greedy':
      expected = [tokens[n - 1:n] for n in range(1, calls + 1)]
    else:
      layout = translator.settings.interleaving
      words = int(np.argmax(tokens == EOS_ID)) if (tokens == EOS_ID).any() else len(tokens)
      reordered = np.asarray(order.reorder(layout, jnp.asarray(tokens[None]), jnp.array([words]), calls))[0]
      z = layout.slots  # the last step may hold EOS where the layout would not: the full steps before it
      expected = [reordered[(n - 1) * z:n * z] for n in range(1, calls)]
    assert len(expected) >= 2, (method, calls)  # the check needs a few calls
    # without its encoder (benchmarks/call_context.py), given the source's memory: the same calls
    alone = script.bare_loop(translator, source.shape[1], encoder=False)
    model = models.Transformer(translator.config)
    memory = script.encoded_memory(model, translator.params, jnp.asarray(source))
    for n, want in enumerate(expected, 1):
      got = np.asarray(loop(translator.params, translator.output_projection, source, np.int32(n)))[0]
      np.testing.assert_array_equal(got, want, err_msg=f'{method}, after {n} calls')
      got = np.asarray(alone(translator.params, translator.output_projection, memory, np.int32(n)))[0]
      np.testing.assert_array_equal(got, want, err_msg=f'{method}, after {n} calls, without the encoder')
  assert script.bare_loop(bench.build_translators(trained_workdir, ['pgj:3'])[0]['pgj:3'], 16) is None


def recording_writes(step_fn, log):
  """step_fn that logs, for every call it runs (a debug callback: once per executed call, inside the loop),
  (slots of the cache it was given, the highest slot its call writes + 1)."""
  def step(tokens, positions, self_mask, cache, write_offsets, **kwargs):
    slots = jax.tree_util.tree_leaves(cache)[0].shape[1]
    jax.debug.callback(lambda end: log.append((slots, int(end))), jnp.max(write_offsets) + tokens.shape[1])
    return step_fn(tokens, positions, self_mask, cache, write_offsets, **kwargs)
  return step


def unlikely_runner_up_eos(step_fn):
  """step_fn with EOS far below every other wrong word wherever the step does not predict it: beam search's
  runner-up combinations then hold words, not early EOS (a sentence with K finished hypotheses stops, whatever
  its live ones score: with beam 3 the one-hot oracle's third word of every slot would be EOS)."""
  def step(*args, **kwargs):
    logits, cache = step_fn(*args, **kwargs)
    wrong_eos = jnp.argmax(logits, axis=-1) != EOS_ID
    return logits.at[..., EOS_ID].add(jnp.where(wrong_eos, -100.0, 0.0)), cache
  return step


@pytest.mark.parametrize('beam', [1, 2, 3])  # 1: interleaved_greedy
@pytest.mark.parametrize('h,c', [(2, 2), (4, 1), (1, 4)])
def test_a_cap_that_z_does_not_divide_uses_exactly_the_registry_cache(h, c, beam):
  """max_length 18, z = 4, the registry's cache of ceil(18 / 4) * 4 = 20 slots, no row caps: a 17-word target
  (its EOS in the 5th step, slot 2) comes back exactly; an oracle that never says EOS gives exactly 18 words
  (the first 18 of the 20 its 5 steps hold, in natural order), no EOS; both make 5 calls, each writing its
  4 slots in turn, none past the cache. Greedy also stops a 2-word row after its one call."""
  from fastmt.decoding import registry  # pylint: disable=g-import-not-at-top
  from fastmt.translate import DecodeSettings  # pylint: disable=g-import-not-at-top
  layout = layout_of(h, c)
  max_length, z = 18, h * c
  cache_length = registry.get('ib').cache_length(max_length, DecodeSettings('ib', interleaving=layout))
  assert cache_length == 20 and layout.steps_for(max_length) == 5
  lengths = [17, 2] if beam == 1 else [17]
  natural = natural_rows(lengths, max_length)
  reordered = np.asarray(order.reorder(layout, jnp.asarray(natural), jnp.asarray(lengths), 5))
  endless = (3 + 7 * np.arange(20) % 13)[None]  # 20 words, no EOS: 5 full steps
  never = np.asarray(order.reorder(layout, jnp.asarray(endless), jnp.array([20]), 5))
  assert EOS_ID not in never
  rows = np.concatenate([reordered[:1], never, reordered[1:]])  # the 17-word row, the endless one, the rest
  log = []
  step = recording_writes(unlikely_runner_up_eos(oracle_step(layout, np.repeat(rows, beam, axis=0))), log)
  cache = stub_cache(len(rows) * beam, cache_length)
  if beam == 1:
    out = interleaved_greedy(step, cache, len(rows), max_length, layout)
  else:
    out = interleaved_beam(step, cache, len(rows), beam, max_length, layout)
  tokens = np.asarray(out.tokens)
  assert tokens[0].tolist() == natural[0].tolist()  # 17 words, EOS: 18 tokens
  assert tokens[1].tolist() == endless[0, :18].tolist()
  if beam == 1:
    assert tokens[2].tolist() == natural[1].tolist()
  assert np.asarray(out.decoder_calls).tolist() == [5, 5] + [1] * (beam == 1) and int(out.loop_iterations) == 5
  jax.effects_barrier()  # every debug callback has run
  assert sorted(set(log)) == [(20, end) for end in range(z, 21, z)] and len(log) == 5


@pytest.mark.parametrize('beam', [1, 2, 3])  # 1: interleaved_greedy (the registry's ib with beam size 1)
@pytest.mark.parametrize('h,c,step,expected', [
    (2, 1, [EOS_ID, 7], [5, 7, 6]),  # the left-to-right direction ends first: its words stop at step 0
    (2, 1, [7, EOS_ID], [5, 7, 6]),  # the right-to-left one ends first
    (2, 1, [EOS_ID, EOS_ID], [5, 6]),
    (2, 2, [9, EOS_ID, EOS_ID, 10], [5, 6, 9, 8, 7]),  # EOS in the middle slots: 10 follows its direction's EOS
    (2, 2, [EOS_ID, 9, 10, EOS_ID], [5, 6, 10, 8, 7]),
    (4, 1, [9, EOS_ID, EOS_ID, 10], [5, 9, 6, 7, 10, 8]),  # segments (5, 9 | 6) and (7 | 8, 10)
    (4, 1, [EOS_ID, 9, 10, EOS_ID], [5, 9, 6, 7, 10, 8])])
def test_eos_first_in_one_direction_after_a_full_step(h, c, step, expected, beam):
  """Step 0 is full (5, 6 for z = 2; 5, 6, 7, 8 for z = 4), step 1 holds an EOS in some slots and words in
  others (Algorithm 1's 'any' rule ends the hypothesis there): each direction keeps its words before its own
  first EOS, a segment is its left-to-right words then its right-to-left ones reversed; the whole row, for
  greedy and beam search alike (the stub's later steps say 11, never read). Greedy stops after the 2 calls:
  the step with an EOS in any slot ends the row (recovery alone would hide a search that ran on to its cap;
  a beam's runner-ups may keep it going)."""
  layout = layout_of(h, c)
  z = h * c
  max_length = 3 * z
  row = np.array([list(range(5, 5 + z)) + step + [11] * z] * beam, np.int32)
  cache = stub_cache(beam, max_length)
  if beam == 1:
    out = interleaved_greedy(oracle_step(layout, row), cache, 1, max_length, layout)
    assert int(out.decoder_calls[0]) == 2 and int(out.loop_iterations) == 2
  else:
    out = interleaved_beam(oracle_step(layout, row), cache, 1, beam, max_length, layout, end_rule='any')
  assert np.asarray(out.tokens)[0].tolist() == expected + [EOS_ID] + [PAD_ID] * (max_length - len(expected) - 1)


def test_bad_arguments_to_the_interleaved_decoders_are_clear_errors():
  """They skipped the checks the other decoders make: max_length=0 and batch 0 were a TypeError and a
  ZeroDivisionError from inside the loop, a layout without start ids a broadcasting error, a step_fn of the
  wrong contract or a cache of other rows a raw JAX error."""
  layout = layout_of(2, 1)
  max_length = 8
  reordered = order.reorder(layout, jnp.asarray(natural_rows([3], max_length)), jnp.asarray([3]),
                            layout.steps_for(max_length))
  good_step = oracle_step(layout, reordered)
  assert interleaved_greedy(good_step, stub_cache(1, 8), 1, max_length, layout).tokens.shape == (1, 8)
  swapped = lambda *args, **kw: good_step(*args, **kw)[::-1]  # (cache, logits)
  last_only = lambda *args, **kw: (good_step(*args, **kw)[0][:, -1], args[3])  # [B, V]
  for call, message in (
      (lambda: interleaved_greedy(good_step, stub_cache(1, 8), 1, 0, layout), 'max_length must be a whole number'),
      (lambda: interleaved_greedy(good_step, stub_cache(1, 8), 0, max_length, layout), 'batch_size must be'),
      (lambda: interleaved_greedy(good_step, stub_cache(1, 8), 1, max_length, order.Interleaving(2, 1)),
       'layout must be an Interleaving with its start ids'),
      (lambda: interleaved_greedy(good_step, stub_cache(2, 8), 1, max_length, layout), 'cache leaf .* rows = 1'),
      (lambda: interleaved_greedy(swapped, stub_cache(1, 8), 1, max_length, layout), 'logits of shape'),
      (lambda: interleaved_greedy(last_only, stub_cache(1, 8), 1, max_length, layout), 'logits of shape'),
      (lambda: interleaved_beam(good_step, stub_cache(2, 8), 1, 2, 0, layout), 'max_length must be'),
      (lambda: interleaved_beam(good_step, stub_cache(3, 8), 1, 2, max_length, layout), 'cache leaf .* rows = 2')):
    with pytest.raises(ValueError, match=message):
      call()


def test_interleaved_beam_of_one_is_a_clear_error():
  """A step keeps 2k of the k x k pruned continuations; with k = 1 that would be a top_k failure deep in the
  loop. --algorithm ib with beam 1 decodes greedy (the registry); the library call says so."""
  layout = order.Interleaving(2, 1, start_ids=(2, 2))
  with pytest.raises(ValueError, match='beam_size >= 2, got 1: beam 1 is interleaved_greedy'):
    interleaved_beam(lambda *args: None, stub_cache(1, 8), 1, 1, 8, layout)
