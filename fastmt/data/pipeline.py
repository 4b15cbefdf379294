"""From a config to what training needs: the tokenizer (trained once into the work directory) and batches."""

import dataclasses
import hashlib
import itertools
import json
import logging
import os

import numpy as np

from fastmt.data import batching, corpus, distilled
from fastmt.data.tokenizer import RESERVED_SYMBOLS, UNK_ID, Tokenizer, extend_with_reserved, train_tokenizer
from fastmt.errors import FastmtError
from fastmt.files import write_whole
from fastmt.workdir import TOKENIZER_FILE, has_checkpoints

logger = logging.getLogger(__name__)  # named 'fastmt.<module>': users set its level or handlers by name


@dataclasses.dataclass
class TrainingData:
  tokenizer: Tokenizer
  train_batches: batching.TrainBatches
  validation: corpus.ParallelText
  validation_batches: list[batching.Batch]  # fixed, for the validation loss
  skipped: dict[str, int]  # training pairs skipped, by reason


def get_tokenizer(config, workdir: str, train: corpus.ParallelText) -> Tokenizer:
  """Loads workdir/spm.model, or trains it on the training split's source and target text.

  A student of distilled data uses its teacher's vocabulary, copied from the distillation directory, and a
  fine-tuned model (config.init_from) its initial model's; either gains the reserved symbols it lacks (a
  vocabulary from before their reservation), so that any objective can train on it; a workdir that already has another vocabulary, or
  a teacher and an initial model with different ones, is an error.
  """
  path = os.path.join(workdir, TOKENIZER_FILE)
  if not os.path.exists(path) and has_checkpoints(workdir):  # a new vocabulary would give their ids other pieces
    raise FastmtError(f'{workdir} holds checkpoints but no {TOKENIZER_FILE}: the work directory is damaged (put '
                      f'back the {TOKENIZER_FILE} it was trained with, or use a new --workdir)')
  init_from = config.get('init_from')
  if init_from:  # fine-tuning keeps the initial model's vocabulary
    init_spm = os.path.join(init_from, TOKENIZER_FILE)
    distilled.check_same_vocabulary(init_spm, workdir)
    if not os.path.exists(path):
      os.makedirs(workdir, exist_ok=True)
      added = extend_with_reserved(init_spm, path)  # a vocabulary from before the reservation gains them
      _write_vocabulary_record(workdir, {'copied_from': os.path.abspath(init_spm)})
      if added:
        logger.warning('%s predates fastmt\'s reserved symbols: %d appended to the copy in %s (ids from %d; '
                       'the embedding table grows by as many rows)', init_spm, len(added), workdir,
                       Tokenizer(init_spm).vocab_size)
  distilled_dir = config.dataset.get('distilled_dir')
  if distilled_dir:
    teacher_spm = os.path.join(distilled_dir, TOKENIZER_FILE)
    distilled.check_same_vocabulary(teacher_spm, workdir)
    if not os.path.exists(path):
      os.makedirs(workdir, exist_ok=True)
      added = extend_with_reserved(teacher_spm, path)  # as for init_from: a student may train any objective
      _write_vocabulary_record(workdir, {'copied_from': os.path.abspath(teacher_spm)})
      if added:
        logger.warning('%s predates fastmt\'s reserved symbols: %d appended to the student\'s copy in %s',
                       teacher_spm, len(added), workdir)
  if os.path.exists(path) and (init_from or distilled_dir or has_checkpoints(workdir)):
    return Tokenizer(path)  # a resumed run keeps its vocabulary (train_lib warns when the corpus changed)
  record = _vocabulary_record(config, train)  # digests the training text: only where it is compared or written
  if os.path.exists(path):
    earlier = _read_json(os.path.join(workdir, VOCABULARY_RECORD))
    if earlier in (None, record):
      return Tokenizer(path)  # made for this config, or the user's own (no record beside it)
    # Left by a run that stopped before its first checkpoint (a bad validation split, a refused init_from,
    # Ctrl-C): nothing was trained on it, and it was made for another corpus or size, or copied from another
    # model. Reusing it would spell the new text with the old pieces (a new script as <unk>) without a word.
    made = (f'copied from {earlier["copied_from"]}' if isinstance(earlier, dict) and 'copied_from' in earlier
            else 'trained for another corpus, training text or vocab_size')
    logger.warning('%s was left by an earlier start of this work directory that saved no checkpoint (%s): '
                   'training the vocabulary again for this config', path, made)
  tokenizer = train_tokenizer(train.sources + train.targets, path, config.vocab_size, seed=config.seed,
                              user_symbols=RESERVED_SYMBOLS + tuple(corpus.language_tags(config.dataset)),
                              character_coverage=config.get('vocab_character_coverage', 1.0),
                              normalization=config.get('vocab_normalization', 'nmt_nfkc'))
  _write_vocabulary_record(workdir, record)
  return tokenizer


