#!/usr/bin/env bash
# The interleaved-decoder table (issue [ib]) end to end on en->de, on CPU or one GPU:
#   teacher (an existing work directory, or trained here) -> beam-4 distillation of the training split ->
#   AT, IB (2,1), SA (1,2), IB+SA (2,2), IM (4,1) on the distilled targets, AT and IB also on raw targets, and the
#   Table 2 ablations -> each the average of its last 5 checkpoints -> one fastmt.bench run that translates the
#   test split with every model (greedy and beam 4) and times them side by side in one process against AT-KD greedy.
#
#   bash benchmarks/interleaved.sh                                   # every stage, the quickstart's 2400 steps
#   STEPS=800 bash benchmarks/interleaved.sh                          # a shorter equal budget for every row (CPU)
#   TEACHER=runs/quickstart STAGES="distill students eval" bash benchmarks/interleaved.sh   # reuse a teacher
#   STEPS=5000 TOKENS=8192 PARALLEL=1 SHAPE=e6d1 bash benchmarks/interleaved.sh           # one GPU, student shape
#   ROWS="at_kd:at:kd at_kd_ft:at:kd:at_kd ib_kd_ft:ib:kd:at_kd" BASELINE=at_kd_ft bash benchmarks/interleaved.sh
#                                    # IB fine-tuned from AT-KD against AT-KD trained on as long (equal budgets)
#
# Resumable: train.py resumes each row from its last checkpoint (the teacher trained here too), distillation
# from its last chunk, a finished row (its _avg5 directory, made with the same settings) is skipped. A row made
# with other settings (STEPS, TOKENS, SHAPE, EXTRA, its targets or initial row) is refused, not reused: each
# records them in row.txt (benchmarks/lib.sh). Run it from the repository root. Run directories: RUNS (default
# runs/interleaved).
#
# Environment: RUNS, TEACHER (a work directory; default: train configs/quickstart.py into RUNS/teacher), STEPS
# (optimiser steps per row; 0 = the config's own), TOKENS (padded tokens per side per batch; 0 = the config's),
# SHAPE (quickstart | e6d6 | e6d1 | e12d1), ROWS (names below), PARALLEL (1 = train the rows at once: a large GPU),
# FT_STEPS (steps of a fine-tuned row; default STEPS / 2, or 1200), BASELINE (the row every other is measured
# against; default at_kd), EXTRA (more --config overrides for every row), PY, BENCH_FLAGS (more fastmt.bench flags),
# EVAL_DIR (where the eval stage writes its bench and table; default $RUNS/eval).
set -euo pipefail
# shellcheck source=benchmarks/lib.sh
source "$(dirname "$0")/lib.sh"
PY=${PY:-python}
RUNS=${RUNS:-runs/interleaved}
OWN_TEACHER=0  # a TEACHER given is used as it is; the default one is trained (or resumed) here
if [[ -z ${TEACHER:-} ]]; then TEACHER=$RUNS/teacher OWN_TEACHER=1; fi
STEPS=${STEPS:-0}
TOKENS=${TOKENS:-0}
SHAPE=${SHAPE:-quickstart}
EXTRA=${EXTRA:-}
BENCH_FLAGS=${BENCH_FLAGS:-}
STAGES=${STAGES:-teacher distill students eval}
FT_STEPS=${FT_STEPS:-$(( STEPS > 0 ? STEPS / 2 : 1200 ))}
BASELINE=${BASELINE:-at_kd}
EVAL_DIR=${EVAL_DIR:-$RUNS/eval}
# name:factorisation:targets[:from] (configs/interleaved.py:<factorisation>; targets raw | kd; from: another
# row, whose last checkpoint this row is fine-tuned from for FT_STEPS steps, with a fresh warm-up and decay; to
# keep budgets equal, measure such a row against its initial row fine-tuned as long with its own objective, as
# the example above does). KD rows first: on a slow machine the table's core is done before the raw comparison
# and the ablations.
ROWS=${ROWS:-at_kd:at:kd ib_kd:ib:kd sa_kd:sa:kd ib_sa_kd:ib_sa:kd im_kd:im:kd at_raw:at:raw ib_raw:ib:raw \
ib_vanilla_mask_raw:ib_vanilla_mask:raw ib_vanilla_positions_raw:ib_vanilla_positions:raw}
mkdir -p "$RUNS"

