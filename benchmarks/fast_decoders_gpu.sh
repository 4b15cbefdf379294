#!/usr/bin/env bash
# The one-GPU run of issues [ib], [hrt] and [spec] side by side against one AT model (docs/BENCHMARKS.md, "One
# GPU, three fast decoders"), about 25 minutes of an H100:
#   1. the RoyalFlush teacher (configs/teacher.py, d384 E6D6) and its beam-4 distillation of the training split
#      (benchmarks/royalflush.sh);
#   2. at once on the one GPU, STEPS each at the paper's 6-layer decoder (E6D6 d256): AT, IBDecoder (2,1) and
#      IB+SA (2,2) on the distilled targets (benchmarks/interleaved.sh) and the separate drafter of
#      `--drafter model` (benchmarks/spec.sh's stage `model_train`); as soon as AT is done, two fine-tunings of it
#      for FT_STEPS: HRT k=2 with mixed distillation (benchmarks/hrt.sh) and the self-drafter, W = 4
#      (benchmarks/spec.sh's stage `drafters`);
#   3. with nothing else running, one fastmt.bench process that translates the test split with every model and
#      method and times them side by side at batch 1 and 32 against AT's greedy, then HRT's batch 8.
# Everything the figures need lands in $RUNS/export (progress.txt, results.json and table.md of each bench,
# histories, the distilled data), small enough to copy off a lent machine.
#
#   nohup bash benchmarks/fast_decoders_gpu.sh > runs/gpu.out 2>&1 &
#   FIRST_STAGES=none bash benchmarks/fast_decoders_gpu.sh     # resume: reuse RUNS/teacher_avg5, RUNS/kd_en_de
#   # a smoke run on a CPU (minutes; the figures mean nothing), given a finished distillation in RUNS/kd_en_de:
#   FIRST_STAGES=none RUNS=runs/smoke STEPS=20 FT_STEPS=20 TOKENS=512 BENCH_FLAGS="--limit 16 \
#     --speed_sentences 4 --large_batch_sentences 16 --repeats 1 --nofloor" bash benchmarks/fast_decoders_gpu.sh
#
# On a bare lent machine, carry the wheels its image lacks and a copy of the prepared corpus (FASTMT_CACHE=DIR
# holding tfds/), and keep XLA's GPU autotuning on (benchmarks/interleaved_gpu.sh's header says why).
#
# Environment: RUNS (default runs/gpu), TEACHER_STEPS (3000: section 4's teacher was best on validation at
# 2,500), STEPS (2000 per row), FT_STEPS (800 per fine-tuning), TOKENS (8192 padded tokens per side per batch),
# PY, EXTRA (more --config overrides for every training run), BENCH_FLAGS (more flags for every fastmt.bench
# run), FIRST_STAGES (royalflush.sh's stages to run first, default "teacher distill").
set -uo pipefail
# Several processes share the GPU: none may take 75% of its memory up front.
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 PY=${PY:-python3} RUNS=${RUNS:-runs/gpu}
export TEACHER_STEPS=${TEACHER_STEPS:-3000} STEPS=${STEPS:-2000} TOKENS=${TOKENS:-8192}
export DISTILL_BATCH=${DISTILL_BATCH:-512} SHAPE=e6d6 KD=$RUNS/kd_en_de
FT_STEPS=${FT_STEPS:-800}
# Two training buckets; no BLEU during training (the bench scores every model at the end).
export EXTRA="--config.bucket_lengths=(32,64) --config.eval_bleu_sentences=0 ${EXTRA:-}"
X=$RUNS/export
mkdir -p "$X"
log() { echo "[$(date +%T)] $*" >> "$X/progress.txt"; }
log "start: teacher $TEACHER_STEPS steps, rows $STEPS steps, fine-tunings $FT_STEPS steps, $TOKENS tokens, $SHAPE"

STAGES=${FIRST_STAGES-"teacher distill"} bash benchmarks/royalflush.sh > "$RUNS/teacher_distill.log" 2>&1
log "teacher+distill rc $?"
if [[ ! -f $KD/manifest.json ]]; then log "no distilled targets in $KD: stopping"; log done; exit 1; fi
gzip -c "$KD/distilled.txt" > "$X/distilled.txt.gz"
cp "$KD/manifest.json" "$X/kd_manifest.json"

