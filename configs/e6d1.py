r"""Deep encoder, one decoder layer (RoyalFlush Sec. 3): most of the AT decoding cost
is the decoder, so one layer decodes fastest.

    python train.py --config configs/e6d1.py --workdir runs/e6d1
    # the RoyalFlush recipe: train on a teacher's distilled targets (python -m fastmt.distill)
    python train.py --config configs/e6d1.py --workdir runs/e6d1_kd --config.dataset.distilled_dir=runs/kd_en_de

Same width, vocabulary, data and optimiser as configs/quickstart.py, so that the E6D6 / E6D1 / E12D1 rows of
docs/BENCHMARKS.md differ only in depth.
"""

from fastmt.configs import quickstart


def get_config():
  config = quickstart.get_config()
  config.model.num_encoder_layers = 6
  config.model.num_decoder_layers = 1
  # Deeper stacks than the quickstart's need the longer warm-up of a pre-LN Transformer at this peak rate.
  config.warmup_steps = 400
  config.num_train_steps = 8000
  config.eval_every_steps = 1000
  config.checkpoint_every_steps = 500
  # The last five checkpoints stay, for python -m fastmt.checkpoint_average --last 5.
  config.max_checkpoints_to_keep = 5
  config.keep_best_checkpoint = True
  return config
