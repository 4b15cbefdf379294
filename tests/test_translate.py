"""Translating text: input order kept, empty lines stay empty, over-long lines truncated and counted, every
Jacobi variant equals greedy through the Translator, decode.py end to end, and the hand-written reference
greedy of benchmarks/ agrees with fastmt's."""

import dataclasses
import importlib.util
import itertools
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import DATA, REPO
from fastmt import decode_lib, translate, workdir as workdir_lib
from fastmt.data import corpus
from fastmt.data.tokenizer import BOS_ID
from fastmt.decoding.step import EOS_ID
from fastmt.errors import FastmtError
from fastmt.translate import DecodeSettings, TranslationStats, Translator


@pytest.fixture(scope='session')  # once a worker (test_multidevice's eight_devices says why not module)
def model_parts(trained_workdir):
  config = workdir_lib.load_model_config(trained_workdir)
  params, _ = workdir_lib.restore_params(trained_workdir, config)
  return config, params, workdir_lib.load_tokenizer(trained_workdir)


SOURCES = ['And God said, Let there be light.', '', 'And the evening and the morning were the first day.',
           '   ', 'God']


def test_order_is_kept_and_empty_lines_stay_empty(model_parts):
  translator = Translator(*model_parts)
  batched, stats = translator.translate(SOURCES, batch_size=2)
  one_by_one = [translator.translate([s], batch_size=1)[0][0] for s in SOURCES]
  assert batched == one_by_one
  assert batched[1] == '' and batched[3] == '' and len(batched) == len(SOURCES)
  assert stats.empty_inputs == 2 and stats.sentences == 5


def test_over_long_inputs_are_truncated_and_counted(model_parts):
  config = model_parts[0]
  translator = Translator(*model_parts)
  long_line = ' '.join(['light'] * (3 * config.max_length))
  outputs, stats = translator.translate([long_line, 'God'], batch_size=2)
  assert stats.truncated_inputs == 1 and len(outputs) == 2
  # What is kept: the line's first max_length - 1 pieces, then EOS (a line of varied words, so that the head,
  # the tail and one piece differ).
  varied = ' '.join(line.strip() for line in open(REPO / 'tests/data/genesis.en', encoding='utf-8'))
  pieces = translator.tokenizer.encode([varied])[0]
  assert len(pieces) > 2 * config.max_length
  kept = translator.encode_sources([varied], TranslationStats())[0]
  assert kept.tolist() == list(pieces[:config.max_length - 1]) + [EOS_ID]


@pytest.mark.parametrize('algorithm, block', [('pj', 0), ('pgj', 3), ('pgj', 5), ('hgj', 3)])
def test_jacobi_through_the_translator_equals_greedy(model_parts, algorithm, block):
  lines = [line for line in open(REPO / 'tests/data/genesis.en', encoding='utf-8')][:12]
  greedy, _ = Translator(*model_parts).translate(lines, batch_size=4)
  settings = DecodeSettings(algorithm, block_size=block or 3, parallel_length=6 if algorithm == 'hgj' else 0)
  parallel, stats = Translator(*model_parts, settings).translate(lines, batch_size=4)
  assert parallel == greedy
  greedy_calls = Translator(*model_parts).translate(lines, batch_size=4)[1].decoder_calls
  # Fewer calls, not only as many: this model repeats itself, so every window commits several tokens, and a
  # Translator that ran greedy under the algorithm's name would fail here.
  assert stats.decoder_calls < greedy_calls


@pytest.mark.parametrize('algorithm', ['greedy', 'beam', 'pgj'])
def test_cpu_layout_and_compiler_options_translate_the_same(model_parts, algorithm):
  """The tied projection or E^T laid out once (the default), YNNPACK's individual dots or none: the same
  translations (kernels, not maths)."""
  lines = [line for line in open(REPO / 'tests/data/genesis.en', encoding='utf-8')][:8]
  settings = DecodeSettings(algorithm)
  expected, _ = Translator(*model_parts, settings).translate(lines, batch_size=4)
  variants = [{'transposed_output': False}]
  if jax.default_backend() == 'cpu':  # XLA:CPU options
    ynn = 'xla_cpu_experimental_ynn_fusion_type'
    variants += [{'compiler_options': {ynn: 'LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT'}},
                 {'transposed_output': True, 'compiler_options': {ynn: ''}}]
  for options in variants:
    assert Translator(*model_parts, settings, **options).translate(lines, batch_size=4)[0] == expected, options


def test_multi_position_calls_project_with_the_laid_out_embedding_and_single_ones_do_not(model_parts):
  """make_step_fn's output_projection is what calls over several positions or rows use (a zero one gives zero
  logits there) and what a single position ignores; with E^T itself every call's logits equal the tied ones."""
  from fastmt import models  # pylint: disable=g-import-not-at-top
  from fastmt.decoding.step import causal_window_mask  # pylint: disable=g-import-not-at-top
  config, params, _ = model_parts
  model = models.Transformer(config)
  laid_out = translate.transposed_output_layout(params)
  for rows, width in ((1, 1), (1, 3), (2, 1)):
    source = np.array([[5, 6, 7, 2]] * rows, np.int32)
    encoded = model.apply({'params': params}, source, method=models.Transformer.encode)
    memory = model.apply({'params': params}, encoded, source, method=models.Transformer.memory)

    def logits(projection):
      step_fn = translate.make_step_fn(model, params, memory, output_projection=projection)
      tokens = np.ones((rows, width), np.int32)
      positions = np.broadcast_to(np.arange(width, dtype=np.int32), (rows, width))
      offsets = np.zeros(rows, np.int32)
      return np.asarray(step_fn(tokens, positions, causal_window_mask(offsets, width, 8),
                                models.init_cache(config, rows, 8), offsets)[0])

    tied = logits(None)
    with_zero = logits(np.zeros_like(laid_out))
    if rows * width > 1:
      assert not with_zero.any()
    else:
      np.testing.assert_array_equal(with_zero, tied)
    np.testing.assert_allclose(logits(laid_out), tied, rtol=1e-5, atol=1e-5)


def test_a_bfloat16_models_laid_out_embedding_stays_bfloat16_and_gives_the_tied_logits(model_parts):
  """In bfloat16 E^T keeps the embedding's bfloat16 (half the bytes, and the product XLA:CPU runs on AMX); its
  float32-summed products of the same bfloat16 values are the tied projection's logits up to the sums' order."""
  from fastmt import models, precision  # pylint: disable=g-import-not-at-top
  from fastmt.decoding.step import causal_window_mask  # pylint: disable=g-import-not-at-top
  config, params = precision.for_inference(model_parts[0], model_parts[1], 'bfloat16')
  laid_out = translate.transposed_output_layout(params)
  assert laid_out.dtype == jnp.bfloat16 and laid_out.shape == (config.emb_dim, config.vocab_size)
  assert translate.transposed_output_layout(model_parts[1]).dtype == np.float32
  model = models.Transformer(config)
  source = np.array([[5, 6, 7, 2]] * 2, np.int32)
  memory = model.apply({'params': params}, model.apply({'params': params}, source, method=models.Transformer.encode),
                       source, method=models.Transformer.memory)
  offsets = np.zeros(2, np.int32)
  tokens, positions = np.ones((2, 3), np.int32), np.broadcast_to(np.arange(3, dtype=np.int32), (2, 3))

  def logits(projection):
    step_fn = translate.make_step_fn(model, params, memory, output_projection=projection)
    out = step_fn(tokens, positions, causal_window_mask(offsets, 3, 8), models.init_cache(config, 2, 8), offsets)[0]
    assert out.dtype == jnp.float32
    return np.asarray(out)

  np.testing.assert_allclose(logits(laid_out), logits(None), rtol=1e-5, atol=1e-5)


def test_projecting_some_positions_equals_those_positions_of_the_full_logits(model_parts):
  """DecoderStepFn's `project` (HRT's stage II asks for its masks only): the logits at those positions of a
  full call, with the tied projection and with E^T laid out once, for one row and for several."""
  from fastmt import models  # pylint: disable=g-import-not-at-top
  config, params, _ = model_parts
  model = models.Transformer(config)
  for rows, projection in itertools.product((1, 3), (None, translate.transposed_output_layout(params))):
    source = np.array([[5, 6, 7, 2]] * rows, np.int32)
    encoded = model.apply({'params': params}, source, method=models.Transformer.encode)
    memory = model.apply({'params': params}, encoded, source, method=models.Transformer.memory)
    step_fn = translate.make_step_fn(model, params, memory, output_projection=projection)
    tokens = np.arange(4, 4 + rows * 5, dtype=np.int32).reshape(rows, 5)
    positions = np.broadcast_to(np.arange(1, 6, dtype=np.int32), (rows, 5))
    mask = np.ones((rows, 5, 5), bool)
    call = lambda **kw: np.asarray(step_fn(tokens, positions, mask, models.init_cache(config, rows, 5),
                                           np.zeros(rows, np.int32), **kw)[0])
    full = call()
    for project in ([0, 2, 3], [4]):
      np.testing.assert_allclose(call(project=np.array(project)), full[:, project], rtol=1e-5, atol=1e-5)
    per_row = np.array([[4, 0], [1, 3], [2, 2]][:rows])  # the draft model's: other positions in every row
    np.testing.assert_allclose(call(project=per_row), np.take_along_axis(full, per_row[..., None], 1),
                               rtol=1e-5, atol=1e-5)


def test_a_source_at_the_maximum_length_still_matches_greedy(model_parts):
  config = model_parts[0]
  line = ' '.join(['God'] * (config.max_length - 1))
  greedy, _ = Translator(*model_parts).translate([line], 1)
  parallel, _ = Translator(*model_parts, DecodeSettings('pgj', block_size=3)).translate([line], 1)
  assert parallel == greedy


def test_bad_decode_settings_are_clear_errors():
  with pytest.raises(ValueError, match='block_size'):
    DecodeSettings('pgj', block_size=0)
  with pytest.raises(ValueError, match='parallel_length must be >= 0'):
    DecodeSettings('hgj', parallel_length=-1)
  # pj reads neither: values it ignores (decode.py warns of them, then leaves them out) do not stop the run
  assert DecodeSettings('pj', block_size=0, parallel_length=-1).algorithm == 'pj'
  with pytest.raises(ValueError, match='Unknown decoding algorithm'):
    DecodeSettings('sampling')
  # wrong types are the same one-line errors, not TypeErrors from deep inside JAX
  for settings, message in (({'algorithm': 'beam', 'beam_size': 2.0}, 'beam_size must be a whole number'),
                            ({'algorithm': 'pgj', 'block_size': 'auto'}, 'block_size must be a whole number'),
                            ({'algorithm': 'hgj', 'parallel_length': True}, 'parallel_length must be a whole'),
                            ({'algorithm': 'beam', 'alpha': float('nan')}, 'alpha .* must be a number >= 0'),
                            ({'algorithm': 'beam', 'alpha': -1}, 'alpha .* must be a number >= 0'),
                            ({'algorithm': ['greedy']}, 'Unknown decoding algorithm'),
                            ({'algorithm': 'spec', 'drafter': None}, 'drafter must be a string')):
    with pytest.raises(ValueError, match=message):
      DecodeSettings(**settings)
  assert DecodeSettings('beam', beam_size=np.int64(2), alpha=0).beam_size == 2  # numpy integers are whole numbers


