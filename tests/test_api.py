"""fastmt as a library: fastmt.load(...).translate, and every code block of docs/API.md runs as written."""

import os
import re
import subprocess
import sys

import jax
import numpy as np
import pytest

import fastmt
from conftest import DATA, REPO
from fastmt import decode_lib
from fastmt.errors import FastmtError
from fastmt.translate import Translator

SENTENCES = [line.rstrip('\n') for line in open(DATA / 'genesis.en', encoding='utf-8')][:12]


def api_blocks():
  text = (REPO / 'docs' / 'API.md').read_text(encoding='utf-8')
  return re.findall(r'```python\n(.*?)```', text, re.S)


def test_load_and_translate_in_order_with_every_algorithm(trained_workdir):
  model = fastmt.load(trained_workdir)
  greedy = model.translate(SENTENCES)
  ids, stats = model.translator().translate_ids(SENTENCES)
  assert len(greedy) == len(SENTENCES) and stats.output_tokens > len(SENTENCES)  # real decoding happened
  assert model.tokenizer.decode(ids) == greedy
  translator = model.translator()  # the lower-level Translator takes any iterable too, as its errors say
  assert translator.translate(line for line in SENTENCES)[0] == greedy
  assert [list(x) for x in translator.translate_ids(iter(SENTENCES))[0]] == [list(x) for x in ids]
  assert model.translate(SENTENCES[3]) == greedy[3]  # one string in, one string out, batch-independent
  assert model.translate(SENTENCES, algorithm='pgj', block_size=3) == greedy  # exact
  assert model.translate(SENTENCES, algorithm='hgj', block_size=2, parallel_length=4) == greedy
  assert model.translate(SENTENCES, algorithm='beam', beam_size=1) == greedy  # beam 1 is greedy
  assert list(model.translate_iter(line + '\n' for line in SENTENCES)) == greedy
  assert model.translate(['', SENTENCES[0], '   ']) == ['', greedy[0], '']


def test_new_weights_reach_every_algorithm_and_an_edited_copy_none(trained_workdir):
  """Each compiled decoder held its own copy of the weights: an in-place edit of model.params reached only the
  algorithms not used yet (PGJ then no longer equalled greedy), and assigning model.params reached none."""
  model = fastmt.load(trained_workdir)
  ids = lambda algorithm: [row.tolist() for row in model.translator(algorithm, block_size=3).translate_ids(
      SENTENCES[:4])[0]]
  before = ids('greedy')
  edited = model.params
  edited['decoder_0'] = jax.tree_util.tree_map(jax.numpy.zeros_like, edited['decoder_0'])
  assert ids('greedy') == ids('pgj') == before  # the edit was of a copy
  model.params = edited
  after = ids('greedy')
  assert after != before and ids('pgj') == after  # every algorithm, the used ones too, decodes the new weights
  with pytest.raises(FastmtError, match='the same tree of the same shapes'):
    model.params = {'embed': edited['embed']}


def test_a_model_keeps_a_bounded_set_of_translators_sharing_one_output_layout(trained_workdir, monkeypatch):
  """A server sending its own settings with each request: greedy's alpha (ignored, warned of) compiled and kept
  one more translator per value, and every new setting kept one forever, each with its own copy of the
  transposed embedding (7.8 MiB here)."""
  monkeypatch.setattr(fastmt.api, 'MAX_TRANSLATORS', 3)
  model = fastmt.load(trained_workdir)
  greedy = model.translator('greedy')
  with pytest.warns(UserWarning, match='alpha has no effect'):
    assert model.translator('greedy', alpha=0.1) is greedy
  with pytest.warns(UserWarning, match='block_size has no effect'):
    assert model.translator('beam', beam_size=2, block_size=5) is model.translator('beam', beam_size=2)
  assert model.translator('beam', beam_size=2, alpha=0.1) is not model.translator('beam', beam_size=2)
  ratios = [model.translator('greedy', output_length_ratio=1.5 + i / 10) for i in range(4)]
  assert len(model._translators) == 3  # pylint: disable=protected-access
  assert model.translator('greedy', output_length_ratio=1.8) is ratios[-1]  # the most recent are kept
  assert model.translator('greedy') is not greedy  # the least recently used went (and is built again)
  layouts = {t.output_projection.unsafe_buffer_pointer() for t in ratios + [greedy]}
  assert len(layouts) == 1  # one copy on the device for all of them
  assert ratios[0].translate(SENTENCES[:2])[0] == greedy.translate(SENTENCES[:2])[0]
  with pytest.raises(FastmtError, match='transposed_output: a layout of shape'):
    Translator(model.config, model.params, model.tokenizer, transposed_output=np.zeros((3, 4), np.float32))


