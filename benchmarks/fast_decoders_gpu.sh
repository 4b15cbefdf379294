#!/usr/bin/env bash
# The one-GPU run of issues [ib], [hrt] and [spec] side by side against one AT model (docs/BENCHMARKS.md,
# section 10), within the 30 minutes of an H100 that a session is lent:
#   1. the RoyalFlush teacher (configs/teacher.py, d384 E6D6) and its beam-4 distillation of the training split
#      (benchmarks/royalflush.sh: 8 minutes), or a distillation exported by an earlier run (KD_FROM), or none
#      (KD_FROM=raw: every model on the training split's own targets, named *_raw: at_raw, ib_raw, ...);
#   2. at once on the one GPU, STEPS each at the paper's 6-layer decoder (E6D6 d256): AT on the distilled
#      targets, IB_ROWS (IBDecoder (2,1) and IB+SA (2,2), benchmarks/interleaved.sh) and the separate drafter of
#      `--drafter model` (benchmarks/spec.sh's stage `model_train`); as soon as AT is done, two fine-tunings of it
#      for FT_STEPS: HRT k=2 with mixed distillation (benchmarks/hrt.sh) and the self-drafter, W = 4
#      (benchmarks/spec.sh's stage `drafters`);
#   3. with nothing else running, fastmt.bench on the test split, each method only on the models it is for (a
#      bench's first pass compiles and decodes all 1,007 sentences per model and method: 25-70 s each on the
#      H100), every speed-up against greedy in the same process, the bars' figures first: AT, HRT and the IB
#      rows together at batch 1 and 32 (TABLE_METHODS); the self-drafter against its own greedy (SPEC_METHODS);
#      HRT at batch 8; AT with the drafter model and n-grams; then LATER_TABLE_METHODS and LATER_SPEC_METHODS,
#      if set (methods left out of the first benches to keep them short, e.g. hrt:5:1, spec:2).
# Everything the figures need lands in $RUNS/export (progress.txt, results.json and table.md of each bench,
# histories, the distilled data with its vocabulary), small enough to copy off a lent machine.
#
#   nohup bash benchmarks/fast_decoders_gpu.sh > runs/gpu.out 2>&1 &
#   KD_FROM=runs/gpu_h100 bash benchmarks/fast_decoders_gpu.sh   # an earlier run's export: no teacher, 8 min saved
#   IB_ROWS= KD_FROM=runs/gpu_h100 bash benchmarks/fast_decoders_gpu.sh   # HRT and the drafters only
#   # no distilled data: HRT and the self-drafter from a raw AT model, short benches (on an H200 the three
#   # trainings alone took 5.7 minutes and the first bench did not finish within a 9-minute run)
#   IB_ROWS= DRAFTER= KD_FROM=raw STEPS=1500 FT_STEPS=600 TABLE_METHODS=greedy,hrt LATER_TABLE_METHODS=greedy,hrt:5:1 \
#     BENCH_FLAGS="--limit 300 --large_batch_sentences 300" bash benchmarks/fast_decoders_gpu.sh
#   # a fresh checkout with no models (runs/ does not outlast a session): every model trained there at once, for
#   # one device call (carry .gpu_carry and .whl: `ROWS= TRAIN_SPLIT=1 bash benchmarks/gpu_carry.sh` here;
#   # the wheels' install line is in gpu_carry.sh's header); the figures of AT, IB, IB+SA, HRT (with the
#   # repetition guard) and the self-drafter at batch 1, 32 and 8, the bars' first:
#   FASTMT_CACHE=$PWD/.gpu_carry RUNS=/tmp/gpu KD_FROM=raw DRAFTER= FT_INIT=scratch STEPS=1200 \
#     TABLE_METHODS=greedy,ib,hrt,hrt+rep8 SPEC_METHODS=greedy,spec:4 \
#     BENCH_FLAGS="--limit 300 --large_batch_sentences 300" timeout 470 bash benchmarks/fast_decoders_gpu.sh
#   # a smoke run on a CPU (minutes; the figures mean nothing), given a finished distillation in RUNS/kd_en_de:
#   FIRST_STAGES=none RUNS=runs/smoke STEPS=20 FT_STEPS=20 TOKENS=512 BENCH_FLAGS="--limit 16 \
#     --speed_sentences 4 --large_batch_sentences 16 --repeats 1" bash benchmarks/fast_decoders_gpu.sh
#   # (with KD_FROM=raw, no distillation is needed: PY=.venv/bin/python KD_FROM=raw IB_ROWS= DRAFTER= ...)
#   # models trained on a CPU and carried to the lent machine (benchmarks/gpu_carry.sh makes the folder): no
#   # training at all, the whole run for the benches (at_raw_avg5 and hrt_k2_avg5 in .gpu_carry/models)
#   MODELS_FROM=.gpu_carry/models FASTMT_CACHE=$PWD/.gpu_carry KD_FROM=raw IB_ROWS= DRAFTER= \
#     TABLE_METHODS=greedy,hrt bash benchmarks/fast_decoders_gpu.sh   # (gpu_carry.sh's header: the whole command)
#
# On a bare lent machine, carry the wheels its image lacks and a copy of the prepared corpus (FASTMT_CACHE=DIR
# holding tfds/), and keep XLA's GPU autotuning on (benchmarks/interleaved_gpu.sh's header says why).
#
# Environment: RUNS (default runs/gpu), TEACHER_STEPS (3000: section 4's teacher was best on validation at
# 2,500), STEPS (2000 per row), FT_STEPS (800 per fine-tuning), TOKENS (8192 padded tokens per side per batch),
# IB_ROWS (default "ib_kd:ib:kd ib_sa_kd:ib_sa:kd", with KD_FROM=raw "ib_raw:ib:raw ib_sa_raw:ib_sa:raw"; empty:
# none), KD_FROM (a directory holding an earlier run's distilled.txt.gz, kd_manifest.json and kd_spm.model: used
# instead of a teacher; raw: no teacher, no distillation, raw targets for every model), DRAFTER (default 1: train
# and bench the separate drafter model; empty: not), PY, EXTRA (more --config overrides for every training run),
# BENCH_FLAGS (more flags for every fastmt.bench run), FIRST_STAGES (royalflush.sh's stages to run first, default
# "teacher distill"), TABLE_METHODS (default greedy,ib,hrt,hrt:5:1), B8_METHODS (HRT's batch-8 bench, default
# greedy,hrt), SPEC_METHODS (the self-drafter's, default
# greedy,spec:4), LATER_TABLE_METHODS and LATER_SPEC_METHODS (default none: one more bench each, after the others,
# of AT and HRT / of the self-drafter), MODELS_FROM (a folder of trained work directories named as this script
# names them, <row>_avg5 with <row> at_raw or at_kd, hrt_k2, selfdraft_w4, drafter_w3, ib_kd ...: nothing is
# trained, each bench runs for the models present), FT_INIT (ft, the default: HRT k=2 and the self-drafter are
# fine-tuned from AT; scratch: both trained from random initialisation for STEPS at once with AT, for a device
# session too short to train AT first; their C_d = 1 greedy is then another model's than AT's).
set -uo pipefail
case ${FT_INIT:-ft} in ft | scratch) ;; *) echo "FT_INIT=$FT_INIT: use ft or scratch" >&2; exit 2 ;; esac
# Several processes share the GPU: none may take 75% of its memory up front.
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 PY=${PY:-python3} RUNS=${RUNS:-runs/gpu}
export TEACHER_STEPS=${TEACHER_STEPS:-3000} STEPS=${STEPS:-2000} TOKENS=${TOKENS:-8192}
export DISTILL_BATCH=${DISTILL_BATCH:-512} SHAPE=e6d6 KD=$RUNS/kd_en_de
FT_STEPS=${FT_STEPS:-800} DRAFTER=${DRAFTER-1}
TABLE_METHODS=${TABLE_METHODS:-greedy,ib,hrt,hrt:5:1} SPEC_METHODS=${SPEC_METHODS:-greedy,spec:4}
# Targets of every student (interleaved.sh's, hrt.sh's and spec.sh's names): distilled, or raw with KD_FROM=raw.
if [[ ${KD_FROM:-} == raw ]]; then
  T=raw HRT_T=raw IB_ROWS=${IB_ROWS-"ib_raw:ib:raw ib_sa_raw:ib_sa:raw"}
