r"""One model translating English into German, French, Spanish and Russian, with a 32k shared vocabulary.

    python train.py --config configs/multilingual.py --workdir runs/multi
    python -m fastmt.clusters_lib --workdir runs/multi --direction en_fr   # C=500, K=5 by default
    python benchmarks/clustered_projection.py --workdir runs/multi --output_dir runs/multi/clustered  # dense vs clustered
    python decode.py --workdir runs/multi --input acts.en --output hyp.fr --tag_inputs --direction en_fr \
        --projection clustered

The setting of the clustered-vocabulary paper: a large vocabulary makes the output projection the largest
part of a decoder step (here 32k x 256 multiply-adds per token against ~1.8M for the two decoder layers), so
projecting onto a cluster's active tokens pays. Sources carry the target-language tag (`<2fr> ...`), a
single SentencePiece piece; decode.py --tag_inputs --direction en_fr adds it to raw input.

The quickstart's shape and optimiser with four directions and a 4x larger vocabulary; the step budget fits
about an hour on 2 CPU cores (docs/BENCHMARKS.md has the measured time and BLEU per direction).
"""

from fastmt.configs import quickstart


def get_config():
  config = quickstart.get_config()
  config.dataset.name = 'bible/en_de+en_fr+en_es+en_ru'
  # Shared by the four target languages and English; the target-language tags are single pieces.
  config.vocab_size = 32000
  config.num_train_steps = 3200
  config.warmup_steps = 300
  config.eval_every_steps = 800
  config.checkpoint_every_steps = 400
  return config
