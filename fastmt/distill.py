r"""Sequence-level knowledge distillation: a teacher translates the training sources; students learn its outputs.

    python -m fastmt.distill --teacher runs/teacher --output_dir runs/kd_en_de --beam_size 4
    python train.py --config configs/e12d1.py --workdir runs/e12d1_kd \
        --config.dataset.distilled_dir=runs/kd_en_de --config.dataset.p_raw=0.0   # 0 = all distilled

The output directory holds `distilled.txt` (one teacher translation per training source, in corpus order),
`manifest.json` (teacher, checkpoint step, decoding settings, a fingerprint of the sources, progress) and the
teacher's `spm.model`. A student that trains on it uses the teacher's vocabulary (copied into its work
directory); a student work directory that already has another vocabulary is an error, before any decoding.
The teacher searches with beam search (`--beam_size 1`: greedy), an interleaved teacher with its own ib search
at that beam size (teacher_settings).

Resumable: translations are appended a chunk at a time, each chunk flushed and fsynced before the manifest
records it; a restarted run truncates anything past the recorded count (a chunk cut short by a kill) and
continues with the next source, so no line is duplicated, lost or shifted. An empty source gives an empty
line (counted); the student's data pipeline then skips that pair like any pair with an empty side.

A teacher's output that reached its length cap without EOS (a model repeating itself: 265 of 51,766 greedy
translations by the quickstart model) is written like any other, and its line number (from 0) goes into the
manifest's `outputs_at_cap`; a student trains on its reference target there instead (counted in its log): no
target it learns from is a repetition cut at a cap (two students with and without it ran on equally often:
docs/BENCHMARKS.md section 4).
"""

import dataclasses
import json
import logging
import os
import shutil
import time

from absl import flags, logging as absl_logging

from fastmt import cli, files, workdir as workdir_lib
from fastmt.decode_lib import one_line
from fastmt.data import corpus
from fastmt.data.distilled import (DISTILLED_FILE, MANIFEST_FILE, OUTPUTS_AT_CAP, check_same_vocabulary,  # noqa: F401
                                   file_fingerprint, fingerprint, load_distilled_targets,  # (re-exported)
                                   recorded_outputs_at_cap)
from fastmt.errors import FastmtError
from fastmt.translate import DecodeSettings, Translator

logger = logging.getLogger(__name__)  # named 'fastmt.<module>': users set its level or handlers by name


@dataclasses.dataclass
class DistillResult:
  translated: int  # lines written by this call
  total: int  # lines in the distilled file now
  empty_sources: int  # of the lines written by this call, those of an empty source (an empty line)
  seconds: float
  outputs_at_cap: int = 0  # lines in the distilled file now whose translation reached the cap without EOS
  outputs_with_unknown: int = 0  # lines written by this call holding the teacher's <unk> (text: ' ⁇ ')


def check_arguments(teacher_workdir: str, output_dir: str, chunk_sentences: int,
                    student_workdir: str | None = None, batch_size: int = 1) -> None:
  """What distill can refuse before the sources are read or the teacher loads."""
  if chunk_sentences < 1:
    raise FastmtError(f'chunk_sentences must be >= 1, got {chunk_sentences}')
  if batch_size < 1:  # the translator's own error came after the output directory was made
    raise FastmtError(f'batch_size must be >= 1, got {batch_size}')
  for role, workdir in (('teacher', teacher_workdir), ('student', student_workdir)):
    if workdir and os.path.realpath(output_dir) == os.path.realpath(workdir):
      raise FastmtError(f'--output_dir {output_dir} is the {role} work directory; distil into a directory of its '
                        'own')
  cli.check_output_directory(output_dir, '--output_dir')
  # A train.py work directory (a student's own run): the teacher's spm.model replaced its vocabulary.
  held = [name for name in (workdir_lib.MODEL_CONFIG_FILE, workdir_lib.CHECKPOINT_DIR)
          if os.path.exists(os.path.join(output_dir, name))]
  if held:
    raise FastmtError(f'--output_dir {output_dir} is a train.py work directory (it holds {" and ".join(held)}); '
                      'distil into a directory of its own and give it to the student as dataset.distilled_dir')


