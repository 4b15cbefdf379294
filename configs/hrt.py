r"""Hybrid-regressive translation (HRT; ../shared/papers/hybrid-regressive-translation.txt and
royalflush-wmt22-efficiency.txt): one decoder trained on AT, CMLM, Skip-AT and Skip-CMLM, decoded in two passes.

    # fine-tune an AT model (same shape and vocabulary) into HRT k=2 with mixed distillation (p_raw = 0.5)
    python train.py --config configs/hrt.py:k2 --workdir runs/hrt_k2 --config.init_from=runs/at \
        --config.dataset.distilled_dir=runs/kd_en_de
    python decode.py --workdir runs/hrt_k2 --algorithm hrt                      # b_at = b_nat = 1
    python decode.py --workdir runs/hrt_k2 --algorithm hrt --beam_size 5 --nat_beam_size 1
    python decode.py --workdir runs/hrt_k2 --algorithm greedy                   # C_d = 1: the AT task alone

The argument: k2 ... k8 (chunk size; the papers' tables use k2, k3, k4), then optionally ',e6d6' (the one-GPU
table's deep decoder), ',e6d1' / ',e12d1' (a RoyalFlush student's shape) or ',small' (the notebooks',
configs/small.py; default the quickstart's) and ',nocl' (no curriculum: the skip tasks from the first step, Table
5's -CL), ',rpr' (relative position keys in decoder self-attention, HRT Eq. 4, clipped at distance 16; Table 5's
RPR; zero-initialised, so fine-tuning from an AT model without them starts from that model).
Mixed distillation is `dataset.p_raw = 0.5` here (it applies once `dataset.distilled_dir` is given).
"""

import ml_collections

from fastmt.configs._shapes import SHAPES

# The clipping distance of ',rpr': 16, as Shaw et al. (2018) used for translation (they saw little change from
# 2 up); the HRT paper does not give its own.
RELATIVE_KEY_DISTANCE = 16


def get_config(arg: str = 'k2'):
  name, *extras = arg.split(',')
  if name not in ('k2', 'k3', 'k4', 'k5', 'k6', 'k7', 'k8'):
    raise ValueError(f'Unknown chunk size {name!r} in configs/hrt.py:{arg}; use k2 .. k8')
  shapes = [e for e in extras if e in SHAPES]
  unknown = [e for e in extras if e not in SHAPES and e not in ('nocl', 'rpr')]
  if unknown or len(shapes) > 1:
    raise ValueError(f'Unknown options {unknown or shapes} in configs/hrt.py:{arg}; use one of {sorted(SHAPES)} '
                     'and/or nocl, rpr')
  config = SHAPES[shapes[0] if shapes else 'quickstart'].get_config()
  if 'rpr' in extras:
    config.model.relative_key_distance = RELATIVE_KEY_DISTANCE
  config.objective = 'hrt'
  config.hrt = ml_collections.ConfigDict(dict(
      chunk_size=int(name[1:]),
      curriculum='nocl' not in extras,  # p_k = (t / T)^lambda from {AT, CMLM} to {Skip-AT, Skip-CMLM}
      curriculum_power=1.0,  # lambda (the paper's: linear)
      curriculum_steps=0,  # T; 0 = num_train_steps at the first start (recorded: a continued run keeps it)
      seed=0))
  config.dataset.p_raw = 0.5  # HRT's mixed distillation (with dataset.distilled_dir)
  return config