def test_decode_py_with_closed_standard_streams_and_an_ascii_stdout_encoding(trained_workdir, tmp_path):
  """decode.py started by a program that closed a stream it does not use, or with PYTHONIOENCODING=ascii: a
  traceback (stdin closed in a file-to-file run, stdout closed), the report on stdout (stderr closed), a
  UnicodeEncodeError (stdout ascii). stdout carries translations only, in UTF-8 as --output FILE does."""
  source = tmp_path / 'in.txt'
  source.write_text(''.join(line + '\n' for line in corpus.read_lines(str(DATA / 'genesis.en'))[:6]), encoding='utf-8')
  decode = f'{sys.executable} {REPO / "decode.py"} --workdir {trained_workdir} --noprogress'
  run = lambda command, **env: subprocess.run(['bash', '-c', command], capture_output=True, cwd=REPO,
                                             env={**os.environ, **env})
  to_file = run(f'{decode} --input {source} --output {tmp_path / "out.txt"} <&- 2>&-')
  assert to_file.returncode == 0 and to_file.stdout == b'', to_file.stdout
  expected = (tmp_path / 'out.txt').read_bytes()
  assert expected.count(b'\n') == 6
  to_stdout = run(f'{decode} < {source} 2>&-', PYTHONIOENCODING='ascii')
  assert to_stdout.returncode == 0 and to_stdout.stdout == expected  # no report lines, the same bytes
  # the tiny model's outputs may be plain ASCII: what stdout does with German, through decode.py's own writer
  script = tmp_path / 'write.py'
  script.write_text("from fastmt import decode_lib\nwith decode_lib.replaced_on_success('-') as f:\n"
                    "  f.write('Grüße\\n')\n", encoding='utf-8')
  written = run(f'{sys.executable} {script}', PYTHONIOENCODING='ascii')
  assert written.returncode == 0 and written.stdout == 'Grüße\n'.encode('utf-8'), written.stderr
  for command, message in ((f'{decode} <&-', b'stdin is closed'), (f'{decode} < {source} >&-', b'stdout is closed')):
    refused = run(command)
    assert refused.returncode == 1 and message in refused.stderr and b'Traceback' not in refused.stderr, \
        refused.stderr


def test_decode_cli_end_to_end(trained_workdir, tmp_path):
  src = tmp_path / 'src.txt'
  src.write_text('And God said, Let there be light.\n\nGod\n', encoding='utf-8')
  hyp, metrics = tmp_path / 'hyp.txt', tmp_path / 'metrics.json'
  result = subprocess.run(
      [sys.executable, str(REPO / 'decode.py'), '--workdir', trained_workdir, '--input', str(src), '--output',
       str(hyp), '--reference', str(src), '--algorithm', 'hgj', '--block_size', '3', '--batch_size', '2',
       '--speed_sentences', '2', '--metrics_json', str(metrics), '--ddgviz', str(tmp_path / 'viz'),
       '--ddgviz_sentences', '2'], capture_output=True, text=True, cwd=REPO)
  assert result.returncode == 0, result.stderr
  assert len(hyp.read_text(encoding='utf-8').split('\n')) == 4 and hyp.read_text().split('\n')[1] == ''
  figures = json.loads(metrics.read_text())
  for key in ('bleu', 'chrf', 'length_ratio', 'brevity_penalty', 'ms_per_sentence', 'sentences_per_s', 'words_per_s',
              'decoder_calls_per_sentence', 'compile_s'):
    assert figures[key] is not None, key
  assert figures['empty_inputs'] == 1
  # every key is in docs/API.md's table, and every key of the table but --block_size auto's is written
  section = (REPO / 'docs' / 'API.md').read_text(encoding='utf-8').split("## decode.py's `--metrics_json`")[1]
  documented = set(re.findall(r'`(\w+)`', ''.join(line.split('|')[1] for line in section.split('\n## ')[0]
                                                   .splitlines() if line.startswith('| `'))))
  assert set(figures) == documented - {'auto_width'}, (set(figures) ^ documented)
  # what a call commits, in the report and the JSON (the "tokens accepted per call in every report")
  assert figures['tokens_per_call'] >= 1 and f"per call {figures['tokens_per_call']:.2f}" in result.stderr
  # --checkpoint latest is recorded with the step it resolved to
  assert figures['checkpoint'] == 'latest' and figures['step'] == max(
      int(d) for d in os.listdir(os.path.join(trained_workdir, 'checkpoints')) if d.isdigit())
  # The first 2 lines that decode (line 2 is blank), named by their input line, and said where.
  assert sorted(os.listdir(tmp_path / 'viz')) == ['ddgviz_1.html', 'ddgviz_1.png', 'ddgviz_3.html', 'ddgviz_3.png']
  assert f'input lines 1, 3 drawn into {tmp_path / "viz"}' in result.stderr


def test_decode_refuses_two_readers_of_stdin_and_two_writers_of_stdout(tmp_path, capsys):
  from fastmt import decode_lib  # pylint: disable=g-import-not-at-top
  with pytest.raises(FastmtError, match='--input and --reference both read stdin'):
    decode_lib.check_paths('-', str(tmp_path / 'hyp'), '-')
  with pytest.raises(FastmtError, match='--metrics_json and --output both write to stdout'):
    decode_lib.check_paths('-', '-', None, '-')
  decode_lib.check_paths('-', str(tmp_path / 'hyp'), None, '-')  # the translations in a file, the metrics on stdout
  assert not (tmp_path / '-').exists()
  decode_lib.write_metrics_json('-', decode_lib.DecodeReport(**{f.name: 0 for f in dataclasses.fields(
      decode_lib.DecodeReport) if f.default is dataclasses.MISSING}), {'dtype': 'float32'})
  assert json.loads(capsys.readouterr().out)['dtype'] == 'float32'


def test_metrics_json_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
  """A kill or a full disk while --metrics_json was written left half a JSON; it now replaces the file in one
  rename (a link stays a link), and a named pipe or /dev/stderr is written as it is."""
  import threading  # pylint: disable=g-import-not-at-top
  report = decode_lib.DecodeReport(**{f.name: 0 for f in dataclasses.fields(decode_lib.DecodeReport)
                                      if f.default is dataclasses.MISSING})
  metrics, link = tmp_path / 'metrics.json', tmp_path / 'link.json'
  metrics.write_text('{"old": 1}', encoding='utf-8')
  link.symlink_to(metrics)
  with monkeypatch.context() as m:
    m.setattr(decode_lib.files.os, 'replace', lambda *args: (_ for _ in ()).throw(OSError(28, 'No space left')))
    with pytest.raises(OSError):
      decode_lib.write_metrics_json(str(link), report, {'dtype': 'float32'})
  assert json.loads(metrics.read_text(encoding='utf-8')) == {'old': 1}
  assert sorted(p.name for p in tmp_path.iterdir()) == ['link.json', 'metrics.json']  # no temporary file left
  decode_lib.write_metrics_json(str(link), report, {'dtype': 'float32'})
  assert link.is_symlink() and json.loads(metrics.read_text(encoding='utf-8'))['dtype'] == 'float32'
  fifo = tmp_path / 'fifo'
  os.mkfifo(fifo)
  read = []
  reader = threading.Thread(target=lambda: read.append(fifo.read_text(encoding='utf-8')), daemon=True)
  reader.start()
  decode_lib.write_metrics_json(str(fifo), report, {'dtype': 'bfloat16'})
  reader.join(timeout=60)
  assert json.loads(read[0])['dtype'] == 'bfloat16' and fifo.exists() and not fifo.is_file()
  # a writable file in a directory this process cannot write to (no temporary file there): written in place
  with monkeypatch.context() as m:
    m.setattr(decode_lib.files, 'write_whole', lambda *args: (_ for _ in ()).throw(PermissionError(13, 'denied')))
    decode_lib.write_metrics_json(str(metrics), report, {'dtype': 'int8'})
  assert json.loads(metrics.read_text(encoding='utf-8'))['dtype'] == 'int8'


def test_scores_say_how_long_the_hypotheses_are_against_the_reference():
  from fastmt import decode_lib  # pylint: disable=g-import-not-at-top
  references = ['And God said , Let there be light .', 'And there was light .']
  same = decode_lib.score(references, references)
  assert same.bleu == pytest.approx(100.0) and (same.length_ratio, same.brevity_penalty) == (1.0, 1.0)
  short = decode_lib.score(['And God said .', 'And there was light .'], references)  # 9 of 14 tokens
  assert short.length_ratio == pytest.approx(9 / 14) and short.brevity_penalty == pytest.approx(np.exp(1 - 14 / 9))
  long = decode_lib.score(['And God said , Let there be light . light .', 'And there was light .'], references)
  assert long.length_ratio == pytest.approx(16 / 14) and long.brevity_penalty == 1.0
  assert decode_lib.score([], []) is None
  with pytest.raises(ValueError, match='2 input lines but 1 reference lines'):
    decode_lib.score(references, references[:1])


def test_bleu_takes_the_target_languages_tokenizer():
  """sacreBLEU's default 13a reads a Chinese sentence as one word: a near-perfect output scored 0."""
  from fastmt import decode_lib  # pylint: disable=g-import-not-at-top
  references = ['起初神创造天地。', '地是空虚混沌，渊面黑暗。']
  hypotheses = ['起初神创造天地。', '地是空虚混沌，渊面黑。']
  assert decode_lib.score(hypotheses, references).bleu < 50  # one of two "words" right
  chinese = decode_lib.score(hypotheses, references, 'zh')
  assert chinese.bleu > 80 and 'tok:zh' in chinese.bleu_signature
  with pytest.raises(decode_lib.FastmtError, match='BLEU tokenizer must be one of'):
    decode_lib.score(hypotheses, references, 'chinese')
  if importlib.util.find_spec('MeCab') is None:  # not among fastmt's dependencies: said before any work
    with pytest.raises(decode_lib.FastmtError, match='ja-mecab tokenizer cannot load: .*sacrebleu\\[ja\\]'):
      decode_lib.check_bleu_tokenize('ja-mecab')


def test_bench_compares_work_directories_recorded_with_relative_or_absolute_names(tmp_path, monkeypatch):
  from fastmt import bench  # pylint: disable=g-import-not-at-top
  monkeypatch.chdir(tmp_path)
  old = {'name': 'text', 'test_files': ['test.en', 'test.de'], 'train_files': ['a.en', 'a.de'], 'data_dir': ''}
  new = {**old, 'test_files': [str(tmp_path / 'test.en'), str(tmp_path / 'test.de')]}
  assert bench._comparable(old) == bench._comparable(new)
  assert bench._comparable(old) != bench._comparable({**new, 'test_files': ['/elsewhere/test.en', 'test.de']})


def test_decode_cli_names_the_bad_utf8_line(trained_workdir, tmp_path):
  src = tmp_path / 'src.txt'
  src.write_bytes(b'God\n\xc3\x28 broken\n')
  result = subprocess.run([sys.executable, str(REPO / 'decode.py'), '--workdir', trained_workdir, '--input',
                           str(src), '--output', str(tmp_path / 'hyp.txt')], capture_output=True, text=True,
                          cwd=REPO)
  assert result.returncode != 0 and 'src.txt:2: invalid UTF-8' in result.stderr and 'Traceback' not in result.stderr


