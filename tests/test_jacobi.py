"""Jacobi decoding (PJ, PGJ, HGJ): exact accepted counts on stubs, token-for-token equality with greedy on
random-weight models over seeds, lengths, batch sizes and EOS positions, and the bad-input contract."""

import jax.numpy as jnp
import numpy as np
import pytest

from conftest import VOCAB, markov_step, model_step, positional_step, random_model, stub_cache
from fastmt import models
from fastmt.decoding import drafts, greedy, jacobi
from fastmt.decoding.step import BOS_ID, EOS_ID, PAD_ID

A, B, C, D, E, F = 5, 6, 7, 8, 9, 10
SEQ = [A, B, C, D, E, F, EOS_ID]  # 7 outputs


def test_pj_on_a_model_without_dependencies_takes_two_iterations():
  """Every prediction is right at once, but only the first is verified; iteration 2 verifies the rest."""
  seqs = np.array([SEQ + [A] * 5])
  out, trace = jacobi.pj_decode(positional_step(seqs), stub_cache(1, 24), 1, 12, return_trace=True)
  np.testing.assert_array_equal(out.tokens[0, :7], SEQ)
  np.testing.assert_array_equal(out.decoder_calls, [2])
  np.testing.assert_array_equal(trace.accepted[:2, 0], [1, 6])


def test_pgj_accepted_counts_match_the_worked_example():
  """b=3: accept 1 (PAD guesses), 3 (guesses carried over), 1 (fresh PADs), then 2 (stops at EOS)."""
  seqs = np.array([SEQ + [A] * 5])
  out, trace = jacobi.pgj_decode(positional_step(seqs), stub_cache(1, 15), 1, 12, 3, return_trace=True)
  np.testing.assert_array_equal(out.tokens[0, :8], SEQ + [0])
  np.testing.assert_array_equal(trace.accepted[:5, 0], [1, 3, 1, 2, 0])
  np.testing.assert_array_equal(trace.start[:4, 0], [0, 1, 4, 5])
  assert int(out.loop_iterations) == 4


def test_hgj_switches_to_greedy_after_the_parallel_length():
  seqs = np.array([SEQ + [A] * 5])
  out = jacobi.hgj_decode(positional_step(seqs), stub_cache(1, 15), 1, 12, 3, parallel_length=2)
  np.testing.assert_array_equal(out.tokens[0, :7], SEQ)
  # PGJ: accept 1 then 3 (committed 4 >= l = 2), then one token per greedy step for the last 3.
  np.testing.assert_array_equal(out.decoder_calls, [2 + 3])
  # The trace keeps each iteration's window, W while parallel and 1 after: DDGviz drew a greedy step's padding
  # columns as predictions ('<pad>' at p = 0, red).
  _, trace = jacobi.jacobi_decode(positional_step(seqs), stub_cache(1, 15), 1, 12, 3, parallel_length=2,
                                  return_trace=True)
  np.testing.assert_array_equal(trace.widths[:5], [3, 3, 1, 1, 1])
  np.testing.assert_array_equal(trace.accepted[:5, 0], [1, 3, 1, 1, 1])


def test_window_of_one_is_greedy_on_a_markov_chain():
  table = np.full(16, EOS_ID)
  table[2], table[A], table[B] = A, B, C
  g = greedy.greedy_search(markov_step(table), stub_cache(2, 8), 2, 8)
  j = jacobi.pgj_decode(markov_step(table), stub_cache(2, 9), 2, 8, 1)
  np.testing.assert_array_equal(j.tokens, g.tokens)
  np.testing.assert_array_equal(j.decoder_calls, g.decoder_calls)


def _perfect_draft():
  """A next-token table that knows SEQ: BOS -> A -> B -> ... -> F -> EOS."""
  table = np.full(16, EOS_ID)
  for previous, following in zip([2] + SEQ[:-1], SEQ):
    table[previous] = following
  return table


