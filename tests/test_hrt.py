"""HRT: the chunked layout against the papers' examples, the four training tasks and the curriculum, two-pass
decoding on stub logits with exact outputs, and fine-tuning an AT model into HRT end to end."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import one_hot_logits, stub_cache
from fastmt.decoding import chunks
from fastmt.decoding.hrt import hrt_decode, stage_one_caps
from fastmt.decoding.step import BOS_ID, EOS_ID, PAD_ID
from fastmt.errors import FastmtError
from fastmt.objectives import hrt

MASK_ID, BOS_K = 4, 5  # stand-ins for <mask> and <bos_k>
Y = [11, 12, 13, 14]  # y1 .. y4


def test_layout_is_table_1():
  """HRT Table 1 / RoyalFlush Figure 1, k = 2, y = y1 .. y4: Skip-AT (<s2>, y2, y4) at (0, 2, 4) -> (y2, y4, EOS);
  Skip-CMLM sees (M, y2, M, y4, M, EOS) and predicts y1, y3 and EOS."""
  target = jnp.array([Y + [EOS_ID, PAD_ID]])
  extended = chunks.extended_target(target, 2)
  assert np.asarray(extended).tolist() == [Y + [EOS_ID, EOS_ID]]
  z = chunks.skip_targets(extended, 2)
  assert np.asarray(z).tolist() == [[12, 14, EOS_ID]]
  assert np.asarray(chunks.skip_positions(3, 2)).tolist() == [0, 2, 4]
  assert np.asarray(chunks.masked_input(z, 2, MASK_ID)).tolist() == [[MASK_ID, 12, MASK_ID, 14, MASK_ID, EOS_ID]]
  assert np.asarray(chunks.extended_target(target, 3)).tolist() == [Y + [EOS_ID, EOS_ID]]
  assert np.asarray(chunks.skip_targets(chunks.extended_target(target, 3), 3)).tolist() == [[13, EOS_ID]]


def make_batch(rows):
  length = max(len(r) for r in rows) + 2
  target = np.zeros((len(rows), length), np.int32)
  decoder_input = np.zeros_like(target)
  for b, words in enumerate(rows):
    target[b, :len(words) + 1] = words + [EOS_ID]
    decoder_input[b, :len(words) + 1] = [BOS_ID] + words
  return {'source': jnp.ones((len(rows), 3), jnp.int32), 'decoder_input': jnp.asarray(decoder_input),
          'target': jnp.asarray(target)}


def test_curriculum_moves_rows_from_at_and_cmlm_to_the_skip_tasks():
  options = hrt.HrtOptions(chunk_size=2, curriculum_steps=100)
  assert float(hrt.skip_fraction(options, 0)) == 0.0
  assert float(hrt.skip_fraction(options, 50)) == 0.5
  assert float(hrt.skip_fraction(options, 150)) == 1.0
  assert float(hrt.skip_fraction(hrt.HrtOptions(2, curriculum=False), 0)) == 1.0
  assert float(hrt.skip_fraction(hrt.HrtOptions(2, curriculum_power=2.0, curriculum_steps=100), 50)) == 0.25
  batch = make_batch([Y, Y, Y, Y])
  early = hrt.hrt_batch(batch, 0, options, MASK_ID, BOS_K)
  assert early['decoder_input'].shape == (8, 6)  # an autoregressive and a masked sample per pair
  assert np.asarray(early['decoder_input'][0]).tolist() == [BOS_ID] + Y + [PAD_ID]  # AT
  assert np.asarray(early['positions'][0]).tolist() == [0, 1, 2, 3, 4, 5]
  late = hrt.hrt_batch(batch, 100, options, MASK_ID, BOS_K)
  assert np.asarray(late['decoder_input'][0]).tolist() == [BOS_K, 12, 14, PAD_ID, PAD_ID, PAD_ID]  # Skip-AT
  assert np.asarray(late['positions'][0]).tolist()[:3] == [0, 2, 4]
  assert np.asarray(late['target'][0]).tolist()[:3] == [12, 14, EOS_ID]
  assert np.asarray(late['weights'][0]).tolist() == [1, 1, 1, 0, 0, 0]
  # Skip-CMLM: deterministic masks, loss on them only, bidirectional over the real slots.
  assert np.asarray(late['decoder_input'][4]).tolist() == [MASK_ID, 12, MASK_ID, 14, MASK_ID, EOS_ID]
  assert np.asarray(late['weights'][4]).tolist() == [1, 0, 1, 0, 1, 0]
  assert np.asarray(late['positions'][4]).tolist() == [1, 2, 3, 4, 5, 6]
  assert bool(late['self_mask'][4].all())
  assert not bool(late['self_mask'][0, 0, 1])  # causal for the autoregressive samples
  half = hrt.hrt_batch(batch, 50, options, MASK_ID, BOS_K)
  skip_rows = [int(half['decoder_input'][b, 0] == BOS_K) for b in range(4)]
  assert skip_rows == [1, 1, 0, 0]


def test_cmlm_masks_between_one_and_all_words_never_eos():
  options = hrt.HrtOptions(chunk_size=2, curriculum_steps=10**6)
  batch = make_batch([list(range(11, 11 + n)) for n in (1, 2, 5, 9)])
  for step in range(20):
    fields = hrt.hrt_batch(batch, step, options, MASK_ID, BOS_K)
    masked = np.asarray(fields['decoder_input'][4:]) == MASK_ID
    words = np.array([1, 2, 5, 9])
    assert (masked.sum(1) >= 1).all() and (masked.sum(1) <= words).all()
    assert (np.asarray(fields['weights'][4:]) == masked).all()
    assert not (masked & (np.asarray(fields['target'][4:]) == EOS_ID)).any()


def oracle_hrt_step(natural, k):
  """Stub decoder for natural targets [B, T] (words, EOS, PAD): a one-position call at (scaled) position p
  predicts y~[p + k - 1] (Skip-AT); a longer call is stage II and predicts y~[p - 1] at position p."""
  extended = chunks.extended_target(jnp.asarray(natural), k)

  def step_fn(tokens, positions, self_mask, cache, write_offsets, project=None):
    index = jnp.where(tokens.shape[1] == 1, positions + k - 1, positions - 1)
    index = jnp.clip(index, 0, extended.shape[1] - 1)
    predicted = jnp.take_along_axis(extended, index, axis=1)
    # EOS far below every other wrong token: beam search's runner-up continuations are words, not early EOS
    # (a sentence with K finished hypotheses stops, whatever its live ones score).
    eos_penalty = jnp.where(predicted == EOS_ID, 0.0, -100.0)[..., None] * jax.nn.one_hot(EOS_ID, 16)
    logits = one_hot_logits(predicted) + eos_penalty
    return (logits if project is None else logits[:, project]), cache
  return step_fn


def natural_rows(lengths, width):
  rows = np.zeros((len(lengths), width), np.int32)
  for b, n in enumerate(lengths):
    rows[b, :n] = 6 + (np.arange(n) + b) % 9
    rows[b, n] = EOS_ID
  return rows


@pytest.mark.parametrize('k', [2, 3, 4])
def test_two_stage_greedy_returns_the_oracle_and_counts_calls(k):
  lengths = [0, 1, 4, 7, 10]
  natural = natural_rows(lengths, 24)
  oracle, projected = oracle_hrt_step(natural, k), []

  def step_fn(tokens, positions, self_mask, cache, write_offsets, project=None):
    if tokens.shape[1] > 1:  # stage II asks for logits at its masks only: k - 1 of every k slots
      projected.append((tokens.shape[1], None if project is None else np.asarray(project).tolist()))
    return oracle(tokens, positions, self_mask, cache, write_offsets, project)
  out = hrt_decode(step_fn, stub_cache(5, 24), 5, 24, k, MASK_ID, BOS_K)
  assert projected and all(p == [i for i in range(w) if i % k != k - 1] for w, p in projected)
  assert (np.asarray(out.tokens) == natural).all()
  assert np.asarray(out.decoder_calls).tolist() == [-(-(n + 1) // k) + 1 for n in lengths]


def test_a_step_function_taking_keywords_through_kwargs_gets_every_positions_logits_asked_for():
  """One step function for every decoder takes the interleaved decoders' directions= through **kwargs; HRT read
  that as taking project= and failed on the shape of the logits it got back."""
  natural = natural_rows([0, 3, 8], 24)
  oracle = oracle_hrt_step(natural, 2)

  def step_fn(tokens, positions, self_mask, cache, write_offsets, **unused):
    assert 'project' not in unused
    return oracle(tokens, positions, self_mask, cache, write_offsets)
  out = hrt_decode(step_fn, stub_cache(3, 24), 3, 24, 2, MASK_ID, BOS_K)
  assert (np.asarray(out.tokens) == natural).all()


def test_two_stage_beam_returns_the_oracle():
  natural = natural_rows([3, 8], 20)
  step = oracle_hrt_step(np.repeat(natural, 3, axis=0), 2)
  out = hrt_decode(step, stub_cache(6, 20), 2, 20, 2, MASK_ID, BOS_K, beam_size=3, nat_beam_size=2)
  assert (np.asarray(out.tokens) == natural).all()


def test_stage_two_scores_decide_between_stage_one_hypotheses():
  """RoyalFlush Eq. 2: stage I's best hypothesis (A EOS, log 0.6) gets flat stage-II logits at its masks, the
  runner-up (B EOS, log 0.4) confident ones. With b_nat = 2 both go through stage II and the runner-up's total
  wins; with b_nat = 1 only the best does. (The oracle test above cannot tell: there every stage II agrees.)"""
  A, B, C, D = 11, 12, 13, 14

  def step_fn(tokens, positions, self_mask, cache, write_offsets, project=None):
    rows, width = tokens.shape
    if width == 1:  # stage I: after <bos_k> A (0.6) or B (0.4); after a word EOS
      after_start = jnp.full((rows, 16), -30.0).at[:, A].set(np.log(0.6)).at[:, B].set(np.log(0.4))
      after_word = jnp.full((rows, 16), -30.0).at[:, EOS_ID].set(0.0)
      logits = jnp.where((positions == 0)[:, :1], after_start, after_word)[:, None]
    else:  # stage II over (M, z1, M, EOS): sure of C then EOS after B, nearly flat (D by a hair) after A
      sure = one_hot_logits(jnp.where(jnp.arange(width) == 0, C, EOS_ID))[None]
      flat = jnp.zeros((1, width, 16)).at[..., D].set(0.1)
      logits = jnp.where((tokens[:, 1] == B)[:, None, None], sure, flat)
    return (logits if project is None else logits[:, project]), cache
  both = hrt_decode(step_fn, stub_cache(2, 8), 1, 8, 2, MASK_ID, BOS_K, beam_size=2, nat_beam_size=2)
  assert np.asarray(both.tokens)[0, :3].tolist() == [C, B, EOS_ID]
  best_only = hrt_decode(step_fn, stub_cache(2, 8), 1, 8, 2, MASK_ID, BOS_K, beam_size=2, nat_beam_size=1)
  assert np.asarray(best_only.tokens)[0, :4].tolist() == [D, A, D, EOS_ID]


def test_stage_two_eos_inside_a_chunk_truncates_and_caps_bound_stage_one():
  """Stage II predicting EOS (once or several times) cuts the output at the first; a row's stage I makes at
  most ceil(cap / k) calls, and the output is cut at the cap (a source at the maximum length)."""
  natural = natural_rows([9], 20)

  def step_fn(tokens, positions, self_mask, cache, write_offsets, project=None):
    logits, cache = oracle_hrt_step(natural, 2)(tokens, positions, self_mask, cache, write_offsets)
    if tokens.shape[1] > 1:  # stage II: EOS at the masks of positions 3 and 5
      logits = logits.at[:, 2, EOS_ID].set(100.0).at[:, 4, EOS_ID].set(100.0)
    return (logits if project is None else logits[:, project]), cache
  out = hrt_decode(step_fn, stub_cache(1, 20), 1, 20, 2, MASK_ID, BOS_K)
  # The whole row: stage II fills (y1, y2, EOS, y4, EOS, y6 .. y9, EOS); cut after the first EOS, PAD to 20.
  assert np.asarray(out.tokens)[0].tolist() == natural[0, :2].tolist() + [EOS_ID] + [PAD_ID] * 17
  capped = hrt_decode(oracle_hrt_step(natural, 2), stub_cache(1, 20), 1, 20, 2, MASK_ID, BOS_K,
                      row_caps=jnp.array([5]))
  assert int(capped.decoder_calls[0]) == 3 + 1  # ceil(5 / 2) stage-I calls, one stage II
  assert np.asarray(capped.tokens)[0].tolist() == natural[0, :5].tolist() + [PAD_ID] * 15
  assert np.asarray(stage_one_caps(jnp.array([0, 1, 5, 128]), 2, 128)).tolist() == [0, 1, 3, 64]
  assert np.asarray(stage_one_caps(jnp.array([5, 7]), 2, 7)).tolist() == [3, 3]  # the papers' bound L // k


@pytest.mark.parametrize('k', [2, 3, 4])
def test_a_translation_that_fits_its_cap_comes_back_whole_as_greedys(k):
  """Four words and EOS under a row cap of 5: greedy returns them whole, and so must HRT for every k. With
  cap // k stage-I calls it returned (y1 .. y4) without EOS for k = 2 and 4, and lost y4 for k = 3."""
  natural = natural_rows([4, 4], 16)
  caps = jnp.array([5, 16])
  out = hrt_decode(oracle_hrt_step(natural, k), stub_cache(2, 16), 2, 16, k, MASK_ID, BOS_K, row_caps=caps)
  assert np.asarray(out.tokens).tolist() == natural.tolist()


