#!/usr/bin/env bash
# Exact speculative decoding (issue [spec]) end to end on en->de, on CPU or one GPU:
#   an AT model (default runs/quickstart) -> fine-tuned into a self-drafter (configs/selfdraft.py: the AT loss
#   plus <mask> blocks that draft the next W tokens) on distilled targets -> the average of its last 5
#   checkpoints -> one fastmt.bench run that translates the test split with greedy and every drafter side by
#   side in one process at batch 32 and 1 (identical outputs counted, tokens per call, speed-up vs greedy).
#
#   AT=runs/quickstart KD=runs/ib/kd_en_de STEPS=800 bash benchmarks/spec.sh   # reuse a teacher's distillation
#   STAGES=eval bash benchmarks/spec.sh                                          # bench the finished drafters again
#   KD_BEAM=1 KD=runs/spec_self/greedy_en_de RUNS=runs/spec_self bash benchmarks/spec.sh   # self-distillation
#   KD_BEAM=1 KD=runs/spec_self/greedy_en_de STAGES="distill model" bash benchmarks/spec.sh   # a drafter model
#
# Stage `model`: a separate drafter (configs/drafter.py: width 128, E2 D1, the selfdraft objective with blocks
# of DRAFTER_W) trained from scratch on KD for DRAFTER_STEPS (default 2,400), averaged over its last
# 5 checkpoints, then AT itself (untouched) decoded with DRAFTER_METHODS, its drafts verified: identical to
# AT's greedy output, the drafter's encoder and calls counted in every timing. Stage `model_train`: the
# drafter alone (benchmarks/fast_decoders_gpu.sh times it beside the other decoders).
#
# Resumable: run again after a kill, every stage goes on (train.py and distill resume; a finished row, its _avg5
# made with the same settings, is skipped; a row made with other settings (STEPS, KD, KD_BEAM, INIT, TARGETS,
# SHAPE, AT, ...) is refused, not reused: row.txt, benchmarks/lib.sh). Run it from the repository root.
# RUNS/training_seconds.txt has a line per pass of train.py: a row resumed after a kill has several, to add.
#
# Environment: RUNS (default runs/spec), AT (the model to fine-tune; it is also the baseline), KD (distilled
# targets; default RUNS/kd_en_de, distilled by AT with beam KD_BEAM if missing: default 4; 1 = AT's own greedy
# outputs, self-distillation, so that the mask slots learn the tokens the verifier will accept), WIDTHS (draft blocks to train, default
# "4"), SHAPE (the self-drafter's: quickstart | e6d6 | e6d1 | e12d1, AT's shape), STEPS (per row; 0 = the
# config's), TOKENS, METHODS (bench methods), EXTRA, PY, BENCH_FLAGS, TARGETS (kd: KD's distilled targets, the
# default; raw: the training split's own targets for the self-drafters and the drafter model, no distillation),
# INIT (the self-drafters': ft, fine-tuned from AT, the default; scratch: random initialisation, AT unused, for a
# lent GPU whose session is too short to train AT first).
set -euo pipefail
# shellcheck source=benchmarks/lib.sh
source "$(dirname "$0")/lib.sh"
PY=${PY:-python}
RUNS=${RUNS:-runs/spec}
AT=${AT:-runs/quickstart}
KD=${KD:-$RUNS/kd_en_de}
WIDTHS=${WIDTHS:-4}
STEPS=${STEPS:-0}
SHAPE=${SHAPE:-quickstart}
TOKENS=${TOKENS:-0}
EXTRA=${EXTRA:-}
BENCH_FLAGS=${BENCH_FLAGS:-}
STAGES=${STAGES:-distill drafters eval model}
INIT=${INIT:-ft}
case $INIT in
  ft) INIT_FLAGS=(--config.init_from="$AT") ;;
  scratch) INIT_FLAGS=() ;;
  *) echo "INIT=$INIT: use ft or scratch" >&2; exit 2 ;;
esac
DRAFTER_W=${DRAFTER_W:-3}
DRAFTER_STEPS=${DRAFTER_STEPS:-2400}
DRAFTER_METHODS=${DRAFTER_METHODS:-greedy,spec:2+model,spec:3+model,spec:4+model,spec:2+ngram}
METHODS=${METHODS:-greedy,pgj:3+bigram,spec:2,spec:3,spec:4,spec:4+bigram,spec:2+ngram}
mkdir -p "$RUNS"

