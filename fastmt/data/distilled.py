"""Reading a fastmt.distill output directory: the teacher's translations of a dataset's training sources.

Training (data/pipeline.py) reads distilled targets through this module, and fastmt.distill writes them;
keeping the reader here means the data pipeline never imports the distillation (or decoding) stack.
"""

import hashlib
import json
import os

from fastmt.data import corpus, tokenizer
from fastmt.errors import FastmtError, MissingError
from fastmt.workdir import TOKENIZER_FILE

DISTILLED_FILE = 'distilled.txt'
MANIFEST_FILE = 'manifest.json'
# The manifest's list of line numbers (from 0) whose translation reached the teacher's output cap without EOS.
OUTPUTS_AT_CAP = 'outputs_at_cap'


def fingerprint(lines) -> str:
  """sha256 of the lines (newline-joined): ties a distilled file to the exact sources it translates."""
  digest = hashlib.sha256()
  for line in lines:
    digest.update(line.encode('utf-8') + b'\n')
  return digest.hexdigest()


def file_fingerprint(path: str) -> str:
  with open(path, 'rb') as f:
    return hashlib.sha256(f.read()).hexdigest()


def check_same_vocabulary(teacher_spm: str, student_workdir: str) -> None:
  """A student work directory that already has a vocabulary must have the teacher's (or the teacher's with
  reserved symbols appended: tokenizer.extend_with_reserved keeps every id and segmentation)."""
  student_spm = os.path.join(student_workdir, TOKENIZER_FILE)
  if (os.path.exists(student_spm) and file_fingerprint(student_spm) != file_fingerprint(teacher_spm)
      and not tokenizer.extends(teacher_spm, student_spm)):
    raise FastmtError(f'The student work directory {student_workdir} has another vocabulary ({student_spm}) than '
                     f'the teacher ({teacher_spm}); use a new student work directory')


def load_distilled_targets(distilled_dir: str, sources: list[str], split: str = 'train') -> list[str]:
  """The finished distilled targets for exactly these sources, the student's training `split` (an error if
  unfinished or for other sources)."""
  manifest_path = os.path.join(distilled_dir, MANIFEST_FILE)
  if not os.path.exists(manifest_path):
    raise MissingError(f'No {MANIFEST_FILE} in {distilled_dir!r}: not a fastmt.distill output directory')
  with open(manifest_path) as f:
    manifest = json.load(f)
  if manifest['sources_fingerprint'] != fingerprint(sources):
    raise FastmtError(f'{distilled_dir} distils other sources ({manifest.get("sources", "?")} of them) than this '
                      f'config\'s training split {split!r} ({len(sources)}): distil that split with python -m '
                      f'fastmt.distill --split {split!r}, or train on the split it distils '
                      '(config.dataset.train_split)')
  if manifest.get('done', 0) != len(sources):
    raise FastmtError(f'{distilled_dir} is unfinished ({manifest.get("done", 0)}/{len(sources)} lines); '
                     'run python -m fastmt.distill again to complete it')
  targets = corpus.read_lines(os.path.join(distilled_dir, DISTILLED_FILE))
  if len(targets) != len(sources):
    raise FastmtError(f'{distilled_dir}/{DISTILLED_FILE} has {len(targets)} lines for {len(sources)} sources')
  return targets


def recorded_outputs_at_cap(distilled_dir: str) -> list[int]:
  """The manifest's OUTPUTS_AT_CAP: line numbers (from 0), sorted, each once ([] for a distillation from
  before 2026-11-27, which did not record them)."""
  with open(os.path.join(distilled_dir, MANIFEST_FILE)) as f:
    return sorted({int(i) for i in json.load(f).get(OUTPUTS_AT_CAP, [])})


def student_targets(distilled_dir: str, sources: list[str], references: list[str],
                    split: str = 'train') -> tuple[list[str], int]:
  """(the distilled targets a student trains on, how many of them are references): load_distilled_targets,
  with the reference target wherever the teacher's translation reached its output cap without EOS (the
  manifest's OUTPUTS_AT_CAP; none is recorded by distillations from before 2026-11-27)."""
  targets = load_distilled_targets(distilled_dir, sources, split)
  at_cap = recorded_outputs_at_cap(distilled_dir)
  if at_cap and not 0 <= at_cap[0] <= at_cap[-1] < len(targets):
    raise FastmtError(f'{distilled_dir}/{MANIFEST_FILE}: {OUTPUTS_AT_CAP} names lines outside its '
                      f'{len(targets)} sources')
  for i in at_cap:
    targets[i] = references[i]
  return targets, len(at_cap)
