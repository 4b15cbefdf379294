"""A separate drafter model for speculative decoding (fastmt/decoding/draft_model.py): its cached call is the
selfdraft training layout, a perfect drafter takes the fewest verification calls, and whatever it drafts
(random weights, adversarial stubs) the output is the verifier's greedy output with never more calls."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import VOCAB, model_step, one_hot_logits, random_model, select_positions, stub_cache, tiny_model_config
from fastmt import models, precision, translate
from fastmt.decoding import draft_model, greedy, jacobi
from fastmt.decoding.step import BOS_ID, EOS_ID, PAD_ID
from fastmt.objectives import selfdraft

A, B, C, D, E, F = 5, 6, 7, 8, 9, 10
SEQ = [A, B, C, D, E, F, EOS_ID]  # 7 outputs
JUNK, MASK = 11, 12


def test_the_call_mask_is_the_rule_entry_by_entry():
  width, slots = 2, 12
  mask = np.asarray(draft_model.draft_call_mask(jnp.array([0, 3]), jnp.array([0, 2]), width, slots))
  assert mask.shape == (2, 2 * width + 1, slots)
  for b, (n, accepted) in enumerate([(0, 0), (3, 2)]):
    for q in range(2 * width + 1):
      for k in range(slots):
        if q <= width:  # an input, written at slot n + q: causal
          expected = k <= n + q
        else:  # a mask slot, written at n + q: the final inputs 0 .. n + accepted and its own block
          expected = k <= n + accepted or n + width < k <= n + 2 * width
        assert mask[b, q, k] == expected, (b, q, k)


def test_each_drafter_call_is_the_training_layout_at_the_new_cut():
  """Calls chained as the decoder chains them (commits of 2, 0 and 3 tokens) give, at every call, the logits of
  the selfdraft training row at cut n' = n + accepted: its causal slot n' (the first draft), then its block's
  mask slots 1 .. W - 1. The cache invariant holds across calls."""
  width = 3
  target = [A, B, C, D, E, F, EOS_ID, PAD_ID]
  model, params = random_model(3)
  source = jnp.array([[4, 5, 6, EOS_ID]])
  drafter = draft_model.DraftModel(model_step(model, params, source), None, MASK)
  cache = models.init_cache(model.config, 1, draft_model.drafter_cache_length(8, width))
  tokens = jnp.array([[BOS_ID] + target + [PAD_ID] * width])
  batch = {'source': source, 'target': jnp.array([target]),
           'decoder_input': jnp.array([[BOS_ID] + target[:-1]])}
  layout = selfdraft.draft_batch(batch, 0, selfdraft.SelfDraftOptions(block_size=width, blocks=1), MASK)
  T = len(target)
  start = 0
  for accepted in (0, 2, 0, 3):
    logits, cache = draft_model.draft_logits(drafter, cache, tokens, jnp.array([start]), jnp.array([accepted]),
                                             width)
    cut = start + accepted
    positions = layout['positions'].at[:, T:].set(jnp.arange(cut, cut + width))
    trained = model.apply({'params': params}, source, layout['decoder_input'], positions,
                          selfdraft.block_mask(T, jnp.array([[cut]]), width))
    np.testing.assert_allclose(logits[0, 0], trained[0, cut], atol=1e-4, err_msg=f'causal slot, cut {cut}')
    np.testing.assert_allclose(logits[0, 1:], trained[0, T + 1:], atol=1e-4, err_msg=f'mask slots, cut {cut}')
    start = cut


def _oracle_verifier(sequence):
  """A stub AT model that is right only when its input is right: position p predicts sequence[p] if its input
  is output p - 1 (BOS at 0), else JUNK."""
  sequence = jnp.asarray(sequence, jnp.int32)
  previous = jnp.concatenate([jnp.array([BOS_ID]), sequence[:-1]])

  def step_fn(tokens, positions, self_mask, cache, write_offsets):
    del self_mask, write_offsets
    p = jnp.minimum(positions, sequence.shape[0] - 1)
    return one_hot_logits(jnp.where(tokens == previous[p], sequence[p], JUNK)), cache
  return step_fn


def _stub_drafter(drafts, batch=1, max_length=16, width=3):
  """A drafter whose every slot at position p (causal or <mask>) drafts drafts[p], whatever it sees; its
  vocabulary has 8 ids more than the verifier's VOCAB (which decoding keeps its drafts to)."""
  drafts = jnp.asarray(drafts, jnp.int32)

  def step_fn(tokens, positions, self_mask, cache, write_offsets, project=None):
    del tokens, self_mask, write_offsets
    logits = one_hot_logits(drafts[jnp.minimum(positions, drafts.shape[0] - 1)], vocab=VOCAB + 8)
    return (logits if project is None else select_positions(logits, project)), cache
  cache = stub_cache(batch, draft_model.drafter_cache_length(max_length, width))
  return draft_model.DraftModel(step_fn, cache, MASK, VOCAB)


