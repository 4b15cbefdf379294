"""Speculative decoding with self-drafting: the selfdraft objective's layout, its agreement with the decoder's
draft call, exact outputs (== greedy) on random models with any drafts, exact call counts on stubs, and the
bad-input contract (a model not trained to draft, bad settings)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import fine_tuning_config, model_step, one_hot_logits, random_model, stub_cache
from fastmt import models
from fastmt.decoding import drafts as drafts_lib, greedy, jacobi, registry
from fastmt.decoding.step import BOS_ID, EOS_ID, PAD_ID, causal_window_mask
from fastmt.errors import FastmtError
from fastmt.objectives import autoregressive, selfdraft

A, B, C, D, E, F = 5, 6, 7, 8, 9, 10
SEQ = [A, B, C, D, E, F, EOS_ID]  # 7 outputs
JUNK, MASK = 11, 12


def _batch(targets):
  target = jnp.asarray(targets, jnp.int32)
  decoder_input = jnp.pad(target, ((0, 0), (1, 0)), constant_values=BOS_ID)[:, :-1]
  decoder_input = jnp.where(decoder_input == EOS_ID, PAD_ID, decoder_input)
  return {'source': jnp.ones((target.shape[0], 3), jnp.int32), 'decoder_input': decoder_input, 'target': target}


def test_block_mask_is_the_rule_entry_by_entry():
  length, width, cuts = 5, 2, np.array([[1, 3], [0, 4]])
  mask = np.asarray(selfdraft.block_mask(length, jnp.asarray(cuts), width))
  assert mask.shape == (2, length + 4, length + 4)
  for b in range(2):
    for q in range(length + 4):
      for k in range(length + 4):
        if q < length:  # AT slot: causal over AT slots only
          expected = k < length and k <= q
        else:  # mask slot of block (q - length) // width
          block = (q - length) // width
          expected = (k < length and k <= cuts[b, block]) or (k >= length and (k - length) // width == block)
        assert mask[b, q, k] == expected, (b, q, k)


def test_draft_batch_scores_the_w_tokens_after_each_cut_and_nothing_past_eos():
  targets = [[A, B, C, EOS_ID, PAD_ID, PAD_ID], [A, EOS_ID, PAD_ID, PAD_ID, PAD_ID, PAD_ID]]
  options = selfdraft.SelfDraftOptions(block_size=3, blocks=4)
  batch = _batch(targets)
  out = selfdraft.draft_batch(batch, jnp.int32(7), options, MASK)
  cuts = np.asarray(selfdraft.draft_cuts(batch['target'], 4, jax.random.fold_in(jax.random.PRNGKey(0), 7)))
  assert (cuts[0] <= 3).all() and (cuts[1] <= 1).all() and (cuts >= 0).all()
  T = 6
  at = autoregressive.left_to_right(batch)
  np.testing.assert_array_equal(out['decoder_input'][:, :T], at['decoder_input'])
  np.testing.assert_array_equal(out['target'][:, :T], at['target'])
  np.testing.assert_array_equal(out['decoder_input'][:, T:], MASK)
  padded = np.pad(np.array(targets), ((0, 0), (0, 3)))
  for b in range(2):
    for block in range(4):
      for j in range(3):
        slot = T + block * 3 + j
        expected = padded[b, cuts[b, block] + j]
        assert out['target'][b, slot] == expected
        assert out['weights'][b, slot] == float(expected != PAD_ID)
        assert out['positions'][b, slot] == min(cuts[b, block] + j, T - 1)


def test_at_slots_are_exactly_the_plain_at_task():
  """The causal slots never see a mask slot: their logits equal the AT objective's under the same weights."""
  model, params = random_model(0)
  batch = _batch([[A, B, C, D, EOS_ID, PAD_ID], [F, E, EOS_ID, PAD_ID, PAD_ID, PAD_ID]])
  drafted = selfdraft.draft_batch(batch, jnp.int32(3), selfdraft.SelfDraftOptions(block_size=3), MASK)
  plain = autoregressive.left_to_right(batch)
  apply = lambda d: model.apply({'params': params}, d['source'], d['decoder_input'], d['positions'], d['self_mask'])
  np.testing.assert_allclose(apply(drafted)[:, :6], apply(plain), atol=1e-5)