def test_decode_cli_reads_stdin_and_writes_stdout_in_order(trained_workdir):
  result = subprocess.run(
      [sys.executable, str(REPO / 'decode.py'), '--workdir', trained_workdir, '--input', '-', '--output', '-',
       '--speed_sentences', '0', '--batch_size', '2'],
      input='God\n\nAnd God said, Let there be light.\n', capture_output=True, text=True, cwd=REPO)
  assert result.returncode == 0, result.stderr
  lines = result.stdout.split('\n')
  assert len(lines) == 4 and lines[1] == '' and lines[3] == ''


@pytest.mark.parametrize('signum', [signal.SIGTERM, signal.SIGINT])
def test_decode_cli_stopped_by_a_signal_leaves_the_output_file_as_it_was(trained_workdir, tmp_path, signum):
  """kill / timeout / a scheduler (SIGTERM) and Ctrl-C (SIGINT) while a stream is being translated: the old
  output file is kept, the temporary file beside it removed (SIGTERM used to leave it), no traceback."""
  hyp = tmp_path / 'hyp.de'
  hyp.write_text('kept\n', encoding='utf-8')
  process = subprocess.Popen([sys.executable, str(REPO / 'decode.py'), '--workdir', trained_workdir, '--input',
                              '-', '--output', str(hyp), '--noprogress'], stdin=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, cwd=REPO,
                             # as from a shell: a pytest-xdist worker ignores SIGINT, and its children would too
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
  process.stdin.write('God\n')
  process.stdin.flush()  # stdin stays open: the translator waits for more, its first line written and flushed
  partial = []
  for _ in range(1200):
    partial = [p for p in tmp_path.iterdir() if p.name.endswith('.partial') and p.stat().st_size > 0]
    if partial or process.poll() is not None:
      break
    time.sleep(0.1)
  assert partial, 'the first translation was never written'
  process.send_signal(signum)
  _, stderr = process.communicate(timeout=120)
  assert process.returncode == 128 + signum, stderr
  assert 'Traceback' not in stderr
  assert sorted(p.name for p in tmp_path.iterdir()) == ['hyp.de'] and hyp.read_text(encoding='utf-8') == 'kept\n'


def test_decode_cli_as_the_readme_runs_it_stdin_and_stdout_redirected_to_files(trained_workdir, tmp_path):
  """`decode.py --workdir w < src.en > hyp.de`: stdin and stdout are two regular files, not one."""
  src, hyp = tmp_path / 'src.en', tmp_path / 'hyp.de'
  src.write_text('God\n\nAnd God said, Let there be light.\n', encoding='utf-8')
  with open(src, encoding='utf-8') as stdin, open(hyp, 'w', encoding='utf-8') as stdout:
    result = subprocess.run([sys.executable, str(REPO / 'decode.py'), '--workdir', trained_workdir,
                             '--progress=false'], stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, text=True,
                            cwd=REPO)
  assert result.returncode == 0, result.stderr
  lines = hyp.read_text(encoding='utf-8').split('\n')
  assert len(lines) == 4 and lines[1] == '' and lines[3] == ''  # three lines in, three out, in order


def test_decode_cli_says_which_flags_do_nothing_and_refuses_clusters_that_are_not_there(trained_workdir, tmp_path):
  """--beam_size with greedy, --drafter with pgj ... were silently ignored; a --clusters path the user names
  that holds no clusters fell back to the dense projection with a warning only."""
  run = lambda *flags: subprocess.run([sys.executable, str(REPO / 'decode.py'), '--workdir', trained_workdir,
                                       '--progress=false', *flags], input='God\n', capture_output=True, text=True,
                                      cwd=REPO)
  # A beam larger than the vocabulary, warned of as doing nothing with greedy, then refused: it is left out
  result = run('--beam_size', '100000', '--drafter', 'ngram', '--clusters', str(tmp_path),
               '--metrics_json', str(tmp_path / 'metrics.json'))
  assert result.returncode == 0 and result.stdout.count('\n') == 1, result.stderr
  recorded = json.loads((tmp_path / 'metrics.json').read_text())['settings']
  assert recorded['beam_size'] == DecodeSettings('greedy').beam_size  # what decoded
  assert '--beam_size has no effect with --algorithm greedy (it acts on --algorithm beam, ib, hrt)' in result.stderr
  assert '--drafter has no effect with --algorithm greedy' in result.stderr
  assert '--clusters has no effect without --projection clustered' in result.stderr
  assert 'no effect' not in run('--algorithm', 'beam', '--beam_size', '2').stderr
  result = run('--bleu_tokenize', 'zh', '--direction', 'en_fr', '--ddgviz_sentences', '5')
  assert result.returncode == 0 and result.stdout.count('\n') == 1, result.stderr
  for flag in ('--bleu_tokenize has no effect without --reference', '--direction has no effect without '
               '--tag_inputs or --projection clustered', '--ddgviz_sentences has no effect without --ddgviz'):
    assert flag in result.stderr, result.stderr
  # '--workdir=~/...': the shell leaves the '~' of '--flag=~/x' alone; fastmt.load expanded it, decode.py did not
  (tmp_path / 'home').mkdir()
  os.symlink(trained_workdir, tmp_path / 'home' / 'model')
  result = subprocess.run([sys.executable, str(REPO / 'decode.py'), '--workdir=~/model', '--progress=false'],
                          input='God\n', capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, 'HOME': str(tmp_path / 'home')})
  assert result.returncode == 0 and result.stdout.count('\n') == 1, result.stderr
  result = run('--projection', 'clustered', '--clusters', str(tmp_path / 'none'))
  assert result.returncode != 0 and 'no clusters there' in result.stderr and 'Traceback' not in result.stderr
  # Clusters of another direction: lines tagged beforehand need no --direction, and the default's clusters
  # (en_de) projected French outputs without a word.
  from fastmt import clusters_lib  # pylint: disable=g-import-not-at-top
  workdir = tmp_path / 'multi'
  shutil.copytree(trained_workdir, workdir)
  recorded = json.loads((workdir / 'config.json').read_text())  # a multilingual model's record
  recorded['dataset']['name'] = 'bible/en_de+en_fr'
  (workdir / 'config.json').write_text(json.dumps(recorded))
  (workdir / 'clusters' / 'en_fr').mkdir(parents=True)
  (workdir / 'clusters' / 'en_fr' / clusters_lib.METADATA).write_text('{"direction": "en_fr"}')
  for flags, message in ((['--projection', 'clustered'], 'holds clusters for en_fr; name the direction'),
                         (['--projection', 'clustered', '--direction', 'en_de', '--clusters',
                           str(workdir / 'clusters' / 'en_fr')],
                          'were built for direction en_fr, not --direction en_de')):
    result = subprocess.run([sys.executable, str(REPO / 'decode.py'), '--workdir', str(workdir), '--progress=false',
                             *flags], input='God\n', capture_output=True, text=True, cwd=REPO)
    assert result.returncode != 0 and message in result.stderr and 'Traceback' not in result.stderr, result.stderr
  # --tag_inputs names the direction (the default's tag); clusters under another name (notebook 04's C250_K5,
  # recorded as of 'C250_K5') are the user's to choose
  result = subprocess.run([sys.executable, str(REPO / 'decode.py'), '--workdir', str(workdir), '--progress=false',
                           '--projection', 'clustered', '--tag_inputs'], input='God\n', capture_output=True,
                          text=True, cwd=REPO)
  assert 'holds clusters for' not in result.stderr and 'no <2de> symbol' in result.stderr, result.stderr
  shutil.rmtree(workdir / 'clusters' / 'en_fr')
  (workdir / 'clusters' / 'C250_K5').mkdir()
  (workdir / 'clusters' / 'C250_K5' / clusters_lib.METADATA).write_text('{"direction": "C250_K5"}')
  result = subprocess.run([sys.executable, str(REPO / 'decode.py'), '--workdir', str(workdir), '--progress=false',
                           '--projection', 'clustered'], input='God\n', capture_output=True, text=True, cwd=REPO)
  assert result.returncode == 0 and result.stdout.count('\n') == 1, result.stderr


def test_bad_api_arguments_say_what_to_use_instead(trained_workdir):
  import fastmt  # pylint: disable=g-import-not-at-top
  model = fastmt.load(trained_workdir)
  with pytest.raises(fastmt.FastmtError, match='stats must be a fastmt TranslationStats .*got dict'):
    model.translate(['God'], stats={})
  with pytest.raises(fastmt.FastmtError, match='model.choose_width'):
    model.translate(['God'], algorithm='spec', drafter='ngram', block_size='auto')
  with pytest.raises(fastmt.FastmtError, match="use drafter 'ngram' .*'model' .*draft_model= .*'bigram' or 'pad'"):
    model.translate(['God'], algorithm='spec')


def test_the_draft_table_decodes_where_the_work_directory_cannot_be_written(trained_workdir, tmp_path,
                                                                             monkeypatch, caplog):
  """The bigram table is a cache in the work directory: a read-only one (a shared model) still decodes."""
  from fastmt import decode_lib  # pylint: disable=g-import-not-at-top
  workdir = tmp_path / 'copy'
  shutil.copytree(trained_workdir, workdir, ignore=shutil.ignore_patterns(decode_lib.DRAFT_TABLE_FILE))

  def refuse(*args, **kwargs):
    raise OSError(30, 'Read-only file system')
  monkeypatch.setattr(decode_lib.tempfile, 'mkstemp', refuse)
  table = decode_lib.load_draft_table(str(workdir))
  assert table.shape == (workdir_lib.load_model_config(str(workdir)).vocab_size,)
  assert 'not cached' in caplog.text and sorted(os.listdir(workdir)) == sorted(
      p for p in os.listdir(trained_workdir) if p != decode_lib.DRAFT_TABLE_FILE)
  monkeypatch.undo()
  np.testing.assert_array_equal(decode_lib.load_draft_table(str(workdir)), table)
  cached = workdir / decode_lib.DRAFT_TABLE_FILE
  assert cached.exists() and not any(p.startswith('.') for p in os.listdir(workdir))
  assert cached.stat().st_mode & 0o777 == 0o644  # readable by the directory's other users, as np.save's was
  cached.write_bytes(b'cut short')  # a damaged cache is built again, not a traceback
  np.testing.assert_array_equal(decode_lib.load_draft_table(str(workdir)), table)
  config = workdir_lib.load_model_config(str(workdir))
  parts = (config, workdir_lib.restore_params(str(workdir), config, 'latest')[0],
           workdir_lib.load_tokenizer(str(workdir)))
  for ids in (table + len(table), table - len(table)):  # a table of another vocabulary: an error, not NaN drafts
    with pytest.raises(FastmtError, match="ids outside the model's vocabulary"):
      Translator(*parts, DecodeSettings('spec', drafter='bigram', block_size=3), draft_table=ids)
  # Without a table the error names the setting that wants it (it named --drafter bigram for every spec drafter)
  with pytest.raises(FastmtError, match='^--drafter bigram needs a draft table'):
    Translator(*parts, DecodeSettings('spec', drafter='bigram', block_size=3))
  with pytest.raises(FastmtError, match='^jacobi_init=bigram needs a draft table'):
    Translator(*parts, DecodeSettings('spec', drafter='ngram', jacobi_init='bigram', block_size=3))


