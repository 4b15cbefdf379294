r"""The distillation teacher: the largest AT model these 2-core machines train overnight.

    python train.py --config configs/teacher.py --workdir runs/teacher
    python -m fastmt.checkpoint_average --workdir runs/teacher --last 5 --output runs/teacher_avg5
    python -m fastmt.distill --teacher runs/teacher_avg5 --output_dir runs/kd_en_de --beam_size 4

Wider than the students (d 384) with dropout, which a model trained for many epochs needs; same joint 8k
vocabulary size, so that students trained on its distilled data (which copy its spm.model) keep the
quickstart's output-layer cost. About 11 hours on 2 CPU cores; minutes on one GPU.

    python train.py --config configs/teacher.py:students --workdir runs/teacher_d256

`:students` is the teacher of the students' own shape (the quickstart's d 256, E4D2) that 2 CPU cores train
in about two hours: dropout and four times the quickstart's steps, which a model of that size needs to get
past the quickstart's own translations (issue [ib]: "a teacher of the students' width trained in the
background for an hour or two").
"""

from fastmt.configs import quickstart


def get_config(arg: str = ''):
  if arg not in ('', 'students'):
    raise ValueError(f'Unknown argument {arg!r} in configs/teacher.py:{arg}; use configs/teacher.py or '
                     'configs/teacher.py:students')
  config = quickstart.get_config()
  if arg == 'students':
    config.model.dropout_rate = 0.1
    config.num_train_steps = 9600
    config.cooldown_fraction = 0.2
    config.eval_every_steps = 1200
    config.checkpoint_every_steps = 400
    config.max_checkpoints_to_keep = 5
    return config
  config.model.emb_dim = 384
  config.model.num_heads = 6
  config.model.mlp_dim = 1536
  config.model.num_encoder_layers = 6
  config.model.num_decoder_layers = 6
  config.model.dropout_rate = 0.1
  config.learning_rate = 1e-3
  config.warmup_steps = 1000
  config.tokens_per_batch = 4096
  config.num_train_steps = 20000
  config.cooldown_fraction = 0.2
  config.eval_every_steps = 2000
  config.checkpoint_every_steps = 1000
  config.max_checkpoints_to_keep = 5
  config.keep_best_checkpoint = True
  return config
