"""The RoyalFlush/KD toolbox: checkpoint averaging, half-precision inference, resumable distillation, mixing."""

import copy
import json
import os
import shutil

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import orbax.checkpoint as ocp
import pytest

from conftest import DATA
from fastmt import checkpoint_average, decode_lib, distill, precision, workdir as workdir_lib
from fastmt.data import batching, corpus, distilled, pipeline
from fastmt.errors import FastmtError
from fastmt.translate import DecodeSettings


def test_average_trees_is_the_elementwise_mean():
  trees = [{'a': jnp.full((2, 2), v), 'b': {'c': jnp.array([v, 2 * v])}} for v in (1.0, 2.0, 6.0)]
  mean = checkpoint_average.average_trees(trees)
  np.testing.assert_allclose(mean['a'], np.full((2, 2), 3.0))
  np.testing.assert_allclose(mean['b']['c'], [3.0, 6.0])


def test_averaged_workdir_holds_the_mean_of_the_last_checkpoints_and_decodes(trained_workdir, tmp_path):
  model_config = workdir_lib.load_model_config(trained_workdir)
  steps = checkpoint_average.last_steps(trained_workdir, 2)
  params, averaged_steps = checkpoint_average.average_last_checkpoints(trained_workdir, 2)
  assert averaged_steps == steps
  output = str(tmp_path / 'avg')
  checkpoint_average.write_averaged_workdir(trained_workdir, output, params, steps)
  restored, step = workdir_lib.restore_params(output, model_config)
  assert step == steps[-1]
  first, second = (workdir_lib.restore_params(trained_workdir, model_config, checkpoint=s)[0] for s in steps)
  jax.tree_util.tree_map(lambda r, a, b: np.testing.assert_allclose(r, (a + b) / 2, rtol=1e-6), restored, first,
                         second)
  translator = decode_lib.load_translator(output, DecodeSettings('greedy'))
  hypotheses, _ = translator.translate(['In the beginning God created the heavens.'], 1)
  assert len(hypotheses) == 1


def test_parameters_stored_in_bfloat16_load_as_the_models_float32(trained_workdir, tmp_path):
  params, steps = checkpoint_average.average_last_checkpoints(trained_workdir, 1)
  with pytest.raises(ValueError, match='--dtype must be one of'):
    checkpoint_average.write_averaged_workdir(trained_workdir, str(tmp_path / 'bad'), params, steps, 'float16')
  assert not os.path.exists(tmp_path / 'bad')  # refused before anything was written
  output = str(tmp_path / 'half')
  checkpoint_average.write_averaged_workdir(trained_workdir, output, params, steps, 'bfloat16')
  stored = workdir_lib.checkpoint_manager(output).restore(steps[-1], args=ocp.args.StandardRestore())['params']
  assert {leaf.dtype for leaf in jax.tree_util.tree_leaves(stored)} == {np.dtype(jnp.bfloat16)}
  restored, _ = workdir_lib.restore_params(output)
  # Every caller sees float32 parameters: the model's own, rounded to bfloat16 once.
  for got, original in zip(jax.tree_util.tree_leaves(restored), jax.tree_util.tree_leaves(params)):
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, np.asarray(original).astype(jnp.bfloat16).astype(np.float32))
  translator = decode_lib.load_translator(output, DecodeSettings('greedy'))
  hypotheses, _ = translator.translate(['In the beginning God created the heavens.'], 1)
  assert len(hypotheses) == 1


def test_averaging_more_checkpoints_than_kept_is_one_clear_error(trained_workdir):
  with pytest.raises(ValueError, match='fewer than the 99'):
    checkpoint_average.last_steps(trained_workdir, 99)
  first = min(workdir_lib.checkpoint_manager(trained_workdir).all_steps())
  # Up to the earliest kept step the run keeps more checkpoints after it: the advice is the step, not retraining.
  with pytest.raises(ValueError, match=f'up to step {first} .*average up to a later step, or fewer steps'):
    checkpoint_average.last_steps(trained_workdir, 2, first)