def test_a_perfect_drafter_takes_three_calls_for_seven_tokens():
  """W = 3: every window is drafted right, so calls commit 3, 3 and EOS: 3 calls instead of greedy's 7."""
  sequence = SEQ + [A] * 12
  out, trace = jacobi.pgj_decode(_oracle_verifier(sequence), stub_cache(1, 19), 1, 16, 3,
                                 draft_model=_stub_drafter(sequence), return_trace=True)
  np.testing.assert_array_equal(out.tokens[0, :8], SEQ + [PAD_ID])
  np.testing.assert_array_equal(out.decoder_calls, [3])
  np.testing.assert_array_equal(trace.accepted[:3, 0], [3, 3, 1])


@pytest.mark.parametrize('drafts', ['junk', 'eos', 'pad', 'off_by_one', 'out_of_vocabulary'])
def test_useless_or_adversarial_drafts_still_give_greedy_and_never_more_calls(drafts):
  sequence = SEQ + [A] * 12
  proposed = {'junk': [JUNK] * 20, 'eos': [EOS_ID] * 20, 'pad': [PAD_ID] * 20, 'off_by_one': sequence[1:] + [A],
              'out_of_vocabulary': [VOCAB + 3] * 20}[drafts]  # the drafter's own id, not the verifier's
  step_fn = _oracle_verifier(sequence)
  expected = greedy.greedy_search(step_fn, stub_cache(1, 16), 1, 16)
  out, trace = jacobi.pgj_decode(step_fn, stub_cache(1, 19), 1, 16, 3, draft_model=_stub_drafter(proposed),
                                 return_trace=True)
  np.testing.assert_array_equal(out.tokens, expected.tokens)
  assert int(out.decoder_calls[0]) <= int(expected.decoder_calls[0])
  assert (np.asarray(trace.inputs) < VOCAB).all()  # no id the verifier lacks ever reaches its call


def test_no_jacobi_initializer_guess_reaches_a_call_with_a_drafter_model():
  """A selfdraft drafter drafts every window, the first from BOS alone: whatever jacobi_init guesses is never
  fed (registry._drafts_every_guess, which is why --jacobi_init warns and loads no table with --drafter model)."""
  sequence = SEQ + [A] * 12
  step_fn = _oracle_verifier(sequence)
  runs = [jacobi.pgj_decode(step_fn, stub_cache(1, 19), 1, 16, 3, draft_model=_stub_drafter([JUNK] * 20),
                            initializer=initializer, return_trace=True)
          for initializer in (functools.partial(jacobi.pad_initializer, pad_id=PAD_ID),
                              functools.partial(jacobi.pad_initializer, pad_id=A))]
  (first, first_trace), (second, second_trace) = runs
  np.testing.assert_array_equal(first.tokens, second.tokens)
  np.testing.assert_array_equal(first.decoder_calls, second.decoder_calls)
  np.testing.assert_array_equal(first_trace.inputs, second_trace.inputs)  # call for call, the same inputs