@pytest.mark.parametrize('n, after_window', [(0, False), (2, False), (2, True), (3, True)])
def test_the_decoders_draft_call_is_the_training_layout(n, after_window):
  """A draft block in a cached decoder call gives the logits the training row gives for the same cut: the
  prefix draft at n is the block at cut n, the window draft the block at cut n + W - 1 (window = the target)."""
  width = 3
  target = [A, B, C, D, E, F, EOS_ID, PAD_ID]
  model, params = random_model(1)
  source = jnp.array([[4, 5, 6, EOS_ID]])
  step_fn = model_step(model, params, source)
  cache = models.init_cache(model.config, 1, 16)
  inputs = [BOS_ID] + target
  if n:  # the committed prefix: inputs 0 .. n - 1 in the cache
    _, cache = step_fn(jnp.array([inputs[:n]]), jnp.arange(n)[None], causal_window_mask(jnp.array([0]), n, 16),
                       cache, jnp.array([0]))
  context = jnp.array([width - 1 if after_window else 0])
  call_inputs = jnp.array([inputs[n:n + width] + [MASK] * width])
  positions = jnp.concatenate([jnp.arange(n, n + width), jnp.arange(n, n + width) + context[0]])[None]
  logits, _ = step_fn(call_inputs, positions, jacobi.draft_window_mask(jnp.array([n]), context, width, 16),
                      cache, jnp.array([n]))
  cut = n + int(context[0])
  batch = _batch([target])
  layout = selfdraft.draft_batch(batch, jnp.int32(0), selfdraft.SelfDraftOptions(block_size=width, blocks=1), MASK)
  T = len(target)
  layout['positions'] = layout['positions'].at[:, T:].set(jnp.arange(cut, cut + width))
  layout['self_mask'] = selfdraft.block_mask(T, jnp.array([[cut]]), width)
  trained = model.apply({'params': params}, source, layout['decoder_input'], layout['positions'], layout['self_mask'])
  np.testing.assert_allclose(logits[0, width:], trained[0, T:], atol=1e-4)
  np.testing.assert_allclose(logits[0, :width], trained[0, n:n + width], atol=1e-4)  # the window: AT logits


def _oracle_step(sequence, mask_draft=None):
  """A stub AT model that is right only when its input is right (as a real one mostly is): position p predicts
  sequence[p] if its input is output p - 1 (BOS at 0), else JUNK; a <mask> slot at position p predicts
  mask_draft[p] (default: sequence[p], a perfect drafter)."""
  sequence = jnp.asarray(sequence, jnp.int32)
  mask_draft = sequence if mask_draft is None else jnp.asarray(mask_draft, jnp.int32)
  previous = jnp.concatenate([jnp.array([BOS_ID]), sequence[:-1]])

  def step_fn(tokens, positions, self_mask, cache, write_offsets):
    del self_mask, write_offsets
    p = jnp.minimum(positions, sequence.shape[0] - 1)
    ar = jnp.where(tokens == previous[p], sequence[p], JUNK)
    return one_hot_logits(jnp.where(tokens == MASK, mask_draft[p], ar)), cache
  return step_fn


def test_a_perfect_self_draft_takes_three_calls_for_seven_tokens():
  """W = 3: call 1 commits 1 and drafts after the prefix; calls 2 and 3 verify whole windows (3 + 3)."""
  sequence = SEQ + [A] * 9
  out, trace = jacobi.pgj_decode(_oracle_step(sequence), stub_cache(1, 22), 1, 16, 3, mask_id=MASK,
                                 return_trace=True)
  np.testing.assert_array_equal(out.tokens[0, :8], SEQ + [PAD_ID])
  np.testing.assert_array_equal(out.decoder_calls, [3])
  np.testing.assert_array_equal(trace.accepted[:3, 0], [1, 3, 3])
  plain = jacobi.pgj_decode(_oracle_step(sequence), stub_cache(1, 22), 1, 16, 3)
  np.testing.assert_array_equal(plain.decoder_calls, [7])  # Jacobi's own guesses are JUNK here: greedy's calls


@pytest.mark.parametrize('draft', ['junk', 'eos', 'pad', 'off_by_one'])
def test_useless_or_adversarial_drafts_still_give_greedy_and_never_more_calls(draft):
  sequence = SEQ + [A] * 9
  drafts = {'junk': [JUNK] * 16, 'eos': [EOS_ID] * 16, 'pad': [PAD_ID] * 16,
            'off_by_one': sequence[1:] + [A]}[draft]
  step_fn = _oracle_step(sequence, drafts)
  expected = greedy.greedy_search(step_fn, stub_cache(1, 16), 1, 16)
  out = jacobi.pgj_decode(step_fn, stub_cache(1, 22), 1, 16, 3, mask_id=MASK)
  np.testing.assert_array_equal(out.tokens, expected.tokens)
  assert int(out.decoder_calls[0]) <= int(expected.decoder_calls[0])