def test_the_plain_step_contract_decodes_and_bad_arguments_are_clear_errors():
  """docs/API.md's step_fn has no `project` keyword: stage II called it with one (a TypeError). Counts, ids
  and the cache went unchecked: chunk_size=0 a ZeroDivisionError, max_length=0 an empty output, a mask id
  outside the vocabulary decoded garbage (an embedding lookup clamps)."""
  natural = natural_rows([0, 3, 6], 16)
  oracle = oracle_hrt_step(natural, 2)

  def plain(tokens, positions, self_mask, cache, write_offsets):
    return oracle(tokens, positions, self_mask, cache, write_offsets)
  out = hrt_decode(plain, stub_cache(3, 16), 3, 16, 2, MASK_ID, BOS_K)
  assert (np.asarray(out.tokens) == natural).all()
  good = dict(batch_size=3, max_length=16, chunk_size=2, mask_id=MASK_ID, bos_k_id=BOS_K)
  for bad, message in ((dict(chunk_size=0), 'chunk_size must be a whole number >= 1'),
                       (dict(chunk_size=2.0), 'chunk_size must be a whole number >= 1'),
                       (dict(max_length=0), 'max_length must be a whole number >= 1'),
                       (dict(mask_id=-1), 'mask_id must be a token id'),
                       (dict(mask_id=600), r'special ids \(600,\) .* below the vocabulary size 16'),
                       (dict(bos_k_id=600), r'special ids \(600,\) .* below the vocabulary size 16')):
    with pytest.raises(ValueError, match=message):
      hrt_decode(plain, stub_cache(3, 16), **{**good, **bad})
  with pytest.raises(ValueError, match='cache leaf .* rows = 3'):
    hrt_decode(plain, stub_cache(2, 16), **good)