@pytest.mark.parametrize('drafts', ['junk', 'eos', 'pad', 'off_by_one', 'out_of_vocabulary'])
def test_useless_or_adversarial_autoregressive_drafts_give_greedy_within_w_times_its_calls(drafts):
  """An autoregressive drafter (--drafter int8's kind: calls of its own before each verification) that drafts junk, EOS,
  PAD, the right tokens one place late, or ids past the verifier's vocabulary: the output is greedy's, the
  verifier makes no more calls than greedy, and the drafter's calls, counted as they run, are W - 1 (one call
  at the cut, then W - 2 one-position ones) before the first verification call and after every one but the
  last, so all calls together stay within W x greedy's."""
  import jax  # pylint: disable=g-import-not-at-top
  sequence = SEQ + [A] * 12
  proposed = jnp.asarray({'junk': [JUNK] * 20, 'eos': [EOS_ID] * 20, 'pad': [PAD_ID] * 20,
                          'off_by_one': sequence[1:] + [A], 'out_of_vocabulary': [VOCAB + 3] * 20}[drafts], jnp.int32)
  drafter_calls = []

  def drafter_step(tokens, positions, self_mask, cache, write_offsets, project=None):
    del tokens, self_mask, write_offsets
    jax.debug.callback(lambda: drafter_calls.append(1))  # runs once per executed call, inside the loop
    logits = one_hot_logits(proposed[jnp.minimum(positions, proposed.shape[0] - 1)], vocab=VOCAB + 8)
    return (logits if project is None else select_positions(logits, project)), cache
  step_fn = _oracle_verifier(sequence)
  expected = greedy.greedy_search(step_fn, stub_cache(1, 16), 1, 16)
  width = 3
  drafter = draft_model.DraftModel(drafter_step, stub_cache(1, draft_model.drafter_cache_length(16, width)), None,
                                   VOCAB, autoregressive=True)
  out, trace = jacobi.pgj_decode(step_fn, stub_cache(1, 16 + width), 1, 16, width, draft_model=drafter,
                                 return_trace=True)
  jax.effects_barrier()
  np.testing.assert_array_equal(out.tokens, expected.tokens)
  verifier_calls = int(out.decoder_calls[0])
  assert verifier_calls <= int(expected.decoder_calls[0])
  assert (np.asarray(trace.inputs) < VOCAB).all()
  assert len(drafter_calls) == (width - 1) * int(out.loop_iterations)
  assert int(out.drafter_calls[0]) == len(drafter_calls)  # what TranslationStats.drafter_calls adds up
  assert verifier_calls + len(drafter_calls) <= width * int(expected.decoder_calls[0])


@pytest.mark.parametrize('drafts', ['right', 'junk'])
def test_a_selfdraft_drafters_calls_are_counted_as_they_run(drafts):
  """DecodeOutput.drafter_calls of a selfdraft drafter model: one call before the first verification and one
  after each, as counted by a callback inside the drafter's step."""
  import jax  # pylint: disable=g-import-not-at-top
  sequence = SEQ + [A] * 12
  ran = []
  stub = _stub_drafter(sequence if drafts == 'right' else [JUNK] * 20)

  def counted_step(*args, **kwargs):
    jax.debug.callback(lambda: ran.append(1))
    return stub.step_fn(*args, **kwargs)
  drafter = draft_model.DraftModel(counted_step, stub.cache, MASK, VOCAB)
  out = jacobi.pgj_decode(_oracle_verifier(sequence), stub_cache(1, 19), 1, 16, 3, draft_model=drafter)
  jax.effects_barrier()
  assert int(out.decoder_calls[0]) == (3 if drafts == 'right' else 7)  # junk: greedy's 7
  assert int(out.drafter_calls[0]) == len(ran) == int(out.decoder_calls[0]) + 1