@pytest.mark.parametrize('seed', range(4))
@pytest.mark.parametrize('batch', [1, 4])
def test_self_drafting_equals_greedy_on_random_models(seed, batch):
  """Exact whatever the model drafts: random weights (so whatever the mask id), varied EOS positions and caps."""
  model, params = random_model(10 + seed)
  rng = np.random.default_rng(seed)
  # One padded source length and one mask id per width for every seed (the weights are what is random): the
  # same programs, so the seeds after the first reuse the compiled decoders instead of compiling anew.
  source = rng.integers(4, 40, (batch, 9))
  source_len = int(rng.integers(2, 10))
  source[:, source_len - 1], source[:, source_len:] = EOS_ID, PAD_ID
  step_fn = model_step(model, params, jnp.array(source), rng.integers(1, 20, batch))
  max_len = 16
  caps = jnp.array(rng.integers(0, max_len + 1, batch)) if batch > 1 else None
  expected = greedy.greedy_search(step_fn, models.init_cache(model.config, batch, max_len), batch, max_len, caps)
  for width, mask_id in ((2, 7), (3, 23), (5, 38)):
    out = jacobi.pgj_decode(step_fn, models.init_cache(model.config, batch, max_len + 2 * width), batch, max_len,
                            width, mask_id=mask_id, row_caps=caps)
    np.testing.assert_array_equal(out.tokens, expected.tokens, err_msg=f'W={width}')
    assert (np.asarray(out.decoder_calls) <= np.asarray(expected.decoder_calls)).all()


def test_lookup_drafts_on_worked_examples():
  """What followed the last two tokens before: in the output (most recent match; a repetition continued when
  the match is close), else in the source, else nothing found."""
  # Past `end` are stale predictions (here copies of each key and junk): never read.
  history = jnp.array([[BOS_ID, A, B, C, D, A, B, A, B],  # "A B" again: what followed it, C D A B
                       [BOS_ID, E, E, E, E, E, A, 0, 0],  # "E E" right before: the repetition goes on
                       [BOS_ID, F, C, F, C, D, D, D, D],  # "F C" only in the source
                       [BOS_ID, F, BOS_ID, F, JUNK, 0, 0, 0, 0]])  # BOS F: nowhere
  end = jnp.array([6, 3, 2, 1])
  source = jnp.array([[A, A, A, A, EOS_ID, 0], [C, C, C, EOS_ID, 0, 0], [D, F, C, A, B, EOS_ID],
                      [F, F, EOS_ID, 0, 0, 0]])
  drafts, found = drafts_lib.lookup_drafts(history, end, 4, 2, source)
  np.testing.assert_array_equal(drafts, [[C, D, A, B], [E, E, E, E], [A, B, EOS_ID, PAD_ID], [PAD_ID] * 4])
  np.testing.assert_array_equal(found, [True, True, True, False])
  drafts, found = drafts_lib.lookup_drafts(history, end, 4, 2)  # no source: row 2 finds nothing
  np.testing.assert_array_equal(found, [True, True, False, False])
  drafts, found = drafts_lib.lookup_drafts(history[:1], jnp.array([6]), 3, 1)  # key "B": latest B before is 2
  np.testing.assert_array_equal(drafts, [[C, D, A]])
  with pytest.raises(ValueError, match='one source per row'):
    drafts_lib.lookup_drafts(history, end, 4, 2, source[:1])


def _reference_lookup(history, end, width, ngram, source):
  """lookup_drafts in plain Python, one row."""
  if end < ngram - 1:
    return [PAD_ID] * width, False
  key = list(history[end - ngram + 1:end + 1])
  for j in range(end - 1, ngram - 2, -1):  # latest match first, ending before the anchor
    if list(history[j - ngram + 1:j + 1]) == key:
      known = list(history[j + 1:end + 1])  # what followed it, up to the anchor; repeated if too short
      return [known[t % len(known)] for t in range(width)], True
  if source is not None:
    for j in range(len(source) - 2, ngram - 2, -1):
      if list(source[j - ngram + 1:j + 1]) == key:
        return [source[j + 1 + t] if j + 1 + t < len(source) else PAD_ID for t in range(width)], True
  return [PAD_ID] * width, False


@pytest.mark.parametrize('seed', range(3))
def test_lookup_drafts_equal_a_plain_python_reference(seed):
  rng = np.random.default_rng(seed)
  rows, length = 64, 12
  history = rng.integers(3, 7, (rows, length))  # 4 tokens: many matches, some none
  history[:, 0] = BOS_ID
  end = rng.integers(0, length, rows)
  source = rng.integers(3, 9, (rows, 7))
  for ngram in (1, 2, 3):
    for width, src in ((1, None), (4, source), (6, source)):
      drafts, found = drafts_lib.lookup_drafts(history, end, width, ngram, src)
      for b in range(rows):
        expected, expected_found = _reference_lookup(history[b], int(end[b]), width, ngram,
                                                     None if src is None else src[b])
        assert (list(np.asarray(drafts[b])), bool(found[b])) == (expected, expected_found), (b, ngram, width)
      assert np.asarray(found).any() and not np.asarray(found).all()


