r"""The notebooks' small settings: the quickstart recipe at a size that trains in a minute or two on 2 CPU cores
(notebooks/ run with it in CI; a reader flips SMALL = False for the full recipe).

    python train.py --config configs/small.py --workdir runs/small
    python train.py --config configs/interleaved.py:ib,small --workdir runs/ib_small   # any objective, this shape

Same data, vocabulary kind and optimiser as configs/quickstart.py, narrower and shorter: it learns the
corpus's frequent words and little else (a few BLEU), enough to show every method run, not to rank them.
"""

from fastmt.configs import quickstart


def get_config():
  config = quickstart.get_config()
  config.vocab_size = 2000
  config.model.emb_dim = 128
  config.model.num_heads = 4
  config.model.mlp_dim = 512
  config.model.num_encoder_layers = 2
  config.model.num_decoder_layers = 2
  config.num_train_steps = 400
  config.warmup_steps = 100
  config.learning_rate = 3e-3
  config.log_every_steps = 50
  config.eval_every_steps = 400
  config.eval_bleu_sentences = 32
  config.checkpoint_every_steps = 80
  config.max_checkpoints_to_keep = 5
  return config