@pytest.mark.parametrize('seed', range(3))
@pytest.mark.parametrize('batch', [1, 4])
def test_a_random_drafter_of_another_shape_gives_the_verifiers_greedy_output(seed, batch):
  """Exact whatever the drafter drafts: random verifier and drafter (a one-layer decoder of another width,
  sharing nothing, its vocabulary extended by 8 pieces of its own that drafts never use), varied EOS positions
  and row caps, windows of 2, 3 and 5. Unrestricted (vocab_size None), its drafts of ids past the verifier's
  vocabulary embed as NaN in the verifier's call and break exactness on 3 of these 6 cases: the restriction
  is what keeps them out."""
  verifier, verifier_params = random_model(30 + seed)
  small = tiny_model_config(emb_dim=16, num_decoder_layers=1, num_encoder_layers=1, mlp_dim=32, vocab_size=48)
  drafter, drafter_params = random_model(40 + seed, small)
  rng = np.random.default_rng(seed)
  source = rng.integers(4, 40, (batch, 9))  # one padded length for every seed: compiled programs are reused
  source_len = int(rng.integers(2, 10))
  source[:, source_len - 1], source[:, source_len:] = EOS_ID, PAD_ID
  step_fn = model_step(verifier, verifier_params, jnp.array(source), rng.integers(1, 20, batch))
  max_len = 16
  caps = jnp.array(rng.integers(0, max_len + 1, batch)) if batch > 1 else None
  expected = greedy.greedy_search(step_fn, models.init_cache(verifier.config, batch, max_len), batch, max_len, caps)
  for width, mask_id in ((2, 7), (3, 29), (5, 45)):  # fixed per width: the seeds' programs are the same
    drafts = draft_model.DraftModel(model_step(drafter, drafter_params, jnp.array(source)),
                                    models.init_cache(small, batch, draft_model.drafter_cache_length(max_len, width)),
                                    mask_id, verifier.config.vocab_size)
    out = jacobi.pgj_decode(step_fn, models.init_cache(verifier.config, batch, max_len + width), batch, max_len,
                            width, row_caps=caps, draft_model=drafts)
    np.testing.assert_array_equal(out.tokens, expected.tokens, err_msg=f'W={width}')
    assert (np.asarray(out.decoder_calls) <= np.asarray(expected.decoder_calls)).all()


def test_a_drafter_cache_too_small_or_two_drafters_are_clear_errors():
  step_fn = _oracle_verifier(SEQ)
  small = draft_model.DraftModel(_stub_drafter(SEQ).step_fn, stub_cache(1, 22), MASK)
  with pytest.raises(ValueError, match='2 \\* block_size \\+ 1 = 23'):
    jacobi.pgj_decode(step_fn, stub_cache(1, 19), 1, 16, 3, draft_model=small)
  with pytest.raises(ValueError, match='not several'):
    jacobi.pgj_decode(step_fn, stub_cache(1, 22), 1, 16, 3, mask_id=MASK, draft_model=_stub_drafter(SEQ))


class _Vocabulary:
  def __init__(self, pieces):
    self._pieces = pieces
    self.vocab_size = len(pieces)

  def pieces(self, ids):
    return [self._pieces[i] for i in ids]


@pytest.mark.parametrize('pieces, objective, error', [
    (['<pad>', 'a', 'b'], 'at', 'selfdraft objective'),
    (['<pad>', 'a'], 'selfdraft', '2-piece vocabulary \\(an embedding of 2\\), the model 3'),
    (['<pad>', 'a', 'c'], 'selfdraft', 'differs from the model.s in 1 pieces \\(the first at id 2\\)'),
])
def test_a_drafter_of_another_objective_or_vocabulary_is_a_clear_error_before_decoding(pieces, objective, error):
  from types import SimpleNamespace  # pylint: disable=g-import-not-at-top
  from fastmt.errors import FastmtError  # pylint: disable=g-import-not-at-top
  from fastmt.translate import check_draft_model  # pylint: disable=g-import-not-at-top
  drafter = SimpleNamespace(objective=objective, tokenizer=_Vocabulary(pieces),
                            config=SimpleNamespace(vocab_size=len(pieces)))
  with pytest.raises(FastmtError, match=error):
    check_draft_model(drafter, _Vocabulary(['<pad>', 'a', 'b']))
  for same_or_extended in (['<pad>', 'a', 'b'], ['<pad>', 'a', 'b', '<mask>']):  # reserved symbols appended
    check_draft_model(SimpleNamespace(objective='selfdraft', tokenizer=_Vocabulary(same_or_extended),
                                      config=SimpleNamespace(vocab_size=len(same_or_extended))),
                      _Vocabulary(['<pad>', 'a', 'b']))


