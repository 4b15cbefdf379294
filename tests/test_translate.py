"""Translating text: input order kept, empty lines stay empty, over-long lines truncated and counted, every
Jacobi variant equals greedy through the Translator, decode.py end to end, and the hand-written reference
greedy of benchmarks/ agrees with fastmt's."""

import importlib.util
import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from conftest import REPO
from fastmt import translate, workdir as workdir_lib
from fastmt.translate import DecodeSettings, Translator


@pytest.fixture(scope='module')
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


@pytest.mark.parametrize('algorithm, block', [('pj', 0), ('pgj', 3), ('pgj', 5), ('hgj', 3)])
def test_jacobi_through_the_translator_equals_greedy(model_parts, algorithm, block):
  lines = [line for line in open(REPO / 'tests/data/genesis.en', encoding='utf-8')][:12]
  greedy, _ = Translator(*model_parts).translate(lines, batch_size=4)
  settings = DecodeSettings(algorithm, block_size=block or 3, parallel_length=6 if algorithm == 'hgj' else 0)
  parallel, stats = Translator(*model_parts, settings).translate(lines, batch_size=4)
  assert parallel == greedy
  greedy_calls = Translator(*model_parts).translate(lines, batch_size=4)[1].decoder_calls
  assert stats.decoder_calls <= greedy_calls


def test_a_source_at_the_maximum_length_still_matches_greedy(model_parts):
  config = model_parts[0]
  line = ' '.join(['God'] * (config.max_length - 1))
  greedy, _ = Translator(*model_parts).translate([line], 1)
  parallel, _ = Translator(*model_parts, DecodeSettings('pgj', block_size=3)).translate([line], 1)
  assert parallel == greedy


def test_bad_decode_settings_are_clear_errors():
  with pytest.raises(ValueError, match='block_size'):
    DecodeSettings('pgj', block_size=0)
  with pytest.raises(ValueError, match='Unknown decoding algorithm'):
    DecodeSettings('sampling')


def test_decode_cli_end_to_end(trained_workdir, tmp_path):
  src = tmp_path / 'src.txt'
  src.write_text('And God said, Let there be light.\n\nGod\n', encoding='utf-8')
  hyp, metrics = tmp_path / 'hyp.txt', tmp_path / 'metrics.json'
  result = subprocess.run(
      [sys.executable, str(REPO / 'decode.py'), '--workdir', trained_workdir, '--input', str(src), '--output',
       str(hyp), '--reference', str(src), '--algorithm', 'hgj', '--block_size', '3', '--batch_size', '2',
       '--speed_sentences', '2', '--metrics_json', str(metrics), '--ddgviz', str(tmp_path / 'viz'),
       '--ddgviz_sentences', '1'], capture_output=True, text=True, cwd=REPO)
  assert result.returncode == 0, result.stderr
  assert len(hyp.read_text(encoding='utf-8').split('\n')) == 4 and hyp.read_text().split('\n')[1] == ''
  figures = json.loads(metrics.read_text())
  for key in ('bleu', 'chrf', 'ms_per_sentence', 'sentences_per_s', 'words_per_s', 'decoder_calls_per_sentence',
              'compile_s'):
    assert figures[key] is not None, key
  assert figures['empty_inputs'] == 1
  assert sorted(os.listdir(tmp_path / 'viz')) == ['ddgviz_0.html', 'ddgviz_0.png']


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