def test_ngram_drafts_continue_a_repeated_phrase_in_fewer_calls():
  """'A B C D E A B C D E F': once 'A B' is out the second time, the drafter proposes what followed it."""
  sequence = [A, B, C, D, E, A, B, C, D, E, F, EOS_ID] + [A] * 6
  step_fn = _oracle_step(sequence)
  expected = greedy.greedy_search(step_fn, stub_cache(1, 18), 1, 18)
  plain = jacobi.pgj_decode(step_fn, stub_cache(1, 22), 1, 18, 4)
  lookup, trace = jacobi.pgj_decode(step_fn, stub_cache(1, 22), 1, 18, 4, drafter=jacobi.ngram_drafter(),
                                    return_trace=True)
  np.testing.assert_array_equal(lookup.tokens, expected.tokens)
  np.testing.assert_array_equal(plain.decoder_calls, [12])  # the oracle's own guesses never help: greedy's
  # Calls 1-7 commit one token each: no two committed tokens occur earlier until 'A B' (after call 7); call 8
  # is fed the draft 'C D E' (what followed 'A B') and commits C D E F; call 9 EOS.
  np.testing.assert_array_equal(trace.accepted[:9, 0], [1, 1, 1, 1, 1, 1, 1, 4, 1])
  np.testing.assert_array_equal(lookup.decoder_calls, [9])


def test_ngram_drafts_copy_from_the_source():
  """A name the translation copies: once its first two pieces are out, the rest comes from the source."""
  sequence = [A, C, D, E, F, JUNK + 2, EOS_ID] + [A] * 9
  source = jnp.array([[B, C, D, E, F, JUNK + 2, EOS_ID]])
  step_fn = _oracle_step(sequence)
  expected = greedy.greedy_search(step_fn, stub_cache(1, 16), 1, 16)
  without = jacobi.pgj_decode(step_fn, stub_cache(1, 20), 1, 16, 4, drafter=jacobi.ngram_drafter())
  copied = jacobi.pgj_decode(step_fn, stub_cache(1, 20), 1, 16, 4, drafter=jacobi.ngram_drafter(source))
  np.testing.assert_array_equal(copied.tokens, expected.tokens)
  np.testing.assert_array_equal(without.decoder_calls, [7])
  # Calls 1-3 commit A, C, D; 'C D' is in the source: call 4 is fed E F x and commits E F x EOS.
  np.testing.assert_array_equal(copied.decoder_calls, [4])


def test_each_row_drafts_from_its_own_source_through_the_spec_algorithm():
  """registry's spec with drafter ngram at batch 3: row b copies from source b only (a row given another
  row's source would find nothing and need every greedy call)."""
  from fastmt.translate import DecodeSettings  # pylint: disable=g-import-not-at-top
  names = [[C, D, E, F, JUNK + 2], [D, E, F, JUNK + 2, JUNK + 3], [JUNK + 4] * 5]
  sequences = jnp.array([[A] + names[0] + [EOS_ID] + [A] * 9, [B] + names[1] + [EOS_ID] + [A] * 9,
                         [A, B, C, D, E, F, EOS_ID] + [A] * 9])
  sources = jnp.array([[B] + names[0] + [EOS_ID], [A] + names[1] + [EOS_ID], [JUNK + 5] * 6 + [EOS_ID]])

  def step_fn(tokens, positions, self_mask, cache, write_offsets):  # _oracle_step, one sequence per row
    del self_mask, write_offsets
    p = jnp.minimum(positions, sequences.shape[1] - 1)
    previous = jnp.concatenate([jnp.full((3, 1), BOS_ID), sequences[:, :-1]], axis=1)
    right = tokens == jnp.take_along_axis(previous, p, 1)
    return one_hot_logits(jnp.where(right, jnp.take_along_axis(sequences, p, 1), JUNK)), cache

  settings = DecodeSettings('spec', block_size=4, drafter='ngram')
  spec = registry.get('spec')
  assert spec.uses_source(settings)
  out = spec.run(step_fn, stub_cache(3, 20), 3, 16, settings, None, None, source=sources)
  expected = greedy.greedy_search(step_fn, stub_cache(3, 16), 3, 16)
  np.testing.assert_array_equal(out.tokens, expected.tokens)
  # Rows 0 and 1: three calls to the first token and the name's first two pieces, then the rest of the name
  # and EOS (4 tokens, the window) in one call; row 2 has nothing to copy: greedy's 7 calls.
  np.testing.assert_array_equal(out.decoder_calls, [4, 4, 7])


def test_remember_outputs_keeps_the_last_tokens_with_eos_after_each_sentence():
  recent = np.full((6,), PAD_ID, np.int32)
  recent = drafts_lib.remember_outputs(recent, [np.array([A, B]), np.array([], np.int32)])
  np.testing.assert_array_equal(recent, [PAD_ID, PAD_ID, A, B, EOS_ID, EOS_ID])  # an empty output: EOS alone
  recent = drafts_lib.remember_outputs(recent, [np.array([C, D, E])])
  np.testing.assert_array_equal(recent, [B, EOS_ID, EOS_ID, C, D, E, EOS_ID][-6:])
  assert drafts_lib.remember_outputs(np.zeros((0,), np.int32), [np.array([A])]).shape == (0,)