def test_the_translator_refuses_a_drafter_of_another_vocabulary_before_it_compiles(trained_float_parts,
                                                                                     monkeypatch):
  """Through the real entry point (Translator(..., draft_model=)): a drafter whose embedding does not match its
  own vocabulary, or whose vocabulary is the model's cut short, is a clear error in the constructor, before
  anything is compiled."""
  from types import SimpleNamespace  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  from fastmt.errors import FastmtError  # pylint: disable=g-import-not-at-top
  config, params, tokenizer = trained_float_parts
  monkeypatch.setattr(jax, 'jit', lambda *a, **k: pytest.fail('compiled before refusing the drafter'))
  settings = translate.DecodeSettings('spec', drafter='model', block_size=3)
  for drafter_config, drafter_tokenizer in ((config.replace(vocab_size=config.vocab_size + 5), tokenizer),
                                            (config, _Vocabulary(['<pad>', 'a']))):
    drafter = SimpleNamespace(objective='selfdraft', tokenizer=drafter_tokenizer, config=drafter_config,
                              params=params)
    with pytest.raises(FastmtError, match='vocabulary'):
      translate.Translator(config, params, tokenizer, settings, draft_model=drafter)


def _uncached_continuation(model, params, source, prefix, count, width=32):
  """The model's greedy continuation of prefix (BOS first), count tokens, each from a full uncached pass. The
  pass reads `width` target positions, PAD after the prefix: causal attention keeps them from the position read,
  and one compiled pass serves every prefix (op by op, each prefix length cost a compile of every op)."""
  forward = _FORWARDS.setdefault(id(model), (model, jax.jit(
      lambda params, source, tokens: model.apply({'params': params}, source, tokens))))[1]
  tokens = list(prefix)
  assert len(tokens) + count <= width
  for _ in range(count):
    logits = forward(params, source, jnp.array([tokens + [PAD_ID] * (width - len(tokens))]))
    tokens.append(int(jnp.argmax(logits[0, len(tokens) - 1])))
  return tokens[len(prefix):]


_FORWARDS = {}  # id(model) -> (model: kept alive so that its id is not reused, its compiled forward pass)


@pytest.mark.parametrize('precision_', ['float32', 'int8'])
def test_each_autoregressive_draft_is_the_drafters_uncached_greedy_continuation(precision_):
  """draft_autoregressive chained as the decoder chains it, two rows at their own committed lengths: each call
  the verifier accepts the first accepted - 1 drafts of a row and commits a token of its own after them (1 .. W
  tokens; W = 4: 3 real drafts per call, whole windows included). At every call each row's drafts equal the
  drafter's greedy continuation of that row's committed prefix computed without a cache, so the cache
  invariant holds across calls and rows. The drafter runs through translate.make_step_fn (per-row projected
  slots), as a float model and as the int8 copy the Translator builds."""
  width = 4
  model, params = random_model(5)
  source = jnp.array([[4, 5, 6, 7, EOS_ID], [9, 8, 7, EOS_ID, PAD_ID]])
  if precision_ == 'int8':  # the Translator's drafter: the int8 copy, its int8 output layout
    int8_config, params = precision.for_inference(model.config, params, 'int8')
    model = models.Transformer(int8_config)
  encoded = model.apply({'params': params}, source, method=models.Transformer.encode)
  memory = model.apply({'params': params}, encoded, source, method=models.Transformer.memory)
  step_fn = translate.make_step_fn(model, params, memory, None, translate.transposed_output_layout(params))
  drafter = draft_model.DraftModel(step_fn, None, None, autoregressive=True)  # the real path: per-row project
  cache = models.init_cache(model.config, 2, draft_model.drafter_cache_length(20, width))
  outputs, drafts = [[], []], None  # what the verifier committed per row; the last call's drafts
  accepts = [(0, 1, 4, 2, 4, 1, 3), (0, 4, 4, 1, 2, 3, 1)]  # the first call drafts from BOS alone
  for call in range(len(accepts[0])):
    for row in range(2):
      accepted = accepts[row][call]
      if accepted:
        outputs[row] += drafts[row, :accepted - 1].tolist() + [A + len(outputs[row]) % 5]
    tokens = jnp.array([[BOS_ID] + out + [PAD_ID] * (24 - len(out)) for out in outputs])
    drafts, cache = draft_model.draft_autoregressive(drafter, cache, tokens, jnp.array([len(o) for o in outputs]),
                                                     width)
    assert drafts.shape == (2, width)
    for row in range(2):
      expected = _uncached_continuation(model, params, source[row:row + 1], [BOS_ID] + outputs[row], width - 1)
      assert drafts[row, :width - 1].tolist() == expected, f'row {row}, committed {len(outputs[row])}'
      assert int(drafts[row, -1]) == expected[-1]  # the column never compared repeats the last draft


