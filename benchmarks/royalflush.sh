#!/usr/bin/env bash
# The RoyalFlush recipe (issue [kd]) end to end on en->de:
#   teacher -> average of its last 5 checkpoints -> beam-4 distillation of the training split ->
#   students on raw / distilled / mixed targets (E6D6, E6D1, E12D1) -> test BLEU, chrF and batch-1 words/s.
#
#   bash benchmarks/royalflush.sh                          # every stage, the configs' own step counts (CPU: days)
#   TEACHER_STEPS=5000 STUDENT_STEPS=4000 TOKENS=8192 PARALLEL_STUDENTS=1 bash benchmarks/royalflush.sh  # one GPU
#   STAGES="students eval" bash benchmarks/royalflush.sh     # resume from a stage: train.py and distill resume too
#   PARALLEL_STUDENTS=1 bash benchmarks/royalflush.sh        # students at once (one large GPU; logs in RUNS/NAME.log)
#
# Every model is evaluated as the average of its last 5 checkpoints (RUNS/NAME_avg5), the teacher included.
#
# Environment: RUNS (work directories, default runs/royalflush), TEACHER_STEPS, STUDENT_STEPS, TOKENS (padded
# tokens per side per batch; 0 = the configs' own), STUDENTS (names below), EXTRA (more --config overrides for
# every train.py, e.g. --config.dataset.data_dir=DIR), PY (python), EVAL_FLAGS (more fastmt.bench flags).
set -euo pipefail
# shellcheck source=benchmarks/lib.sh
source "$(dirname "$0")/lib.sh"
PY=${PY:-python}
RUNS=${RUNS:-runs/royalflush}
TEACHER_STEPS=${TEACHER_STEPS:-0}
STUDENT_STEPS=${STUDENT_STEPS:-0}
TOKENS=${TOKENS:-0}
EXTRA=${EXTRA:-}
EVAL_FLAGS=${EVAL_FLAGS:-}
STAGES=${STAGES:-teacher distill students eval}
# name:config:targets, targets = raw | kd (teacher translations only) | mixed (raw with probability 0.5, HRT's mix)
STUDENTS=${STUDENTS:-e6d6_raw:e6d6:raw e6d1_raw:e6d1:raw e6d1_kd:e6d1:kd e6d1_mixed:e6d1:mixed e12d1_kd:e12d1:kd}
mkdir -p "$RUNS"

if has_stage teacher; then
  # shellcheck disable=SC2046
  $PY train.py --config configs/teacher.py --workdir "$RUNS/teacher" $(training_flags "$TEACHER_STEPS" 4)
  rm -rf "$RUNS/teacher_avg5"
  $PY -m fastmt.checkpoint_average --workdir "$RUNS/teacher" --last 5 --output "$RUNS/teacher_avg5"
fi

if has_stage distill; then
  $PY -m fastmt.distill --teacher "$RUNS/teacher_avg5" --output_dir "$RUNS/kd_en_de" --beam_size 4 \
    --batch_size "${DISTILL_BATCH:-32}"
fi

train_student() {  # train_student NAME CONFIG TARGETS: train.py, then the average of its last 5 checkpoints
  local name=$1 config=$2 targets=$3 data=()
  case $targets in
    raw) ;;
    kd) data=(--config.dataset.distilled_dir="$RUNS/kd_en_de" --config.dataset.p_raw=0.0) ;;
    mixed) data=(--config.dataset.distilled_dir="$RUNS/kd_en_de" --config.dataset.p_raw=0.5) ;;
    *) echo "unknown targets '$targets' for $name" >&2; return 2 ;;
  esac
  # shellcheck disable=SC2046
  $PY train.py --config "configs/$config.py" --workdir "$RUNS/$name" "${data[@]}" $(training_flags "$STUDENT_STEPS" 4)
  rm -rf "$RUNS/${name}_avg5"
  $PY -m fastmt.checkpoint_average --workdir "$RUNS/$name" --last 5 --output "$RUNS/${name}_avg5"
}

if has_stage students; then
  pids=()
  for spec in $STUDENTS; do
    IFS=: read -r name config targets <<< "$spec"
    if [[ ${PARALLEL_STUDENTS:-0} == 1 ]]; then
      train_student "$name" "$config" "$targets" > "$RUNS/$name.log" 2>&1 &
      pids+=($!)
    else
      train_student "$name" "$config" "$targets"
    fi
  done
  for pid in "${pids[@]}"; do wait "$pid"; done  # set -e: the first failed student stops the script
fi

if has_stage eval; then
  for name in teacher $(for spec in $STUDENTS; do echo "${spec%%:*}"; done); do
    # shellcheck disable=SC2086
    $PY -m fastmt.bench --workdir "$RUNS/${name}_avg5" --split test --methods greedy,beam:4 \
      --exactness_at_batch1=false --nofloor --output_dir "$RUNS/eval/$name" $EVAL_FLAGS
  done
  $PY - "$RUNS" <<'EOF'
import json, os, sys
runs = sys.argv[1]
print('| model | greedy BLEU | greedy chrF | beam 4 BLEU | beam 4 chrF | greedy words/s b1 | beam 4 words/s b1 |')
print('|---|---|---|---|---|---|---|')
for name in sorted(os.listdir(os.path.join(runs, 'eval'))):
  with open(os.path.join(runs, 'eval', name, 'results.json')) as f:
    results = {r['method']: r for r in json.load(f)['results']}
  g, b = results['greedy'], results['beam:4']
  print(f"| {name} | {g['bleu']:.2f} | {g['chrf']:.2f} | {b['bleu']:.2f} | {b['chrf']:.2f} | "
        f"{g['words_per_s_b1']:.0f} | {b['words_per_s_b1']:.0f} |")
EOF
fi