def test_new_weights_assigned_while_a_translator_is_built_never_meet_the_old_layout(trained_workdir, monkeypatch):
  """model.params = new while another thread built a translator: the old weights' transposed embedding became
  the shared layout of every later translator of the new weights."""
  import threading  # pylint: disable=g-import-not-at-top
  import time  # pylint: disable=g-import-not-at-top
  model = fastmt.load(trained_workdir)
  real, started = fastmt.api.transposed_output_layout, threading.Event()

  def slow_layout(params):
    started.set()
    time.sleep(1)
    return real(params)
  monkeypatch.setattr(fastmt.api, 'transposed_output_layout', slow_layout)
  builder = threading.Thread(target=model.translator, args=('greedy',))
  builder.start()
  started.wait()
  model.params = jax.tree_util.tree_map(jax.numpy.zeros_like, model.params)
  builder.join()
  assert not np.asarray(model.translator('greedy').output_projection).any()  # the new, zero weights' layout


def test_a_built_translator_is_found_while_another_thread_builds_one(trained_workdir, monkeypatch):
  """A server's request for a translator already built waited while another thread built a new one (loading a
  drafter model or clusters, under the model's one lock); now only builds take turns."""
  import threading  # pylint: disable=g-import-not-at-top
  from fastmt import decode_lib  # pylint: disable=g-import-not-at-top
  model = fastmt.load(trained_workdir)
  greedy = model.translator('greedy')
  building, release = threading.Event(), threading.Event()
  real = decode_lib.draft_table_for

  def slow_build(workdir, settings):  # a part of every build: held open here for the pgj translator
    if settings.algorithm == 'pgj':
      building.set()
      assert release.wait(60)
    return real(workdir, settings)
  monkeypatch.setattr(decode_lib, 'draft_table_for', slow_build)
  built, found = [], []
  builder = threading.Thread(target=lambda: built.append(model.translator('pgj', block_size=3)))
  builder.start()
  assert building.wait(60)
  reader = threading.Thread(target=lambda: found.append(model.translator('greedy')))
  reader.start()
  reader.join(timeout=30)
  waited = reader.is_alive()  # still waiting for the build: the old behaviour
  release.set()
  builder.join()
  reader.join()
  assert not waited and found == [greedy]
  assert built[0] is model.translator('pgj', block_size=3)  # kept, not built twice


def test_threads_sharing_a_model_compile_each_shape_once(trained_workdir):
  """Two threads meeting a new shape at once both compiled it (the check and the compile were not one step)."""
  import concurrent.futures  # pylint: disable=g-import-not-at-top
  import time  # pylint: disable=g-import-not-at-top
  model = fastmt.load(trained_workdir)
  translator = model.translator('pgj', block_size=3)
  lowered, decode = [], translator._decode  # pylint: disable=protected-access

  class SlowToLower:  # widens the window in which a second thread could start the same compile
    def lower(self, *args):
      lowered.append(args[1].shape)
      time.sleep(0.5)
      return decode.lower(*args)
  translator._decode = SlowToLower()  # pylint: disable=protected-access
  lines = [SENTENCES[0]] * 2
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    outputs = list(pool.map(lambda _: translator.translate(lines, batch_size=2)[0], range(2)))
  assert outputs == [model.translate(lines)] * 2
  assert len(lowered) == len(set(lowered)) == 1, lowered


