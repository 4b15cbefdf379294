"""The repetition guard (max_repeats): where it cuts, that the in-loop test and the cut agree, and greedy and HRT
with it on stub logits with exact outputs, calls and loop iterations."""

import jax.numpy as jnp
import numpy as np
import pytest

from conftest import positional_step, stub_cache
from fastmt import bench
from fastmt.decoding import repeats
from fastmt.decoding.greedy import greedy_search
from fastmt.decoding.hrt import hrt_decode
from fastmt.decoding.step import BOS_ID, EOS_ID, PAD_ID
from fastmt.errors import FastmtError
from fastmt.translate import DecodeSettings, TranslationStats
from test_hrt import BOS_K, MASK_ID, oracle_hrt_step

W, X, Y = 7, 8, 9  # words


def rows(*lists, width=10):
  out = np.full((len(lists), width), PAD_ID, np.int32)
  for b, r in enumerate(lists):
    out[b, :len(r)] = r
  return out


def test_cut_first_run_keeps_one_copy_then_eos():
  tokens = rows([W, X, Y, Y, Y, Y, Y, EOS_ID],  # a run of 5: cut from its first copy
                [W, Y, Y, X, EOS_ID],  # two in a row: no run of 3
                [W, EOS_ID, Y, Y, Y],  # after the EOS: not an output
                [X, X, X],  # a run at the start, no EOS (a row at its cap)
                [PAD_ID] * 10,  # a padding row
                [BOS_ID, BOS_ID, BOS_ID, W, EOS_ID])  # BOS is no word (with bos_id given)
  cut, run_end = repeats.cut_first_run(jnp.asarray(tokens), 3, bos_id=BOS_ID)
  np.testing.assert_array_equal(cut, rows([W, X, Y, EOS_ID], [W, Y, Y, X, EOS_ID], [W, EOS_ID, Y, Y, Y],
                                          [X, EOS_ID], [PAD_ID] * 10, [BOS_ID, BOS_ID, BOS_ID, W, EOS_ID]))
  assert np.asarray(run_end).tolist() == [5, -1, -1, 3, -1, -1]
  cut4, run_end4 = repeats.cut_first_run(jnp.asarray(tokens), 4)
  assert np.asarray(run_end4).tolist() == [6, -1, -1, -1, -1, -1]
  np.testing.assert_array_equal(cut4[0], rows([W, X, Y, EOS_ID])[0])
  assert np.asarray(repeats.cut_first_run(jnp.asarray(tokens), 11)[1]).tolist() == [-1] * 6  # longer than a row


def test_the_guarded_loop_stops_where_the_cut_finds_the_run():
  """greedy_search's guard (a counter in the loop) ends each row at the end of the run that cut_first_run (on the
  unguarded output) cuts: the same tokens, and calls up to the run's last copy; random rows of few words."""
  rng = np.random.default_rng(0)
  for max_repeats in (2, 3, 4):
    sequences = rng.choice([W, X, EOS_ID], p=[0.55, 0.4, 0.05], size=(64, 12)).astype(np.int32)
    step = positional_step(sequences)
    plain = greedy_search(step, stub_cache(64, 12), 64, 12)
    guarded = greedy_search(step, stub_cache(64, 12), 64, 12, max_repeats=max_repeats)
    cut, run_end = repeats.cut_first_run(plain.tokens, max_repeats)
    np.testing.assert_array_equal(guarded.tokens, cut)
    np.testing.assert_array_equal(guarded.decoder_calls, np.where(run_end >= 0, run_end, plain.decoder_calls))
    assert (np.asarray(run_end) >= 0).any() and (np.asarray(run_end) < 0).any()  # both kinds of row
    # The loop itself stops there (the cut after it would hide a counter that fires late or never): each row
    # alone runs exactly as many iterations as its guarded calls.
    for b in range(0, 64, 4):
      alone = greedy_search(positional_step(sequences[b:b + 1]), stub_cache(1, 12), 1, 12, max_repeats=max_repeats)
      assert int(alone.loop_iterations) == int(guarded.decoder_calls[b]), (max_repeats, sequences[b])


def test_greedy_with_the_guard_stops_a_run_on_and_keeps_the_others():
  sequences = rows([W, X, Y, Y, Y, Y, Y, Y, Y, Y],  # a run-on to the cap
                   [W, Y, Y, X, EOS_ID],  # a legitimate double
                   [X, W, X, W, EOS_ID],
                   [Y, Y, Y, Y, Y, Y, Y, Y, Y, Y])  # a run-on from the first token
  step = positional_step(sequences)
  plain = greedy_search(step, stub_cache(4, 10), 4, 10)
  guarded = greedy_search(step, stub_cache(4, 10), 4, 10, max_repeats=3)
  np.testing.assert_array_equal(plain.tokens, sequences)
  np.testing.assert_array_equal(guarded.tokens, rows([W, X, Y, EOS_ID], [W, Y, Y, X, EOS_ID], [X, W, X, W, EOS_ID],
                                                     [Y, EOS_ID]))
  assert np.asarray(plain.decoder_calls).tolist() == [10, 5, 5, 10]
  assert np.asarray(guarded.decoder_calls).tolist() == [5, 5, 5, 3]  # up to the run's third copy
  assert int(plain.loop_iterations) == 10 and int(guarded.loop_iterations) == 5  # the batch stops early
  with pytest.raises(ValueError, match='max_repeats must be 0'):
    greedy_search(step, stub_cache(4, 10), 4, 10, max_repeats=1)