def test_the_ngram_drafter_decodes_a_model_copied_without_its_corpus(trained_workdir, tmp_path, caplog):
  """--drafter ngram is for any model: without its training text it guesses PAD where no lookup matches (same
  output, a warning), reads no corpus and writes nothing; the bigram drafter, which follows the table, refuses."""
  import fastmt  # pylint: disable=g-import-not-at-top
  from fastmt import decode_lib  # pylint: disable=g-import-not-at-top
  workdir = tmp_path / 'copy'
  shutil.copytree(trained_workdir, workdir, ignore=shutil.ignore_patterns(decode_lib.DRAFT_TABLE_FILE))
  config = json.loads((workdir / 'config.json').read_text())
  config['dataset']['train_files'] = [str(tmp_path / 'gone.en'), str(tmp_path / 'gone.de')]
  (workdir / 'config.json').write_text(json.dumps(config))
  before = sorted(os.listdir(workdir))
  model = fastmt.load(str(workdir))
  lines = ['In the beginning God created the heaven and the earth.', 'And God said, Let there be light.']
  greedy = model.translate(lines)
  assert model.translate(lines, algorithm='spec', drafter='ngram', block_size=3) == greedy
  assert 'no bigram draft table' in caplog.text and 'gone.en' in caplog.text
  assert sorted(os.listdir(workdir)) == before
  # the error says where the name comes from (a <(zcat ...) training file read /dev/fd/63, named alone)
  with pytest.raises(fastmt.FastmtError, match='training targets recorded in .*config.json.*gone.en'):
    model.translate(lines, algorithm='spec', drafter='bigram', block_size=3)


def test_decode_cli_unknown_flag_is_one_line(trained_workdir):
  result = subprocess.run([sys.executable, str(REPO / 'decode.py'), '--workdir', trained_workdir, '--algoritm=pj'],
                          capture_output=True, text=True, cwd=REPO)
  assert result.returncode != 0 and 'Traceback' not in result.stderr and 'algoritm' in result.stderr


def test_an_independent_hand_written_greedy_gives_the_same_tokens(model_parts):
  """benchmarks/reference_greedy.py re-implements the model with plain jax.numpy (the speed reference of
  docs/BENCHMARKS.md section 1); it must agree with fastmt token for token, or its timings compare nothing."""
  spec = importlib.util.spec_from_file_location('reference_greedy', REPO / 'benchmarks/reference_greedy.py')
  reference = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(reference)
  config, params, _ = model_parts
  translator = Translator(*model_parts)
  lines = [line for line in open(REPO / 'tests/data/genesis.en', encoding='utf-8')][:6]
  decode = jax.jit(reference.reference_greedy, static_argnums=(2, 3))
  output_tokens = 0
  for ids in translator.encode_sources(lines, translate.TranslationStats()):
    _, source, _ = next(translator.batches([ids], 1))
    cap = translate.output_cap(config, source.shape[1], translator.settings)
    tokens, _ = decode(params, source, cap, config.num_heads)
    expected = np.asarray(translator.decode_batch(source, [cap]).tokens)
    np.testing.assert_array_equal(np.asarray(tokens), expected)
    output_tokens += int((expected != 0).sum())
  assert output_tokens > 2 * len(lines)  # real translations, not rows that stop at once


def test_the_dispatch_cost_script_calls_the_translators_executable_as_decode_batch_does(trained_workdir, capsys,
                                                                                        monkeypatch):
  """benchmarks/dispatch_cost.py (BENCHMARKS section 1) calls Translator's compiled executable directly, past
  decode_batch: when the executable gained an argument (recent outputs) the script broke without a test
  noticing. It runs here on the tiny model, every way it times."""
  spec = importlib.util.spec_from_file_location('dispatch_cost', REPO / 'benchmarks/dispatch_cost.py')
  script = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(script)
  monkeypatch.setattr(sys, 'argv', ['dispatch_cost.py', '--workdir', trained_workdir, '--sentences', '2',
                                    '--repeats', '1'])
  script.main()
  out = capsys.readouterr().out
  for way in ('device_put, own cap', 'host arrays, cap 1', 'encoder + memory alone', 'translate(), batch 1'):
    assert way in out
  assert 'the Python around the call' in out


def test_the_spec_cost_script_times_every_part_and_both_decoders(trained_float_parts):
  """benchmarks/spec_cost.py (BENCHMARKS section 7, the int8 drafter) runs on the tiny model: every part of an
  iteration, both whole decoders, a row for a width (one width: the script's rows share their code)."""
  spec = importlib.util.spec_from_file_location('spec_cost', REPO / 'benchmarks/spec_cost.py')
  script = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(script)
  row = script.width_report(*trained_float_parts, texts=['In the beginning', 'And God said'], width=3, calls=4,
                            repeats=1)
  assert set(row['ms_per_call']) == {'step', 'verify', 'draft', 'both', 'overlap'}
  assert np.isfinite(row['overlap_over_sum'])
  assert row['iterations_per_sentence']['spec'] < row['iterations_per_sentence']['greedy']
  # timings only: on a loaded machine a difference of two of them may have either sign
  assert row['ms_per_sentence']['greedy'] > 0 and np.isfinite(row['loop_model_ms'])


GENESIS = [line.rstrip('\n') for line in open(REPO / 'tests/data/genesis.en', encoding='utf-8')][:40]


def decode_cli(args, **kwargs):
  return subprocess.run([sys.executable, str(REPO / 'decode.py'), *args], capture_output=True, text=True,
                        cwd=REPO, **kwargs)


@pytest.mark.parametrize('algorithm', ['greedy', 'pgj', 'beam'])
def test_a_sentence_translates_the_same_at_batch_1_and_batch_32(model_parts, algorithm):
  """A row's output cap comes from its own source, and padding rows are done from the start: a sentence's
  translation does not depend on its batch-mates (up to float near-ties between batch shapes: none here)."""
  settings = DecodeSettings(algorithm, beam_size=2)
  at_1, _ = Translator(*model_parts, settings).translate_ids(GENESIS, batch_size=1)
  at_32, _ = Translator(*model_parts, settings).translate_ids(GENESIS, batch_size=32)
  differing = [i for i, (a, b) in enumerate(zip(at_1, at_32)) if not np.array_equal(a, b)]
  assert not differing, differing


def test_one_sentence_costs_its_own_decoder_calls_not_a_padded_batch(model_parts):
  translator = Translator(*model_parts)
  _, stats = translator.translate_ids([GENESIS[0]], batch_size=32)
  assert stats.batches == 1 and stats.padding_rows == 0
  assert stats.loop_iterations == stats.decoder_calls  # the loop ran exactly that sentence's calls
  _, stats = translator.translate_ids(GENESIS[:3], batch_size=32)  # 3 sentences -> a batch of 4 rows
  assert stats.padding_rows == 1 and stats.loop_iterations <= stats.decoder_calls


@pytest.mark.parametrize('stream', [False, True])
def test_inputs_stream_a_chunk_at_a_time(model_parts, stream):
  """iter_ids reads only chunk_sentences lines ahead (a streamed input's reader two chunks more): an endless
  input still yields its first translations, and a caller that stops early stops the reading too."""
  import threading  # pylint: disable=g-import-not-at-top
  translator = Translator(*model_parts)
  read = []

  def endless():
    for i in itertools.count():
      read.append(i)
      yield GENESIS[i % 5]
  readers_before = {t for t in threading.enumerate() if t.name == 'fastmt-available-chunks'}
  outputs = translator.iter_ids(endless(), batch_size=4, chunk_sentences=8, stream=stream)
  first = list(itertools.islice(outputs, 10))
  outputs.close()
  read_when_closed = len(read)
  for reader in {t for t in threading.enumerate() if t.name == 'fastmt-available-chunks'} - readers_before:
    reader.join(timeout=30)
    assert not reader.is_alive()
  expected, _ = translator.translate_ids(GENESIS[:5] * 2, batch_size=4)
  assert all(np.array_equal(a, b) for a, b in zip(first, expected))
  # streamed: the two chunks decoded, the reader's queue of two more, the line it was putting when the caller
  # left and at most the one it was reading then
  assert len(read) <= (16 + 2 * 8 + 2 if stream else 16) and len(read) <= read_when_closed + 1


def test_a_streamed_input_is_translated_as_its_lines_arrive(model_parts):
  """stream=True (decode.py on stdin or a pipe): a line is translated once it has arrived, not once its chunk's
  4,096 lines have; the outputs are those of the same lines read at once."""
  import threading  # pylint: disable=g-import-not-at-top
  translator = Translator(*model_parts)
  first_out = threading.Event()

  def typed():
    yield GENESIS[0]
    if not first_out.wait(timeout=30):  # fixed chunks would wait here for line 2: fail rather than hang
      raise AssertionError('line 2 was asked for before line 1 was translated')
    yield GENESIS[1]
  outputs = []
  for ids in translator.iter_ids(typed(), batch_size=4, stream=True):
    outputs.append(ids)
    first_out.set()
  expected, _ = translator.translate_ids(GENESIS[:2], batch_size=4)
  assert len(outputs) == 2 and all(np.array_equal(a, b) for a, b in zip(outputs, expected))


def test_the_truncation_warning_names_the_input_line_counting_blank_lines(model_parts, caplog):
  long_line = ' '.join(['light'] * (3 * model_parts[0].max_length))
  Translator(*model_parts).translate(['God', '', '', long_line], batch_size=2)
  assert 'Input line 4 has' in caplog.text


def test_fastmt_warns_on_loggers_named_fastmt_which_a_user_can_silence(model_parts, caplog):
  long_line = ' '.join(['light'] * (3 * model_parts[0].max_length))
  Translator(*model_parts).translate([long_line], batch_size=1)
  assert 'Input line 1 has' in caplog.text
  assert {record.name for record in caplog.records} == {'fastmt.translate'}
  caplog.clear()
  logging.getLogger('fastmt').setLevel(logging.ERROR)
  try:
    stats = TranslationStats()
    Translator(*model_parts).translate([long_line], batch_size=1, stats=stats)
  finally:
    logging.getLogger('fastmt').setLevel(logging.NOTSET)
  assert not caplog.records and stats.truncated_inputs == 1  # silenced, still counted


def test_no_library_module_logs_on_the_root_logger():
  # logging.warning() and friends log on the root logger, which no user can silence without silencing every
  # library; fastmt's modules log on logging.getLogger(__name__). The CLIs' absl logging has its own 'absl'.
  package = os.path.join(REPO, 'fastmt')
  offenders = []
  for folder, _, files in os.walk(package):
    for name in files:
      if name.endswith('.py'):
        path = os.path.join(folder, name)
        with open(path, encoding='utf-8') as f:
          text = f.read()
        root_calls = re.search(r'\blogging\.(debug|info|warning|error|exception)\(', text)
        if re.search(r'^import logging$', text, re.M) and root_calls:
          offenders.append(os.path.relpath(path, REPO))
  assert not offenders


def test_validation_bleu_counts_the_outputs_at_cap_instead_of_warning(model_parts, caplog):
  """Training evaluates every few steps: the cap warning (about a split it did not name) came each time;
  now the history counts those outputs (valid_outputs_at_cap) and the warning stays for every other caller."""
  from fastmt import train_lib  # pylint: disable=g-import-not-at-top
  texts = ['God', 'And God said, Let there be light.', 'And the evening and the morning were the first day.'] * 3
  texts.append('😀')  # a line the vocabulary cannot spell: its warning is per call too
  _, plain = Translator(*model_parts).translate(texts, batch_size=4)
  assert plain.outputs_at_cap and 'reached the output cap' in caplog.text  # the tiny model repeats itself
  assert 'vocabulary lacks' in caplog.text
  caplog.clear()
  validation, stats = corpus.ParallelText(texts, texts), TranslationStats()
  train_lib.validation_bleu(model_parts[1], model_parts[0], model_parts[2], validation, len(texts), stats=stats)
  assert stats.outputs_at_cap == plain.outputs_at_cap and stats.unreadable_inputs == 1
  assert 'reached the output cap' not in caplog.text and 'vocabulary lacks' not in caplog.text
  Translator(*model_parts).translate(texts, batch_size=4)
  assert 'reached the output cap' in caplog.text  # the filter is gone after validation