@pytest.mark.parametrize('batch', [1, 3])
def test_the_verifier_as_its_own_autoregressive_drafter_accepts_every_window(batch):
  """A drafter identical to the verifier drafts exactly its greedy tokens: every call commits W tokens (the
  last call of a row fewer), ceil(greedy's calls / W) calls per row, and the output is greedy's; rows of a
  batch end at their own EOS or cap."""
  model, params = random_model(21)
  rng = np.random.default_rng(batch)
  source = jnp.array(np.concatenate([rng.integers(4, 40, (batch, 6)), np.full((batch, 1), EOS_ID)], 1))
  eos_after = rng.integers(3, 14, batch)
  step_fn = model_step(model, params, source, eos_after)
  max_len = 16
  caps = jnp.array(rng.integers(4, max_len + 1, batch)) if batch > 1 else None
  expected = greedy.greedy_search(step_fn, models.init_cache(model.config, batch, max_len), batch, max_len, caps)
  for width in (2, 3, 5):
    drafter = draft_model.DraftModel(step_fn, models.init_cache(model.config, batch,
                                                                draft_model.drafter_cache_length(max_len, width)),
                                     None, model.config.vocab_size, autoregressive=True)
    out = jacobi.pgj_decode(step_fn, models.init_cache(model.config, batch, max_len + width), batch, max_len,
                            width, row_caps=caps, draft_model=drafter)
    np.testing.assert_array_equal(out.tokens, expected.tokens, err_msg=f'W={width}')
    np.testing.assert_array_equal(out.decoder_calls, -(-np.asarray(expected.decoder_calls) // width),
                                  err_msg=f'W={width}')


@pytest.mark.parametrize('seed', range(2))
def test_a_random_autoregressive_drafter_gives_the_verifiers_greedy_output(seed):
  """Exact whatever an autoregressive drafter drafts: a random drafter of another shape, ids past the verifier's
  vocabulary never drafted, windows of 2, 3 and 5, rows with their own caps."""
  verifier, verifier_params = random_model(50 + seed)
  small = tiny_model_config(emb_dim=16, num_decoder_layers=1, num_encoder_layers=1, mlp_dim=32, vocab_size=48)
  drafter, drafter_params = random_model(60 + seed, small)
  rng = np.random.default_rng(seed)
  batch, max_len = 4, 16
  source = rng.integers(4, 40, (batch, 9))
  source[:, 6], source[:, 7:] = EOS_ID, PAD_ID
  step_fn = model_step(verifier, verifier_params, jnp.array(source), rng.integers(1, 20, batch))
  caps = jnp.array(rng.integers(0, max_len + 1, batch))
  expected = greedy.greedy_search(step_fn, models.init_cache(verifier.config, batch, max_len), batch, max_len, caps)
  for width in (2, 3, 5):
    drafts = draft_model.DraftModel(model_step(drafter, drafter_params, jnp.array(source)),
                                    models.init_cache(small, batch, draft_model.drafter_cache_length(max_len, width)),
                                    None, verifier.config.vocab_size, autoregressive=True)
    out, trace = jacobi.pgj_decode(step_fn, models.init_cache(verifier.config, batch, max_len + width), batch,
                                   max_len, width, row_caps=caps, draft_model=drafts, return_trace=True)
    np.testing.assert_array_equal(out.tokens, expected.tokens, err_msg=f'W={width}')
    assert (np.asarray(out.decoder_calls) <= np.asarray(expected.decoder_calls)).all()
    assert (np.asarray(trace.inputs) < verifier.config.vocab_size).all()