def test_bfloat16_inference_casts_matrices_only_and_keeps_float32_logits(trained_workdir):
  model_config = workdir_lib.load_model_config(trained_workdir)
  params, _ = workdir_lib.restore_params(trained_workdir, model_config)
  half_config, half = precision.for_inference(model_config, params, 'bfloat16')
  assert half_config.dtype == 'bfloat16'
  for path, leaf in jax.tree_util.tree_leaves_with_path(half):
    weight_matrix = path[-1].key in ('kernel', 'embedding')  # biases of any rank and LayerNorm stay float32
    assert leaf.dtype == (jnp.bfloat16 if weight_matrix else jnp.float32), path
  translator = decode_lib.load_translator(trained_workdir, DecodeSettings('greedy'), dtype='bfloat16')
  sources = corpus.read_lines(str(DATA / 'genesis.en'))[:6]
  hypotheses, stats = translator.translate(sources, 2)
  assert len(hypotheses) == 6 and stats.sentences == 6
  with pytest.raises(ValueError, match='dtype'):
    precision.for_inference(model_config, params, 'float16')


def test_a_model_trained_with_bfloat16_activations_decodes_in_float32_when_asked(trained_workdir, tmp_path):
  """config.model.dtype='bfloat16' trains bfloat16 activations over float32 weights; decoding it with the default
  --dtype float32 ran in bfloat16 while the report (and --metrics_json) said float32."""
  import fastmt  # pylint: disable=g-import-not-at-top
  workdir = tmp_path / 'bf16_trained'
  shutil.copytree(trained_workdir, workdir)
  recorded = json.loads((workdir / 'model_config.json').read_text())
  (workdir / 'model_config.json').write_text(json.dumps({**recorded, 'dtype': 'bfloat16'}))
  model_config = workdir_lib.load_model_config(str(workdir))
  params, _ = workdir_lib.restore_params(str(workdir), model_config)
  assert model_config.dtype == 'bfloat16'
  assert precision.for_inference(model_config, params, 'float32')[0].dtype == 'float32'
  sources = corpus.read_lines(str(DATA / 'genesis.en'))[:6]
  model = fastmt.load(str(workdir))
  assert model.translator().config.dtype == 'float32'
  assert model.translate(sources) == fastmt.load(trained_workdir).translate(sources)
  assert fastmt.load(str(workdir), dtype='bfloat16').translator().config.dtype == 'bfloat16'
  from fastmt.config import ModelConfig  # pylint: disable=g-import-not-at-top
  with pytest.raises(ValueError, match='JAX_ENABLE_X64'):  # it trained in float32 while recorded as float64
    ModelConfig.from_config(ml_collections.ConfigDict({'dtype': 'float64'}), model_config.vocab_size)
  assert model_config.replace(dtype='float64').dtype == 'float64'  # a work directory that says so still loads


def test_mixed_distillation_draws_raw_with_probability_p_raw_and_is_deterministic():
  n = 400
  src = [[5 + i % 7] * 3 for i in range(n)]
  raw = [[10] * 4 for _ in range(n)]
  distilled = [[20] * 4 for _ in range(n)]
  make = lambda p: batching.TrainBatches(src, raw, (8, 16), 64, seed=3, distilled_ids=distilled, p_raw=p)

  def raw_share(batches, steps):
    targets = np.concatenate([batches.batch(s).target[:, 0] for s in range(steps)])
    return np.mean(targets == 10)

  steps = make(0.0).batches_per_epoch
  assert raw_share(make(0.0), steps) == 0.0
  assert raw_share(make(1.0), steps) == 1.0
  assert 0.4 < raw_share(make(0.5), 2 * steps) < 0.6
  a, b = make(0.5), make(0.5)
  for s in (0, 5, steps + 2):
    np.testing.assert_array_equal(a.batch(s).target, b.batch(s).target)
  # The plan (which pairs form which batch) does not depend on p_raw: only the targets differ.
  np.testing.assert_array_equal(make(0.0).batch(4).source, make(1.0).batch(4).source)
  with pytest.raises(ValueError, match='p_raw'):
    make(1.5)


def test_prepare_pairs_drops_a_pair_whose_distilled_target_is_empty(caplog):
  src, tgt, dist, counts = batching.prepare_pairs([[5], [6], [7]], [[8], [9], [10]], 8, [[11], [], [12]])
  assert src == [[5], [7]] and tgt == [[8], [10]] and dist == [[11], [12]] and counts['empty'] == 1
  # the warning names the teacher's side too: the user's corpus has no empty line to look for
  assert 'Skipped 1 training pairs with an empty source, target or distilled target' in caplog.text