def test_repeated_passes_leave_out_the_per_call_warnings_but_not_truncation(model_parts, caplog):
  """The bench's timing passes and --speed_sentences translate sentences already warned of, dozens of times."""
  translator = Translator(*model_parts, DecodeSettings(output_length_ratio=0.01))
  long_line = ' '.join(['light'] * (3 * model_parts[0].max_length))
  with translate.quiet_repeated_warnings():
    _, stats = translator.translate(['And God said, Let there be light.', '😀', long_line], batch_size=2)
  assert stats.outputs_at_cap and stats.unreadable_inputs == 1
  assert 'reached the output cap' not in caplog.text and 'vocabulary lacks' not in caplog.text
  assert 'Input line 3 has' in caplog.text  # one line's own problem: still said


def test_greedy_commits_exactly_one_token_a_call_and_pgj_at_least_one(model_parts):
  """TranslationStats.tokens_per_call (decode.py's report, the bench's column): EOS counts, a row at the cap
  has none, an empty input makes no call."""
  texts = ['', 'God', 'And God said, Let there be light.', 'And the evening and the morning were the first day.']
  _, greedy_stats = Translator(*model_parts).translate_ids(texts, 2)  # the tiny model runs on to the cap
  assert greedy_stats.decoder_calls > 3 and greedy_stats.tokens_per_call == 1.0
  # greedy where rows end: 3 words then EOS (4 calls), 2 words then EOS (3 calls), 3 words at the cap (3
  # calls, no EOS), an empty input (no call): 8 words and 2 EOS in 10 calls
  assert translate.TranslationStats(sentences=4, empty_inputs=1, outputs_at_cap=1, output_tokens=8,
                                    decoder_calls=10).tokens_per_call == 1.0
  _, pgj_stats = Translator(*model_parts, DecodeSettings('pgj', block_size=3)).translate_ids(texts, 2)
  assert pgj_stats.tokens_per_call >= 1.0
  assert pgj_stats.tokens_per_call == pytest.approx(
      (pgj_stats.output_tokens + 3 - pgj_stats.outputs_at_cap) / pgj_stats.decoder_calls)


def test_a_drafter_models_calls_are_counted_beside_the_decoder_calls(model_parts):
  """spec with drafter 'int8' (the model's int8 copy drafts by width - 1 calls of its own before each decoder
  call): TranslationStats.drafter_calls and decode.py's report count them; greedy and PGJ make none."""
  texts = ['', 'God', 'And God said, Let there be light.']
  _, greedy_stats = Translator(*model_parts).translate_ids(texts, 2)
  _, pgj_stats = Translator(*model_parts, DecodeSettings('pgj', block_size=3)).translate_ids(texts, 2)
  assert greedy_stats.drafter_calls == pgj_stats.drafter_calls == 0
  _, spec_stats = Translator(*model_parts, DecodeSettings('spec', block_size=3, drafter='int8')).translate_ids(texts, 2)
  assert spec_stats.decoder_calls > 0 and spec_stats.drafter_calls == 2 * spec_stats.decoder_calls
  report = decode_lib.DecodeReport(
      sentences=3, bleu=None, chrf=None, bleu_signature=None, chrf_signature=None, ms_per_sentence=None,
      sentences_per_s=1.0, words_per_s=1.0, decoder_calls_per_sentence=4.0, compile_s=0.0, empty_inputs=1,
      truncated_inputs=0, outputs_at_cap=0, tokens_per_call=2.0, drafter_calls_per_sentence=8.0)
  assert 'per call 2.00; and 8.00 drafter model calls/sentence' in decode_lib.format_report(report)
  assert 'drafter' not in decode_lib.format_report(dataclasses.replace(report, drafter_calls_per_sentence=0.0))


def test_outputs_holding_unk_are_counted(model_parts, monkeypatch):
  """A character the vocabulary left out comes out as SentencePiece's ' \u2047 ': counted, as decode.py's
  report and fastmt-distill's summary say, instead of passing for text."""
  from fastmt.data.tokenizer import UNK_ID  # pylint: disable=g-import-not-at-top
  from fastmt.decoding.greedy import DecodeOutput  # pylint: disable=g-import-not-at-top
  translator = Translator(*model_parts)

  def decode_batch(source, row_caps=None, stats=None, recent_outputs=None):
    rows, width = source.shape[0], translator.config.max_length
    tokens = np.zeros((rows, width), np.int32)
    tokens[:, :3] = [7, UNK_ID, EOS_ID]
    tokens[1:, 1] = 8  # only the first row holds <unk>
    return DecodeOutput(tokens, np.full((rows,), 3, np.int32), np.int32(3))
  monkeypatch.setattr(translator, 'decode_batch', decode_batch)
  outputs, stats = translator.translate(['God', 'light', 'water'], batch_size=4)
  assert stats.outputs_with_unknown == 1 and '\u2047' in outputs[0] and '\u2047' not in outputs[1]


def test_the_output_cap_warning_names_the_input_lines(model_parts, caplog):
  """The tiny model repeats itself: at a cap of 9 tokens its outputs stop there; the warning says where."""
  translator = Translator(*model_parts, DecodeSettings(output_length_ratio=0.01))
  texts = ['', 'God', '', 'And God said, Let there be light.', 'And the evening and the morning were the first day.']
  every_line = []  # what fastmt.distill asks for: every line at the cap (the warning names the first 10)
  ids, stats = translator.translate_ids(texts, batch_size=2, lines_at_cap=every_line)
  at_cap = [i + 1 for i, out in enumerate(ids) if len(out) == 9]  # 9 tokens, no EOS: the cap
  assert sorted(every_line) == at_cap
  named = f'input line{"s" * (len(at_cap) > 1)} {", ".join(map(str, at_cap))})'
  assert at_cap and stats.outputs_at_cap == len(at_cap) and f'{len(at_cap)} outputs reached' in caplog.text
  assert named in caplog.text
  caplog.clear()  # a second call adding to the same stats warns of its own lines only
  translator.translate_ids([texts[at_cap[-1] - 1]], batch_size=2, stats=stats)  # a line that reached the cap
  assert '1 output reached the output cap without EOS (input line 1)' in caplog.text
  caplog.clear()  # a later chunk of a file (fastmt.distill's): its lines are named as the file's, not the chunk's
  later = []
  translator.translate_ids([texts[at_cap[-1] - 1]], batch_size=2, lines_at_cap=later, first_line=1025)
  assert '(input line 1025)' in caplog.text and later == [1025]
  caplog.clear()  # more than 10: the first 10 of the input, not those of the batches decoded first (the shortest)
  many = [texts[4]] * 12 + [texts[1]] * 12
  ids, _ = translator.translate_ids(many, batch_size=4)
  assert all(len(out) == 9 for out in ids)
  assert '(input lines 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, ...)' in caplog.text


def test_empty_outputs_of_non_empty_inputs_are_counted_and_named(model_parts, caplog, monkeypatch):
  """A model that ends its output at once (a large beam favours it: 15 of 17 lines at beam 256 in a user
  review) gave empty lines, counted nowhere and warned of by nothing."""
  translator = Translator(*model_parts, DecodeSettings())
  decode_batch = translator.decode_batch

  def ending_at_once(*args, **kwargs):  # every row's first token EOS
    out = decode_batch(*args, **kwargs)
    return dataclasses.replace(out, tokens=out.tokens.at[:, 0].set(EOS_ID))
  monkeypatch.setattr(translator, 'decode_batch', ending_at_once)
  hypotheses, stats = translator.translate(['', 'God', '', 'And God said, Let there be light.'], batch_size=2)
  assert hypotheses == ['', '', '', ''] and (stats.empty_inputs, stats.empty_outputs) == (2, 2)
  assert '2 non-empty inputs translated to nothing, the model ending the output at once or writing only pieces ' \
      'without text (input lines 2, 4;' in caplog.text
  caplog.clear()  # validation during training and the bench's timing passes count them instead
  with translate.quiet_repeated_warnings():
    assert translator.translate(['God'])[1].empty_outputs == 1
  assert 'translated to nothing' not in caplog.text


def test_outputs_of_no_text_are_counted_as_empty(model_parts, caplog, monkeypatch):
  """An output whose pieces all detokenise to nothing (BOS, the reserved symbols, a lone word boundary: a weak
  model under a tight repetition guard wrote '▁' alone) is an empty line too: it was counted only when the first
  token was EOS, so a user review saw empty lines with empty_outputs 0 and no warning."""
  translator = Translator(*model_parts, DecodeSettings())
  decode_batch = translator.decode_batch

  def no_text(*args, **kwargs):  # row 0: BOS then EOS (no text); the other rows as decoded
    out = decode_batch(*args, **kwargs)
    return dataclasses.replace(out, tokens=out.tokens.at[0, :2].set(jnp.array([BOS_ID, EOS_ID])))
  monkeypatch.setattr(translator, 'decode_batch', no_text)
  texts = ['God', 'And God said, Let there be light.']
  hypotheses, stats = translator.translate(texts, batch_size=1)  # each its own batch: both rows 0
  assert hypotheses == ['', ''] and stats.empty_outputs == 2
  assert '(input lines 1, 2;' in caplog.text
  monkeypatch.setattr(translator, 'decode_batch', decode_batch)
  hypotheses, stats = translator.translate(texts)
  assert stats.empty_outputs == sum(not h.strip() for h in hypotheses)  # the count is the text's


def test_decode_cli_blank_and_huge_lines_keep_their_places(trained_workdir, tmp_path):
  src = tmp_path / 'src.txt'
  src.write_text('\n\n' + 'light ' * 20000 + '\nGod\n\n', encoding='utf-8')  # a 120k-character line
  result = decode_cli(['--workdir', trained_workdir, '--input', str(src), '--output', str(tmp_path / 'hyp')])
  assert result.returncode == 0, result.stderr
  lines = (tmp_path / 'hyp').read_text(encoding='utf-8').split('\n')
  assert len(lines) == 6 and lines[0] == lines[1] == lines[4] == lines[5] == ''
  assert 'Input line 3 has' in result.stderr and 'truncated inputs 1' in result.stderr
  (tmp_path / 'blank').write_text('\n \n\n', encoding='utf-8')
  result = decode_cli(['--workdir', trained_workdir, '--input', str(tmp_path / 'blank')])
  assert result.returncode == 0 and result.stdout == '\n\n\n', result.stderr


def test_decode_cli_checkpoint_choice_and_its_errors_are_one_line(trained_workdir, tmp_path):
  src = tmp_path / 'src.txt'
  src.write_text('God\n', encoding='utf-8')
  for checkpoint in ('best', '20', 'latest'):
    result = decode_cli(['--workdir', trained_workdir, '--input', str(src), '--checkpoint', checkpoint])
    assert result.returncode == 0 and len(result.stdout.split('\n')) == 2, result.stderr
  for checkpoint, message in (('7', 'no checkpoint step 7'), ('newest', "'latest', 'best' or a step")):
    result = decode_cli(['--workdir', trained_workdir, '--input', str(src), '--checkpoint', checkpoint])
    assert result.returncode != 0 and message in result.stderr and 'Traceback' not in result.stderr, result.stderr
  result = decode_cli(['--workdir', str(tmp_path / 'nowhere'), '--input', str(src)])
  assert result.returncode != 0 and 'No work directory' in result.stderr and 'Traceback' not in result.stderr
  result = decode_cli(['--workdir', trained_workdir, '--input', str(tmp_path / 'missing.txt')])
  assert result.returncode != 0 and 'No input file' in result.stderr and 'Traceback' not in result.stderr