def test_ngram_drafts_copy_from_earlier_outputs():
  """A name an earlier sentence's translation used, not in this source: with the memory, the rest of it comes
  from there; the memory's latest occurrence wins over the source's."""
  sequence = [A, C, D, E, F, JUNK + 2, EOS_ID] + [A] * 9
  source = jnp.array([[B, B, EOS_ID]])
  step_fn = _oracle_step(sequence)
  expected = greedy.greedy_search(step_fn, stub_cache(1, 16), 1, 16)
  recent = drafts_lib.remember_outputs(np.full((12,), PAD_ID, np.int32), [[B, C, D, E, F, JUNK + 2], [A, A]])
  without = jacobi.pgj_decode(step_fn, stub_cache(1, 20), 1, 16, 4, drafter=jacobi.ngram_drafter(source))
  remembered = jacobi.pgj_decode(step_fn, stub_cache(1, 20), 1, 16, 4,
                                 drafter=jacobi.ngram_drafter(source, recent=jnp.asarray(recent)))
  np.testing.assert_array_equal(remembered.tokens, expected.tokens)
  np.testing.assert_array_equal(without.decoder_calls, [7])
  np.testing.assert_array_equal(remembered.decoder_calls, [4])  # A, C, D, then E F x EOS from the memory
  wrong_source = jnp.array([[C, D, JUNK, JUNK, JUNK, EOS_ID]])  # "C D" also in the source, followed by junk
  both = jacobi.pgj_decode(step_fn, stub_cache(1, 20), 1, 16, 4,
                           drafter=jacobi.ngram_drafter(wrong_source, recent=jnp.asarray(recent)))
  np.testing.assert_array_equal(both.decoder_calls, [4])
  with pytest.raises(ValueError, match='with the source'):
    jacobi.ngram_drafter(None, recent=jnp.asarray(recent))


@pytest.mark.parametrize('seed', range(3))
@pytest.mark.parametrize('batch', [1, 4])
def test_ngram_drafting_equals_greedy_on_random_models(seed, batch):
  """Exact whatever the lookups find: random weights, sources full of repeats, a random fallback table."""
  model, params = random_model(20 + seed)
  rng = np.random.default_rng(seed)
  # Few distinct tokens: many matches. One source length for every seed: the decoders' shapes are the same, so
  # the seeds after the first reuse their compiled programs (jax's compilation cache) instead of compiling anew.
  source = rng.integers(4, 9, (batch, 11))
  length = int(rng.integers(3, 12))  # each seed's own length, EOS and PAD after it as in a padded batch
  source[:, length - 1], source[:, length:] = EOS_ID, PAD_ID
  step_fn = model_step(model, params, jnp.array(source), rng.integers(1, 20, batch))
  max_len = 16
  caps = jnp.array(rng.integers(0, max_len + 1, batch)) if batch > 1 else None
  expected = greedy.greedy_search(step_fn, models.init_cache(model.config, batch, max_len), batch, max_len, caps)
  fallback = jacobi.chain_initializer(rng.integers(0, 40, 40))
  for width in (2, 3, 5):
    for ngram in (1, 2):
      # A memory of "earlier outputs": random tokens and the expected output itself, shifted (drafts that are
      # partly right), so that many lookups find something there.
      recent = np.concatenate([rng.integers(3, 40, 20), np.asarray(expected.tokens).ravel()[1:]]).astype(np.int32)
      for memory in (None, jnp.asarray(recent)):
        out = jacobi.pgj_decode(step_fn, models.init_cache(model.config, batch, max_len + width), batch, max_len,
                                width, initializer=fallback, row_caps=caps,
                                drafter=jacobi.ngram_drafter(jnp.array(source), ngram, recent=memory))
        np.testing.assert_array_equal(out.tokens, expected.tokens, err_msg=f'W={width} n={ngram}')
        assert (np.asarray(out.decoder_calls) <= np.asarray(expected.decoder_calls)).all()


def test_cache_too_small_for_the_draft_slots_is_a_clear_error():
  with pytest.raises(ValueError, match='2 \\* block_size'):
    jacobi.pgj_decode(_oracle_step(SEQ), stub_cache(1, 19), 1, 16, 3, mask_id=MASK)


