r"""A small drafter for exact speculative decoding with a separate model (`--drafter model`, issue [spec]):
a narrow two-layer encoder and one decoder layer, trained with the selfdraft objective on the verifier's own
greedy outputs, so that its <mask> slots guess the tokens the verifier will accept.

    # the verifier's greedy outputs of the training split (it keeps its vocabulary: the drafter shares it)
    python -m fastmt.distill --teacher runs/quickstart --output_dir runs/greedy_en_de --beam_size 1
    python train.py --config configs/selfdraft.py:w3,drafter --workdir runs/drafter \
      --config.dataset.distilled_dir=runs/greedy_en_de
    python decode.py --workdir runs/quickstart --algorithm spec --drafter model --drafter_workdir runs/drafter

It shares nothing with the verifier but the vocabulary: its own encoder pass, decoder and cache, all of whose
cost counts in every timing (docs/BENCHMARKS.md section 7). Width 128 instead of the quickstart's 256 makes
its output projection, most of a small model's call, a quarter of the verifier's per position.
"""

from fastmt.configs import quickstart


def get_config():
  config = quickstart.get_config()
  config.model.emb_dim = 128
  config.model.num_heads = 4
  config.model.mlp_dim = 512
  config.model.num_encoder_layers = 2
  config.model.num_decoder_layers = 1
  config.num_train_steps = 2400
  # The last five checkpoints (the last quarter of training) stay, for checkpoint_average --last 5.
  config.checkpoint_every_steps = 120
  config.max_checkpoints_to_keep = 5
  return config
