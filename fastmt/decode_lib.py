"""What decode.py does: translate a file in input order, score it, time it, optionally draw DDGviz traces."""

import dataclasses
import json
import logging
import os
import statistics
import sys
import time

import numpy as np
import sacrebleu

from fastmt import precision, train_lib
from fastmt.data import corpus, pipeline
from fastmt.decoding import drafts
from fastmt.translate import DecodeSettings, Translator


@dataclasses.dataclass
class DecodeReport:
  sentences: int
  bleu: float | None
  chrf: float | None
  bleu_signature: str | None
  chrf_signature: str | None
  ms_per_sentence: float | None  # median over sentences at batch 1
  sentences_per_s: float  # at --batch_size
  words_per_s: float  # source words per second at --batch_size
  decoder_calls_per_sentence: float
  compile_s: float  # first pass minus the timed pass: compilation of every shape used
  empty_inputs: int
  truncated_inputs: int
  outputs_at_cap: int


def read_input(path: str, errors: str) -> list[str]:
  """Lines of a file, or of stdin for '-'; invalid UTF-8 is an error naming the line (or U+FFFD)."""
  if path == '-':
    return corpus.decode_lines(sys.stdin.buffer.read(), 'stdin', errors)
  return corpus.read_lines(path, errors=errors)


DRAFT_TABLE_FILE = 'bigram_draft.npy'


def load_draft_table(workdir: str) -> np.ndarray:
  """The bigram draft table of a workdir's training targets (decoding/drafts.py), built once and cached there.

  Only the training split is read: the table is part of the model's training data, never of its test.
  """
  path = os.path.join(workdir, DRAFT_TABLE_FILE)
  if os.path.exists(path):
    return np.load(path)
  config = train_lib.load_train_config(workdir)
  tokenizer = pipeline.load_tokenizer(workdir)
  targets = corpus.load_split(config.dataset, 'train').targets
  table = drafts.bigram_table(tokenizer.encode(targets), tokenizer.vocab_size)
  np.save(path + '.tmp.npy', table)
  os.replace(path + '.tmp.npy', path)
  return table


def load_translator(workdir: str, settings: DecodeSettings, clusters_dir: str | None = None,
                    dtype: str = 'float32') -> Translator:
  """The workdir's latest checkpoint as a Translator; clusters_dir selects the clustered output projection
  (a direction without clusters falls back to the dense projection with a warning); dtype 'bfloat16' decodes
  in half precision (fastmt.precision); settings.jacobi_init='bigram' loads the draft table."""
  model_config = train_lib.load_model_config(workdir)
  params, step = train_lib.restore_params(workdir, model_config)
  logging.info('Loaded %s step %d', workdir, step)
  tokenizer = pipeline.load_tokenizer(workdir)
  clusters = None
  if clusters_dir:
    from fastmt import clusters_lib  # pylint: disable=g-import-not-at-top
    try:
      clusters = clusters_lib.load_clusters(clusters_dir, model_config, tokenizer, params)
    except FileNotFoundError as e:
      logging.warning('%s: using the dense projection for this direction', e)
  model_config, params = precision.for_inference(model_config, params, dtype)
  draft_table = load_draft_table(workdir) if settings.jacobi_init == 'bigram' else None
  return Translator(model_config, params, tokenizer, settings, clusters, draft_table)


def translate_and_measure(translator: Translator, sources, references=None, batch_size: int = 32,
                          speed_sentences: int = 100) -> tuple[list[str], DecodeReport]:
  start = time.perf_counter()
  hypotheses, stats = translator.translate(sources, batch_size)
  first_pass = time.perf_counter() - start
  start = time.perf_counter()
  translator.translate(sources, batch_size)  # everything compiled now: this is the throughput pass
  timed = time.perf_counter() - start

  ms_per_sentence = None
  if speed_sentences:
    subset = [s for s in sources if s.strip()][:speed_sentences]
    translator.translate(subset, 1)  # compile batch-1 shapes
    per_sentence = []
    for sentence in subset:
      t = time.perf_counter()
      translator.translate([sentence], 1)
      per_sentence.append(time.perf_counter() - t)
    ms_per_sentence = 1000 * statistics.median(per_sentence) if per_sentence else None

  bleu = chrf = bleu_sig = chrf_sig = None
  if references is not None:
    if len(references) != len(sources):
      raise ValueError(f'{len(sources)} input lines but {len(references)} reference lines')
    bleu_metric, chrf_metric = sacrebleu.BLEU(), sacrebleu.CHRF()
    bleu = bleu_metric.corpus_score(hypotheses, [references]).score
    chrf = chrf_metric.corpus_score(hypotheses, [references]).score
    bleu_sig, chrf_sig = str(bleu_metric.get_signature()), str(chrf_metric.get_signature())
  decoded = max(1, stats.sentences - stats.empty_inputs)
  report = DecodeReport(
      sentences=len(sources), bleu=bleu, chrf=chrf, bleu_signature=bleu_sig, chrf_signature=chrf_sig,
      ms_per_sentence=ms_per_sentence, sentences_per_s=len(sources) / timed,
      words_per_s=sum(len(s.split()) for s in sources) / timed,
      decoder_calls_per_sentence=stats.decoder_calls / decoded, compile_s=max(0.0, first_pass - timed),
      empty_inputs=stats.empty_inputs, truncated_inputs=stats.truncated_inputs,
      outputs_at_cap=stats.outputs_at_cap)
  return hypotheses, report


def write_lines(path: str, lines) -> None:
  if path == '-':
    sys.stdout.writelines(line + '\n' for line in lines)
    return
  with open(path, 'w', encoding='utf-8') as f:
    f.writelines(line + '\n' for line in lines)


def format_report(report: DecodeReport) -> str:
  parts = []
  if report.bleu is not None:
    parts.append(f'BLEU {report.bleu:.2f} ({report.bleu_signature})')
    parts.append(f'chrF {report.chrf:.2f} ({report.chrf_signature})')
  if report.ms_per_sentence is not None:
    parts.append(f'batch 1: {report.ms_per_sentence:.2f} ms/sentence (median)')
  parts.append(f'large batch: {report.sentences_per_s:.1f} sentences/s, {report.words_per_s:.0f} source words/s')
  parts.append(f'decoder calls/sentence {report.decoder_calls_per_sentence:.2f}; compile {report.compile_s:.1f} s')
  parts.append(f'empty inputs {report.empty_inputs}, truncated inputs {report.truncated_inputs}, '
               f'outputs at the length cap {report.outputs_at_cap}')
  return '\n'.join(parts)


def write_metrics_json(path: str, report: DecodeReport, extra: dict) -> None:
  with open(path, 'w') as f:
    json.dump({**dataclasses.asdict(report), **extra}, f, indent=1)
