"""From a config to what training needs: the tokenizer (trained once into the work directory) and batches."""

import dataclasses
import logging
import os

from fastmt.data import batching, corpus, distilled
from fastmt.data.tokenizer import RESERVED_SYMBOLS, Tokenizer, extend_with_reserved, train_tokenizer
from fastmt.workdir import TOKENIZER_FILE



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
  init_from = config.get('init_from')
  if init_from:  # fine-tuning keeps the initial model's vocabulary
    init_spm = os.path.join(init_from, TOKENIZER_FILE)
    distilled.check_same_vocabulary(init_spm, workdir)
    if not os.path.exists(path):
      os.makedirs(workdir, exist_ok=True)
      added = extend_with_reserved(init_spm, path)  # a vocabulary from before the reservation gains them
      if added:
        logging.warning('%s predates fastmt\'s reserved symbols: %d appended to the copy in %s (ids from %d; '
                        'the embedding table grows by as many rows)', init_spm, len(added), workdir,
                        Tokenizer(init_spm).vocab_size)
  distilled_dir = config.dataset.get('distilled_dir')
  if distilled_dir:
    teacher_spm = os.path.join(distilled_dir, TOKENIZER_FILE)
    distilled.check_same_vocabulary(teacher_spm, workdir)
    if not os.path.exists(path):
      os.makedirs(workdir, exist_ok=True)
      added = extend_with_reserved(teacher_spm, path)  # as for init_from: a student may train any objective
      if added:
        logging.warning('%s predates fastmt\'s reserved symbols: %d appended to the student\'s copy in %s',
                        teacher_spm, len(added), workdir)
  if os.path.exists(path):
    return Tokenizer(path)
  return train_tokenizer(train.sources + train.targets, path, config.vocab_size, seed=config.seed,
                         user_symbols=RESERVED_SYMBOLS + tuple(corpus.language_tags(config.dataset)))


def load_training_data(config, workdir: str, batch_multiple: int = 1) -> TrainingData:
  train_split = corpus.training_split(config.dataset)
  train = corpus.load_split(config.dataset, train_split)
  validation = corpus.load_split(config.dataset, 'validation')
  tokenizer = get_tokenizer(config, workdir, train)
  max_length = config.model.max_length
  distilled_ids = None
  if config.dataset.get('distilled_dir'):
    distilled_ids = tokenizer.encode(distilled.load_distilled_targets(config.dataset.distilled_dir, train.sources,
                                                                   train_split))
  src, tgt, kept_distilled, skipped = batching.prepare_pairs(
      tokenizer.encode(train.sources), tokenizer.encode(train.targets), max_length, distilled_ids)
  buckets = [b for b in config.bucket_lengths if b < max_length] + [max_length]
  train_batches = batching.TrainBatches(src, tgt, buckets, config.tokens_per_batch, config.seed,
                                        batch_multiple, kept_distilled, config.dataset.get('p_raw', 0.0))
  val_src, val_tgt, _, _ = batching.prepare_pairs(tokenizer.encode(validation.sources),
                                                  tokenizer.encode(validation.targets), max_length,
                                                  split='validation')
  validation_batches, repeated = batching.validation_batches(val_src, val_tgt, buckets, config.tokens_per_batch,
                                                             batch_multiple)
  if repeated:
    logging.info('Validation: %d rows repeated to split the batches evenly over %d devices', repeated,
                 batch_multiple)
  logging.info('Training pairs: %d in %d batches per epoch; validation pairs: %d', len(src),
               train_batches.batches_per_epoch, len(validation))
  return TrainingData(tokenizer, train_batches, validation, validation_batches, skipped)
