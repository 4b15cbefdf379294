#!/usr/bin/env bash
# The RoyalFlush recipe (issue [kd]) end to end on en->de:
#   teacher -> average of its last 5 checkpoints -> beam-4 distillation of the training split ->
#   students on raw / distilled / mixed targets (E6D6, E6D1, E12D1) -> test BLEU, chrF and batch-1 words/s.
#
#   bash benchmarks/royalflush.sh                          # every stage, the configs' own step counts (CPU: days)
#   TEACHER_STEPS=5000 STUDENT_STEPS=4000 TOKENS=8192 PARALLEL_STUDENTS=1 bash benchmarks/royalflush.sh  # one GPU
#   STAGES="students eval" bash benchmarks/royalflush.sh     # from a stage on (after a kill: all stages resume)
#   PARALLEL_STUDENTS=1 bash benchmarks/royalflush.sh        # students at once (one large GPU; logs in RUNS/NAME.log)
#
# Every model is evaluated as the average of its last 5 checkpoints (RUNS/NAME_avg5), the teacher included.
# Resumable: train.py resumes every model, distill its last chunk; a model averaged with the same settings is
# skipped, one made with other settings (TEACHER_STEPS, STUDENT_STEPS, TOKENS, EXTRA, its config or targets) is
# refused, not carried on under the new budget (row.txt, benchmarks/lib.sh). The table (RUNS/eval/table.md) is of
# the teacher and this run's STUDENTS. Run it from the repository root.
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
  settings="config=configs/teacher.py steps=$TEACHER_STEPS tokens=$TOKENS extra=$EXTRA"
  if ! row_done "$RUNS/teacher" "$settings"; then
    claim_row "$RUNS/teacher" "$settings"
    # shellcheck disable=SC2046
    $PY train.py --config configs/teacher.py --workdir "$RUNS/teacher" $(training_flags "$TEACHER_STEPS" 4)
    average_row "$RUNS/teacher"
  fi
fi

if has_stage distill; then
  $PY -m fastmt.distill --teacher "$RUNS/teacher_avg5" --output_dir "$RUNS/kd_en_de" --beam_size 4 \
    --batch_size "${DISTILL_BATCH:-32}"
fi

train_student() {  # train_student NAME CONFIG TARGETS: train.py, then the average of its last 5 checkpoints
  local name=$1 config=$2 targets=$3 data=()
  local settings="config=configs/$config.py targets=$targets kd=$RUNS/kd_en_de steps=$STUDENT_STEPS tokens=$TOKENS"
  settings+=" extra=$EXTRA"
  if row_done "$RUNS/$name" "$settings"; then return; fi
  case $targets in
    raw) ;;
    kd) data=(--config.dataset.distilled_dir="$RUNS/kd_en_de" --config.dataset.p_raw=0.0) ;;
    mixed) data=(--config.dataset.distilled_dir="$RUNS/kd_en_de" --config.dataset.p_raw=0.5) ;;
    *) echo "unknown targets '$targets' for $name" >&2; return 2 ;;
  esac
  claim_row "$RUNS/$name" "$settings"
  # shellcheck disable=SC2046
  $PY train.py --config "configs/$config.py" --workdir "$RUNS/$name" ${data[@]+"${data[@]}"} \
    $(training_flags "$STUDENT_STEPS" 4)
  average_row "$RUNS/$name"
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
  wait_all ${pids[@]+"${pids[@]}"}  # every student ends; then a failed one stops the script
fi

if has_stage eval; then
  names=(teacher $(for spec in $STUDENTS; do echo "${spec%%:*}"; done))
  for name in "${names[@]}"; do
    # shellcheck disable=SC2086
    $PY -m fastmt.bench --workdir "$RUNS/${name}_avg5" --split test --methods greedy,beam:4 \
      --exactness_at_batch1=false --nofloor --output_dir "$RUNS/eval/$name" $EVAL_FLAGS
  done
  write_table "$RUNS/eval/table.md" $PY - "$RUNS" "${names[@]}" <<'EOF'
import json, os, sys
runs = sys.argv[1]
print('| model | greedy BLEU | greedy chrF | beam 4 BLEU | beam 4 chrF | greedy words/s b1 | beam 4 words/s b1 |')
print('|---|---|---|---|---|---|---|')
for name in sys.argv[2:]:  # the teacher and this run's students, not every bench ever written under eval/
  with open(os.path.join(runs, 'eval', name, 'results.json')) as f:
    results = {r['method']: r for r in json.load(f)['results']}
  g, b = results['greedy'], results['beam:4']
  print(f"| {name} | {g['bleu']:.2f} | {g['chrf']:.2f} | {b['bleu']:.2f} | {b['chrf']:.2f} | "
        f"{g['words_per_s_b1']:.0f} | {b['words_per_s_b1']:.0f} |")
EOF
fi
