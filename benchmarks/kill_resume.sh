#!/usr/bin/env bash
# A training run killed with SIGKILL and restarted ends with the same parameters as an uninterrupted run.
#   bash benchmarks/kill_resume.sh [CONFIG] [STEPS] [KILL_AFTER_CHECKPOINT]
# Both runs share one tokenizer (copied from runs/quickstart when present) so only training is compared.
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=${1:-configs/quickstart.py}
STEPS=${2:-60}
KILL_AT=${3:-40}
PY=${PY:-.venv/bin/python}
FLAGS=(--config "$CONFIG" --config.num_train_steps="$STEPS" --config.checkpoint_every_steps=20
       --config.eval_every_steps=100000 --config.eval_bleu_sentences=0)
rm -rf runs/kill_reference runs/kill_resumed
mkdir -p runs/kill_reference runs/kill_resumed
for d in runs/kill_reference runs/kill_resumed; do
  [ -f runs/quickstart/spm.model ] && cp runs/quickstart/spm.model "$d/"
done
$PY train.py "${FLAGS[@]}" --workdir runs/kill_reference > runs/kill_reference.log 2>&1
$PY train.py "${FLAGS[@]}" --workdir runs/kill_resumed > runs/kill_resumed.log 2>&1 &
pid=$!
until [ -d "runs/kill_resumed/checkpoints/$KILL_AT" ]; do sleep 0.2; done
sleep 3  # a few steps past the checkpoint: those are lost with the process and must be redone
kill -9 "$pid"; wait "$pid" 2>/dev/null || true
echo "killed with SIGKILL after checkpoint $KILL_AT; checkpoints left: $(ls runs/kill_resumed/checkpoints | tr '\n' ' ')"
$PY train.py "${FLAGS[@]}" --workdir runs/kill_resumed >> runs/kill_resumed.log 2>&1
grep -a "Resumed from step" runs/kill_resumed.log
$PY - <<'PYEOF'
import jax, numpy as np
from fastmt import workdir
config = workdir.load_model_config('runs/kill_reference')
a, step_a = workdir.restore_params('runs/kill_reference', config)
b, step_b = workdir.restore_params('runs/kill_resumed', config)
diffs = jax.tree_util.tree_leaves(jax.tree_util.tree_map(lambda x, y: float(np.abs(np.asarray(x) - np.asarray(y)).max()), a, b))
print(f'final steps {step_a} vs {step_b}; max |difference| over all {len(diffs)} parameter arrays: {max(diffs)}')
PYEOF