def test_translate_and_translate_iter_take_a_file_objects_lines_without_their_line_ends(trained_workdir, tmp_path,
                                                                                         monkeypatch):
  """translate(f) passed each line with its '\\n' (an <unk> for an 'identity'-normalised vocabulary), while
  translate_iter(f) dropped it: one file, two translations. Both now give the Translator the same lines."""
  import io  # pylint: disable=g-import-not-at-top
  model = fastmt.load(trained_workdir)
  translator = model.translator()
  seen = []
  real = translator.translate
  monkeypatch.setattr(translator, 'translate', lambda texts, *a, **k: (seen.append(list(texts)), real(texts, *a, **k))[1])
  text = 'In the beginning\r\nGod created\n\nthe earth'
  assert model.translate(io.StringIO(text, newline='')) == list(model.translate_iter(io.StringIO(text, newline='')))
  assert seen == [['In the beginning', 'God created', '', 'the earth']]


def test_translate_iter_translates_a_generator_line_by_line_as_lines_arrive(trained_workdir):
  """A generator fed by a person, a socket or a queue: its first translation comes before its next line does
  (chunks of 4,096 lines waited for the 4,096th, or the end)."""
  import threading  # pylint: disable=g-import-not-at-top
  model = fastmt.load(trained_workdir)
  first_out = threading.Event()

  def typed():
    yield SENTENCES[0]
    if not first_out.wait(timeout=30):  # the old chunking: never set, so fail rather than hang
      raise AssertionError('line 2 was asked for before line 1 was translated')
    yield SENTENCES[1]
  outputs = []
  for output in model.translate_iter(typed()):
    outputs.append(output)
    first_out.set()
  assert outputs == model.translate(SENTENCES[:2])


def test_load_picks_the_checkpoint_and_reports_bad_input(trained_workdir, tmp_path, monkeypatch):
  monkeypatch.setenv('HOME', os.path.dirname(trained_workdir))  # '~/run' as a shell reads it (was 'No work directory')
  assert fastmt.load(f'~/{os.path.basename(trained_workdir)}').workdir == trained_workdir
  best = fastmt.load(trained_workdir, checkpoint='best')
  assert best.step in (10, 20)  # tiny config: validation at steps 10 and 20
  assert fastmt.load(trained_workdir, checkpoint=20).step == 20
  assert fastmt.load(trained_workdir, checkpoint=np.int64(20)).step == 20  # was refused, as no step number
  with pytest.raises(FastmtError, match='no checkpoint step 7'):
    fastmt.load(trained_workdir, checkpoint=7)
  with pytest.raises(FastmtError, match="'latest', 'best' or a step"):
    fastmt.load(trained_workdir, checkpoint='newest')
  for workdir in (None, trained_workdir.encode()):  # raw TypeErrors from os.fspath / os.path.join
    with pytest.raises(FastmtError, match='load takes a work directory'):
      fastmt.load(workdir)
  with pytest.raises(FastmtError, match="float32_kernel must be True or False, got 'no'"):
    fastmt.load(trained_workdir, float32_kernel='no')  # truthy: it turned the kernel on
  with pytest.raises(FileNotFoundError, match='No work directory'):  # fastmt.MissingError, a FastmtError too
    fastmt.load(str(tmp_path / 'missing'))
  model = fastmt.load(trained_workdir)
  with pytest.raises(FastmtError, match='Unknown decoding settings'):
    model.translate(SENTENCES, block=3)
  with pytest.raises(FastmtError, match='Unknown decoding algorithm'):
    model.translate(SENTENCES, algorithm='nat')
  # a setting the algorithm does not use is said, at the caller's line, not silently ignored
  with pytest.warns(UserWarning, match=r'beam_size has no effect with algorithm greedy \(it acts on beam, ib, hrt\)') \
      as caught:
    assert model.translate(SENTENCES[:2], beam_size=4) == model.translate(SENTENCES[:2])
  assert [w.filename for w in caught if 'no effect' in str(w.message)] == [__file__]
  assert model.translator('pgj', block_size=2).checkpoint_step == model.step == 20