def test_bad_settings_are_clear_errors():
  with pytest.raises(FastmtError, match='chunk_size'):
    hrt.HrtOptions(chunk_size=1)
  from fastmt import objectives  # pylint: disable=g-import-not-at-top
  # options of the wrong type: a TypeError deep in the objective, 'no <bos_2.5> symbol', nan trained silently
  for parse, options, message in (
      (objectives.hrt_from, dict(chunk_size='2'), "hrt chunk_size must be a whole number, got '2'"),
      (objectives.hrt_from, dict(chunk_size=2.5), 'hrt chunk_size must be a whole number'),
      (objectives.hrt_from, dict(curriculum='yes'), 'hrt curriculum must be True or False'),
      (objectives.selfdraft_from, dict(block_size=2.5), 'selfdraft block_size must be a whole'),
      (objectives.selfdraft_from, dict(draft_weight=float('nan')), 'selfdraft draft_weight must be a finite number'),
      (objectives.interleaving_from, dict(directions=2.0), 'interleaving directions must be a whole number')):
    with pytest.raises(FastmtError, match=message):
      parse(options)
  assert objectives.hrt_from(dict(curriculum_power=2)).curriculum_power == 2  # an int where a float goes: fine
  from fastmt.translate import DecodeSettings  # pylint: disable=g-import-not-at-top
  with pytest.raises(FastmtError, match='nat_beam_size'):
    DecodeSettings('hrt', beam_size=2, nat_beam_size=3)
  from fastmt.configs import hrt as configs  # pylint: disable=g-import-not-at-top
  assert configs.get_config('k3,e6d1,nocl').hrt.to_dict()['curriculum'] is False
  assert configs.get_config('k2,small').model.emb_dim == 128  # the notebooks' shape
  assert configs.get_config('k2,e6d6').model.num_decoder_layers == 6  # the one-GPU table's
  with pytest.raises(ValueError):
    configs.get_config('k1')


