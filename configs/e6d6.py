r"""The matching deep-decoder baseline of the RoyalFlush table (Table 2): 6 encoder and 6 decoder layers.

    python train.py --config configs/e6d6.py --workdir runs/e6d6
    # the RoyalFlush recipe: train on a teacher's distilled targets (python -m fastmt.distill)
    python train.py --config configs/e6d6.py --workdir runs/e6d6_kd --config.dataset.distilled_dir=runs/kd_en_de

Same width, vocabulary, data and optimiser as configs/quickstart.py, so that the E6D6 / E6D1 / E12D1 rows of
docs/BENCHMARKS.md differ only in depth.
"""

from fastmt.configs import quickstart


def get_config():
  config = quickstart.get_config()
  config.model.num_encoder_layers = 6
  config.model.num_decoder_layers = 6
  # Deeper stacks than the quickstart's need the longer warm-up of a pre-LN Transformer at this peak rate.
  config.warmup_steps = 400
  config.num_train_steps = 8000
  config.eval_every_steps = 1000
  config.checkpoint_every_steps = 500
  # The last five checkpoints stay, for python -m fastmt.checkpoint_average --last 5.
  config.max_checkpoints_to_keep = 5
  config.keep_best_checkpoint = True
  return config
