r"""Self-drafting (fastmt/objectives/selfdraft.py): the AT loss plus <mask> blocks that draft the next W tokens
after a prefix, so that `--algorithm spec` drafts in the same decoder call that verifies (issue [spec]).

    # fine-tune an AT model (same shape and vocabulary; the reserved <mask> is appended if it lacks it)
    python train.py --config configs/selfdraft.py:w4 --workdir runs/selfdraft --config.init_from=runs/quickstart
    python decode.py --workdir runs/selfdraft --algorithm spec --block_size 4   # == its greedy output, faster
    python decode.py --workdir runs/selfdraft --algorithm greedy                 # the AT task alone

The argument: w2 .. w8 (W: the draft block = the speculative window), then optionally ',e6d6' (the one-GPU table's
deep decoder), ',e6d1' / ',e12d1' (a RoyalFlush student's shape), ',small' (the notebooks') or ',drafter' (a
separate drafter for any AT model, configs/drafter.py: `--drafter model`); default the quickstart's. Distilled
targets (`dataset.distilled_dir`) make a model's greedy output more predictable, hence more drafts accepted, as for
every fast decoder here.
"""

import ml_collections

from fastmt.configs import _shapes, drafter

SHAPES = {**_shapes.SHAPES, 'drafter': drafter}  # and a separate drafter's own small shape


def get_config(arg: str = 'w4'):
  name, *extras = arg.split(',')
  if name not in tuple(f'w{w}' for w in range(2, 9)):
    raise ValueError(f'Unknown block size {name!r} in configs/selfdraft.py:{arg}; use w2 .. w8')
  unknown = [e for e in extras if e not in SHAPES]
  if unknown or len(extras) > 1:
    raise ValueError(f'Unknown options {unknown or extras} in configs/selfdraft.py:{arg}; use one of '
                     f'{sorted(SHAPES)}')
  config = SHAPES[extras[0] if extras else 'quickstart'].get_config()
  config.objective = 'selfdraft'
  config.selfdraft = ml_collections.ConfigDict(dict(
      block_size=int(name[1:]),
      blocks=2,  # two cuts per row: (T + 2W) / T of an AT step
      draft_weight=1.0,
      seed=0))
  return config