def test_left_to_right_decoding_of_a_model_trained_without_the_curriculum_warns(trained_workdir, caplog):
  """`configs/hrt.py:k2,nocl` trains the skip tasks from the first step: its AT task never trains, so C_d = 1
  decodes it poorly (0.69 BLEU in BENCHMARKS' ablation, which measures it: allowed, but said); a model with the
  curriculum, or --algorithm hrt, says nothing."""
  from fastmt import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  from fastmt.translate import DecodeSettings, Translator  # pylint: disable=g-import-not-at-top
  config = workdir_lib.load_model_config(trained_workdir)
  params, _ = workdir_lib.restore_params(trained_workdir, config)
  tokenizer = workdir_lib.load_tokenizer(trained_workdir)

  def warnings(algorithm, **options):
    caplog.clear()
    with caplog.at_level('WARNING', logger='fastmt.translate'):
      Translator(config, params, tokenizer, DecodeSettings(algorithm), objective='hrt',
                 objective_options=dict(chunk_size=2, **options))
    return [r.getMessage() for r in caplog.records if 'without the curriculum' in r.getMessage()]
  assert len(warnings('greedy', curriculum=False)) == 1
  assert 'C_d = 1' in warnings('pgj', curriculum=False)[0]
  assert not warnings('greedy')


@pytest.mark.parametrize('relative', [0, 3])
def test_fine_tuning_an_at_model_into_hrt_end_to_end(trained_workdir, tiny_config, tmp_path, relative, monkeypatch,
                                                      caplog):
  """From the AT model, HRT trains and decodes with both stages, beams, C_d = 1 and int8; with relative
  position keys (HRT Eq. 4, added at zero to the AT model's weights) too."""
  import ml_collections  # pylint: disable=g-import-not-at-top
  import fastmt  # pylint: disable=g-import-not-at-top
  from conftest import fine_tuning_config  # pylint: disable=g-import-not-at-top
  from fastmt import train_lib, workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  config = fine_tuning_config(tiny_config, trained_workdir, 'hrt', 'hrt', dict(chunk_size=2))
  config.model.relative_key_distance = relative
  workdir = str(tmp_path / 'hrt')
  train_lib.train_and_evaluate(config, workdir)
  if relative:
    params, _ = workdir_lib.restore_params(workdir, workdir_lib.load_model_config(workdir))
    assert np.any(params['decoder_0']['self_attention']['relative_keys'])  # trained: no longer zero
  model = fastmt.load(workdir)
  texts = ['In the beginning God created the heaven and the earth.', '']
  two_stage = model.translate(texts, algorithm='hrt')
  assert len(two_stage) == 2 and two_stage[1] == ''
  assert len(model.translate(texts, algorithm='greedy')) == 2  # C_d = 1
  assert len(fastmt.load(workdir, dtype='int8').translate(texts, algorithm='hrt')) == 2  # 8-bit: both stages
  if relative:
    return  # what follows does not depend on the relative keys: once is enough (the tests' minutes)
  assert len(model.translate(texts, algorithm='hrt', beam_size=3, nat_beam_size=2)) == 2
  assert len(fastmt.load(workdir, dtype='bfloat16').translate(texts, algorithm='hrt')) == 2
  _check_clusters_and_the_command_line(model, workdir, tmp_path)
  # fastmt's float32 kernel (products of at most 8 rows; XLA's where it cannot run): the same translations
  kernel = fastmt.load(workdir, float32_kernel=True)
  assert kernel.translate(texts, algorithm='hrt') == two_stage
  assert kernel.translate(texts, algorithm='hrt', beam_size=3, nat_beam_size=2) == model.translate(
      texts, algorithm='hrt', beam_size=3, nat_beam_size=2)
  with pytest.raises(FastmtError, match='chunk size 2'):
    model.translate(texts, algorithm='hrt', chunk_size=3)
  with pytest.raises(FastmtError, match='objective'):
    fastmt.load(trained_workdir).translate(texts, algorithm='hrt')
  other = ml_collections.ConfigDict(config.to_dict())
  other.model.emb_dim = 64
  with pytest.raises(FastmtError, match='another model config'):
    train_lib.train_and_evaluate(other, str(tmp_path / 'bad_init'))
  _check_a_continued_run_keeps_its_curriculum(config, workdir, monkeypatch, caplog)