def _write_vocabulary_record(workdir: str, record: dict) -> None:
  """workdir/vocabulary.json: what its spm.model was trained for (_vocabulary_record), or the vocabulary it was
  copied from ({'copied_from': path}: a run that starts again without init_from or distilled_dir, before any
  checkpoint, then trains its own instead of keeping another model's)."""
  write_whole(os.path.join(workdir, VOCABULARY_RECORD), json.dumps(record, indent=2).encode('utf-8'))


UNKNOWN_WARNING_FRACTION = 0.01  # of the training tokens: a few rare characters are normal, more is a mismatch


def _warn_of_unknown_pieces(source_ids, target_ids, tokenizer, config) -> float:
  """Warns when more than UNKNOWN_WARNING_FRACTION of either side's training tokens are <unk>: a vocabulary
  inherited from init_from or a distillation teacher (or a resumed run's) that cannot spell this corpus trains
  the model on <unk> without a word. Returns the larger fraction."""
  worst = 0.0
  for side, rows in (('source', source_ids), ('target', target_ids)):
    flat = np.concatenate(rows) if rows else np.zeros((0,), np.int32)  # one pass (4.5M lines: seconds)
    fraction = int((flat == UNK_ID).sum()) / max(len(flat), 1)
    worst = max(worst, fraction)
    if fraction > UNKNOWN_WARNING_FRACTION:
      lines = sum(1 for row in rows if (row == UNK_ID).any())
      if config.get('init_from') or config.dataset.get('distilled_dir'):
        origin = 'config.init_from\'s' if config.get('init_from') else 'the distillation teacher\'s'
        advice = 'a vocabulary trained on it needs a new work directory without init_from or distilled_dir'
      else:  # trained on this very text: its coverage left characters out (or a resumed run's older corpus)
        origin = 'this work directory\'s'
        advice = (f'config.vocab_character_coverage={config.get("vocab_character_coverage", 1.0)} leaves the '
                  'rarest characters of the joint source and target text without a piece (the side with the larger '
                  'alphabet loses most): raise it toward 1.0, or vocab_size, in a new work directory')
      logger.warning('%.1f%% of the training %s tokens (in %d of %d lines) are <unk>: %s vocabulary (%s) cannot '
                     'spell this corpus; %s', 100 * fraction, side, lines, len(rows), origin, tokenizer.model_path,
                     advice)
  return worst


VOCABULARY_RECORD = 'vocabulary.json'  # what spm.model was trained on, beside it


# The dataset fields that decide the vocabulary's training text (the training split's lines and the language
# tags): not the validation or test files (mending those after a failed start keeps the vocabulary), nor how
# batches mix raw and distilled targets.
_VOCABULARY_DATASET_FIELDS = ('name', 'data_dir', 'train_files', 'train_split', 'reverse')