@pytest.fixture(scope='module')
def sources():
  lines = corpus.read_lines(str(DATA / 'genesis.en'))[:21]
  lines[7] = ''  # an empty source gives an empty distilled line, in place
  return lines


def test_a_killed_distillation_resumes_to_the_uninterrupted_output(trained_workdir, sources, tmp_path):
  settings = DecodeSettings('beam', beam_size=2)
  full = str(tmp_path / 'full')
  result = distill.distill(trained_workdir, sources, full, settings, batch_size=4, chunk_sentences=8)
  assert result.total == 21 and result.empty_sources == 1
  expected = open(os.path.join(full, distill.DISTILLED_FILE), encoding='utf-8').read()
  assert expected.split('\n')[7] == '' and expected.count('\n') == 21

  part = str(tmp_path / 'part')
  first = distill.distill(trained_workdir, sources, part, settings, batch_size=4, chunk_sentences=8, max_chunks=1)
  assert first.total == 8
  with open(os.path.join(part, distill.DISTILLED_FILE), 'a', encoding='utf-8') as f:
    f.write('a line of a chunk\nthat was cut sh')  # killed mid-chunk: written, never recorded
  second = distill.distill(trained_workdir, sources, part, settings, batch_size=4, chunk_sentences=8)
  assert second.translated == 13 and second.total == 21
  assert open(os.path.join(part, distill.DISTILLED_FILE), encoding='utf-8').read() == expected
  assert distill.load_distilled_targets(part, sources) == expected.split('\n')[:-1]


def test_distillation_refuses_other_settings_other_sources_and_unfinished_files(trained_workdir, sources, tmp_path):
  out = str(tmp_path / 'kd')
  distill.distill(trained_workdir, sources, out, DecodeSettings('greedy'), batch_size=4, chunk_sentences=8,
                  max_chunks=1)
  with pytest.raises(ValueError, match='settings'):
    distill.distill(trained_workdir, sources, out, DecodeSettings('beam', beam_size=2), chunk_sentences=8)
  with pytest.raises(ValueError, match='sources'):
    distill.distill(trained_workdir, sources[:-1], out, DecodeSettings('greedy'), chunk_sentences=8)
  with pytest.raises(ValueError, match='unfinished'):
    distill.load_distilled_targets(out, sources)
  kept = open(os.path.join(out, distill.DISTILLED_FILE), 'rb').read()
  os.unlink(os.path.join(out, distill.DISTILLED_FILE))  # deleted by hand: a raw FileNotFoundError
  with pytest.raises(FastmtError, match='recording 8 distilled lines but no distilled.txt: the directory is damaged'):
    distill.distill(trained_workdir, sources, out, DecodeSettings('greedy'), chunk_sentences=8)
  open(os.path.join(out, distill.DISTILLED_FILE), 'wb').write(kept)
  # Another teacher at the same path and step (trained or averaged again): its outputs were appended to the
  # first one's without a word.
  teacher = tmp_path / 'teacher'
  shutil.copytree(trained_workdir, teacher)
  again = str(tmp_path / 'kd_again')
  distill.distill(str(teacher), sources, again, DecodeSettings('greedy'), batch_size=4, chunk_sentences=8,
                  max_chunks=1)
  manifest_path = os.path.join(again, distill.MANIFEST_FILE)
  recorded = json.load(open(manifest_path))
  params, steps = checkpoint_average.average_last_checkpoints(str(teacher), last=2)
  shutil.rmtree(teacher)
  checkpoint_average.write_averaged_workdir(trained_workdir, str(teacher), params, steps)
  with pytest.raises(ValueError, match=r"other \['teacher_weights'\]"):
    distill.distill(str(teacher), sources, again, DecodeSettings('greedy'), batch_size=4, chunk_sentences=8)
  del recorded['teacher_weights']  # a manifest from before the field: resumes on the others
  json.dump(recorded, open(manifest_path, 'w'))
  assert distill.distill(str(teacher), sources, again, DecodeSettings('greedy'), batch_size=4,
                         chunk_sentences=8).total == len(sources)
  with pytest.raises(ValueError, match=r"other sources \(21 of them\) than this config's training split "
                     r"'train\[:20\]' \(20\): distil that split with python -m fastmt.distill --split 'train\[:20\]'"):
    distill.load_distilled_targets(out, sources[1:], 'train[:20]')