def test_only_algorithms_with_jacobi_guesses_need_the_draft_table():
  from fastmt.translate import DecodeSettings  # pylint: disable=g-import-not-at-top
  for algorithm in ('greedy', 'beam', 'hrt'):  # jacobi_init is not theirs to read: no table to build or load
    assert not registry.needs_draft_table(DecodeSettings(algorithm, jacobi_init='bigram'))
    assert not registry.uses_draft_table(DecodeSettings(algorithm, jacobi_init='bigram'))
  for algorithm in registry.JACOBI_ALGORITHMS:
    settings = DecodeSettings(algorithm, jacobi_init='bigram', block_size=3)
    assert registry.needs_draft_table(settings) and registry.uses_draft_table(settings)
  assert registry.needs_draft_table(DecodeSettings('spec', drafter='bigram'))
  assert not registry.needs_draft_table(DecodeSettings('spec', drafter='ngram'))
  assert registry.uses_draft_table(DecodeSettings('spec', drafter='ngram'))
  # --drafter int8 drafts every window, the first included: no Jacobi guess is fed. The bigram table cost 15 s
  # to build (and a file in the work directory) for nothing, without a word.
  int8 = DecodeSettings('spec', drafter='int8', jacobi_init='bigram', block_size=3)
  assert not registry.needs_draft_table(int8) and not registry.uses_draft_table(int8)
  assert registry.ignored_settings(int8, ['jacobi_init'], '--') == [
      '--jacobi_init has no effect with --drafter int8 (the int8 copy drafts every window, the first included)']
  assert registry.without_ignored_settings(int8) == DecodeSettings('spec', drafter='int8', block_size=3)
  # So does --drafter model: its first window is drafted from BOS alone before the loop (jacobi.pgj_decode), so
  # the table was built, loaded and a second program compiled for outputs and calls identical to pad's.
  model = DecodeSettings('spec', drafter='model', jacobi_init='bigram', block_size=3)
  assert not registry.needs_draft_table(model) and not registry.uses_draft_table(model)
  assert registry.ignored_settings(model, ['jacobi_init'], '--') == [
      '--jacobi_init has no effect with --drafter model (the drafter model drafts every window, the first included)']
  assert registry.without_ignored_settings(model) == DecodeSettings('spec', drafter='model', block_size=3)
  # --drafter bigram is the table's chain whatever jacobi_init says: an explicit pad was taken without a word.
  bigram = DecodeSettings('spec', drafter='bigram', jacobi_init='pad', block_size=3)
  assert registry.needs_draft_table(bigram)
  assert registry.ignored_settings(bigram, ['jacobi_init'], '--') == [
      '--jacobi_init pad has no effect with --drafter bigram (the bigram table guesses every new position; '
      '--drafter pad guesses PAD)']
  assert registry.ignored_settings(dataclasses.replace(bigram, jacobi_init='bigram'), ['jacobi_init'], '--') == []


def test_bad_spec_settings_are_clear_errors():
  from fastmt.translate import DecodeSettings  # pylint: disable=g-import-not-at-top
  with pytest.raises(FastmtError, match='drafter'):
    DecodeSettings('spec', drafter='medusa')
  with pytest.raises(FastmtError, match='block_size >= 2'):
    DecodeSettings('spec', block_size=1)
  with pytest.raises(FastmtError, match='selfdraft'):
    registry.check_drafter(DecodeSettings('spec', drafter='self'), 'at')
  assert not registry.decodes(DecodeSettings('spec'), 'hrt')
  assert registry.decodes(DecodeSettings('spec', drafter='bigram'), 'at')
  with pytest.raises(FastmtError, match='block_size'):
    selfdraft.SelfDraftOptions(block_size=1)
  from fastmt import objectives  # pylint: disable=g-import-not-at-top
  with pytest.raises(FastmtError, match='Unknown selfdraft keys'):
    objectives.selfdraft_from({'width': 3})
  from fastmt.configs import selfdraft as configs  # pylint: disable=g-import-not-at-top
  assert configs.get_config('w4,e6d6').model.num_decoder_layers == 6  # the shared shapes, e.g. the one-GPU table's
  assert configs.get_config('w3,drafter').selfdraft.block_size == 3  # and the separate drafter's own
  with pytest.raises(ValueError, match='Unknown options'):
    configs.get_config('w4,e6d7')