def _check_a_continued_run_keeps_its_curriculum(config, workdir, monkeypatch, caplog):
  """curriculum_steps 0 (configs/hrt.py) is T = num_train_steps at the run's first start, recorded: filled in
  again at every start, a run trained to 2400 steps and continued to 4000 fell back from p_k = 1 to 0.6."""
  import json  # pylint: disable=g-import-not-at-top
  import ml_collections  # pylint: disable=g-import-not-at-top
  from fastmt import objectives, train_lib, workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  steps = config.num_train_steps
  assert config.hrt.get('curriculum_steps', 0) == 0
  assert workdir_lib.load_objective_options(workdir)['curriculum_steps'] == steps
  built = []
  real_build = objectives.build
  monkeypatch.setattr(objectives, 'build', lambda name, options, *rest: built.append(options) or real_build(
      name, options, *rest))
  longer = ml_collections.ConfigDict(config.to_dict())
  longer.num_train_steps = steps + 1
  train_lib.train_and_evaluate(longer, workdir)
  assert built[-1]['curriculum_steps'] == steps
  assert workdir_lib.load_objective_options(workdir)['curriculum_steps'] == steps
  # A work directory recorded before T was kept (0): it goes on stretched to the new count, as it did, warned of.
  path = os.path.join(workdir, workdir_lib.OBJECTIVE_FILE)
  with open(path) as f:
    record = json.load(f)
  record['options']['curriculum_steps'] = 0
  with open(path, 'w') as f:
    json.dump(record, f)
  longer.num_train_steps = steps + 2
  with caplog.at_level('WARNING'):
    train_lib.train_and_evaluate(longer, workdir)
  assert built[-1]['curriculum_steps'] == 0
  assert f'stretches from {steps + 1} to {steps + 2} steps, so p_k falls back' in caplog.text


def test_an_old_vocabulary_is_extended_for_fine_tuning(tmp_path, tiny_config):
  """A model whose vocabulary predates the reserved symbols fine-tunes into HRT: the symbols are appended (the
  same ids and segmentation for everything else) and the tied embedding grows by as many rows."""
  import os  # pylint: disable=g-import-not-at-top
  import ml_collections  # pylint: disable=g-import-not-at-top
  import fastmt  # pylint: disable=g-import-not-at-top
  from fastmt import train_lib, workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  from fastmt.data import tokenizer as tokenizer_lib  # pylint: disable=g-import-not-at-top
  from conftest import DATA  # pylint: disable=g-import-not-at-top
  old_dir = tmp_path / 'old_at'
  os.makedirs(old_dir)
  lines = (DATA / 'genesis.en').read_text().splitlines() + (DATA / 'genesis.de').read_text().splitlines()
  base = tokenizer_lib.train_tokenizer(lines, str(old_dir / 'spm.model'), 300)  # no reserved symbols
  added = tokenizer_lib.extend_with_reserved(str(old_dir / 'spm.model'), str(tmp_path / 'new.model'))
  assert added == list(tokenizer_lib.RESERVED_SYMBOLS)
  new = tokenizer_lib.Tokenizer(str(tmp_path / 'new.model'))
  assert new.vocab_size == base.vocab_size + len(added) and new.special_id('<mask>') == base.vocab_size
  assert [list(x) for x in new.encode(lines[:50])] == [list(x) for x in base.encode(lines[:50])]
  assert tokenizer_lib.extends(str(old_dir / 'spm.model'), str(tmp_path / 'new.model'))
  assert not tokenizer_lib.extends(str(tmp_path / 'new.model'), str(old_dir / 'spm.model'))

  config = ml_collections.ConfigDict(tiny_config.to_dict())
  config.num_train_steps, config.eval_every_steps, config.checkpoint_every_steps = 3, 3, 3
  config.eval_bleu_sentences = 2
  train_lib.train_and_evaluate(config, str(old_dir))  # an AT model on the old vocabulary
  config.objective, config.hrt, config.init_from = 'hrt', ml_collections.ConfigDict(dict(chunk_size=2)), str(old_dir)
  workdir = str(tmp_path / 'hrt')
  train_lib.train_and_evaluate(config, workdir)
  assert workdir_lib.load_model_config(workdir).vocab_size == base.vocab_size + len(added)
  assert len(fastmt.load(workdir).translate(['In the beginning'], algorithm='hrt')) == 1


