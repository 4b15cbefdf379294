r"""Interleaved decoders (IBDecoder, SA, IB+SA, IMDecoder; ../shared/papers/interleaved-bidirectional-decoder.txt):
the same Transformer, trained on a reordered target that z = h * c words per step come from.

    python train.py --config configs/interleaved.py:ib --workdir runs/ib          # IBDecoder, (h, c) = (2, 1)
    python train.py --config configs/interleaved.py:ib_sa --workdir runs/ib_sa    # IB+SA (2, 2)
    python train.py --config configs/interleaved.py:im,e6d1 --workdir runs/im     # IMDecoder (4, 1), student shape
    python train.py --config configs/interleaved.py:ib --workdir runs/ib_ft --config.init_from=runs/at_kd \
        --config.num_train_steps=1200                                # fine-tuned from an AT model
    python decode.py --workdir runs/ib --algorithm ib                 # greedy; --beam_size 4: Algorithm 1

The first part of the argument picks the factorisation:
    at            the autoregressive baseline (h, c) = (1, 1) of the same table (= configs/quickstart.py)
    ib            IBDecoder (2, 1): both ends at once, signed positions (Eq. 7), mask M(2, 1)
    sa            SA (1, 2): two neighbouring words per step, left to right (Wang et al. 2018)
    ib_sa         IB+SA (2, 2): two words per direction per step, mask M(2, 2) (Eq. 12)
    im            IMDecoder (4, 1): two segments, each from both ends; step positions and learned direction
                  embeddings (Eqs. 9-11)
    ib_vanilla_mask, ib_vanilla_positions   the ablations of Table 2: IBDecoder with the causal mask M(1, 1) /
                  with positions 0, 1, 2, ... of the reordered sequence
The optional second part picks the shape: the quickstart's (default), one of the RoyalFlush table's (e6d6, the
deep-decoder baseline with the paper's 6 decoder layers at d256, the one-GPU table's shape; the students e6d1,
e12d1: configs/e6d6.py, ...) or the notebooks' (small, configs/small.py). Everything else (data, optimiser, steps) is the shape's config, so every
row of a table differs only in its factorisation.
"""

import ml_collections

from fastmt.configs._shapes import SHAPES

FACTORISATIONS = {
    'ib': dict(directions=2, words_per_direction=1),
    'sa': dict(directions=1, words_per_direction=2),
    'ib_sa': dict(directions=2, words_per_direction=2),
    'im': dict(directions=4, words_per_direction=1, positions='step', direction_embeddings=True),
    'ib_vanilla_mask': dict(directions=2, words_per_direction=1, mask='causal'),
    'ib_vanilla_positions': dict(directions=2, words_per_direction=1, positions='vanilla'),
}


def get_config(arg: str = 'ib'):
  name, _, shape = arg.partition(',')
  if shape and shape not in SHAPES:
    raise ValueError(f'Unknown shape {shape!r} in configs/interleaved.py:{arg}; choose one of {sorted(SHAPES)}')
  if name != 'at' and name not in FACTORISATIONS:
    raise ValueError(f'Unknown factorisation {name!r} in configs/interleaved.py:{arg}; choose at or one of '
                     f'{sorted(FACTORISATIONS)}')
  config = SHAPES[shape or 'quickstart'].get_config()
  if name == 'at':
    return config
  config.objective = 'interleaved'
  # The factorisation (fastmt.decoding.interleaving.Interleaving): recorded in the work directory with the
  # objective, and read from there by `decode.py --algorithm ib`.
  config.interleaving = ml_collections.ConfigDict(dict(
      directions=2, words_per_direction=1, positions='signed', mask='interleaved', direction_embeddings=False,
      start='bos'))  # 'slot': each slot's own reserved start symbol instead of BOS
  config.interleaving.update(FACTORISATIONS[name])
  if config.interleaving.direction_embeddings:
    config.model.num_directions = config.interleaving.directions
  return config