# AT, then its two fine-tunings (they start from RUNS/at_kd_avg5).
( ROWS=at_kd:at:kd STAGES=students bash benchmarks/interleaved.sh > "$RUNS/at_kd.log" 2>&1
  log "at_kd rc $?"
  if [[ -d $RUNS/at_kd_avg5 ]]; then
    ( ROWS=hrt_k2:k2:mixed:ft AT=$RUNS/at_kd_avg5 STEPS=$FT_STEPS STAGES=students bash benchmarks/hrt.sh \
        > "$RUNS/hrt_k2.log" 2>&1; log "hrt_k2 rc $?" ) &
    ( WIDTHS=4 AT=$RUNS/at_kd_avg5 STEPS=$FT_STEPS STAGES=drafters bash benchmarks/spec.sh \
        > "$RUNS/selfdraft_w4.log" 2>&1; log "selfdraft_w4 rc $?" ) &
    wait
  fi ) &
for spec in ib_kd:ib:kd ib_sa_kd:ib_sa:kd; do
  ( ROWS=$spec STAGES=students bash benchmarks/interleaved.sh > "$RUNS/${spec%%:*}.log" 2>&1
    log "${spec%%:*} rc $?" ) &
done
( DRAFTER_STEPS=$STEPS STAGES=model_train bash benchmarks/spec.sh > "$RUNS/drafter_w3.log" 2>&1; log "drafter_w3 rc $?" ) &
wait
log "all trained"
for name in at_kd ib_kd ib_sa_kd hrt_k2 selfdraft_w4 drafter_w3; do
  cp "$RUNS/$name/train_history.jsonl" "$X/$name.history.jsonl" 2>/dev/null
done
if [[ ! -d $RUNS/at_kd_avg5 ]]; then log "no table: AT did not finish (see $RUNS/at_kd.log)"; log done; exit 1; fi

# The table: every model side by side in one process against AT's greedy (the bench leaves out the methods a
# model cannot run: ib for AT, spec's own drafts for a model not trained to draft, ...). The floor pass (after
# the table is written) adds the step-cost curve and the encoder's time.
compare=()
for name in ib_kd ib_sa_kd hrt_k2 selfdraft_w4; do
  if [[ -d $RUNS/${name}_avg5 ]]; then compare+=("$RUNS/${name}_avg5"); fi
done
drafter=()
methods=greedy,beam:4,ib,ib:4,hrt,hrt:5:1,spec:4,spec:3+ngram
if [[ -d $RUNS/drafter_w3_avg5 ]]; then
  drafter=(--drafter_workdir "$RUNS/drafter_w3_avg5"); methods+=,spec:2+model,spec:3+model
fi
# shellcheck disable=SC2086
$PY -m fastmt.bench --workdir "$RUNS/at_kd_avg5" --split test --methods "$methods" "${drafter[@]}" \
  --compare "$(IFS=,; echo "${compare[*]}")" --batch_size 32 --exactness_at_batch1=false --repeats 3 \
  --output_dir "$RUNS/eval" ${BENCH_FLAGS:-} > "$RUNS/eval.log" 2>&1
log "eval rc $?"
cp "$RUNS/eval/results.json" "$X/results.json"; cp "$RUNS/eval/table.md" "$X/table.md"
# HRT's third batch size (the bar: >= 1.5x AT at batch 1, 8 and 32).
if [[ -d $RUNS/hrt_k2_avg5 ]]; then
  # shellcheck disable=SC2086
  $PY -m fastmt.bench --workdir "$RUNS/at_kd_avg5" --split test --methods greedy,hrt --compare "$RUNS/hrt_k2_avg5" \
    --batch_size 8 --speed_sentences 0 --exactness_at_batch1=false --repeats 3 --nofloor \
    --output_dir "$RUNS/eval_b8" ${BENCH_FLAGS:-} > "$RUNS/eval_b8.log" 2>&1
  log "eval b8 rc $?"
  cp "$RUNS/eval_b8/results.json" "$X/results_b8.json"; cp "$RUNS/eval_b8/table.md" "$X/table_b8.md"
fi
log done
