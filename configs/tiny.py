r"""A few-second model for tests and smoke runs: the quickstart recipe shrunk in every dimension.

    python train.py --config configs/tiny.py --workdir /tmp/tiny --config.dataset.name=text \
        --config.dataset.train_files='("tests/data/genesis.en","tests/data/genesis.de")' ...
"""

from fastmt.configs import quickstart


def get_config():
  config = quickstart.get_config()
  config.vocab_size = 300
  config.model.emb_dim = 32
  config.model.num_heads = 2
  config.model.mlp_dim = 64
  config.model.num_encoder_layers = 2
  config.model.num_decoder_layers = 1
  config.model.max_length = 64
  config.tokens_per_batch = 512
  config.bucket_lengths = (16, 32)
  config.num_train_steps = 20
  config.warmup_steps = 5
  config.learning_rate = 3e-3
  config.log_every_steps = 5
  config.eval_every_steps = 10
  config.eval_bleu_sentences = 8
  config.checkpoint_every_steps = 5
  config.keep_best_checkpoint = True
  return config
