#!/usr/bin/env bash
# The one-GPU run of the interleaved-decoder table (issue [ib], docs/BENCHMARKS.md section 5, "On one GPU"):
#   the RoyalFlush teacher (configs/teacher.py, d384 E6D6) and its beam-4 distillation of the training split
#   (benchmarks/royalflush.sh), then every row of the table at once on the one GPU with a 6-layer decoder
#   (configs/interleaved.py:<row>,e6d6, the d256 E6D6 of section 4: AT, IB, SA, IB+SA, IM on the distilled
#   targets, AT and IB on raw targets), then one fastmt.bench process that translates the test split with
#   every row (greedy and beam 4; BLEU/chrF) and times them side by side at batch 1 and 32 against BASELINE's
#   greedy (AT-KD). Everything the figures need lands in $RUNS/export (progress.txt, results.json, the tables,
#   histories, the distilled data), small enough to copy off a lent machine.
#
#   nohup bash benchmarks/interleaved_gpu.sh > runs/ib_gpu.out 2>&1 &
#   FIRST_STAGES=none bash benchmarks/interleaved_gpu.sh      # reuse RUNS/teacher_avg5 and RUNS/kd_en_de
#   # speed on the GPU from raw rows only (no teacher), BENCHMARKS section 5 "On one GPU":
#   FIRST_STAGES=none STEPS=1000 ROWS="at_raw:at:raw ib_raw:ib:raw ib_sa_raw:ib_sa:raw" BASELINE=at_raw \
#     METHODS=greedy,ib RUNS=runs/ibs bash benchmarks/interleaved_gpu.sh
#
# On a bare machine without the pinned environment (a lent GPU; a plain clone runs uninstalled), carry the
# wheels the image lacks (ml_collections, tensorflow-datasets and its needs, array_record, tensorboardX,
# importlib_resources, ...) and a copy of the prepared corpus (FASTMT_CACHE=DIR holding tfds/), and keep
# XLA's GPU autotuning on: --xla_gpu_autotune_level=0 made the teacher's steps about 7x slower on an H100.
#
# Environment: RUNS (default runs/ib_gpu), TEACHER_STEPS (5000), STEPS (4000 per row), TOKENS (8192 padded
# tokens per side per batch), SHAPE (e6d6), ROWS (interleaved.sh's names), BASELINE (the row every
# speed-up is against, default at_kd), METHODS (the table's, default greedy,beam:4,ib,ib:4), PY, EXTRA (more
# --config overrides for every training run, added to the script's own, e.g. --config.dataset.data_dir=DIR
# on a machine with no package index: FASTMT_CACHE=DIR works too), BENCH_FLAGS (more flags for both
# fastmt.bench runs, e.g. a smoke run's --limit 16 --speed_sentences 4).
set -uo pipefail
# Several processes share the GPU: none may take 75% of its memory up front.
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 PY=${PY:-python3} RUNS=${RUNS:-runs/ib_gpu}
export TEACHER_STEPS=${TEACHER_STEPS:-5000} STEPS=${STEPS:-4000} TOKENS=${TOKENS:-8192} SHAPE=${SHAPE:-e6d6}
export STUDENT_STEPS=$STEPS DISTILL_BATCH=${DISTILL_BATCH:-512}
# Two training buckets; no BLEU during training (the bench scores every row at the end).
export EXTRA="--config.bucket_lengths=(32,64) --config.eval_bleu_sentences=0 ${EXTRA:-}"
BASELINE=${BASELINE:-at_kd} METHODS=${METHODS:-greedy,beam:4,ib,ib:4}
ROWS=${ROWS:-"at_kd:at:kd ib_kd:ib:kd sa_kd:sa:kd ib_sa_kd:ib_sa:kd im_kd:im:kd at_raw:at:raw ib_raw:ib:raw"}
X=$RUNS/export
mkdir -p "$X"
log() { echo "[$(date +%T)] $*" >> "$X/progress.txt"; }
log "start: stages '${FIRST_STAGES-teacher distill}' (teacher $TEACHER_STEPS steps)," \
  "rows $STEPS steps x $TOKENS tokens at $SHAPE"

STAGES=${FIRST_STAGES-"teacher distill"} bash benchmarks/royalflush.sh > "$RUNS/teacher_distill.log" 2>&1
log "teacher+distill rc $?"
if [[ -f $RUNS/teacher/train_history.jsonl ]]; then
  cp "$RUNS/teacher/train_history.jsonl" "$X/teacher.history.jsonl"
fi
if [[ -f $RUNS/kd_en_de/manifest.json ]]; then
  gzip -c "$RUNS/kd_en_de/distilled.txt" > "$X/distilled.txt.gz"
  cp "$RUNS/kd_en_de/manifest.json" "$X/kd_manifest.json"
fi

# The teacher's own test BLEU, beside the students' training.
if [[ -d $RUNS/teacher_avg5 ]]; then
  ( $PY -m fastmt.bench --workdir "$RUNS/teacher_avg5" --split test --methods greedy,beam:4 --batch_size 256 \
      --speed_sentences 1 --large_batch_sentences 256 --repeats 1 --exactness_at_batch1=false --nofloor \
      --output_dir "$RUNS/eval_teacher" ${BENCH_FLAGS:-} > "$RUNS/eval_teacher.log" 2>&1
    log "teacher bleu rc $?"; cp "$RUNS/eval_teacher/results.json" "$X/teacher.results.json" ) &
fi

# Every row at once (one process each: a failed row does not stop the others).
for spec in $ROWS; do
  name=${spec%%:*}
  if [[ $spec == *:kd && ! -f $RUNS/kd_en_de/manifest.json ]]; then
    log "$name skipped: no distilled targets in $RUNS/kd_en_de"; continue
  fi
  ( ROWS=$spec STAGES=students bash benchmarks/interleaved.sh > "$RUNS/$name.log" 2>&1
    log "$name rc $?"; cp "$RUNS/$name/train_history.jsonl" "$X/$name.history.jsonl" ) &
done
wait
log "all trained"

# The table: every row side by side in one process against BASELINE's greedy (the bench skips the methods a
# row cannot run).
if [[ ! -d $RUNS/${BASELINE}_avg5 ]]; then
  log "no table: the baseline row $BASELINE did not finish (see $RUNS/$BASELINE.log)"; log done; exit 1
fi
compare=()
for spec in $ROWS; do
  name=${spec%%:*}
  if [[ $name != "$BASELINE" && -d $RUNS/${name}_avg5 ]]; then compare+=("$RUNS/${name}_avg5"); fi
done
# The floor pass (run after the table is written) adds the step-cost curve and the encoder's time: the ideal.
$PY -m fastmt.bench --workdir "$RUNS/${BASELINE}_avg5" --split test --methods "$METHODS" \
  --compare "$(IFS=,; echo "${compare[*]}")" --exactness_at_batch1=false --repeats 3 \
  --output_dir "$RUNS/eval" ${BENCH_FLAGS:-} > "$RUNS/eval.log" 2>&1
log "eval rc $?"
$PY benchmarks/interleaved_table.py --runs "$RUNS" --eval_dir "$RUNS/eval" --baseline "$BASELINE" \
  > "$RUNS/eval/interleaved.md" 2>&1
cp "$RUNS/eval/results.json" "$RUNS/eval/table.md" "$RUNS/eval/interleaved.md" "$X/"
log done
