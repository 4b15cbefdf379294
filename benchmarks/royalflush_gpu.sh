#!/usr/bin/env bash
# The one-GPU run of the RoyalFlush recipe behind docs/BENCHMARKS.md section 4 (about 24 minutes of an H100):
#   teacher + distillation (benchmarks/royalflush.sh), then six students at once on the one GPU, each evaluated
#   (test BLEU/chrF, greedy and beam 4, at batch EVAL_BATCH) as it finishes, then batch-1 speed on the GPU
#   one model at a time (fp32 and bf16). Everything the figures need lands in $RUNS/export (progress.txt,
#   NAME.results.json, NAME.gpu_speed.json, histories, the distilled data, and each averaged student as 15 MB
#   tar parts for copying off a lent machine: cat NAME_avg5.tar.part-* | tar -x -C runs/rf).
#
#   nohup bash benchmarks/royalflush_gpu.sh > runs/rf.out 2>&1 &
#
# The batch-1 words/s of the RoyalFlush table on CPU come from the exported students afterwards:
#   python -m fastmt.bench --workdir runs/rf/e6d6_raw_avg5 --compare runs/rf/e6d1_kd_avg5,runs/rf/e12d1_kd_avg5 ...
set -uo pipefail
# Several processes share the GPU: none may take 75% of its memory up front.
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 PY=${PY:-python3} RUNS=${RUNS:-runs/rf}
export TEACHER_STEPS=${TEACHER_STEPS:-5000} STUDENT_STEPS=${STUDENT_STEPS:-4000} TOKENS=${TOKENS:-8192}
export DISTILL_BATCH=${DISTILL_BATCH:-512}
# Three training buckets (each costs ~40 s of XLA GPU autotuning to compile); no BLEU during training. The
# BENCHMARKS run added --config.dataset.data_dir=DIR: a copy of the prepared corpus, as that machine had no
# package index to fetch it from.
export EXTRA=${EXTRA:-"--config.bucket_lengths=(32,64) --config.eval_bleu_sentences=0"}
ALL=${ALL:-"e6d1_kd:e6d1:kd e6d6_raw:e6d6:raw e12d1_kd:e12d1:kd e6d1_raw:e6d1:raw e6d1_mixed:e6d1:mixed e6d6_kd:e6d6:kd"}
EVAL_BATCH=${EVAL_BATCH:-256}
X=$RUNS/export
mkdir -p "$X"
log() { echo "[$(date +%T)] $*" >> "$X/progress.txt"; }
# An export is what this run made or nothing: a failed step's earlier results, or parts of an earlier pack (fewer
# parts now), would otherwise be copied off as current. Without -e (each step's rc is logged instead).
pack() {
  rm -f "$X/tmp/$1".tar.part-* "$X/$1".tar.part-*
  mkdir -p "$X/tmp"; tar -C "$RUNS" -cf - "$1" | split -b 15M - "$X/tmp/$1.tar.part-" && mv "$X/tmp/$1".tar.part-* "$X/"
  log "packed $1 rc $?"
}
export_or_remove() {  # export_or_remove RC FROM TO: FROM copied to TO when RC is 0, else TO removed
  if [[ $1 == 0 ]]; then cp "$2" "$3"; else rm -f "$3"; fi
}
bleu() {  # bleu NAME: test BLEU/chrF of greedy and beam 4 at a large batch (speed timed elsewhere)
  $PY -m fastmt.bench --workdir "$RUNS/$1_avg5" --split test --methods greedy,beam:4 --batch_size "$EVAL_BATCH" \
    --speed_sentences 1 --large_batch_sentences 256 --repeats 1 --exactness_at_batch1=false --nofloor \
    --output_dir "$RUNS/eval/$1" > "$RUNS/eval_$1.log" 2>&1
  local rc=$?; export_or_remove $rc "$RUNS/eval/$1/results.json" "$X/$1.results.json"; log "bleu $1 rc $rc"
}
log start
# FIRST_STAGES=none skips to the students (an existing teacher and distillation).
STAGES=${FIRST_STAGES-"teacher distill"} bash benchmarks/royalflush.sh > "$RUNS/teacher_distill.log" 2>&1
rc=$?; log "teacher+distill rc $rc"
cp "$RUNS/teacher/train_history.jsonl" "$X/teacher.history.jsonl"
if [[ $rc == 0 ]]; then  # a distillation cut short is not exported as the distilled data
  gzip -c "$RUNS/kd_en_de/distilled.txt" > "$X/distilled.txt.gz"
  cp "$RUNS/kd_en_de/manifest.json" "$X/kd_manifest.json"
else
  rm -f "$X/distilled.txt.gz" "$X/kd_manifest.json"
fi
bleu teacher &
for spec in $ALL; do
  name=${spec%%:*}
  ( XLA_PYTHON_CLIENT_PREALLOCATE=false STAGES=students STUDENTS=$spec bash benchmarks/royalflush.sh \
      > "$RUNS/$name.log" 2>&1; log "$name rc $?"; cp "$RUNS/$name/train_history.jsonl" "$X/$name.history.jsonl"
    bleu "$name"; pack "${name}_avg5" ) &
done
wait
log "all trained"
# Batch-1 speed on the GPU, one model at a time (nothing else running).
for name in e6d6_raw e6d1_kd e12d1_kd teacher; do
  $PY -m fastmt.bench --workdir "$RUNS/${name}_avg5" --split test --methods greedy,beam:4,greedy@bf16 \
    --batch_size "$EVAL_BATCH" --speed_sentences 100 --large_batch_sentences 1007 --repeats 3 \
    --exactness_at_batch1=false --nofloor --output_dir "$RUNS/gpu_speed/$name" > "$RUNS/gpu_speed_$name.log" 2>&1
  rc=$?; log "gpu speed $name rc $rc"
  export_or_remove $rc "$RUNS/gpu_speed/$name/results.json" "$X/$name.gpu_speed.json"
done
log done