def test_the_guard_with_row_caps_padding_rows_and_special_tokens():
  """Caps below the buffer, a padding row (cap 0), the guard firing on the cap's own step, and BOS / PAD
  emitted inside a row (no words: never a run)."""
  sequences = rows([W, Y, Y, Y, X, X],  # the third Y is the cap's step: both end the row there
                   [W, W, W, W, W, W],  # a padding row
                   [BOS_ID, BOS_ID, BOS_ID, PAD_ID, PAD_ID, PAD_ID, X, EOS_ID],  # specials repeated: no run
                   [X, X, W, W, W, W],  # capped before its run
                   width=10)
  caps = jnp.array([4, 0, 10, 4], jnp.int32)
  out = greedy_search(positional_step(sequences), stub_cache(4, 10), 4, 10, caps, max_repeats=3)
  np.testing.assert_array_equal(out.tokens, rows([W, Y, EOS_ID], [], [BOS_ID, BOS_ID, BOS_ID, PAD_ID, PAD_ID,
                                                                       PAD_ID, X, EOS_ID], [X, X, W, W], width=10))
  assert np.asarray(out.decoder_calls).tolist() == [4, 0, 8, 4]
  assert int(out.loop_iterations) == 8


def test_hrt_with_the_guard_stops_stage_one_and_cuts_the_output():
  """k = 2: a run-on of one word shows in stage I's tokens (every second word), which stop after 3 of them; the
  output keeps one copy."""
  natural = rows([W, X, Y, Y, Y, Y, Y, Y, Y, Y, Y, Y, Y, Y, Y, Y, Y, Y, Y, Y],
                 [W, X, W, X, Y, EOS_ID], width=24)
  step = oracle_hrt_step(natural, 2)
  plain = hrt_decode(step, stub_cache(2, 24), 2, 24, 2, MASK_ID, BOS_K)
  guarded = hrt_decode(step, stub_cache(2, 24), 2, 24, 2, MASK_ID, BOS_K, max_repeats=3)
  np.testing.assert_array_equal(plain.tokens, natural)
  np.testing.assert_array_equal(guarded.tokens, rows([W, X, Y, EOS_ID], [W, X, W, X, Y, EOS_ID], width=24))
  # stage I: X, Y, Y, Y (the guard fires at the third Y), then the one stage II call
  assert np.asarray(guarded.decoder_calls).tolist() == [4 + 1, 3 + 1]
  assert int(guarded.loop_iterations) == 4 + 1 and int(plain.loop_iterations) == 12 + 1
  # Where the output's cut does not reach: stage II fills the masks around stage I's last copy, so the output
  # may keep up to 2k - 1 copies of a loop's word, fewer than R (documented in DecodeSettings.max_repeats).
  long_guard = hrt_decode(step, stub_cache(2, 24), 2, 24, 2, MASK_ID, BOS_K, max_repeats=8)
  np.testing.assert_array_equal(long_guard.tokens[0], rows([W, X, Y, Y, Y, EOS_ID], width=24)[0])
  with pytest.raises(ValueError, match='greedy stage I'):
    hrt_decode(step, stub_cache(4, 24), 2, 24, 2, MASK_ID, BOS_K, beam_size=2, max_repeats=3)


def test_settings_take_the_guard_for_greedy_and_hrt_only():
  assert DecodeSettings('greedy', max_repeats=4).max_repeats == 4
  assert DecodeSettings('hrt', max_repeats=4).max_repeats == 4
  for algorithm in ('spec', 'pgj', 'beam', 'ib'):
    with pytest.raises(FastmtError, match='acts on --algorithm greedy and hrt only'):
      DecodeSettings(algorithm, max_repeats=4)
  with pytest.raises(FastmtError, match='an exact decoder'):
    DecodeSettings('pgj', max_repeats=4)
  with pytest.raises(FastmtError, match='beam_size 1'):
    DecodeSettings('hrt', beam_size=4, max_repeats=4)
  for bad in (1, -2):
    with pytest.raises(FastmtError, match='max_repeats must be 0'):
      DecodeSettings('greedy', max_repeats=bad)
  with pytest.raises(FastmtError, match='whole number'):
    DecodeSettings('greedy', max_repeats=2.5)
  assert bench.parse_method('hrt+rep4')[1].max_repeats == 4
  assert bench.parse_method('greedy+rep')[1].max_repeats == 8
  assert bench.parse_method('greedy+rep3@int8')[1].max_repeats == 3
  for bad, message in (('greedy+repx', 'takes an integer'), ('greedy+rep0', 'leave the suffix out'),
                       ('spec:3+rep4', 'unknown suffix'),
                       ('beam:4+rep4', 'unknown suffix')):
    with pytest.raises(FastmtError, match=message):
      bench.parse_method(bad)


def test_a_trained_models_translator_cuts_its_own_runs(trained_workdir):
  """Through the registry and the Translator (decode.py's path): the guarded greedy output of a real model is its
  unguarded output cut at the first run; the tiny model repeats itself, so max_repeats=2 cuts some rows."""
  translators = bench.build_translators(trained_workdir, ['greedy', 'greedy+rep2'])[0]
  plain, guarded = translators['greedy'], translators['greedy+rep2']
  lines = ['And God called the light Day, and the darkness he called Night.', 'In the beginning', 'light', 'God']
  ids = plain.encode_sources(lines, TranslationStats())
  source = np.zeros((len(ids), max(map(len, ids))), np.int32)
  for b, row in enumerate(ids):
    source[b, :len(row)] = row
  caps = np.array([plain.row_cap(len(row)) for row in ids], np.int32)
  want, run_end = repeats.cut_first_run(plain.decode_batch(source, caps).tokens, 2)
  np.testing.assert_array_equal(guarded.decode_batch(source, caps).tokens, want)
  assert (np.asarray(run_end) >= 0).any()  # the guard had something to cut
