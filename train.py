r"""Trains a fastmt model; resumes from the work directory's latest checkpoint (same as `fastmt-train`).

    python train.py --config configs/quickstart.py --workdir runs/quickstart [--config.num_train_steps=2000]

The flags and what they do: fastmt/commands/train.py.
"""

from fastmt.commands import train

if __name__ == '__main__':
  train.run()