def test_pgj_with_a_perfect_draft_accepts_whole_blocks():
  """b=3, drafts always right: accept 3 (A B C), 3 (D E F), then EOS: 3 iterations for 7 tokens."""
  seqs = np.array([SEQ + [A] * 5])
  init = jacobi.chain_initializer(_perfect_draft())
  out, trace = jacobi.pgj_decode(positional_step(seqs), stub_cache(1, 15), 1, 12, 3, initializer=init,
                                 return_trace=True)
  np.testing.assert_array_equal(out.tokens[0, :8], SEQ + [0])
  np.testing.assert_array_equal(trace.accepted[:4, 0], [3, 3, 1, 0])
  np.testing.assert_array_equal(trace.inputs[:3, 0], [[2, A, B], [C, D, E], [F, EOS_ID, EOS_ID]])
  np.testing.assert_array_equal(out.decoder_calls, [3])


def test_chain_initializer_follows_the_table_from_each_anchor():
  table = np.array([0, 1, 5, 3, 4, 6, 7, 5])  # 2 -> 5 -> 6 -> 7 -> 5 ...
  guesses = jacobi.chain_initializer(table)(4)(jnp.array([2, 6, 1]))
  np.testing.assert_array_equal(guesses, [[5, 6, 7, 5], [7, 5, 6, 7], [1, 1, 1, 1]])


def test_an_initializer_of_the_wrong_shape_or_dtype_is_a_clear_error():
  """A custom initializer returning [W] (one row) was an IndexError deep inside the loop, a drafter's other width
  a broadcasting error; float guesses a cast."""
  seqs = np.array([SEQ + [A] * 5])
  one_row = lambda width: lambda anchors: jnp.full((width,), A, jnp.int32)
  floats = lambda width: lambda anchors: jnp.full((anchors.shape[0], width), 2.5)
  for initializer, found in ((one_row, r'shape \(3,\) of int32'), (floats, r'shape \(1, 3\) of float32')):
    with pytest.raises(ValueError, match=r'must be token ids \[B, width\] = \[1, 3\], got ' + found):
      jacobi.pgj_decode(positional_step(seqs), stub_cache(1, 15), 1, 12, 3, initializer=initializer)
  two_wide = lambda tokens, end, width: (jnp.full((tokens.shape[0], 2), A, jnp.int32), jnp.ones(tokens.shape[0], bool))
  with pytest.raises(ValueError, match=r'must be token ids \[B, width\] = \[1, 3\], got shape \(1, 2\)'):
    jacobi.jacobi_decode(positional_step(seqs), stub_cache(1, 15), 1, 12, 3, drafter=two_wide)


def test_no_eos_runs_to_the_cap_exactly():
  seqs = np.array([[A, B] * 6])
  out = jacobi.pj_decode(positional_step(seqs), stub_cache(1, 16), 1, 8)
  np.testing.assert_array_equal(out.tokens, [[A, B] * 4])