def test_stage_two_sizes_bound_the_padding():
  """Every stage-I length 1..m has a branch at most 7 slots or a quarter of itself longer (the powers of two of
  2026-11-26 padded a 17-token row to 32), the last branch is m, and the branches stay few for long caps."""
  from fastmt.decoding import hrt as two_pass  # pylint: disable=g-import-not-at-top
  for m in [*range(1, 70), 100, 128, 255, 256, 512]:
    sizes = two_pass.stage_two_sizes(m)
    assert sizes == sorted(set(sizes)) and sizes[-1] == m and sizes[0] >= 1
    for n in range(1, m + 1):
      bucket = next(size for size in sizes if size >= n)
      assert bucket - n <= max(7, n // 4), (m, n, bucket)
  assert two_pass.stage_two_sizes(32) == [8, 16, 24, 32]
  assert len(two_pass.stage_two_sizes(512)) == 20


@pytest.mark.parametrize('m, k, lengths, relative, pad_inside', [
    (20, 2, [3, 1], 0, False), (20, 2, [9, 20], 0, False), (20, 2, [12, 5], 0, False), (20, 2, [17, 5], 0, False),
    (40, 2, [17, 3], 0, False), (40, 3, [24, 0, 8], 0, False), (40, 3, [0, 0], 0, False), (7, 3, [7, 2], 0, False),
    (40, 2, [17, 3], 3, False), (20, 2, [9, 3], 0, True)])
def test_stage_two_on_the_used_length_equals_the_full_pass(m, k, lengths, relative, pad_inside):
  """fill_masks_bucketed runs stage II over the longest row's bucket only (for m = 40: 17 tokens in the branch
  of 24, 24 in its own): the same tokens and scores as the pass over every stage-I slot (masked slots never
  see PAD slots), on a random model; a row of 0 tokens is a padding row (beam search's)."""
  from conftest import (model_step, random_model, tiny_model_config,  # pylint: disable=g-import-not-at-top
                        with_random_relative_keys)
  from fastmt import models  # pylint: disable=g-import-not-at-top
  from fastmt.decoding import hrt as two_pass  # pylint: disable=g-import-not-at-top
  model, params = random_model(3, tiny_model_config(relative_key_distance=relative))
  if relative:
    params = with_random_relative_keys(params)
  rng = np.random.default_rng(sum(lengths) + m + k)
  mask_id = 33
  skip = np.zeros((len(lengths), m), np.int32)
  for row, n in enumerate(lengths):
    if n:
      skip[row, :n - 1] = rng.integers(4, 30, n - 1)
      skip[row, n - 1] = EOS_ID
  if pad_inside:  # stage I predicted PAD before EOS: the bucket was chosen by the count of non-PAD tokens (8 of 9),
    skip[0, 1] = PAD_ID  # cutting off the row's EOS
  source = jnp.asarray(rng.integers(4, 30, (len(lengths), 6)))
  step_fn = model_step(model, params, source)
  cache = models.init_cache(model.config, len(lengths), m * k)
  full = two_pass.fill_masks(step_fn, cache, jnp.asarray(skip), k, mask_id)
  bucketed = two_pass.fill_masks_bucketed(step_fn, cache, jnp.asarray(skip), k, mask_id)
  np.testing.assert_array_equal(bucketed[0], full[0])
  np.testing.assert_allclose(bucketed[1], full[1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('k, relative', [(2, 0), (3, 0), (2, 3)])
def test_both_stages_call_the_model_as_the_skip_tasks_train_it(k, relative):
  """hrt_decode on a real model: every stage-I call gives the logits of the Skip-AT training row of its output,
  and the stage-II call those of the Skip-CMLM row (hrt_batch: <bos_k>, positions 0, k, 2k, ..., causal; masks
  before every stage-I token, positions 1 .. L, bidirectional). Logits recorded from inside the loops (a
  random model mostly copies its input token, so its outputs alone would not show a wrong mask or position).
  Stage I's EOS is forced at its fourth call, so that both rows end there as the training target does."""
  from conftest import (random_model, select_positions, source_memory,  # pylint: disable=g-import-not-at-top
                        tiny_model_config, with_random_relative_keys)
  from fastmt import models  # pylint: disable=g-import-not-at-top
  config = tiny_model_config(relative_key_distance=relative)
  model, params = random_model(5, config)
  if relative:
    params = with_random_relative_keys(params)
  source = jnp.array([[5, 6, 7, 8, EOS_ID], [9, 10, EOS_ID, PAD_ID, PAD_ID]])
  memory = source_memory(model, params, source)
  calls = []

  def step_fn(tokens, positions, self_mask, cache, write_offsets, project=None):
    logits, _, cache = model.apply({'params': params}, tokens, positions, self_mask, memory, cache, write_offsets,
                                   method=models.Transformer.decode)
    jax.debug.callback(lambda offsets, logits: calls.append((int(offsets[0]), np.asarray(logits))), write_offsets,
                       logits, ordered=True)
    if tokens.shape[1] == 1:  # stage I: words until the input at position 3k, then EOS
      logits = logits.at[..., EOS_ID].set(jnp.where(positions >= 3 * k, 1e9, -1e9))
    return (logits if project is None else select_positions(logits, project)), cache
  out = hrt_decode(step_fn, models.init_cache(config, 2, 4 * k), 2, 4 * k, k, MASK_ID, BOS_K)
  assert np.asarray(out.decoder_calls).tolist() == [5, 5]  # 4 stage-I calls and stage II
  stage_one = np.stack([logits[:, 0] for _, logits in calls[:4]], axis=1)  # [B, 4, V]
  skip_tokens = np.concatenate([np.argmax(stage_one[:, :3], -1), np.full((2, 1), EOS_ID)], axis=1)
  assert (skip_tokens[:, :3] > EOS_ID).all()
  # The training target whose chunks end in these tokens (what precedes them in a chunk is masked in training).
  target = np.zeros((2, 4 * k), np.int32)
  target[:, k - 1::k] = skip_tokens
  target[:, np.arange(4 * k) % k != k - 1] = 7
  batch = {'source': source, 'target': jnp.asarray(target),
           'decoder_input': jnp.asarray(np.concatenate([np.full((2, 1), BOS_ID), target[:, :-1]], axis=1))}
  fields = hrt.hrt_batch(batch, 0, hrt.HrtOptions(chunk_size=k, curriculum=False), MASK_ID, BOS_K)
  full = np.asarray(model.apply({'params': params}, fields['source'], fields['decoder_input'], fields['positions'],
                                fields['self_mask']))
  np.testing.assert_allclose(stage_one, full[:2, :4], atol=2e-4)  # Skip-AT rows
  assert [offset for offset, _ in calls] == [0, 1, 2, 3, 0] and calls[4][1].shape[1] == 4 * k
  np.testing.assert_allclose(calls[4][1], full[2:], atol=2e-4)  # Skip-CMLM rows


def recording_writes(step_fn, log):
  """step_fn that logs, for every call it runs (a debug callback: once per executed call, inside the loops too),
  (tokens per row, slots of the cache it was given, the highest slot its call writes + 1)."""
  def step(tokens, positions, self_mask, cache, write_offsets, **kwargs):
    width, slots = tokens.shape[1], jax.tree_util.tree_leaves(cache)[0].shape[1]
    jax.debug.callback(lambda end: log.append((width, slots, int(end))), jnp.max(write_offsets) + width)
    return step_fn(tokens, positions, self_mask, cache, write_offsets, **kwargs)
  return step


@pytest.mark.parametrize('beam_size, nat_beam_size', [(1, 1), (3, 2)])
@pytest.mark.parametrize('max_length, k', [(7, 3), (5, 2), (11, 4), (2, 3)])
def test_a_source_at_the_maximum_length_never_exceeds_the_cache(max_length, k, beam_size, nat_beam_size):
  """An oracle that never says EOS, no row caps, a cap L that k does not divide, and the cache the registry
  allocates (max(L, k) slots): stage I makes max(L // k, 1) calls on its max(L // k, 1) slots, stage II one
  call over those tokens' chunks (at most max(L, k) slots), and the output is the oracle's first
  min(L, max(L // k, 1) * k) words, no EOS (the last L mod k words are never produced: stage I is bounded by
  L / k), PAD after; greedy Skip-AT and the b_at / b_nat beam alike."""
  from fastmt.decoding import registry  # pylint: disable=g-import-not-at-top
  from fastmt.translate import DecodeSettings  # pylint: disable=g-import-not-at-top
  cache_length = registry.get('hrt').cache_length(max_length, DecodeSettings('hrt', chunk_size=k))
  assert cache_length == max(max_length, k)
  words = 6 + np.arange(12) % 9  # 12 words, no EOS: k divides 12, so y~ holds no EOS either
  natural = np.stack([words, np.roll(words, 1)]).astype(np.int32)
  log = []
  step = recording_writes(oracle_hrt_step(np.repeat(natural, beam_size, axis=0), k), log)
  out = hrt_decode(step, stub_cache(2 * beam_size, cache_length), 2, max_length, k, MASK_ID, BOS_K,
                   beam_size=beam_size, nat_beam_size=nat_beam_size)
  m = max(max_length // k, 1)  # stage-I tokens
  produced = min(max_length, m * k)
  expected = np.pad(natural[:, :produced], ((0, 0), (0, max_length - produced)))
  assert np.asarray(out.tokens).tolist() == expected.tolist()
  assert np.asarray(out.decoder_calls).tolist() == [m + 1, m + 1] and int(out.loop_iterations) == m + 1
  # Executed calls: m of one token each on the m-slot stage-I cache, writing slots 1 .. m in turn; then one
  # stage-II call of m * k tokens on as many slots; none past the cache it was given, nor past the allocation.
  jax.effects_barrier()  # every debug callback has run
  assert sorted(log) == [(1, m, end) for end in range(1, m + 1)] + [(m * k, m * k, m * k)]
  assert all(end <= slots <= cache_length for _, slots, end in log)


def test_targets_shorter_than_k_give_one_chunk_of_eos():
  """k = 3, every row on the skip tasks (no curriculum): y~ of an empty target is (EOS, EOS, EOS), of a
  one-word target (y1, EOS, EOS); Skip-AT reads <bos_k> at position 0 and predicts y~_3 = EOS, its only loss;
  Skip-CMLM masks y~_1 and y~_2 (the first k - 1 tokens of the chunk, EOS or not: Table 1's (M, y2, M, y4, M,
  EOS) for k = 2), keeps y~_3 and scores the masks only; the second chunk of these rows is all PAD (no loss,
  unseen by the bidirectional mask). A 4-word row sets the width (two chunks)."""
  options = hrt.HrtOptions(chunk_size=3, curriculum=False)
  fields = hrt.hrt_batch(make_batch([[], [11], Y]), 0, options, MASK_ID, BOS_K)
  rows = lambda name: np.asarray(fields[name]).tolist()
  none = [PAD_ID] * 3
  # Skip-AT (rows 0 .. 2): <bos_k> z1 .. -> z1 .. EOS.
  assert rows('decoder_input')[:3] == [[BOS_K] + [PAD_ID] * 5, [BOS_K] + [PAD_ID] * 5, [BOS_K, 13] + [PAD_ID] * 4]
  assert rows('target')[:3] == [[EOS_ID] + [PAD_ID] * 5, [EOS_ID] + [PAD_ID] * 5, [13, EOS_ID] + [PAD_ID] * 4]
  assert rows('weights')[:3] == [[1, 0, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0]]
  assert [p[:2] for p in rows('positions')[:3]] == [[0, 3], [0, 3], [0, 3]]  # 0, k, 2k, ... (PAD slots unread)
  # Skip-CMLM (rows 3 .. 5): the first k - 1 tokens of every chunk of y~ masked, loss at the masks only.
  assert rows('decoder_input')[3:] == [[MASK_ID, MASK_ID, EOS_ID] + none, [MASK_ID, MASK_ID, EOS_ID] + none,
                                       [MASK_ID, MASK_ID, 13, MASK_ID, MASK_ID, EOS_ID]]
  assert rows('target')[3:] == [[EOS_ID, EOS_ID, EOS_ID] + none, [11, EOS_ID, EOS_ID] + none,
                                [11, 12, 13, 14, EOS_ID, EOS_ID]]
  assert rows('weights')[3:] == [[1, 1, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0], [1, 1, 0, 1, 1, 0]]
  assert rows('positions')[3:] == [[1, 2, 3, 4, 5, 6]] * 3
  mask = np.asarray(fields['self_mask'])
  assert (mask[3] == [True] * 3 + [False] * 3).all() and (mask[4] == mask[3]).all() and mask[5].all()


def _check_clusters_and_the_command_line(model, workdir, tmp_path):
  """The clustered projection sits in the decoder step, so both HRT stages take it: with every token active the
  ids are the dense ones; with clusters of rare pieces only, stage I's and stage II's tokens stay inside them.
  decode.py's --algorithm hrt --chunk_size --beam_size --nat_beam_size gives the library's translations."""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  from conftest import DATA, REPO  # pylint: disable=g-import-not-at-top
  from fastmt import clusters_lib, projection  # pylint: disable=g-import-not-at-top
  sources = open(DATA / 'genesis.en', encoding='utf-8').read().splitlines()[:8]
  vocab = model.config.vocab_size
  hidden, _ = clusters_lib.record_states(model.translator('greedy'), sources, top_k=2)
  fingerprint = {'fingerprint': clusters_lib.fingerprint(model.config, model.tokenizer, model.params)}
  allowed = np.arange(vocab - 60, vocab)
  for name, active in (('all', np.arange(vocab)), ('rare', allowed)):
    clusters = projection.build_clusters(hidden, np.tile(active, (len(hidden), 1)), projection.fit_kmeans(hidden, 4),
                                         vocab)
    clusters_lib.save_clusters(str(tmp_path / name), clusters, fingerprint)
  for settings in (dict(), dict(beam_size=3, nat_beam_size=2)):
    dense = model.translator('hrt', **settings).translate_ids(sources, 8)[0]
    every = model.translator('hrt', clusters=str(tmp_path / 'all'), **settings).translate_ids(sources, 8)[0]
    assert [row.tolist() for row in every] == [row.tolist() for row in dense], settings
    assert {t for row in dense for t in row} - set(allowed.tolist()) - {EOS_ID}  # so the check below can fail
    rare = model.translator('hrt', clusters=str(tmp_path / 'rare'), **settings).translate_ids(sources, 8)[0]
    tokens = {t for row in rare for t in row.tolist()} - {EOS_ID}
    assert tokens and tokens <= set(allowed.tolist()), (settings, sorted(tokens - set(allowed.tolist())))
  (tmp_path / 'src.en').write_text('\n'.join(sources) + '\n', encoding='utf-8')
  for flags, settings in (([], {}), (['--beam_size', '3', '--nat_beam_size', '2'], dict(beam_size=3, nat_beam_size=2))):
    result = subprocess.run([sys.executable, str(REPO / 'decode.py'), '--workdir', workdir, '--input',
                             str(tmp_path / 'src.en'), '--output', str(tmp_path / 'hyp'), '--algorithm', 'hrt',
                             '--chunk_size', '2', *flags], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr
    hypotheses = (tmp_path / 'hyp').read_text(encoding='utf-8').split('\n')[:-1]
    assert hypotheses == model.translate(sources, algorithm='hrt', **settings), flags