def test_the_cli_distils_the_split_its_teacher_trained_on_unless_told_otherwise():
  teacher = ml_collections.ConfigDict({'name': 'bible/en_de', 'train_split': 'train[:6000]'})
  assert distill.split_to_distil(None, teacher) == 'train[:6000]'
  assert distill.split_to_distil('train', teacher) == 'train'
  del teacher['train_split']  # a teacher from before the field trained on the whole split
  assert distill.split_to_distil(None, teacher) == 'train'


def test_a_student_with_another_vocabulary_is_refused_before_decoding(trained_workdir, sources, tmp_path,
                                                                     monkeypatch):
  student = tmp_path / 'student'
  student.mkdir()
  (student / workdir_lib.TOKENIZER_FILE).write_bytes(b'another vocabulary')
  monkeypatch.setattr(workdir_lib, 'restore_params', lambda *a, **k: pytest.fail('decoded before checking'))
  with pytest.raises(ValueError, match='another vocabulary'):
    distill.distill(trained_workdir, sources, str(tmp_path / 'kd'), student_workdir=str(student))


def test_training_on_distilled_data_uses_the_teachers_vocabulary(trained_workdir, tiny_config, tmp_path, caplog):
  train_sources = corpus.load_split(tiny_config.dataset, 'train').sources
  kd = str(tmp_path / 'kd')
  distill.distill(trained_workdir, train_sources, kd, DecodeSettings('greedy'), batch_size=32,
                  chunk_sentences=1000)
  # The tiny teacher (20 steps) ends most outputs at once, and a pair with an empty target cannot train (no
  # usable pair is an error): the references stand in for its outputs, line for line.
  references = corpus.load_split(tiny_config.dataset, 'train').targets
  with open(os.path.join(kd, distill.DISTILLED_FILE), 'w', encoding='utf-8') as f:
    f.writelines(t + '\n' for t in references[:3])
    f.write(references[3] + ' \u2047\n')  # the teacher's <unk>, as its text shows it: a student learns '??'
    f.writelines(t + '\n' for t in references[4:])
  manifest = json.load(open(os.path.join(kd, distill.MANIFEST_FILE)))
  json.dump({**manifest, distill.OUTPUTS_AT_CAP: [0, 2]}, open(os.path.join(kd, distill.MANIFEST_FILE), 'w'))
  config = copy.deepcopy(tiny_config)
  config.dataset.distilled_dir = kd
  config.dataset.p_raw = 0.5
  student = str(tmp_path / 'student')
  data = pipeline.load_training_data(config, student)
  assert f'2 of {len(references)} distilled targets reached the teacher\'s output cap' in caplog.text
  assert f'1 of {len(references)} distilled targets hold the teacher\'s <unk>' in caplog.text
  assert open(os.path.join(student, workdir_lib.TOKENIZER_FILE), 'rb').read() == open(
      os.path.join(trained_workdir, workdir_lib.TOKENIZER_FILE), 'rb').read()
  assert data.train_batches.distilled_ids is not None and data.train_batches.p_raw == 0.5
  shutil.copyfile(os.path.join(DATA, 'genesis.en'), os.path.join(student, workdir_lib.TOKENIZER_FILE))
  with pytest.raises(ValueError, match='another vocabulary'):
    pipeline.load_training_data(config, student)


def test_a_student_of_a_teacher_with_an_old_vocabulary_gains_the_reserved_symbols(tiny_config, tmp_path):
  """A teacher trained before fastmt reserved <mask> and the chunk starts: its students' copy of the vocabulary
  appends them (same ids and segmentation), so that an HRT or self-drafting student can train from scratch."""
  from fastmt.data import tokenizer as tokenizer_lib  # pylint: disable=g-import-not-at-top
  train = corpus.load_split(tiny_config.dataset, 'train')
  kd = tmp_path / 'kd'
  kd.mkdir()
  old = tokenizer_lib.train_tokenizer(train.sources + train.targets, str(kd / workdir_lib.TOKENIZER_FILE), 300)
  config = copy.deepcopy(tiny_config)
  config.dataset.distilled_dir = str(kd)
  student = pipeline.get_tokenizer(config, str(tmp_path / 'student'), train)
  assert student.special_id('<mask>') == old.vocab_size
  assert [list(x) for x in student.encode(train.targets[:20])] == [list(x) for x in old.encode(train.targets[:20])]


