"""fastmt as a library: fastmt.load(...).translate, and every code block of docs/API.md runs as written."""

import os
import re

import pytest

import fastmt
from conftest import DATA, REPO
from fastmt.errors import FastmtError

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
  assert model.translate(SENTENCES[3]) == greedy[3]  # one string in, one string out, batch-independent
  assert model.translate(SENTENCES, algorithm='pgj', block_size=3) == greedy  # exact
  assert model.translate(SENTENCES, algorithm='hgj', block_size=2, parallel_length=4) == greedy
  assert model.translate(SENTENCES, algorithm='beam', beam_size=1) == greedy  # beam 1 is greedy
  assert list(model.translate_iter(line + '\n' for line in SENTENCES)) == greedy
  assert model.translate(['', SENTENCES[0], '   ']) == ['', greedy[0], '']


def test_load_picks_the_checkpoint_and_reports_bad_input(trained_workdir, tmp_path):
  best = fastmt.load(trained_workdir, checkpoint='best')
  assert best.step in (10, 20)  # tiny config: validation at steps 10 and 20
  assert fastmt.load(trained_workdir, checkpoint=20).step == 20
  with pytest.raises(FastmtError, match='no checkpoint step 7'):
    fastmt.load(trained_workdir, checkpoint=7)
  with pytest.raises(FastmtError, match="'latest', 'best' or a step"):
    fastmt.load(trained_workdir, checkpoint='newest')
  with pytest.raises(FastmtError, match='No work directory'):
    fastmt.load(str(tmp_path / 'missing'))
  model = fastmt.load(trained_workdir)
  with pytest.raises(FastmtError, match='Unknown decoding settings'):
    model.translate(SENTENCES, block=3)
  with pytest.raises(FastmtError, match='Unknown decoding algorithm'):
    model.translate(SENTENCES, algorithm='nat')


def test_the_outside_decoder_example_of_docs_api_runs():
  blocks = [b for b in api_blocks() if 'def step_fn' in b]
  assert len(blocks) == 1
  exec(compile(blocks[0], 'docs/API.md', 'exec'), {})  # pylint: disable=exec-used  (it asserts pgj == greedy)


def test_the_library_example_of_docs_api_runs(trained_workdir, tmp_path, monkeypatch, capsys):
  block = next(b for b in api_blocks() if 'fastmt.load' in b)
  (tmp_path / 'big.en').write_text('\n'.join(SENTENCES[:3]) + '\n', encoding='utf-8')
  monkeypatch.chdir(tmp_path)
  code = block.replace("'runs/quickstart'", repr(trained_workdir))
  namespace = {'sentences': SENTENCES}
  exec(compile(code, 'docs/API.md', 'exec'), namespace)  # pylint: disable=exec-used
  assert isinstance(namespace['model'], fastmt.TranslationModel)
  printed = capsys.readouterr().out.split('\n')[:-1]
  assert printed == namespace['model'].translate(SENTENCES[:3])  # translate_iter streamed big.en in order


def test_a_work_directory_from_before_objectives_were_recorded_loads_as_autoregressive(trained_workdir, tmp_path):
  import shutil  # pylint: disable=g-import-not-at-top
  old = tmp_path / 'old'
  shutil.copytree(trained_workdir, old)
  os.remove(old / 'objective.json')
  model = fastmt.load(str(old))
  assert model.objective == 'at'
  assert model.translate(SENTENCES[:4], algorithm='pgj') == fastmt.load(trained_workdir).translate(SENTENCES[:4])