def test_fine_tuning_an_at_model_into_a_self_drafter_end_to_end(trained_workdir, tiny_config, tmp_path):
  """train.py's path: fine-tune, then spec with the model's own drafts == its greedy output; an AT model is a
  clear error for --drafter self and fine with --drafter bigram."""
  import fastmt  # pylint: disable=g-import-not-at-top
  from fastmt import train_lib  # pylint: disable=g-import-not-at-top
  config = fine_tuning_config(tiny_config, trained_workdir, 'selfdraft', 'selfdraft', dict(block_size=3))
  workdir = str(tmp_path / 'selfdraft')
  train_lib.train_and_evaluate(config, workdir)
  model = fastmt.load(workdir)
  texts = ['In the beginning God created the heaven and the earth.', '', 'And God said, Let there be light.']
  greedy_out = model.translate(texts, algorithm='greedy')
  assert model.translate(texts, algorithm='spec', block_size=3) == greedy_out
  assert model.translate(texts, algorithm='spec', block_size=4, drafter='bigram') == greedy_out
  from fastmt import ddgviz  # pylint: disable=g-import-not-at-top
  translator = model.translator('spec', block_size=3)
  trace = ddgviz.trace_sentence(translator, texts[0], translator.settings)
  assert 'drafter=self' in trace.method
  assert [trace.piece_of[t] for t in trace.final.tolist()] == trace.pieces and len(trace.final) >= 1
  assert trace.accepted.sum() == len(trace.final) and (trace.accepted >= 1).all()
  import matplotlib  # pylint: disable=g-import-not-at-top
  backend = matplotlib.get_backend()
  matplotlib.use('svg')  # any backend but Agg: drawing a picture must leave the caller's (a notebook's) alone
  try:
    assert ddgviz.draw_sentences(translator, texts[:1], translator.settings, str(tmp_path / 'viz'))
    assert matplotlib.get_backend() == 'svg'
  finally:
    matplotlib.use(backend)
  at_model = fastmt.load(trained_workdir)
  with pytest.raises(FastmtError, match='selfdraft'):
    at_model.translate(texts, algorithm='spec')
  assert at_model.translate(texts, algorithm='spec', drafter='pad') == at_model.translate(texts)
  assert at_model.translate(texts, algorithm='spec', drafter='ngram') == at_model.translate(texts)
  assert at_model.translate(texts, algorithm='spec', drafter='ngram', ngram_pool=2) == at_model.translate(texts)
  # A memory of the stream's earlier outputs: the same output, never more calls; each batch sees the outputs
  # of the batches before it in the same call, and a call starts with an empty memory.
  remembering = at_model.translator('spec', block_size=4, drafter='ngram', ngram_memory=256)
  forgetting = at_model.translator('spec', block_size=4, drafter='ngram')
  seen = []
  decode_batch = remembering.decode_batch
  remembering.decode_batch = lambda *args: seen.append(np.array(args[3])) or decode_batch(*args)
  twice = [texts[0], texts[0]]
  outputs, with_memory = remembering.translate(twice, batch_size=1)
  first_ids = remembering.translate_ids(twice[:1])[0][0]
  assert outputs == at_model.translate(twice) and remembering.translate(texts)[0] == at_model.translate(texts)
  assert (seen[0] == PAD_ID).all() and list(seen[1][-len(first_ids) - 1:]) == list(first_ids) + [EOS_ID]
  assert len(seen) == 4 and all((s == PAD_ID).all() for s in seen[2:])  # two more calls: fresh memories
  assert with_memory.decoder_calls <= forgetting.translate(twice, batch_size=1)[1].decoder_calls
  with pytest.raises(FastmtError, match='--drafter ngram only'):
    at_model.translate(texts, algorithm='spec', drafter='pad', ngram_memory=64)
  without_workdir = fastmt.TranslationModel(at_model.config, at_model.params, at_model.tokenizer)
  assert without_workdir.translate(texts, algorithm='spec', drafter='ngram') == at_model.translate(texts)
  ngram_translator = at_model.translator('spec', block_size=3, drafter='ngram')
  assert 'drafter=ngram' in ddgviz.trace_sentence(ngram_translator, texts[0], ngram_translator.settings).method
  # DDGviz draws the trajectory pool's run: the iterations the translator itself makes
  pooled = at_model.translator('spec', block_size=3, drafter='ngram', ngram_pool=1)
  trace = ddgviz.trace_sentence(pooled, texts[0], pooled.settings)
  assert 'pool=1' in trace.method and trace.accepted.sum() == len(trace.final)
  assert len(trace.accepted) == pooled.translate(texts[:1], batch_size=1)[1].decoder_calls
  # ... and the pool is in use there: the same sentence without it is decoded in other calls
  plain = ddgviz.trace_sentence(ngram_translator, texts[0], ngram_translator.settings)
  assert list(plain.accepted) != list(trace.accepted), (list(plain.accepted), list(trace.accepted))
  # The fine-tuned model shares the AT model's vocabulary: it drafts for it as a separate drafter model.
  assert at_model.translate(texts, algorithm='spec', drafter='model', draft_model=workdir) == at_model.translate(texts)
  import pathlib  # pylint: disable=g-import-not-at-top
  assert at_model.translate(texts, algorithm='spec', drafter='model',  # was an AttributeError
                            draft_model=pathlib.Path(workdir)) == at_model.translate(texts)
  assert at_model.translate(texts, algorithm='spec', block_size=2, drafter='model',
                            draft_model=fastmt.load(workdir)) == at_model.translate(texts)
  from fastmt import decode_lib  # pylint: disable=g-import-not-at-top
  from fastmt.translate import DecodeSettings  # pylint: disable=g-import-not-at-top
  cli_translator = decode_lib.load_translator(trained_workdir, DecodeSettings('spec', block_size=3, drafter='model'),
                                              drafter_workdir=workdir)
  assert cli_translator.translate(texts)[0] == at_model.translate(texts)
  trace = ddgviz.trace_sentence(cli_translator, texts[0], cli_translator.settings)
  assert 'drafter=model' in trace.method and trace.accepted.sum() == len(trace.final)
  with pytest.raises(FastmtError, match='needs a drafter model'):
    at_model.translate(texts, algorithm='spec', drafter='model')
  with pytest.raises(FastmtError, match='selfdraft objective'):
    at_model.translate(texts, algorithm='spec', drafter='model', draft_model=trained_workdir)
  with pytest.raises(FastmtError, match="drafter 'model' only"):
    at_model.translate(texts, algorithm='spec', drafter='ngram', draft_model=workdir)