def test_results_json_keeps_each_rows_objective_when_a_compared_directory_shares_the_baselines_name(tmp_path):
  """runs/a/m compared with runs/b/m: the rows are 'greedy' and 'm/greedy'; each keeps its own objective."""
  from fastmt import bench  # pylint: disable=g-import-not-at-top
  own, other = tmp_path / 'a' / 'm', tmp_path / 'b' / 'm'
  for d, objective in ((own, {'objective': 'at'}),
                       (other, {'objective': 'interleaved', 'options': {'directions': 2, 'words_per_direction': 1}})):
    d.mkdir(parents=True)
    (d / workdir_lib.OBJECTIVE_FILE).write_text(json.dumps(objective))
  objectives = bench.objectives_of(str(own), [str(other)])
  assert objectives[''] == {'objective': 'at', 'options': {}}  # the unprefixed rows: --workdir's
  assert objectives['m'] == {'objective': 'interleaved', 'options': {'directions': 2, 'words_per_direction': 1}}
  assert bench.objectives_of(str(own)) == {'m': objectives[''], '': objectives['']}


def test_bench_times_other_models_side_by_side_and_refuses_another_dataset(trained_workdir, tmp_path, caplog):
  """The RoyalFlush table's rows come from one process: --compare adds NAME/method rows next to --workdir's."""
  from fastmt import bench  # pylint: disable=g-import-not-at-top
  twin = str(tmp_path / 'twin')
  shutil.copytree(trained_workdir, twin)
  with open(os.path.join(twin, workdir_lib.TRAIN_CONFIG_FILE)) as f:
    recorded = json.load(f)
  del recorded['dataset']['train_split']  # a work directory from before the field: trained on the whole split
  with open(os.path.join(twin, workdir_lib.TRAIN_CONFIG_FILE), 'w') as f:
    json.dump(recorded, f)
  # a model trained on part of the training split is scored on the same test sentences
  assert bench._comparable({'name': 'bible/en_de', 'train_split': 'train[:6000]'}) == bench._comparable(
      {'name': 'bible/en_de', 'train_split': 'train'})
  sources = corpus.read_lines(str(DATA / 'genesis.en'))[:4]
  references = corpus.read_lines(str(DATA / 'genesis.de'))[:4]
  results, environment, hypotheses = bench.run_benchmark(
      trained_workdir, sources, references, ['greedy'], batch_size=4, speed_sentences=2, large_batch_sentences=4,
      repeats=1, exactness_at_batch1=False, log=lambda *_: None, compare_workdirs=[twin])
  assert [r.method for r in results] == ['greedy', 'twin/greedy']
  assert hypotheses['twin/greedy'] == hypotheses['greedy']  # the same weights translate the same
  assert results[1].identical_to_greedy == '4/4' and results[1].speedup_b1 > 0
  lengths = decode_lib.score(hypotheses['greedy'], references)
  assert results[0].length_ratio == results[1].length_ratio == lengths.length_ratio  # BLEU's, per row
  assert '| len ratio |' in bench.format_table(results)
  assert environment['compared_with'] == [twin]
  # every row's objective rides in results.json (tables are rebuilt from it after the work directories are gone)
  assert set(environment['objectives']) == {os.path.basename(trained_workdir), 'twin', ''}
  assert environment['objectives'][''] == environment['objectives'][os.path.basename(trained_workdir)]
  assert environment['objectives']['twin']['objective'] == workdir_lib.load_objective(trained_workdir)
  assert environment['objectives']['twin']['options'] == workdir_lib.load_objective_options(trained_workdir)
  with pytest.raises(ValueError, match="named 'twin'"):
    bench.build_comparison(trained_workdir, [twin, twin], ['greedy'])
  # a method that no compared model can run is said (an AT comparison asked for ib), not dropped in silence
  translators, _, _ = bench.build_comparison(trained_workdir, [twin], ['greedy', 'ib'])
  assert sorted(translators) == ['greedy', 'twin/greedy'] and "No model here runs ['ib']" in caplog.text

  other = str(tmp_path / 'other_data')
  shutil.copytree(trained_workdir, other)
  config = workdir_lib.load_train_config(other)
  config.dataset.name = 'bible/en_fr'
  with open(os.path.join(other, workdir_lib.TRAIN_CONFIG_FILE), 'w') as f:
    f.write(config.to_json())
  with pytest.raises(ValueError, match='another dataset'):
    bench.build_comparison(trained_workdir, [other], ['greedy'])


