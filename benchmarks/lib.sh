# Shared by the training benchmarks (hrt.sh, interleaved.sh, royalflush.sh, spec.sh): sourced, not run, from the
# repository root.

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

# The scripts run train.py, configs/ and benchmarks/ by relative paths (and RUNS is relative to the same place).
if [[ ! -f train.py || ! -d configs || ! -d benchmarks ]]; then
  echo "$(basename "$0"): run it from the repository root (cd $(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd))" >&2
  exit 2
fi

# A row records what made it (SETTINGS: one line of everything the script passes it: config, targets, initial
# model, budget, extra overrides) in its work directory and its average (row.txt), so that a rerun with other
# settings (another STEPS, TOKENS, SHAPE, KD, ...) is refused instead of resuming the old run under the new budget
# or reusing its average in the table.

# claim_row RUN SETTINGS: RUN is this row's work directory: new, or started with the same SETTINGS.
claim_row() {
  local run=$1 settings=$2
  if [[ -f $run/row.txt && $(< "$run/row.txt") != "$settings" ]]; then
    made_with_other_settings "$run" "$(< "$run/row.txt")" "$settings"
  fi
  mkdir -p "$run"
  printf '%s\n' "$settings" > "$run/row.txt"
}

# row_done RUN SETTINGS: whether the row's average RUN_avg5 is finished with these SETTINGS (with others: an error).
row_done() {
  local avg=$1_avg5 settings=$2
  [[ -d $avg ]] || return 1
  if [[ ! -f $avg/row.txt ]]; then
    echo "$avg: done (averaged before rows recorded their settings: reused as it is)"
    return 0
  fi
  if [[ $(< "$avg/row.txt") != "$settings" ]]; then
    made_with_other_settings "$avg" "$(< "$avg/row.txt")" "$settings"
  fi
  echo "$avg: done"
}

made_with_other_settings() {  # PATH THEN NOW
  printf '%s was made with other settings than this run'"'"'s:\n  then: %s\n  now:  %s\n' "$1" "$2" "$3" >&2
  echo "remove the row (its work directory and its _avg5) to make it again, or set RUNS to another directory" >&2
  exit 2
}

# average_row RUN [fastmt-average flags]: the last 5 checkpoints of RUN averaged into RUN_avg5, with RUN's
# row.txt, through RUN_avg5.tmp: a kill leaves nothing that looks finished (a .tmp, removed by the next call).
average_row() {
  local run=$1
  shift
  rm -rf "${run}_avg5.tmp"
  $PY -m fastmt.checkpoint_average --workdir "$run" --last 5 --output "${run}_avg5.tmp" "$@"
  if [[ -f $run/row.txt ]]; then cp "$run/row.txt" "${run}_avg5.tmp/row.txt"; fi
  rm -rf "${run}_avg5"  # an average made again (royalflush.sh's teacher): replaced only once the new one is whole
  mv "${run}_avg5.tmp" "${run}_avg5"
}

# write_table FILE COMMAND...: COMMAND's output (a table) printed and written to FILE only when it succeeds: a
# failing table script no longer empties the table of the last good run.
write_table() {
  local file=$1
  shift
  "$@" > "$file.tmp"
  mv "$file.tmp" "$file"
  cat "$file"
}

# wait_all PID...: waits for every background row, then fails if any did (a first failure no longer ends the
# script while the other rows go on training behind it, holding their train.lock against a rerun).
wait_all() {
  local failed=0 pid
  for pid in "$@"; do wait "$pid" || failed=1; done
  return $failed
}