else
  T=kd HRT_T=mixed IB_ROWS=${IB_ROWS-"ib_kd:ib:kd ib_sa_kd:ib_sa:kd"}
fi
export TARGETS=$T  # spec.sh: the self-drafter's and the drafter model's targets
AT_NAME=at_$T
# Two training buckets; no BLEU during training (the bench scores every model at the end).
export EXTRA="--config.bucket_lengths=(32,64) --config.eval_bleu_sentences=0 ${EXTRA:-}"
X=$RUNS/export
mkdir -p "$X"
log() { echo "[$(date +%T)] $*" >> "$X/progress.txt"; }
if [[ -n ${MODELS_FROM:-} ]]; then
  log "start: the models of $MODELS_FROM, nothing trained"
else
  log "start: teacher $TEACHER_STEPS steps (or ${KD_FROM:-no} KD_FROM), rows $STEPS steps, HRT and self-drafter" \
    "$( [[ ${FT_INIT:-ft} == ft ]] && echo "fine-tuned $FT_STEPS steps" || echo "from scratch" ), $TOKENS tokens, $SHAPE"
fi

if [[ -n ${MODELS_FROM:-} ]]; then  # trained elsewhere: link them in, train nothing
  mkdir -p "$RUNS"
  for dir in "$MODELS_FROM"/*_avg5; do
    if [[ ! -d $dir ]]; then continue; fi
    if [[ -e $RUNS/$(basename "$dir") ]]; then log "kept $RUNS/$(basename "$dir"), not $dir"; continue; fi
    ln -s "$(realpath "$dir")" "$RUNS/"
  done
  log "models from $MODELS_FROM: $(cd "$MODELS_FROM" && ls -d ./*_avg5 2>/dev/null | tr '\n' ' ')"
  for name in at_kd at_raw; do  # the AT model present, whatever KD_FROM says
    if [[ ! -d $RUNS/${AT_NAME}_avg5 && -d $RUNS/${name}_avg5 ]]; then AT_NAME=$name; fi
  done
else
if [[ $T == raw ]]; then
  FIRST_STAGES=none
elif [[ -n ${KD_FROM:-} ]]; then
  if [[ ! -f $KD/manifest.json ]]; then
    mkdir -p "$KD"
    gunzip -c "$KD_FROM/distilled.txt.gz" > "$KD/distilled.txt"
    cp "$KD_FROM/kd_manifest.json" "$KD/manifest.json"
    cp "$KD_FROM/kd_spm.model" "$KD/spm.model"  # the students' vocabulary (a student copies its teacher's)
  fi
  FIRST_STAGES=none
fi
if [[ $T == kd ]]; then
  STAGES=${FIRST_STAGES-"teacher distill"} bash benchmarks/royalflush.sh > "$RUNS/teacher_distill.log" 2>&1
  log "teacher+distill rc $?"
  if [[ ! -f $KD/manifest.json ]]; then log "no distilled targets in $KD: stopping"; log done; exit 1; fi
  gzip -c "$KD/distilled.txt" > "$X/distilled.txt.gz"
  cp "$KD/manifest.json" "$X/kd_manifest.json"
  cp "$KD/spm.model" "$X/kd_spm.model"
fi

# HRT k=2 and the self-drafter: fine-tuned from AT for FT_STEPS once AT is done (FT_INIT=ft), or from random
# initialisation for STEPS at once with AT (FT_INIT=scratch).
train_hrt_and_selfdraft() {  # train_hrt_and_selfdraft INIT STEPS
  ( ROWS=hrt_k2:k2:$HRT_T:$1 AT=$RUNS/${AT_NAME}_avg5 STEPS=$2 STAGES=students bash benchmarks/hrt.sh \
      > "$RUNS/hrt_k2.log" 2>&1; log "hrt_k2 rc $?" ) &
  ( INIT=$1 WIDTHS=4 AT=$RUNS/${AT_NAME}_avg5 STEPS=$2 STAGES=drafters bash benchmarks/spec.sh \
      > "$RUNS/selfdraft_w4.log" 2>&1; log "selfdraft_w4 rc $?" ) &
  wait
}
( ROWS=$AT_NAME:at:$T STAGES=students bash benchmarks/interleaved.sh > "$RUNS/$AT_NAME.log" 2>&1
  log "$AT_NAME rc $?"
  if [[ ${FT_INIT:-ft} == ft && -d $RUNS/${AT_NAME}_avg5 ]]; then train_hrt_and_selfdraft ft "$FT_STEPS"; fi ) &
if [[ ${FT_INIT:-ft} == scratch ]]; then train_hrt_and_selfdraft scratch "$STEPS" & fi
for spec in $IB_ROWS; do
  ( ROWS=$spec STAGES=students bash benchmarks/interleaved.sh > "$RUNS/${spec%%:*}.log" 2>&1
    log "${spec%%:*} rc $?" ) &
done
if [[ -n $DRAFTER ]]; then
  ( DRAFTER_STEPS=$STEPS STAGES=model_train bash benchmarks/spec.sh > "$RUNS/drafter_w3.log" 2>&1; log "drafter_w3 rc $?" ) &
fi
wait
log "all trained"
for name in $AT_NAME hrt_k2 selfdraft_w4 drafter_w3 $(for spec in $IB_ROWS; do echo "${spec%%:*}"; done); do
  cp "$RUNS/$name/train_history.jsonl" "$X/$name.history.jsonl" 2>/dev/null
done
fi  # MODELS_FROM
if [[ ! -d $RUNS/${AT_NAME}_avg5 ]]; then
  if [[ -n ${MODELS_FROM:-} ]]; then log "no table: no at_kd_avg5 or at_raw_avg5 in $MODELS_FROM"
  else log "no table: AT did not finish (see $RUNS/$AT_NAME.log)"; fi
  log done; exit 1
fi

bench() {  # bench NAME WORKDIR METHODS [FLAG ...]: one fastmt.bench process on the test split -> $X/NAME.*
  local name=$1 workdir=$2 methods=$3
  shift 3
  # shellcheck disable=SC2086
  $PY -m fastmt.bench --workdir "$workdir" --split test --methods "$methods" --repeats 3 --nofloor \
    --output_dir "$RUNS/eval_$name" "$@" ${BENCH_FLAGS:-} > "$RUNS/eval_$name.log" 2>&1
  log "bench $name rc $?"
  cp "$RUNS/eval_$name/results.json" "$X/$name.results.json"; cp "$RUNS/eval_$name/table.md" "$X/$name.table.md"
}
with() {  # with NAME...: the comma-joined work directories of those that finished
  local dirs=() name
  for name in "$@"; do if [[ -d $RUNS/${name}_avg5 ]]; then dirs+=("$RUNS/${name}_avg5"); fi; done
  (IFS=,; echo "${dirs[*]}")
}
AT_DIR=$RUNS/${AT_NAME}_avg5
# 1. AT, HRT k=2 and the IB rows side by side against AT's greedy at batch 1 and 32 (the bench leaves out the
#    methods a model cannot run: ib and hrt for AT, greedy for an IB model; HRT's greedy is its C_d = 1).
bench table "$AT_DIR" "$TABLE_METHODS" --batch_size 32 --exactness_at_batch1=false \
  --compare "$(with hrt_k2 $(for spec in $IB_ROWS; do echo "${spec%%:*}"; done))"
# 2. Exact speculative decoding with the self-drafter against its own greedy, identical outputs counted at
#    batch 1 and 32.
if [[ -d $RUNS/selfdraft_w4_avg5 ]]; then
  bench spec_self "$RUNS/selfdraft_w4_avg5" "$SPEC_METHODS" --batch_size 32
fi
# 3. HRT's third batch size (its bar: >= 1.5x AT at batch 1, 8 and 32).
if [[ -d $RUNS/hrt_k2_avg5 ]]; then
  bench table_b8 "$AT_DIR" "${B8_METHODS:-greedy,hrt}" --batch_size 8 --speed_sentences 0 --exactness_at_batch1=false \
    --compare "$RUNS/hrt_k2_avg5"
fi
# 4. AT with the drafter model and with n-grams, against AT's greedy, identical outputs counted at batch 1 and 32.
if [[ -d $RUNS/drafter_w3_avg5 ]]; then
  bench spec_model "$AT_DIR" greedy,spec:2+model,spec:3+model,spec:3+ngram --batch_size 32 \
    --drafter_workdir "$RUNS/drafter_w3_avg5"
fi
# 5. What the first benches left out to stay short.
if [[ -n ${LATER_TABLE_METHODS:-} && -d $RUNS/hrt_k2_avg5 ]]; then
  bench table_later "$AT_DIR" "$LATER_TABLE_METHODS" --batch_size 32 --exactness_at_batch1=false \
    --compare "$RUNS/hrt_k2_avg5"
fi
if [[ -n ${LATER_SPEC_METHODS:-} && -d $RUNS/selfdraft_w4_avg5 ]]; then
  bench spec_later "$RUNS/selfdraft_w4_avg5" "$LATER_SPEC_METHODS" --batch_size 32
fi
log done