if has_stage teacher && [[ $OWN_TEACHER == 1 ]]; then  # resumed where a kill left it; a finished run returns at once
  $PY train.py --config configs/quickstart.py --workdir "$TEACHER"
fi

if has_stage distill; then
  $PY -m fastmt.distill --teacher "$TEACHER" --output_dir "$RUNS/kd_en_de" --beam_size 4 --batch_size 32
fi

train_row() {  # train_row NAME FACTORISATION TARGETS [FROM]
  local name=$1 factorisation=$2 targets=$3 from=${4:-} data=() steps=$STEPS shape=""
  if [[ $SHAPE != quickstart ]]; then shape=",$SHAPE"; fi
  if [[ -n $from ]]; then steps=$FT_STEPS; fi
  local settings="config=configs/interleaved.py:$factorisation$shape targets=$targets kd=$RUNS/kd_en_de"
  settings+=" from=$from steps=$steps tokens=$TOKENS extra=$EXTRA"
  if row_done "$RUNS/$name" "$settings"; then return; fi
  case $targets in
    raw) ;;
    kd) data=(--config.dataset.distilled_dir="$RUNS/kd_en_de" --config.dataset.p_raw=0.0) ;;
    *) echo "unknown targets '$targets' for $name" >&2; return 2 ;;
  esac
  if [[ -n $from ]]; then
    if [[ ! -d $RUNS/${from}_avg5 ]]; then echo "$name: row $from (its initial model) is not trained" >&2; return 2; fi
    data+=(--config.init_from="$RUNS/$from")
  fi
  claim_row "$RUNS/$name" "$settings"
  # shellcheck disable=SC2046
  $PY train.py --config "configs/interleaved.py:$factorisation$shape" --workdir "$RUNS/$name" "${data[@]}" \
    $(training_flags "$steps")
  average_row "$RUNS/$name"
}

if has_stage students; then
  pids=()
  for spec in $ROWS; do
    IFS=: read -r name factorisation targets from <<< "$spec"
    if [[ ${PARALLEL:-0} == 1 && -z $from ]]; then
      train_row "$name" "$factorisation" "$targets" > "$RUNS/$name.log" 2>&1 &
      pids+=($!)
    else
      # A fine-tuned row waits for the rows trained at once before it (its initial row among them).
      wait_all ${pids[@]+"${pids[@]}"}
      pids=()
      train_row "$name" "$factorisation" "$targets" "$from"
    fi
  done
  wait_all ${pids[@]+"${pids[@]}"}
fi

if has_stage eval; then
  # Every finished row, side by side in one process, against BASELINE's greedy (the baseline of every speed-up).
  compare=()
  for spec in $ROWS; do
    name=${spec%%:*}
    if [[ $name != "$BASELINE" && -d $RUNS/${name}_avg5 ]]; then compare+=("$RUNS/${name}_avg5"); fi
  done
  # shellcheck disable=SC2086
  $PY -m fastmt.bench --workdir "$RUNS/${BASELINE}_avg5" --split test --methods greedy,beam:4,ib,ib:4 \
    --compare "$(IFS=,; echo "${compare[*]}")" --exactness_at_batch1=false --output_dir "$EVAL_DIR" $BENCH_FLAGS
  write_table "$EVAL_DIR/interleaved.md" \
    $PY benchmarks/interleaved_table.py --runs "$RUNS" --eval_dir "$EVAL_DIR" --baseline "$BASELINE"
fi
