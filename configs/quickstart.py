r"""Quickstart: a small en->de model on the built-in Bible corpus, trained in under 30 minutes on 2 CPU cores
(27 minutes and 10.2 test BLEU here; docs/BENCHMARKS.md).

    python train.py --config configs/quickstart.py --workdir runs/quickstart
    python train.py --config configs/quickstart.py --workdir runs/qs --config.num_train_steps=2000

Measured results are in docs/BENCHMARKS.md.
"""

import ml_collections


def get_config():
  config = ml_collections.ConfigDict()

  config.dataset = ml_collections.ConfigDict()
  # 'bible/<pair>' (built in, offline: en_de, en_fr, en_es, en_ru), 'text' (your aligned files) or
  # 'tfds:<builder>' (any tfds translation builder; needs internet to prepare).
  config.dataset.name = 'bible/en_de'
  # Where tfds datasets are prepared; '' = $FASTMT_CACHE/tfds (default ~/.cache/fastmt/tfds).
  config.dataset.data_dir = ''
  # For name='text': (source_path, target_path) per split, one sentence per line, UTF-8.
  config.dataset.train_files = ('', '')
  config.dataset.validation_files = ('', '')
  config.dataset.test_files = ('', '')
  # Translate the other way: swap each pair's sides ('bible/en_de' becomes de->en: each German verse twice,
  # with its WEB and KJV English; 'text': the files' sides; 'tfds:...': the builder's supervised keys).
  # Not for a multilingual Bible set ('bible/en_de+en_fr').
  config.dataset.reverse = False
  # The split to train on: 'train', or for the Bible and tfds datasets a slice of it such as 'train[:8000]'
  # (the first 8,000 pairs) for a quicker run; the vocabulary is learned from the same pairs.
  config.dataset.train_split = 'train'
  # Sequence-level distillation (python -m fastmt.distill): a directory of teacher translations of the
  # training sources ('' = train on the raw targets). With it, each drawn pair takes its raw target with
  # probability p_raw and the teacher's otherwise (0 = distilled only, 0.5 = HRT's mixed distillation).
  config.dataset.distilled_dir = ''
  config.dataset.p_raw = 0.0

  # Joint SentencePiece unigram vocabulary, trained on the training split into <workdir>/spm.model.
  config.vocab_size = 8000
  # The share of the corpus's characters that get a piece of their own (SentencePiece's character_coverage);
  # the rarest of the rest become <unk>. 1.0 for alphabets; about 0.9995 for Chinese or Japanese, whose
  # thousands of characters would otherwise need a vocab_size above their count.
  config.vocab_character_coverage = 1.0
  # How the vocabulary rewrites text before it is split into pieces, and so what every output is written in
  # (SentencePiece's normalization_rule_name): 'nmt_nfkc', its default, folds Unicode compatibility forms
  # (full-width punctuation and digits to ASCII, ligatures, decomposed accents composed) and turns
  # zero-width (non-)joiners and direction marks into spaces; 'identity' keeps text as written (Persian or
  # Hindi with ZWNJ, Chinese full-width punctuation, references in NFD). decode.py --reference says when the
  # references are written in forms the model cannot output.
  config.vocab_normalization = 'nmt_nfkc'

  config.model = ml_collections.ConfigDict()
  # Model width; heads split it evenly.
  config.model.emb_dim = 256
  # Attention heads per layer.
  config.model.num_heads = 4
  # Hidden size of each feed-forward block.
  config.model.mlp_dim = 1024
  # Encoder depth: deep-encoder/shallow-decoder shapes (E12D1 ...) are one change here.
  config.model.num_encoder_layers = 4
  # Decoder depth: decoding cost grows with it, so fast configs keep it small.
  config.model.num_decoder_layers = 2
  # Dropout on embeddings, residual branches and FFN. 0 here: dropout's random bits cost 1/3 of the step on
  # CPU even with the rbg PRNG (measured), and a 27-minute run (2.4 epochs) gains more from the extra tokens.
  config.model.dropout_rate = 0.0
  # Longest source or target in tokens, EOS included; longer training pairs are skipped (counted).
  config.model.max_length = 128
  # Activation dtype ('float32' or 'bfloat16'); parameters stay float32.
  config.model.dtype = 'float32'
  # Relative position keys in decoder self-attention, clipped at this distance (HRT Eq. 4; configs/hrt.py's
  # ',rpr' sets 16); 0 = none, absolute sinusoidal positions only.
  config.model.relative_key_distance = 0

  # Training objective (fastmt.objectives): 'at' = autoregressive, left to right, what greedy, beam and the
  # Jacobi decoders need. Recorded in the work directory; decoding checks it.
  config.objective = 'at'

  # Fine-tuning: start from the latest checkpoint of this work directory (same model shape and vocabulary;
  # dropout_rate, max_length and dtype may differ; a fresh optimiser at step 0), e.g. an AT model turned into
  # an HRT one ('' = random initialisation).
  config.init_from = ''

  # Seed of initialisation, dropout and data order: same seed, same losses.
  config.seed = 0
  # Padded tokens per side per batch; a bucket's batch has tokens_per_batch // bucket_length rows. Small
  # batches: a 27-minute budget is 2400 updates at 2k tokens, twice as many as at 4k, and early training
  # gains more from updates than from larger batches.
  config.tokens_per_batch = 2048
  # Padded lengths of the training buckets (one compiled train step each); max_length is appended.
  config.bucket_lengths = (12, 16, 20, 24, 28, 32, 40, 48, 64, 96)
  # Optimiser steps: 27 minutes at ~1.5 steps/s on 2 cores (1600 steps reached 8.5 test BLEU, 2400 10.2).
  config.num_train_steps = 2400
  # Adam(W) peak learning rate, reached after warmup_steps, then inverse-sqrt decay.
  config.learning_rate = 2e-3
  config.warmup_steps = 200
  # Final fraction of training that decays the learning rate linearly to zero (0 = pure inverse-sqrt).
  config.cooldown_fraction = 0.25
  # Decoupled weight decay of AdamW.
  config.weight_decay = 0.0
  # Global gradient-norm clipping.
  config.grad_clip_norm = 1.0
  # Label smoothing of the training loss.
  config.label_smoothing = 0.1

  # Progress and TensorBoard scalars every this many steps.
  config.log_every_steps = 50
  # Validation loss and greedy BLEU every this many steps (and at the end).
  config.eval_every_steps = 600
  # Validation sentences translated greedily for BLEU (0 = loss only).
  config.eval_bleu_sentences = 150
  # sacreBLEU's tokenizer for that BLEU (and the best checkpoint's choice): 13a for languages that separate
  # words by spaces, zh for Chinese, ja-mecab for Japanese (fastmt.decode_lib.BLEU_TOKENIZERS).
  config.eval_bleu_tokenize = '13a'
  # Checkpoint every this many steps (and at the end); keep the newest max_checkpoints_to_keep.
  config.checkpoint_every_steps = 200
  config.max_checkpoints_to_keep = 3
  # Also keep the checkpoint with the best validation BLEU in <workdir>/best_checkpoint.
  config.keep_best_checkpoint = False
  return config