def test_the_outside_decoder_example_of_docs_api_runs():
  blocks = [b for b in api_blocks() if 'def step_fn' in b]
  assert len(blocks) == 1
  namespace = {}
  exec(compile(blocks[0], 'docs/API.md', 'exec'), namespace)  # pylint: disable=exec-used  (it asserts pgj == greedy)
  reference = namespace['reference']  # as the text says: rows end at different steps, the last at the cap
  assert reference.decoder_calls.tolist() == [4, 7, 10, 12]
  assert (reference.tokens[:3] == namespace['EOS_ID']).any(1).all() and not (reference.tokens[3] == 1).any()
  with_ids = [b for b in api_blocks() if 't5_ids' in b]  # the special-ids example continues the first one
  assert len(with_ids) == 1
  exec(compile(with_ids[0], 'docs/API.md', 'exec'), namespace)  # pylint: disable=exec-used  (pgj == greedy)
  # Started from id 0 instead of BOS_ID, the toy decoder's outputs change: the ids were used.
  assert not np.array_equal(namespace['from_pad'].tokens, namespace['reference'].tokens)
  # A returned cache must be the given one with new values: another leaf or dtype was lax.while_loop's TypeError.
  from fastmt.decoding import beam_search, greedy_search, pgj_decode  # pylint: disable=g-import-not-at-top
  base_step, empty = namespace['step_fn'], namespace['empty_cache']
  def with_a_new_leaf(*args):
    logits, cache = base_step(*args)
    return logits, {**cache, 'hits': jax.numpy.zeros((4, 15))}
  def in_half_precision(*args):
    logits, cache = base_step(*args)
    return logits, {'h': cache['h'].astype(jax.numpy.bfloat16)}
  for step, message in ((with_a_new_leaf, r"\['hits'\]: None -> \(\(4, 15\), 'float32'\)"),
                        (in_half_precision, r"\['h'\]: \(\(4, 15, 16\), 'float32'\) -> \(\(4, 15, 16\), 'bfloat16'\)")):
    with pytest.raises(ValueError, match='must return the cache it was given .*' + message):
      greedy_search(step, empty(15), 4, 12)
    with pytest.raises(ValueError, match='must return the cache it was given'):
      pgj_decode(step, empty(15), 4, 12, block_size=3)
  with pytest.raises(ValueError, match='must return the cache it was given'):
    beam_search(with_a_new_leaf, empty(15), 2, 2, 12)  # 2 sentences x 2 beams: the example's 4 rows
  # The jax.jit recipe of the text after the example, as written there (and what a count left traced says).
  step_fn, cache = namespace['step_fn'], namespace['empty_cache'](15)
  jitted = jax.jit(pgj_decode, static_argnames=('step_fn', 'batch_size', 'max_length', 'block_size'))
  out = jitted(step_fn, cache, batch_size=4, max_length=12, block_size=3)
  np.testing.assert_array_equal(out.tokens, namespace['reference'].tokens)
  assert 'jax.jit(pgj_decode, static_argnames=(\'step_fn\', \'batch_size\', \'max_length\', \'block_size\'))' in (
      REPO / 'docs' / 'API.md').read_text(encoding='utf-8').replace('\n', ' ')
  with pytest.raises(ValueError, match="max_length must be a Python int, got a traced value .*static_argnames"):
    jax.jit(pgj_decode, static_argnames=('step_fn', 'batch_size', 'block_size'))(step_fn, cache, batch_size=4,
                                                                                 max_length=12, block_size=3)


def test_the_library_example_of_docs_api_runs(trained_workdir, tmp_path, monkeypatch, capsys):
  block = next(b for b in api_blocks() if 'fastmt.load' in b)
  # a Windows line end, and a lone '\r' inside a line (Python's default open() would end a line there)
  (tmp_path / 'big.en').write_bytes(f'{SENTENCES[0]}\r\n{SENTENCES[1]}\rand\n{SENTENCES[2]}\n'.encode('utf-8'))
  monkeypatch.chdir(tmp_path)
  code = block.replace("'runs/quickstart'", repr(trained_workdir))
  namespace = {'sentences': SENTENCES}
  exec(compile(code, 'docs/API.md', 'exec'), namespace)  # pylint: disable=exec-used
  assert isinstance(namespace['model'], fastmt.TranslationModel)
  printed = capsys.readouterr().out.split('\n')[:-1]
  as_decode_py_reads = list(decode_lib.iter_lines(str(tmp_path / 'big.en')))
  assert as_decode_py_reads == [SENTENCES[0], SENTENCES[1] + '\rand', SENTENCES[2]]
  assert printed == namespace['model'].translate(as_decode_py_reads)  # streamed in order, the lines decode.py reads