def test_the_trajectory_pool_remembers_each_input_and_follows_its_chain():
  """Entries are (token before, input) -> the prediction at that window position, guesses included; the chain
  follows the pool where it has the key and keeps the row's own guesses where not."""
  for key_length in (1, 2):
    pool = drafts_lib.empty_pool(2, 64, key_length)
    inputs = jnp.array([[A, B, JUNK], [C, D, E]])
    predictions = jnp.array([[B, C, D], [F, F, F]])
    pool = drafts_lib.remember_window(pool, inputs, predictions, jnp.array([BOS_ID, A]), jnp.array([True, False]))
    fallback = jnp.full((2, 4), PAD_ID, jnp.int32)
    chain = drafts_lib.follow_pool(pool, jnp.array([BOS_ID, BOS_ID]), jnp.array([A, A]), fallback)
    # row 0: A -> B -> C (B -> C learnt after (A, B)), then C is unknown: PAD; row 1 was finished: nothing learnt
    np.testing.assert_array_equal(chain, [[B, C, PAD_ID, PAD_ID], [PAD_ID] * 4], err_msg=f'key {key_length}')
    # a guess (JUNK, predicted D) is remembered too; a 2-token key also needs the token before it to match
    after_junk = drafts_lib.follow_pool(pool, jnp.array([B, C]), jnp.array([JUNK, JUNK]), fallback[:, :1])
    np.testing.assert_array_equal(after_junk[:, 0], [D, PAD_ID])
    other_context = drafts_lib.follow_pool(pool, jnp.array([E, E]), jnp.array([JUNK, JUNK]), fallback[:, :1])
    np.testing.assert_array_equal(other_context[0, 0], D if key_length == 1 else PAD_ID)
  # two positions of a window with one key: the later prediction is kept, whatever order a scatter applies
  pool = drafts_lib.remember_window(drafts_lib.empty_pool(1, 64), jnp.array([[A, A, A]]), jnp.array([[B, C, D]]),
                                    jnp.array([BOS_ID]), jnp.array([True]))
  assert int(drafts_lib.follow_pool(pool, jnp.array([-1]), jnp.array([A]), jnp.zeros((1, 1), jnp.int32))[0, 0]) == D
  with pytest.raises(ValueError, match='1 or 2 tokens'):
    drafts_lib.empty_pool(1, 8, 3)
  with pytest.raises(ValueError, match='power of two'):
    drafts_lib.empty_pool(1, 48)


def test_the_trajectory_pool_drafts_a_pattern_it_has_seen_in_the_window():
  """A B C A B C A B C EOS with PAD guesses (right only where the input is): greedy's 10 calls without the pool;
  with it, once A -> B -> C has passed through the window the next windows are drafted whole."""
  sequence = [A, B, C] * 3 + [EOS_ID]
  plain = jacobi.pgj_decode(_oracle_step(sequence), stub_cache(1, 20), 1, 16, 3)
  pooled = jacobi.pgj_decode(_oracle_step(sequence), stub_cache(1, 20), 1, 16, 3, trajectory_pool=1)
  np.testing.assert_array_equal(pooled.tokens, plain.tokens)
  np.testing.assert_array_equal(plain.decoder_calls, [10])
  np.testing.assert_array_equal(pooled.decoder_calls, [6])  # A, B, C, A one by one; then B C A; then B C EOS
  with pytest.raises(ValueError, match='not with self-drafting'):
    jacobi.pgj_decode(_oracle_step(sequence), stub_cache(1, 22), 1, 16, 3, mask_id=MASK, trajectory_pool=1)


@pytest.mark.parametrize('seed', range(2))
def test_trajectory_pool_drafting_equals_greedy_on_random_models(seed):
  """Exact whatever the pool holds, with and without prompt lookups, at widths 2 and 4, keys of 1 and 2."""
  batch, max_len = 4, 16
  model, params = random_model(30 + seed)
  rng = np.random.default_rng(seed)
  source = rng.integers(4, 9, (batch, 11))
  source[:, 9], source[:, 10:] = EOS_ID, PAD_ID
  step_fn = model_step(model, params, jnp.array(source), rng.integers(1, 20, batch))
  caps = jnp.array(rng.integers(0, max_len + 1, batch))
  expected = greedy.greedy_search(step_fn, models.init_cache(model.config, batch, max_len), batch, max_len, caps)
  for width in (2, 4):
    for key_length in (1, 2):
      for drafter in (None, jacobi.ngram_drafter(jnp.array(source))):
        out = jacobi.pgj_decode(step_fn, models.init_cache(model.config, batch, max_len + width), batch, max_len,
                                width, row_caps=caps, drafter=drafter, trajectory_pool=key_length)
        np.testing.assert_array_equal(out.tokens, expected.tokens, err_msg=f'W={width} key={key_length}')
        assert (np.asarray(out.decoder_calls) <= np.asarray(expected.decoder_calls)).all()