def distill(teacher_workdir: str, sources: list[str], output_dir: str, settings=DecodeSettings('beam'),
            batch_size: int = 32, chunk_sentences: int = 1024, student_workdir: str | None = None,
            max_chunks: int | None = None, log=logger.info, checkpoint='latest') -> DistillResult:
  """Translates `sources` with the teacher's checkpoint ('latest', 'best' or a step) into
  output_dir/distilled.txt, resuming.

  max_chunks stops after that many chunks (for tests of resumption; None = all).
  """
  check_arguments(teacher_workdir, output_dir, chunk_sentences, student_workdir, batch_size)
  teacher_spm = os.path.join(teacher_workdir, workdir_lib.TOKENIZER_FILE)
  if student_workdir:
    check_same_vocabulary(teacher_spm, student_workdir)
  model_config = workdir_lib.load_model_config(teacher_workdir)
  params, step = workdir_lib.restore_params(teacher_workdir, model_config, checkpoint)
  # teacher_weights: the same path and step can hold another teacher (trained or averaged again); resuming
  # onto it mixed two teachers' outputs in one file without a word.
  manifest = {'teacher': os.path.realpath(teacher_workdir), 'teacher_step': step,
              'teacher_vocabulary': file_fingerprint(teacher_spm),
              'teacher_weights': workdir_lib.weights_fingerprint(params), 'settings': dataclasses.asdict(settings),
              'sources': len(sources), 'sources_fingerprint': fingerprint(sources)}
  # Built before the output directory is touched: a teacher its objective cannot decode with these settings
  # (an interleaved model with greedy) is refused without leaving a half-made directory behind.
  translator = Translator(model_config, params, workdir_lib.load_tokenizer(teacher_workdir), settings,
                          objective=workdir_lib.load_objective(teacher_workdir),
                          objective_options=workdir_lib.load_objective_options(teacher_workdir))
  os.makedirs(output_dir, exist_ok=True)
  done = _resume_point(output_dir, manifest)
  at_cap = [] if done == 0 else [i for i in recorded_outputs_at_cap(output_dir) if i < done]
  shutil.copyfile(teacher_spm, os.path.join(output_dir, workdir_lib.TOKENIZER_FILE))

  start, written, empty, chunks, unknown = time.perf_counter(), 0, 0, 0, 0
  with open(os.path.join(output_dir, DISTILLED_FILE), 'a', encoding='utf-8') as out:
    while done < len(sources) and (max_chunks is None or chunks < max_chunks):
      chunk = sources[done:done + chunk_sentences]
      chunk_at_cap = []
      # first_line: its warnings name the lines of the whole split, not of the chunk
      hypotheses, stats = translator.translate(chunk, batch_size, lines_at_cap=chunk_at_cap, first_line=done + 1)
      out.writelines(one_line(h) + '\n' for h in hypotheses)  # line i stays source i's
      out.flush()
      os.fsync(out.fileno())
      at_cap += sorted(line - 1 for line in chunk_at_cap)  # line numbers count from 1, the manifest's from 0
      done += len(chunk)
      written += len(chunk)
      empty += stats.empty_inputs
      unknown += stats.outputs_with_unknown
      chunks += 1
      _write_manifest(output_dir, {**manifest, 'done': done, OUTPUTS_AT_CAP: at_cap})
      log(f'distilled {done}/{len(sources)} sentences ({time.perf_counter() - start:.0f} s)')
  return DistillResult(written, done, empty, time.perf_counter() - start, len(at_cap), unknown)


def teacher_settings(objective: str, beam_size: int, alpha: float) -> DecodeSettings:
  """How the CLI's teacher translates: beam search (greedy at beam_size 1), the left-to-right search every
  autoregressive decoder (at, hrt, selfdraft) has; an interleaved teacher, which has no left-to-right search,
  with its own ib search at the same beam size (a greedy search at 1)."""
  search = 'ib' if objective == 'interleaved' else 'beam'
  if beam_size == 1:  # alpha ranks nothing in a greedy search: left at its default, it cannot block a resume
    return DecodeSettings('ib' if search == 'ib' else 'greedy')
  return DecodeSettings(search, beam_size=beam_size, alpha=alpha)


def _with_new_defaults(settings: dict) -> dict:
  """A recorded DecodeSettings dict with the fields added to DecodeSettings since it was written, at their
  defaults: a distillation started before a new decoding option existed still resumes."""
  defaults = dataclasses.asdict(DecodeSettings('beam'))
  return {**{k: v for k, v in defaults.items() if k not in settings}, **settings}


