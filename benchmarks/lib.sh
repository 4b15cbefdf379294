# Shared by the training benchmarks (hrt.sh, interleaved.sh, royalflush.sh, spec.sh): sourced, not run.

# training_flags STEPS [EVALS]: train.py overrides for a row of STEPS optimiser steps (0 = the config's own
# budget): a checkpoint every STEPS / 20 steps with the last 5 kept (what checkpoint averaging reads) and EVALS
# validation passes (default 1, at the end); then TOKENS (padded tokens per side per batch; 0 = the config's)
# and EXTRA (more --config overrides) from the environment.
training_flags() {
  local steps=$1 evals=${2:-1} flags=()
  if [[ $steps -gt 0 ]]; then
    flags+=(--config.num_train_steps="$steps" --config.checkpoint_every_steps=$(( (steps + 19) / 20 ))
            --config.eval_every_steps=$(( (steps + evals - 1) / evals )) --config.max_checkpoints_to_keep=5)
  fi
  if [[ ${TOKENS:-0} -gt 0 ]]; then flags+=(--config.tokens_per_batch="$TOKENS"); fi
  echo "${flags[@]}" "${EXTRA:-}"
}

# has_stage NAME: whether NAME is one of the words of $STAGES.
has_stage() { [[ " $STAGES " == *" $1 "* ]]; }