def test_a_work_directory_from_before_objectives_were_recorded_loads_as_autoregressive(trained_workdir, tmp_path):
  import shutil  # pylint: disable=g-import-not-at-top
  old = tmp_path / 'old'
  shutil.copytree(trained_workdir, old)
  os.remove(old / 'objective.json')
  model = fastmt.load(str(old))
  assert model.objective == 'at'
  assert model.translate(SENTENCES[:4], algorithm='pgj') == fastmt.load(trained_workdir).translate(SENTENCES[:4])


def test_bad_lines_and_settings_are_fastmt_errors_and_translate_reports_its_counts(trained_workdir):
  model = fastmt.load(trained_workdir)
  for texts, message in (([SENTENCES[0], None], 'input 2: .* must be a str, got NoneType'),
                         ([SENTENCES[0], b'God'], 'input 2: .* got bytes'),
                         ([SENTENCES[0], 'Jesus \udcff wept.'], 'input 2: not valid Unicode .* character 6'),
                         (['\ud800'], 'input 1: not valid Unicode'),  # a tokenizer traceback / an empty line
                         (None, 'a str or an iterable of str'), (b'God', 'not bytes'), (5, 'got int'),
                         (np.array('God'), '0-d array: pass array.item')):
    with pytest.raises(FastmtError, match=message):
      model.translate(texts)
  with pytest.raises(FastmtError, match='not one string'):
    model.translate_iter('God')
  with pytest.raises(FastmtError, match='not one string'):  # translated 3 one-character sentences
    model.translator('greedy').translate('God')
  for beam_size in (model.config.vocab_size + 1, 10**6):  # 10**6: top_k's int32 overflow; 10**5: 26 GB asked
    with pytest.raises(FastmtError, match=f'beam_size {beam_size} is larger than the vocabulary'):
      model.translate(SENTENCES[:1], algorithm='beam', beam_size=beam_size)
  for draft_model in (3, b'runs/x'):  # an AttributeError from the drafter's checks
    with pytest.raises(FastmtError, match='draft_model must be a TranslationModel or its work directory'):
      model.translate(SENTENCES[:1], algorithm='spec', drafter='model', draft_model=draft_model)
  with pytest.raises(FastmtError, match='got bytes'):
    list(model.translate_iter([b'God\n']))
  for ratio in (-5, float('inf'), float('nan'), None):
    with pytest.raises(FastmtError, match='output_length_ratio must be > 0'):
      model.translate(SENTENCES[:1], output_length_ratio=ratio)
  for batch_size in (2.5, '4', None):
    with pytest.raises(FastmtError, match='batch_size must be a whole number'):
      model.translate(SENTENCES[:1], batch_size=batch_size)
  translator = model.translator('greedy')
  for chunk_sentences, message in ((0, 'chunk_sentences must be >= 1'), (-2, 'chunk_sentences must be >= 1'),
                                   (1.5, 'chunk_sentences must be a whole number')):
    for stream in (False, True):  # 0 ended the input at once: every sentence lost without a word
      with pytest.raises(FastmtError, match=message):
        list(translator.translate_iter(SENTENCES[:2], chunk_sentences=chunk_sentences, stream=stream))
  with pytest.raises(FastmtError, match='batch_size must be >= 1'):  # checked even for an input of no lines
    list(translator.iter_ids([], batch_size=0))
  stats = fastmt.TranslationStats()
  long_line = ' '.join(['light'] * 3 * model.config.max_length)
  assert len(model.translate(['', SENTENCES[0], long_line], stats=stats)) == 3
  assert (stats.sentences, stats.empty_inputs, stats.truncated_inputs) == (3, 1, 1)