def test_decode_cli_damaged_checkpoint_and_missing_best_are_one_line(trained_workdir, tmp_path):
  workdir = tmp_path / 'copy'
  shutil.copytree(trained_workdir, workdir)
  shutil.rmtree(workdir / workdir_lib.BEST_CHECKPOINT_DIR)
  step = max(int(s) for s in os.listdir(workdir / workdir_lib.CHECKPOINT_DIR) if s.isdigit())
  for path in (workdir / workdir_lib.CHECKPOINT_DIR / str(step)).rglob('*'):
    if path.is_file() and path.stat().st_size > 100:
      path.write_bytes(b'\0' * 10)  # damage every array file of the newest step
  src = tmp_path / 'src.txt'
  src.write_text('God\n', encoding='utf-8')
  result = decode_cli(['--workdir', str(workdir), '--input', str(src), '--checkpoint', 'best'])
  assert result.returncode != 0 and 'kept no best checkpoint' in result.stderr and 'Traceback' not in result.stderr
  result = decode_cli(['--workdir', str(workdir), '--input', str(src)])
  assert result.returncode != 0 and f'step {step}' in result.stderr and 'Traceback' not in result.stderr, \
      result.stderr


def test_an_algorithm_the_model_was_not_trained_for_is_one_clear_error(trained_workdir, tmp_path):
  workdir = tmp_path / 'cmlm_model'
  shutil.copytree(trained_workdir, workdir)
  (workdir / workdir_lib.OBJECTIVE_FILE).write_text(json.dumps({'objective': 'cmlm'}))
  src = tmp_path / 'src.txt'
  src.write_text('God\n', encoding='utf-8')
  result = decode_cli(['--workdir', str(workdir), '--input', str(src), '--algorithm', 'pgj'])
  assert result.returncode != 0 and "trained with 'cmlm'" in result.stderr and 'Traceback' not in result.stderr


def test_progress_is_plain_log_lines_when_stderr_is_not_a_terminal(trained_workdir, tmp_path):
  src = tmp_path / 'src.txt'
  src.write_text('\n'.join(GENESIS[:5] * 12) + '\n', encoding='utf-8')  # 60 lines: longer than a screen
  env = {k: v for k, v in os.environ.items() if k != 'TQDM_DISABLE'}
  result = decode_cli(['--workdir', trained_workdir, '--input', str(src), '--output', str(tmp_path / 'hyp')],
                      env=env)
  assert result.returncode == 0, result.stderr
  assert 'translate: 60/60 sentences (100%)' in result.stderr and '\r' not in result.stderr


def test_decode_cli_streams_a_million_lines_in_bounded_memory(trained_workdir, tmp_path):
  """1,000,000 lines (blank but for one sentence in 100,000) in, 1,000,000 lines out, in order, and the
  process never holds the whole file's lines (peak RSS well below what 1M decoded rows would need)."""
  src = tmp_path / 'million.txt'
  with open(src, 'w', encoding='utf-8') as f:
    for i in range(1_000_000):
      f.write('God said, Let there be light.\n' if i % 100_000 == 7 else '\n')
  metrics = tmp_path / 'metrics.json'
  # Peak RSS of the decode process itself: /proc's VmHWM starts afresh at exec, while getrusage's ru_maxrss
  # would carry over the (large) pytest process it was forked from.
  code = ('import runpy, sys; sys.argv = sys.argv[1:]; '
          'exec("try:\\n runpy.run_path(sys.argv[0], run_name=\'__main__\')\\nfinally:\\n '
          'print(\'maxrss_kb\', [l.split()[1] for l in open(\'/proc/self/status\') if l.startswith(\'VmHWM\')][0], '
          'file=sys.stderr)")')
  result = subprocess.run([sys.executable, '-c', code, str(REPO / 'decode.py'), '--workdir', trained_workdir,
                           '--input', str(src), '--output', str(tmp_path / 'hyp'), '--metrics_json', str(metrics)],
                          capture_output=True, text=True, cwd=REPO)
  assert result.returncode == 0, result.stderr[-2000:]
  figures = json.loads(metrics.read_text())
  assert figures['sentences'] == 1_000_000 and figures['empty_inputs'] == 1_000_000 - 10
  with open(tmp_path / 'hyp', encoding='utf-8') as f:
    assert sum(1 for _ in f) == 1_000_000
  maxrss_mb = int(result.stderr.split('maxrss_kb')[-1].split()[0]) / 1024
  assert maxrss_mb < 1024, maxrss_mb  # measured: 385 MB for 1M lines, 377 MB for 20k (JAX itself ~350)


def test_decode_checks_its_files_before_loading_a_model(tmp_path):
  """An output that is the input or the reference would erase them when opened; a missing directory, a
  directory, or a reference of another length are errors before any work, and the input is untouched."""
  from fastmt import decode_lib  # pylint: disable=g-import-not-at-top
  src, ref = tmp_path / 'src.txt', tmp_path / 'ref.txt'
  src.write_text('God\nlight\n', encoding='utf-8')
  ref.write_text('Gott\n', encoding='utf-8')
  cases = ((str(src), None, None, 'is the input file'),
           (str(ref), str(ref), None, 'is the reference file'),
           (str(tmp_path / 'nodir' / 'hyp'), None, None, 'there is no directory'),
           (str(tmp_path), None, None, 'is a directory'),
           (str(tmp_path / 'hyp'), str(ref), None, 'has 2 lines but the reference'),
           (str(tmp_path / 'hyp'), str(tmp_path / 'missing'), None, 'No reference file'),
           (str(tmp_path / 'hyp'), None, str(tmp_path / 'nodir' / 'm.json'), '--metrics_json'),
           (str(tmp_path / 'hyp'), None, str(src), "--metrics_json .* is the input file"),
           (str(tmp_path / 'hyp'), None, str(tmp_path / 'hyp'), "--metrics_json .* is the --output file"))
  for output, reference, metrics, message in cases:
    with pytest.raises(ValueError, match=message):
      decode_lib.check_paths(str(src), output, reference, metrics)
  with pytest.raises(ValueError, match='input file .* is a directory: give a file'):
    decode_lib.check_paths(str(tmp_path), str(tmp_path / 'hyp'))
  assert src.read_text(encoding='utf-8') == 'God\nlight\n'
  decode_lib.check_paths('-', '-')
  decode_lib.check_paths(str(src), str(tmp_path / 'hyp'), str(src), str(tmp_path / 'm.json'))
  decode_lib.check_paths('/dev/null', '/dev/null')  # devices may be read and written at once
  # `decode.py --output src.txt < src.txt`: stdin is that file
  with open(src, encoding='utf-8') as stdin, pytest.MonkeyPatch.context() as patch:
    patch.setattr(sys, 'stdin', stdin)
    with pytest.raises(ValueError, match='is the input file'):
      decode_lib.check_paths('-', str(src))
    # `decode.py < src.txt > hyp`: '-' is stdin as the input and stdout as the output, two files; `> src.txt` is one
    with open(tmp_path / 'hyp', 'w', encoding='utf-8') as stdout:
      patch.setattr(sys, 'stdout', stdout)
      decode_lib.check_paths('-', '-')
      decode_lib.check_paths(str(src), '-', '-')  # a reference on stdin: read once, when scoring
      with pytest.raises(ValueError, match='both read stdin'):  # the input would leave it nothing
        decode_lib.check_paths('-', '-', '-')
    with open(src, 'a', encoding='utf-8') as stdout:
      patch.setattr(sys, 'stdout', stdout)
      with pytest.raises(ValueError, match="--output '-' is the input file"):
        decode_lib.check_paths('-', '-')
  # a reference with invalid UTF-8 fails here, before decoding, unless it is to be replaced
  (tmp_path / 'bad_ref').write_bytes(b'Gott\n\xff\n')
  with pytest.raises(ValueError, match='bad_ref:2: invalid UTF-8'):
    decode_lib.check_paths(str(src), str(tmp_path / 'hyp'), str(tmp_path / 'bad_ref'))
  decode_lib.check_paths(str(src), str(tmp_path / 'hyp'), str(tmp_path / 'bad_ref'), errors='replace')


def test_check_paths_counts_the_input_lines_in_its_utf8_pass(tmp_path):
  """check_paths returns the input's lines as count_lines counts them (translate_file's total, the check that
  every line came out) from the pass that checks its UTF-8; None for a stream."""
  from fastmt import decode_lib  # pylint: disable=g-import-not-at-top
  contents = (b'', b'\n', b'God', b'God\nlight\n', b'God\nlight', b'\xef\xbb\xbfGod\r\nlight\r\n', b'a\n\n\nb\n\n',
              b'\xff broken\nlight\n')
  for i, content in enumerate(contents):
    src = tmp_path / f'src{i}.txt'
    src.write_bytes(content)
    want = decode_lib.count_lines(str(src))
    assert want == content.count(b'\n') + (not content.endswith(b'\n') and content != b''), content
    assert want == len(list(decode_lib.iter_lines(str(src), 'replace'))), content
    assert decode_lib.check_paths(str(src), str(tmp_path / 'hyp'), errors='replace') == want, content
    if b'\xff' not in content:
      assert decode_lib.check_paths(str(src), str(tmp_path / 'hyp')) == want, content
      assert decode_lib.check_paths(str(src), str(tmp_path / 'hyp'), str(src)) == want, content
  assert decode_lib.check_paths('-', str(tmp_path / 'hyp')) is None


def test_decode_cli_checks_its_files_before_it_loads_the_model(tmp_path):
  src = tmp_path / 'src.txt'
  src.write_text('God\n', encoding='utf-8')
  no_model = ['--workdir', str(tmp_path / 'no_model'), '--input', str(src)]
  cases = ((['--output', str(src)], 'is the input file'),
           # --drafter_workdir belongs to --algorithm spec --drafter model, and that drafter needs it
           (['--drafter_workdir', str(tmp_path)], '--drafter_workdir is the drafter of --algorithm spec --drafter '
            'model; here --algorithm is greedy'),
           (['--algorithm', 'spec', '--drafter', 'ngram', '--drafter_workdir', str(tmp_path)],
            'here --algorithm is spec with --drafter ngram'),
           (['--algorithm', 'spec', '--drafter', 'model'], '--drafter model needs --drafter_workdir'),
           (['--algorithm', 'spec', '--drafter', 'model', '--drafter_workdir', str(tmp_path / 'nope')],
            "--drafter_workdir: No work directory '"))
  processes = [subprocess.Popen([sys.executable, str(REPO / 'decode.py'), *no_model, *args], cwd=REPO, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE) for args, _ in cases]
  for (args, message), process in zip(cases, processes):
    _, stderr = process.communicate(timeout=300)
    # one line, named by the tool (not by the path of the script that runs it)
    assert process.returncode != 0 and stderr.strip().splitlines()[-1].startswith('decode.py: error: '), stderr
    assert message in stderr and 'Traceback' not in stderr, (args, stderr)
  assert src.read_text(encoding='utf-8') == 'God\n'