def test_a_distillation_recorded_before_new_decoding_options_still_resumes():
  import dataclasses  # pylint: disable=g-import-not-at-top
  from fastmt import distill  # pylint: disable=g-import-not-at-top
  from fastmt.translate import DecodeSettings  # pylint: disable=g-import-not-at-top
  old = {'algorithm': 'beam', 'beam_size': 4, 'alpha': 0.6, 'block_size': 3, 'parallel_length': 0,
         'output_length_ratio': 2.0, 'jacobi_init': 'pad'}  # a manifest of 2026-11-22
  assert distill._with_new_defaults(old) == dataclasses.asdict(DecodeSettings('beam', beam_size=4))
  assert distill._with_new_defaults({**old, 'beam_size': 2}) != dataclasses.asdict(DecodeSettings('beam'))


class _RunOnTranslator:
  """A teacher whose every translation of a line containing 'God' runs on to the cap (it says so through
  lines_at_cap, as Translator does): distill's bookkeeping over chunks and resumption, on known lines."""

  def __init__(self, *args, **kwargs):
    del args, kwargs

  def translate(self, texts, batch_size, lines_at_cap=None, first_line=1):
    del batch_size
    from fastmt.translate import TranslationStats  # pylint: disable=g-import-not-at-top
    lines_at_cap.extend(first_line + i for i, text in reversed(list(enumerate(texts))) if 'God' in text)  # any order
    return [text.upper() for text in texts], TranslationStats(empty_inputs=sum(not text for text in texts))


def test_distillation_records_the_outputs_at_the_cap_and_students_train_on_references_there(
    trained_workdir, sources, tmp_path, monkeypatch):
  """The manifest names the lines (from 0) whose translation reached the cap, over chunks of 8; a resumed
  distillation the same ones; a student's targets are the references there, counted."""
  monkeypatch.setattr(distill, 'Translator', _RunOnTranslator)
  settings = DecodeSettings('greedy')
  expected = [i for i, line in enumerate(sources) if 'God' in line]
  assert 0 < len(expected) < len(sources) - 1 and max(expected) >= 8  # lines past the first chunk too
  full = str(tmp_path / 'full')
  result = distill.distill(trained_workdir, sources, full, settings, batch_size=4, chunk_sentences=8)
  manifest = json.load(open(os.path.join(full, distill.MANIFEST_FILE)))
  assert manifest[distill.OUTPUTS_AT_CAP] == expected and result.outputs_at_cap == len(expected)

  part = str(tmp_path / 'part')
  distill.distill(trained_workdir, sources, part, settings, batch_size=4, chunk_sentences=8, max_chunks=1)
  resumed = distill.distill(trained_workdir, sources, part, settings, batch_size=4, chunk_sentences=8)
  assert json.load(open(os.path.join(part, distill.MANIFEST_FILE)))[distill.OUTPUTS_AT_CAP] == expected
  assert resumed.outputs_at_cap == len(expected)

  references = [f'reference {i}' for i in range(len(sources))]
  distilled_lines = distill.load_distilled_targets(full, sources)
  targets, replaced = distilled.student_targets(full, sources, references)
  assert replaced == len(expected)
  assert targets == [references[i] if i in expected else line for i, line in enumerate(distilled_lines)]

  # A manifest from before the field: no line is replaced. One naming a line it does not have: an error.
  for value, error in ((None, None), ([len(sources)], 'outside')):
    changed = {k: v for k, v in manifest.items() if k != distill.OUTPUTS_AT_CAP}
    if value is not None:
      changed[distill.OUTPUTS_AT_CAP] = value
    json.dump(changed, open(os.path.join(full, distill.MANIFEST_FILE), 'w'))
    if error:
      with pytest.raises(ValueError, match=error):
        distilled.student_targets(full, sources, references)
    else:
      assert distilled.student_targets(full, sources, references) == (distilled_lines, 0)