# Three random models per batch size (each case compiles eight decoders: about a CPU-minute); tests/test_api.py,
# test_decoding.py and test_quantize.py check the same equality on trained, relabelled and int8 models.
@pytest.mark.parametrize('seed', range(3))
@pytest.mark.parametrize('batch', [1, 4])
def test_every_jacobi_variant_equals_greedy_on_random_models(seed, batch):
  model, params = random_model(seed)
  rng = np.random.default_rng(100 + seed)
  # One padded source length for every seed (each its own length, EOS and PAD after it): the same shapes, so
  # the seeds after the first reuse the compiled decoders (jax's compilation cache) instead of compiling anew.
  source = rng.integers(4, 40, (batch, 11))
  source_len = int(rng.integers(2, 12))
  source[:, source_len - 1], source[:, source_len:] = EOS_ID, PAD_ID
  eos_after = rng.integers(1, 20, batch)  # varied EOS positions, some past the cap
  step_fn = model_step(model, params, jnp.array(source), eos_after)
  max_len = 16
  g = greedy.greedy_search(step_fn, models.init_cache(model.config, batch, max_len), batch, max_len)
  vocab = model.config.vocab_size
  random_draft = jacobi.chain_initializer(rng.integers(0, vocab, vocab))
  greedy_draft = jacobi.chain_initializer(drafts.bigram_table(np.asarray(g.tokens), vocab))
  out_of_vocabulary = jacobi.chain_initializer(rng.integers(vocab, 3 * vocab, vocab))
  negative = lambda tokens, end, width: (jnp.full((tokens.shape[0], width), -(vocab + 3), jnp.int32),
                                         jnp.ones((tokens.shape[0],), bool))
  variants = {
      'pj': lambda c: jacobi.pj_decode(step_fn, c, batch, max_len),
      'pgj2': lambda c: jacobi.pgj_decode(step_fn, c, batch, max_len, 2),
      'pgj3': lambda c: jacobi.pgj_decode(step_fn, c, batch, max_len, 3),
      'pgj5': lambda c: jacobi.pgj_decode(step_fn, c, batch, max_len, 5),
      'hgj3': lambda c: jacobi.hgj_decode(step_fn, c, batch, max_len, 3, parallel_length=5),
      # Exact whatever the guesses: a random draft table, and a table that is often right (greedy's own).
      'pgj3+random': lambda c: jacobi.pgj_decode(step_fn, c, batch, max_len, 3, initializer=random_draft),
      'pj+greedy_draft': lambda c: jacobi.pj_decode(step_fn, c, batch, max_len, initializer=greedy_draft),
      'hgj4+greedy_draft': lambda c: jacobi.hgj_decode(step_fn, c, batch, max_len, 4, parallel_length=7,
                                                       initializer=greedy_draft),
      # Ids the model lacks (a bad draft table; a drafter of negative ids): fed as PAD, never NaN.
      'pgj3+out_of_vocabulary': lambda c: jacobi.pgj_decode(step_fn, c, batch, max_len, 3,
                                                            initializer=out_of_vocabulary),
      'pgj3+negative_drafts': lambda c: jacobi.pgj_decode(step_fn, c, batch, max_len, 3, drafter=negative),
  }
  for name, run in variants.items():
    out = run(models.init_cache(model.config, batch, 2 * max_len))
    np.testing.assert_array_equal(out.tokens, g.tokens, err_msg=name)
    assert (np.asarray(out.decoder_calls) <= np.asarray(g.decoder_calls)).all(), name
    assert int(out.loop_iterations) <= int(g.loop_iterations), name


def test_bad_settings_give_clear_errors():
  cache = stub_cache(1, 20)
  step_fn = markov_step(np.zeros(16, int))
  with pytest.raises(ValueError, match='block_size'):
    jacobi.pgj_decode(step_fn, cache, 1, 8, 0)
  with pytest.raises(ValueError, match='parallel_length'):
    jacobi.hgj_decode(step_fn, cache, 1, 8, 3, parallel_length=9)
  with pytest.raises(ValueError, match='cache has'):
    jacobi.pgj_decode(step_fn, stub_cache(1, 9), 1, 8, 3)


@pytest.mark.parametrize('block', [1, 3, 8])
def test_jacobi_row_caps_and_padding_rows_match_greedy(block):
  """Each row stops at its own cap as greedy does; a padding row (cap 0) is done from the start."""
  never_eos = np.where(np.arange(VOCAB) == BOS_ID, 5, np.arange(VOCAB))
  caps = jnp.array([3, 0, 7])
  expected = greedy.greedy_search(markov_step(never_eos), stub_cache(3, 8), 3, 8, row_caps=caps)
  out = jacobi.pgj_decode(markov_step(never_eos), stub_cache(3, 8 + block), 3, 8, block, row_caps=caps)
  np.testing.assert_array_equal(out.tokens, expected.tokens)
  np.testing.assert_array_equal(out.decoder_calls[1], 0)
  assert (np.asarray(out.decoder_calls) <= np.asarray(expected.decoder_calls)).all()