def test_ddgviz_draws_dollars_and_control_characters_as_text(tmp_path):
  """A source or piece with '$' signs is text, not mathtext (an unclosed '$x^{' failed the picture), and a tab
  or form feed in a source line draws as a space, not a missing-glyph warning a character."""
  import warnings  # pylint: disable=g-import-not-at-top
  from fastmt import ddgviz  # pylint: disable=g-import-not-at-top
  pieces = ['\u2581$x^{', '\u2581$5', '</s>']
  trace = ddgviz.SentenceTrace(
      source='pay $x^{ or\t$5\fnow', pieces=pieces, final=np.array([5, 6, 2]), starts=np.array([0, 1]),
      predictions=np.array([[5, 7, 2], [6, 2, 2]]), probabilities=np.full((2, 3), 0.5), accepted=np.array([1, 2]),
      piece_of={5: pieces[0], 6: pieces[1], 7: '\u2581$', 2: '</s>'}, method='pgj')
  with warnings.catch_warnings():
    warnings.simplefilter('error')
    ddgviz.render_png(trace, str(tmp_path / 'a.png'))
    ddgviz.render_html(trace, str(tmp_path / 'a.html'))
  assert (tmp_path / 'a.png').stat().st_size > 1000 and '$x^{' in (tmp_path / 'a.html').read_text(encoding='utf-8')


def test_ddgviz_draws_what_was_decoded(model_parts):
  """HGJ's greedy phase is drawn one cell an iteration (its padding columns were red '<pad>' cells at p = 0),
  and a clustered translator's trace is of the clustered projection (it drew the dense model's decoding)."""
  from fastmt import clusters_lib, ddgviz, projection  # pylint: disable=g-import-not-at-top
  config, params, tokenizer = model_parts
  source = SOURCES[0]
  hgj = DecodeSettings('hgj', block_size=3, parallel_length=2)
  trace = ddgviz.trace_sentence(Translator(config, params, tokenizer, hgj), source, hgj)
  assert len(trace.final) > 3  # so that the greedy phase has rows to draw
  drawn = [0] * len(trace.starts)
  for k, _, piece, _, _, probability in ddgviz._cells(trace):  # pylint: disable=protected-access
    if probability is not None:
      drawn[k] += 1
      assert probability > 0 and piece != '<pad>'
  assert drawn == [min(3 if n < 2 else 1, len(trace.final) - n) for n in trace.starts]
  # Clusters whose active sets hold only the rarest pieces: the clustered output differs from the dense one.
  dense = Translator(config, params, tokenizer, DecodeSettings('pgj', block_size=3))
  hidden, _ = clusters_lib.record_states(dense, [source], top_k=1)
  rare = np.arange(config.vocab_size - 60, config.vocab_size)
  narrow = projection.build_clusters(hidden, np.tile(rare, (len(hidden), 1)), projection.fit_kmeans(hidden, 2),
                                     config.vocab_size)
  clustered = Translator(config, params, tokenizer, dense.settings, clusters=narrow)
  [output], _ = clustered.translate_ids([source])
  assert list(output) != list(dense.translate_ids([source])[0][0])
  final = ddgviz.trace_sentence(clustered, source, dense.settings).final.tolist()
  assert final[:len(output)] == list(output) and final[len(output):] in ([], [EOS_ID])


def test_ddgviz_refuses_what_it_cannot_draw_before_the_model_loads(tmp_path):
  """DDGviz draws Jacobi iterations: greedy as PGJ (the same output), never another decoder in beam's or ib's name."""
  from fastmt import ddgviz  # pylint: disable=g-import-not-at-top
  assert ddgviz.drawn_settings(DecodeSettings('greedy', block_size=3)) == DecodeSettings('pgj', block_size=3)
  assert ddgviz.drawn_settings(DecodeSettings('hgj')) == DecodeSettings('hgj')
  for algorithm in ('beam', 'ib', 'hrt'):
    with pytest.raises(ValueError, match=f'--algorithm {algorithm} has no Jacobi iterations'):
      ddgviz.drawn_settings(DecodeSettings(algorithm))
  src = tmp_path / 'src.txt'
  src.write_text('God\n', encoding='utf-8')
  for flags, message in ((['--algorithm', 'beam'], 'no Jacobi iterations to draw'),
                         # greedy is drawn as PGJ: the error named pgj, which nobody had asked for
                         (['--max_repeats', '8'], 'DDGviz draws greedy as PGJ, its exact equal, but PGJ has no '
                                                  'repetition guard'),
                         (['--ddgviz_sentences', '-1'], '--ddgviz_sentences must be >= 0'),
                         (['--output', str(tmp_path / 'viz')], 'is also --output'),  # was a traceback, after
                         (['--metrics_json', str(tmp_path / 'viz')], 'is also --metrics_json')):  # translating
    result = decode_cli(['--workdir', str(tmp_path / 'no_model'), '--input', str(src), '--output', '-',
                         '--ddgviz', str(tmp_path / 'viz'), *flags])
    assert result.returncode != 0 and message in result.stderr and 'Traceback' not in result.stderr, result.stderr


@pytest.mark.skipif(not os.path.exists('/dev/full'), reason='Linux: /dev/full is a device that is always full')
def test_a_full_disk_names_the_output_it_was_writing(tmp_path):
  """'decode.py: error: [Errno 28] No space left on device' said nothing of which output."""
  with pytest.raises(FastmtError, match="writing '/dev/full': No space left on device"):
    with decode_lib.replaced_on_success('/dev/full') as out:
      out.write('Am Anfang\n' * 100000)
  with pytest.raises(FastmtError, match='the input file is bad'):  # other errors pass through as they are
    with decode_lib.replaced_on_success(str(tmp_path / 'out.txt')):
      raise FastmtError('the input file is bad')
  assert os.listdir(tmp_path) == []  # and the temporary file went with it


def test_translate_file_times_the_first_decodable_lines_and_counts_the_words_given(model_parts, tmp_path,
                                                                                   monkeypatch):
  """--speed_sentences 3 timed only 'God' when blank lines came first (time_at_batch1 drops them), and
  --tag_inputs counted each line's tag as a source word in words_per_s."""
  translator = Translator(*model_parts)
  src = tmp_path / 'src.txt'
  src.write_text('\n\nGod\n\nAnd God said.\n \nGod\nGod\n', encoding='utf-8')
  timed, passes = [], []
  monkeypatch.setattr(decode_lib, 'time_at_batch1', lambda _, sentences: timed.append(sentences) or 1.5)
  real_pass = decode_lib.translate_stream
  monkeypatch.setattr(decode_lib, 'translate_stream', lambda *a, **k: passes.append(real_pass(*a, **k)) or passes[-1])
  monkeypatch.setattr(translator.tokenizer, 'has_piece', lambda piece: True)  # as a multilingual model's
  report = decode_lib.translate_file(translator, str(src), str(tmp_path / 'hyp'), speed_sentences=3,
                                     tag_direction='en_de', show_progress=False)
  tag = corpus.language_tag('en_de')
  assert timed == [[f'{tag} God', f'{tag} And God said.', f'{tag} God']] and report.timed_sentences == 3
  assert 'median of 3' in decode_lib.format_report(report)
  (_, wall, words, _), = passes
  assert words == 6 + 4  # what the decoder read: 6 words and 4 tags
  assert report.words_per_s == pytest.approx(6 / max(wall - report.compile_s, 1e-9))
  report = decode_lib.translate_file(translator, str(src), str(tmp_path / 'hyp'), show_progress=False)
  assert report.timed_sentences == 0 and report.ms_per_sentence is None and len(timed) == 1


def test_translate_file_counts_replaced_utf8_reads_streams_and_leaves_the_output_until_it_writes(model_parts,
                                                                                                tmp_path, caplog):
  from fastmt import decode_lib  # pylint: disable=g-import-not-at-top
  translator = Translator(*model_parts)
  src, ref, hyp = tmp_path / 'src.txt', tmp_path / 'ref.txt', tmp_path / 'hyp.txt'
  src.write_bytes(b'God \xff said.\nAnd \xfe light.\nGod\n')
  ref.write_bytes(b'Gott.\nUnd \xff Licht.\nGott\n')
  hyp.write_text('kept\n', encoding='utf-8')
  with pytest.raises(ValueError, match='src.txt:1: invalid UTF-8'):
    decode_lib.translate_file(translator, str(src), str(hyp), show_progress=False)
  assert hyp.read_text(encoding='utf-8') == 'kept\n'  # a failed run leaves it alone
  report = decode_lib.translate_file(translator, str(src), str(hyp), str(ref), batch_size=2, input_errors='replace',
                                     show_progress=False)
  assert (report.replaced_input_lines, report.replaced_reference_lines, report.sentences) == (2, 1, 3)
  assert 'src.txt:2: invalid UTF-8' in caplog.text and 'replaced 2 (reference lines: 1)' in \
      decode_lib.format_report(report)
  assert len(hyp.read_text(encoding='utf-8').split('\n')) == 4
  # a stream (a named pipe here; /dev/stdin and <(zcat x.gz) are the same to it) is read once, in order
  fifo = tmp_path / 'fifo'
  os.mkfifo(fifo)
  import threading  # pylint: disable=g-import-not-at-top
  writer = threading.Thread(target=lambda: fifo.write_text('God\n\nlight\n', encoding='utf-8'), daemon=True)
  writer.start()  # a daemon, with a timeout: a failure before the pipe is opened must not hang the test run
  report = decode_lib.translate_file(translator, str(fifo), str(tmp_path / 'from_fifo'), show_progress=False)
  writer.join(timeout=60)
  assert report.sentences == 3 and report.empty_inputs == 1
  assert (tmp_path / 'from_fifo').read_text(encoding='utf-8').split('\n')[1] == ''
  # no input: an empty output file, and nothing to score rather than a crash
  (tmp_path / 'empty').write_text('', encoding='utf-8')
  report = decode_lib.translate_file(translator, str(tmp_path / 'empty'), str(tmp_path / 'none'),
                                     str(tmp_path / 'empty'), show_progress=False)
  assert report.sentences == 0 and report.bleu is None and (tmp_path / 'none').read_text() == ''
  with pytest.raises(ValueError, match='no <2xx> symbol'):
    decode_lib.translate_file(translator, str(src), str(hyp), input_errors='replace', tag_direction='en_xx',
                              show_progress=False)
  with pytest.raises(ValueError, match='batch_size must be >= 1'):
    decode_lib.translate_file(translator, str(src), str(hyp), batch_size=0, input_errors='replace',
                              show_progress=False)