def _vocabulary_record(config, train) -> dict:
  """What a vocabulary trained for this config depends on: the training text, vocab_size, seed, coverage.
  The text by its digest as well as by its files' names: a file fixed in place (the wrong language given as
  the target, then overwritten) has the name it had."""
  dataset = json.loads(config.dataset.to_json())
  digest = hashlib.sha256()
  for line in itertools.chain(train.sources, ['\0'], train.targets):  # about a second for 1 GB of text
    digest.update(line.encode('utf-8', 'surrogatepass'))
    digest.update(b'\n')
  return {'dataset': {k: dataset.get(k) for k in _VOCABULARY_DATASET_FIELDS}, 'text_sha256': digest.hexdigest(),
          'language_tags': list(corpus.language_tags(config.dataset)), 'vocab_size': config.vocab_size,
          'seed': config.get('seed'), 'character_coverage': config.get('vocab_character_coverage', 1.0),
          **({'normalization': config.vocab_normalization}  # recorded when not the default: older records agree
             if config.get('vocab_normalization', 'nmt_nfkc') != 'nmt_nfkc' else {})}


def _read_json(path: str):
  """The JSON in path; None where there is none or it does not parse (nothing to compare with)."""
  try:
    with open(path, encoding='utf-8') as f:
      return json.load(f)
  except (OSError, ValueError):
    return None


def load_training_data(config, workdir: str, batch_multiple: int = 1) -> TrainingData:
  train_split = corpus.training_split(config.dataset)
  train = corpus.load_split(config.dataset, train_split)
  validation = corpus.load_split(config.dataset, 'validation')
  tokenizer = get_tokenizer(config, workdir, train)
  wanted = config.get('vocab_normalization', 'nmt_nfkc')
  if tokenizer.normalization != wanted:  # kept by a resumed run, or copied from init_from or a teacher
    logger.warning('The vocabulary %s normalises text with %r, not config.vocab_normalization=%r: it was kept or '
                   'copied (a resumed run, init_from, a distillation teacher), and its outputs follow %r; a new work '
                   'directory without init_from or distilled_dir trains one with %r', tokenizer.model_path,
                   tokenizer.normalization, wanted, tokenizer.normalization, wanted)
  max_length = config.model.max_length
  distilled_ids = None
  if config.dataset.get('distilled_dir'):
    targets, references = distilled.student_targets(config.dataset.distilled_dir, train.sources, train.targets,
                                                    train_split)
    unknown = sum('\u2047' in target for target in targets)  # SentencePiece's text for the teacher's <unk>
    if unknown:  # NFKC makes it '??', which a student's vocabulary spells as real question marks
      logger.warning('%d of %d distilled targets hold the teacher\'s <unk> (shown as U+2047): the student learns it '
                     'as question marks; a teacher whose vocabulary covers the corpus (its '
                     'config.vocab_character_coverage) avoids it', unknown, len(targets))
    if references:  # the teacher ran on to its cap there: a student must not learn that
      logger.warning('%d of %d distilled targets reached the teacher\'s output cap without EOS: those pairs '
                     'train on their reference targets', references, len(targets))
    distilled_ids = tokenizer.encode(targets)
  source_ids, target_ids = tokenizer.encode(train.sources), tokenizer.encode(train.targets)
  _warn_of_unknown_pieces(source_ids, target_ids, tokenizer, config)
  src, tgt, kept_distilled, skipped = batching.prepare_pairs(source_ids, target_ids, max_length, distilled_ids)
  buckets = [b for b in config.bucket_lengths if b < max_length] + [max_length]
  train_batches = batching.TrainBatches(src, tgt, buckets, config.tokens_per_batch, config.seed,
                                        batch_multiple, kept_distilled, config.dataset.get('p_raw', 0.0))
  val_src, val_tgt, _, _ = batching.prepare_pairs(tokenizer.encode(validation.sources),
                                                  tokenizer.encode(validation.targets), max_length,
                                                  split='validation')
  validation_batches, padding = batching.validation_batches(val_src, val_tgt, buckets, config.tokens_per_batch,
                                                            batch_multiple)
  if padding:
    logger.info('Validation: %d all-PAD rows (weighed 0) split the batches evenly over %d devices', padding,
                batch_multiple)
  logger.info('Training pairs: %d in %d batches per epoch; validation pairs: %d scored for the loss (of %d)',
              len(src), train_batches.batches_per_epoch, len(val_src), len(validation))
  return TrainingData(tokenizer, train_batches, validation, validation_batches, skipped)
