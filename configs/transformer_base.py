r"""Transformer-base (Vaswani et al. 2017) on the Bible corpus: the size reference for throughput.

    python train.py --config configs/transformer_base.py --workdir runs/base
"""

from fastmt.configs import quickstart


def get_config():
  config = quickstart.get_config()
  config.vocab_size = 16000
  config.model.emb_dim = 512
  config.model.num_heads = 8
  config.model.mlp_dim = 2048
  config.model.num_encoder_layers = 6
  config.model.num_decoder_layers = 6
  config.model.dropout_rate = 0.1
  config.learning_rate = 7e-4
  config.warmup_steps = 4000
  config.cooldown_fraction = 0.0
  config.num_train_steps = 100_000
  config.eval_every_steps = 2000
  config.checkpoint_every_steps = 1000
  return config