def test_a_damaged_work_directory_or_checkpoint_name_is_a_fastmt_error(trained_workdir, tmp_path):
  import json  # pylint: disable=g-import-not-at-top
  import shutil  # pylint: disable=g-import-not-at-top
  from fastmt import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  for checkpoint in ('²', True, '-1'):
    with pytest.raises(FastmtError, match="'latest', 'best' or a step"):
      workdir_lib.parse_checkpoint(checkpoint)
  workdir = tmp_path / 'copy'
  shutil.copytree(trained_workdir, workdir, ignore=shutil.ignore_patterns('checkpoints', 'best_checkpoint'))
  config = json.loads((workdir / 'model_config.json').read_text())
  for text, message in ((json.dumps({**config, 'new_field': 1}), 'does not know.*new_field'),
                        ('', 'not valid JSON'), ('[]', 'not an object'),
                        (json.dumps({'emb_dim': 128}), "lacks \\['vocab_size'\\]"),  # were TypeError tracebacks
                        (json.dumps({**config, 'emb_dim': 'x'}), "model_config.json: emb_dim must be a whole number"),
                        (json.dumps({**config, 'num_heads': 2.5}), 'num_heads must be a whole number')):
    (workdir / 'model_config.json').write_text(text)
    with pytest.raises(FastmtError, match=message):
      fastmt.load(str(workdir))
  (workdir / 'objective.json').write_text('{"objective": ')
  with pytest.raises(FastmtError, match='objective.json is not valid JSON'):
    workdir_lib.load_objective(str(workdir))
  (workdir / 'spm.model').write_bytes(b'not a model')
  with pytest.raises(FastmtError, match='not a SentencePiece model'):
    workdir_lib.load_tokenizer(str(workdir))


def test_a_checkpoint_with_nan_weights_is_refused_not_translated_to_empty_lines(trained_workdir, tmp_path):
  """Flipped bytes that still parse (or a diverged run) give NaN weights; every output would come back empty."""
  import shutil  # pylint: disable=g-import-not-at-top
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  from fastmt import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  workdir = tmp_path / 'copy'
  shutil.copytree(trained_workdir, workdir)
  params, step = workdir_lib.restore_params(str(workdir))
  leaves, tree = jax.tree_util.tree_flatten(params)
  damaged = np.array(leaves[0], copy=True)
  damaged.flat[3] = np.nan
  manager = workdir_lib.checkpoint_manager(str(workdir))
  manager.save(step + 1, args=ocp.args.StandardSave({'params': jax.tree_util.tree_unflatten(
      tree, [damaged] + leaves[1:])}))
  manager.wait_until_finished()
  with pytest.raises(FastmtError, match=f'step {step + 1} .* NaN or Inf weights in 1 array'):
    fastmt.load(str(workdir))
  assert fastmt.load(str(workdir), checkpoint=step).step == step  # the step before it still loads


def test_a_damaged_checkpoint_file_is_one_clean_line(trained_workdir, tmp_path):
  """A data file of the step cut short: FastmtError naming the step, without TensorStore's appendix (the repr
  of a bound method) that orbax's message carried."""
  import shutil  # pylint: disable=g-import-not-at-top
  from fastmt import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  workdir = tmp_path / 'copy'
  shutil.copytree(trained_workdir, workdir)
  step = max(int(p.name) for p in (workdir / workdir_lib.CHECKPOINT_DIR).iterdir() if p.name.isdigit())
  data = [p for p in (workdir / workdir_lib.CHECKPOINT_DIR / str(step)).rglob('*') if p.is_file() and '/d/' in str(p)]
  biggest = max(data, key=lambda p: p.stat().st_size)
  biggest.write_bytes(biggest.read_bytes()[:1000])
  with pytest.raises(FastmtError, match=f'Checkpoint step {step} .* cannot be read') as error:
    workdir_lib.restore_params(str(workdir))
  assert 'bound method' not in str(error.value) and 'TensorStore details' not in str(error.value)
  # decode.py in a plain process (pytest keeps unraisable reports off stderr): one line, not ~190 tracebacks of
  # 'Event loop is closed' from TensorStore's unfinished reads, nor asyncio's 'exception was never retrieved'
  for path in data:
    path.unlink()
  result = subprocess.run([sys.executable, str(REPO / 'decode.py'), '--workdir', str(workdir), '--progress=false'],
                          input='God\n', capture_output=True, text=True, cwd=REPO)
  assert result.returncode == 1 and len(result.stderr.strip().splitlines()) == 1, result.stderr[-3000:]
  assert 'cannot be read' in result.stderr and 'tensorstore_spec' not in result.stderr