def _resume_point(output_dir: str, manifest: dict) -> int:
  """Lines already distilled for this exact (teacher, settings, sources); the file is cut back to them."""
  path = os.path.join(output_dir, DISTILLED_FILE)
  manifest_path = os.path.join(output_dir, MANIFEST_FILE)
  if not os.path.exists(manifest_path):
    if os.path.exists(path) and os.path.getsize(path):
      raise FastmtError(f'{path} exists without {MANIFEST_FILE}: not a fastmt.distill output; use a new dir')
    open(path, 'w').close()
    return 0
  with open(manifest_path) as f:
    saved = json.load(f)
  saved = {**saved, 'settings': _with_new_defaults(saved.get('settings', {}))}
  # A manifest from before teacher_weights was recorded resumes on its other fields.
  differing = sorted(k for k in manifest
                     if saved.get(k) != manifest[k] and not (k == 'teacher_weights' and k not in saved))
  if differing:
    raise FastmtError(f'{output_dir} holds a distillation with other {differing}; use a new --output_dir')
  done = int(saved.get('done', 0))
  if not os.path.isfile(path):  # deleted by hand: resuming would begin mid-way, without the first lines
    raise FastmtError(f'{output_dir} has a {MANIFEST_FILE} recording {done} distilled lines but no '
                      f'{DISTILLED_FILE}: the directory is damaged; use a new --output_dir')
  with open(path, 'rb+') as f:
    data = f.read()
    lines = data.count(b'\n')
    if lines < done:
      raise FastmtError(f'{path} has {lines} lines but its manifest records {done}: the file was damaged')
    keep = 0
    for _ in range(done):
      keep = data.index(b'\n', keep) + 1
    f.truncate(keep)  # lines past the manifest's count belong to a chunk whose write was cut short
  if lines > done:
    logger.warning('Dropped %d lines of an unfinished chunk from %s', lines - done, path)
  return done


def _write_manifest(output_dir: str, manifest: dict) -> None:
  """Atomically: a kill leaves either the old or the new manifest, never half of one."""
  path = os.path.join(output_dir, MANIFEST_FILE)
  files.write_whole(path, json.dumps(manifest, indent=1))


def split_to_distil(requested: str | None, teacher_dataset) -> str:
  """--split, or else the split the teacher trained on (its config.dataset.train_split, 'train' for work
  directories from before the field): a student of the same slice then finds exactly its sources distilled."""
  if requested:  # a student trains on it: validation and test are what models are scored on
    return corpus.check_training_split(requested, teacher_dataset.name, '--split')
  return corpus.training_split(teacher_dataset)


FLAGS = flags.FLAGS


def define_flags():
  """The CLI's flags, defined only when it runs as a program: importing this module as a library
  registers nothing, so any set of fastmt modules imports together."""
  flags.DEFINE_string('teacher', None, 'Work directory of the teacher model.')
  flags.DEFINE_string('output_dir', None, 'Where distilled.txt, manifest.json and spm.model go.')
  flags.DEFINE_string('split', None, 'Split of the teacher\'s dataset to distil: \'train\' or a slice of it such as '
                      '\'train[:8000]\' (the split a student trains on, its config.dataset.train_split). Default: '
                      'the split the teacher trained on.')
  flags.DEFINE_string('student_workdir', None, 'Optional: a student work directory whose vocabulary must match.')
  flags.DEFINE_integer('beam_size', 4, 'Teacher beam size (1 = greedy; an interleaved teacher searches with ib).')
  flags.DEFINE_float('alpha', 0.6, 'Beam length penalty.')
  flags.DEFINE_integer('batch_size', 32, 'Sentences per batch.')
  flags.DEFINE_integer('chunk_sentences', 1024, 'Sentences per fsynced chunk (the unit of resumption).')
  cli.define_checkpoint_flag('The teacher checkpoint')
  cli.define_plugins_flag()


def main(argv):
  del argv  # cli.run refuses positional arguments
  absl_logging.set_verbosity(absl_logging.WARNING)  # orbax and tfds log every read at INFO; progress goes to stdout
  cli.import_plugins(FLAGS.plugins)  # a teacher trained with an objective of the user's own
  check_arguments(FLAGS.teacher, FLAGS.output_dir, FLAGS.chunk_sentences, FLAGS.student_workdir, FLAGS.batch_size)
  config = workdir_lib.load_train_config(FLAGS.teacher)
  split = split_to_distil(FLAGS.split, config.dataset)
  sources = corpus.load_split(config.dataset, split).sources
  settings = teacher_settings(workdir_lib.load_objective(FLAGS.teacher), FLAGS.beam_size, FLAGS.alpha)
  print(f'distilling {len(sources)} sources of {config.dataset.name} {split!r} with {settings.algorithm}'
        + (f', beam {settings.beam_size}' if settings.beam_size > 1 else ''))
  result = distill(FLAGS.teacher, sources, FLAGS.output_dir, settings, FLAGS.batch_size, FLAGS.chunk_sentences,
                   FLAGS.student_workdir, log=print, checkpoint=FLAGS.checkpoint)
  print(f'{result.total}/{len(sources)} sentences distilled into {FLAGS.output_dir} '
        f'({result.translated} now, {result.empty_sources} of them of empty sources, {result.seconds:.0f} s; '
        f'{result.outputs_at_cap} reached the output cap without EOS: their students train on the references; '
        f'{result.outputs_with_unknown} of those written now hold the teacher\'s <unk>, which a student learns as '
        f'two question marks: see the teacher\'s config.vocab_character_coverage)')


def run():
  cli.run(main, define_flags, required=('teacher', 'output_dir'))


if __name__ == '__main__':
  run()