TARGETS=${TARGETS:-kd}
case $TARGETS in
  kd) TARGET_FLAGS=(--config.dataset.distilled_dir="$KD" --config.dataset.p_raw=0.0) ;;
  raw) TARGET_FLAGS=() ;;
  *) echo "unknown TARGETS '$TARGETS': kd or raw" >&2; exit 2 ;;
esac

KD_BEAM=${KD_BEAM:-4}
KD_SETTINGS=""  # what a row records of its distilled targets (none for raw ones)
if [[ $TARGETS == kd ]]; then KD_SETTINGS=" kd=$KD kd_beam=$KD_BEAM"; fi
if [[ $TARGETS == kd ]] && has_stage distill && [[ ! -f $KD/manifest.json || $($PY -c "import json; m=json.load(open('$KD/manifest.json')); print(int(m['done'] == m['sources']))") != 1 ]]; then
  $PY -m fastmt.distill --teacher "$AT" --output_dir "$KD" --beam_size "$KD_BEAM" --batch_size 32
fi
# A finished distillation is reused as it is (another teacher's too), but never one of another beam size:
# KD_BEAM=1 must not silently train on beam-4 targets.
if [[ -f $KD/manifest.json ]]; then
  kd_beam=$($PY -c "import json; print(json.load(open('$KD/manifest.json'))['settings']['beam_size'])")
  if [[ $kd_beam != "$KD_BEAM" ]]; then
    echo "$KD holds a beam-$kd_beam distillation, KD_BEAM=$KD_BEAM: use another KD directory" >&2; exit 2
  fi
fi

if has_stage drafters; then
  shape=""
  if [[ $SHAPE != quickstart ]]; then shape=",$SHAPE"; fi
  for width in $WIDTHS; do
    name=selfdraft_w$width
    settings="config=configs/selfdraft.py:w$width$shape init=$INIT at=$AT targets=$TARGETS$KD_SETTINGS"
    settings+=" steps=$STEPS tokens=$TOKENS extra=$EXTRA"
    if row_done "$RUNS/$name" "$settings"; then continue; fi
    claim_row "$RUNS/$name" "$settings"
    start=$(date +%s)
    # shellcheck disable=SC2046
    $PY train.py --config "configs/selfdraft.py:w$width$shape" --workdir "$RUNS/$name" ${INIT_FLAGS[@]+"${INIT_FLAGS[@]}"} \
      ${TARGET_FLAGS[@]+"${TARGET_FLAGS[@]}"} $(training_flags "$STEPS")
    echo "$name: $(( $(date +%s) - start )) s of fine-tuning (this pass)" | tee -a "$RUNS/training_seconds.txt"
    average_row "$RUNS/$name"
  done
fi

if has_stage eval; then
  for width in $WIDTHS; do
    # Batch 32 and batch 1 (the bench times both, and checks every method's output against greedy's at each).
    # shellcheck disable=SC2086
    $PY -m fastmt.bench --workdir "$RUNS/selfdraft_w${width}_avg5" --split test --methods "$METHODS" \
      --batch_size 32 --nofloor --output_dir "$RUNS/eval_w$width" $BENCH_FLAGS
  done
fi

name=drafter_w$DRAFTER_W
settings="config=configs/selfdraft.py:w$DRAFTER_W,drafter targets=$TARGETS$KD_SETTINGS"
settings+=" steps=$DRAFTER_STEPS tokens=$TOKENS extra=$EXTRA"
if has_stage model || has_stage model_train; then
  if ! row_done "$RUNS/$name" "$settings"; then
    claim_row "$RUNS/$name" "$settings"
    start=$(date +%s)
    # shellcheck disable=SC2046
    $PY train.py --config "configs/selfdraft.py:w$DRAFTER_W,drafter" --workdir "$RUNS/$name" \
      ${TARGET_FLAGS[@]+"${TARGET_FLAGS[@]}"} $(training_flags "$DRAFTER_STEPS")
    echo "$name: $(( $(date +%s) - start )) s of training (this pass)" | tee -a "$RUNS/training_seconds.txt"
    average_row "$RUNS/$name"
  fi
fi
if has_stage model; then
  # shellcheck disable=SC2086
  $PY -m fastmt.bench --workdir "$AT" --split test --methods "$DRAFTER_METHODS" --drafter_workdir "$RUNS/${name}_avg5" \
    --batch_size 32 --nofloor --output_dir "$RUNS/eval_$name" $BENCH_FLAGS
fi