def test_a_run_that_fails_part_way_leaves_the_earlier_output_file_as_it_was(model_parts, tmp_path, monkeypatch):
  """The output file takes its name only when every line is translated: invalid UTF-8 in a later chunk of a
  stream (a named pipe; an input file is checked whole before any work) or Ctrl-C while translating leave the
  file that was there; a successful run replaces it, keeping a symbolic link a link."""
  import functools  # pylint: disable=g-import-not-at-top
  import threading  # pylint: disable=g-import-not-at-top
  from fastmt import decode_lib  # pylint: disable=g-import-not-at-top
  translator = Translator(*model_parts)
  monkeypatch.setattr(translator, 'translate_iter',  # chunks of 2 lines: the bad line comes after a written chunk
                      functools.partial(Translator.translate_iter, translator, chunk_sentences=2))
  hyp = tmp_path / 'hyp.txt'
  hyp.write_text('kept\n', encoding='utf-8')
  fifo = tmp_path / 'fifo'
  os.mkfifo(fifo)
  writer = threading.Thread(target=lambda: fifo.write_bytes(b'God\nlight\nAnd God said.\n\xff broken\n'),
                            daemon=True)
  writer.start()
  with pytest.raises(ValueError, match='fifo:4: invalid UTF-8'):
    decode_lib.translate_file(translator, str(fifo), str(hyp), show_progress=False)
  writer.join(timeout=60)
  src = tmp_path / 'src.txt'
  src.write_bytes(b'God\nlight\n\xff broken\n')
  with pytest.raises(ValueError, match='src.txt:3: invalid UTF-8'):  # checked before any work
    decode_lib.check_paths(str(src), str(hyp))
  src.write_text('God\nlight\nAnd God said.\n', encoding='utf-8')

  def interrupted(*args, **kwargs):
    yield 'first'
    raise KeyboardInterrupt
  with monkeypatch.context() as m:
    m.setattr(translator, 'translate_iter', interrupted)
    with pytest.raises(KeyboardInterrupt):
      decode_lib.translate_file(translator, str(src), str(hyp), show_progress=False)
  assert hyp.read_text(encoding='utf-8') == 'kept\n'
  assert sorted(p.name for p in tmp_path.iterdir()) == ['fifo', 'hyp.txt', 'src.txt']  # no temporary file left
  link = tmp_path / 'link.txt'
  link.symlink_to(hyp)
  hyp.chmod(0o640)
  report = decode_lib.translate_file(translator, str(src), str(link), show_progress=False)
  assert report.sentences == 3 and link.is_symlink() and len(hyp.read_text(encoding='utf-8').split('\n')) == 4
  assert hyp.stat().st_mode & 0o777 == 0o640  # the file's own permissions are kept
  new = tmp_path / 'new.txt'
  decode_lib.translate_file(translator, str(src), str(new), show_progress=False)
  umask = os.umask(0)
  os.umask(umask)
  assert new.stat().st_mode & 0o777 == 0o666 & ~umask  # a new file's ordinary mode, not mkstemp's 0600
  # A rename that fails at the end keeps the finished translation and names where it is.
  with monkeypatch.context() as m:
    m.setattr(decode_lib.os, 'replace', lambda *args: (_ for _ in ()).throw(PermissionError(1, 'Not permitted')))
    with pytest.raises(FastmtError, match='translation is complete but could not replace .* it is in'):
      decode_lib.translate_file(translator, str(src), str(hyp), show_progress=False)
  kept = [p for p in tmp_path.iterdir() if p.name.endswith('.partial')]
  assert len(kept) == 1 and len(kept[0].read_text(encoding='utf-8').split('\n')) == 4


def test_a_reference_of_the_wrong_length_from_a_stream_is_refused_before_the_output_is_replaced(model_parts, tmp_path,
                                                                                            monkeypatch):
  """`--reference -` (stdin, which check_paths cannot count without consuming it) with fewer lines than the input
  file was found only after the whole translation, and the failed run had already replaced the output file. It
  is now refused before any line decodes, naming stdin; and an input stream longer than a reference file is
  refused before the output file takes its name."""
  import io  # pylint: disable=g-import-not-at-top
  import threading  # pylint: disable=g-import-not-at-top
  translator = Translator(*model_parts)
  src, ref, hyp = tmp_path / 'src.txt', tmp_path / 'ref.txt', tmp_path / 'hyp.txt'
  src.write_text('God\nlight\nAnd God said.\n', encoding='utf-8')
  hyp.write_text('kept\n', encoding='utf-8')
  passes = []
  real_pass = decode_lib.translate_stream
  monkeypatch.setattr(decode_lib, 'translate_stream', lambda *a, **k: passes.append(1) or real_pass(*a, **k))
  monkeypatch.setattr(sys, 'stdin', io.TextIOWrapper(io.BytesIO(b'Gott\nLicht\n'), encoding='utf-8'))
  with pytest.raises(FastmtError, match='src.txt has 3 lines but the reference stdin has 2'):
    decode_lib.translate_file(translator, str(src), str(hyp), '-', show_progress=False)
  assert passes == [] and hyp.read_text(encoding='utf-8') == 'kept\n'
  # invalid UTF-8 in a stdin reference: before any work too, not after the translation
  monkeypatch.setattr(sys, 'stdin', io.TextIOWrapper(io.BytesIO(b'Gott\n\xff\nUnd Gott sprach.\n'), encoding='utf-8'))
  with pytest.raises(FastmtError, match='stdin:2: invalid UTF-8'):
    decode_lib.translate_file(translator, str(src), str(hyp), '-', show_progress=False)
  assert passes == [] and hyp.read_text(encoding='utf-8') == 'kept\n'
  monkeypatch.setattr(sys, 'stdin', io.TextIOWrapper(io.BytesIO(b'Gott\nLicht\nUnd Gott sprach.\n'),
                                                     encoding='utf-8'))
  report = decode_lib.translate_file(translator, str(src), str(hyp), '-', show_progress=False)
  assert report.sentences == 3 and report.bleu is not None and len(hyp.read_text(encoding='utf-8').split('\n')) == 4
  # an input stream (a named pipe) of 3 lines against a reference file of 2: known only once it is read
  hyp.write_text('kept\n', encoding='utf-8')
  ref.write_text('Gott\nLicht\n', encoding='utf-8')
  fifo = tmp_path / 'fifo'
  os.mkfifo(fifo)
  writer = threading.Thread(target=lambda: fifo.write_text('God\nlight\nAnd God said.\n', encoding='utf-8'),
                            daemon=True)
  writer.start()
  with pytest.raises(FastmtError, match='fifo had 3 lines but the reference .*ref.txt has 2'):
    decode_lib.translate_file(translator, str(fifo), str(hyp), str(ref), show_progress=False)
  writer.join(timeout=60)
  assert hyp.read_text(encoding='utf-8') == 'kept\n'
  assert sorted(p.name for p in tmp_path.iterdir()) == ['fifo', 'hyp.txt', 'ref.txt', 'src.txt']  # no temporary
  # Two pipes fed one after the other by one writer, the input first (`cat a > src; cat b > ref`): the reference
  # of an input stream is read after it, or each would wait for the other to be opened.
  reference_fifo = tmp_path / 'ref_fifo'
  os.mkfifo(reference_fifo)

  def one_writer():
    fifo.write_text('God\nlight\n', encoding='utf-8')
    reference_fifo.write_text('Gott\nLicht\n', encoding='utf-8')
  threading.Thread(target=one_writer, daemon=True).start()
  finished = []
  run = threading.Thread(target=lambda: finished.append(decode_lib.translate_file(
      translator, str(fifo), str(hyp), str(reference_fifo), show_progress=False)), daemon=True)
  run.start()
  run.join(timeout=120)
  assert finished and finished[0].sentences == 2 and finished[0].bleu is not None, 'the two pipes waited for each other'


def test_a_line_that_encodes_to_nothing_is_an_empty_input(model_parts):
  translator = Translator(*model_parts)
  nothing = [s for s in ('\u200b', '\x01\x02', '\ufeff') if len(translator.tokenizer.encode([s])[0]) == 0]
  assert nothing  # at least one such line for this vocabulary
  outputs, stats = translator.translate([*nothing, 'God'], batch_size=2)
  assert outputs[:-1] == [''] * len(nothing) and len(outputs) == len(nothing) + 1
  assert stats.empty_inputs == len(nothing) and stats.sentences == len(nothing) + 1
  assert stats.decoder_calls > 0  # 'God' itself was decoded
  # The tools that skip blank lines (ddgviz, batch-1 timing, the CTranslate2 peer) ask the same question.
  assert translator.decodable(['', *nothing, 'God', ' ']) == [len(nothing) + 1]


def test_a_line_of_invisible_characters_the_tokenizer_keeps_as_unknown_is_an_empty_input(model_parts):
  """A zero-width joiner, word joiner, soft hyphen, direction override or NUL encodes to <unk> with
  SentencePiece; decoded, a model invents a sentence for it. Such a line is an empty input like a blank one."""
  translator = Translator(*model_parts)
  invisible = ['\u200d', '\u2060', '\u00ad', '\u202e', '\x00', '\u200d \u2060\t']
  assert any(len(row) for row in translator.tokenizer.encode(invisible))  # not all dropped by the tokenizer
  outputs, stats = translator.translate([*invisible, 'God', 'God\u200d'], batch_size=4)
  assert outputs[:len(invisible)] == [''] * len(invisible) and stats.empty_inputs == len(invisible)
  assert translator.decodable([*invisible, 'God', 'God\u200d', '😀']) == [len(invisible) + k for k in range(2)]


def test_a_line_the_vocabulary_cannot_spell_is_an_empty_input_counted_and_named(model_parts, caplog):
  """Emoji, or a script the vocabulary lacks, encode to <unk> only; decoded, a model invented a sentence
  ("Erdboden Erdboden ...") that no count recorded. Such a line is an empty output, counted and named; a line
  with a word the vocabulary spells is translated as before."""
  translator = Translator(*model_parts)
  unreadable = ['😀🎉', 'Ἐν ἀρχῇ', '中文']
  assert all(translator.tokenizer.spells_nothing(row) for row in translator.tokenizer.encode(unreadable))
  outputs, stats = translator.translate_ids(['God', *unreadable, '😀 God'], batch_size=2)
  assert [len(ids) for ids in outputs[1:4]] == [0] * 3 and len(outputs[0]) and len(outputs[4])  # decoded
  assert stats.unreadable_inputs == 3 and stats.empty_inputs == 3 and stats.sentences == 5
  assert '3 input lines in characters the vocabulary lacks only (lines 2, 3, 4)' in caplog.text
  assert translator.decodable(['God', *unreadable, '😀 God']) == [0, 4]
  # An emoji newer than Python's Unicode tables (U+1FA77, Unicode 15) and private-use characters: str.isprintable()
  # says no to both, and such a line was a silent empty input, not counted or named as unreadable.
  _, stats = translator.translate_ids(['\U0001fa77', '\ue000\ue001'], batch_size=2)
  assert stats.unreadable_inputs == 2 and stats.empty_inputs == 2


def test_a_byte_order_mark_is_not_part_of_the_first_input_or_reference_line(tmp_path):
  """Windows editors start UTF-8 files with U+FEFF; glued to line 1 it would cost a reference its first word
  in BLEU. decode.py reads inputs and references as the training data reader does: without it."""
  from fastmt import decode_lib  # pylint: disable=g-import-not-at-top
  from fastmt.data import corpus  # pylint: disable=g-import-not-at-top
  path = tmp_path / 'ref.txt'
  path.write_bytes('\ufeffIm Anfang\r\nschuf \ufeffGott\n'.encode('utf-8'))
  assert list(decode_lib.iter_lines(str(path))) == ['Im Anfang', 'schuf \ufeffGott']  # only the leading mark
  path.write_bytes(b'\xef\xbb\xbf')  # an empty file as Notepad saves it: no line, as the corpus reader sees it
  assert list(decode_lib.iter_lines(str(path))) == corpus.read_lines(str(path)) == []
  assert decode_lib.count_lines(str(path)) == 0
  path.write_bytes(b'\xef\xbb\xbf\n')  # one empty line
  assert list(decode_lib.iter_lines(str(path))) == corpus.read_lines(str(path)) == ['']
  assert decode_lib.count_lines(str(path)) == 1
