r"""One model translating English into German, French, Spanish and Russian, with a 32k shared vocabulary.

    python train.py --config configs/multilingual.py --workdir runs/multi
    python -m fastmt.clusters_lib --workdir runs/multi --direction en_fr --num_clusters 500 --top_k 3
    python -m fastmt.bench --workdir runs/multi --direction en_fr --split test --methods greedy,beam:4
    python decode.py --workdir runs/multi --input acts.en --output hyp.fr --tag_inputs --direction en_fr \
        --projection clustered

The setting of the clustered-vocabulary paper: a large vocabulary makes the output projection the largest
part of a decoder step (here 32k x 256 multiply-adds per token against ~1M for the two decoder layers), so
projecting onto a cluster's active tokens pays. Sources carry the target-language tag (`<2fr> ...`), a
single SentencePiece piece; decode.py --tag_inputs --direction en_fr adds it to raw input.
"""

from configs import quickstart


def get_config():
  config = quickstart.get_config()
  config.dataset.name = 'bible/en_de+en_fr+en_es+en_ru'
  config.vocab_size = 32000
  config.model.num_encoder_layers = 6
  config.model.num_decoder_layers = 2
  config.tokens_per_batch = 4096
  config.warmup_steps = 1000
  config.learning_rate = 1e-3
  config.num_train_steps = 30000
  config.cooldown_fraction = 0.1
  config.eval_every_steps = 2000
  config.checkpoint_every_steps = 1000
  return config
