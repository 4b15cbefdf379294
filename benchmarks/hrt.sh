#!/usr/bin/env bash
# The HRT table (issue [hrt]) end to end on en->de, on CPU or one GPU:
#   an AT model (the one HRT is fine-tuned from) -> beam-4 distillation by a teacher -> HRT k = 2, 3, 4 fine-tuned
#   from the AT model with mixed distillation (p_raw = 0.5), the ablations of HRT Table 5 (-curriculum,
#   -mixed distillation, -fine-tuning, and +RPR: relative position keys, configs/hrt.py's ',rpr', which our
#   main rows leave out) -> each the average of its last 5 checkpoints -> fastmt.bench at batch
#   sizes 1, 8 and 32, every model side by side in one process against the AT model's greedy.
#
#   AT=runs/quickstart bash benchmarks/hrt.sh                         # fine-tune from an existing AT model
#   STEPS=800 AT=runs/ib/at_kd_avg5 KD=runs/ib/kd_en_de bash benchmarks/hrt.sh   # reuse the [ib] table's data
#   bash benchmarks/hrt.sh                                            # again after a kill: it goes on (below)
#   STEPS=4000 TOKENS=8192 PARALLEL=1 SHAPE=e12d1 bash benchmarks/hrt.sh   # one GPU, the RoyalFlush shape
#
# Resumable: the AT model trained here and every row resume from their last checkpoints, distillation from its
# last chunk; a finished row (its _avg5, made with the same settings) is skipped, and a row made with other
# settings (STEPS, TOKENS, SHAPE, KD, AT, EXTRA, ...) is refused, not reused (row.txt, benchmarks/lib.sh). The
# table is of this run's benches. Run it from the repository root.
# An AT model whose vocabulary predates fastmt's reserved symbols works: fine-tuning appends them.
# Environment: RUNS (default runs/hrt), AT (default: train configs/quickstart.py into RUNS/at), TEACHER (default
# AT), KD (distilled targets; default RUNS/kd_en_de, distilled by TEACHER if missing), STEPS (per HRT row;
# 0 = the config's), TOKENS, SHAPE (quickstart | e6d6 | e6d1 | e12d1: AT's shape), ROWS, PARALLEL, EXTRA, PY,
# BENCH_FLAGS, AVG_DTYPE (how each row's average of its last 5 checkpoints is stored: float32, the default, or
# bfloat16, half the size, as benchmarks/gpu_carry.sh stores carried models).
set -euo pipefail
# shellcheck source=benchmarks/lib.sh
source "$(dirname "$0")/lib.sh"
PY=${PY:-python}
RUNS=${RUNS:-runs/hrt}
OWN_AT=0  # an AT given is used as it is; the default one is trained (or resumed) here
if [[ -z ${AT:-} ]]; then AT=$RUNS/at OWN_AT=1; fi
TEACHER=${TEACHER:-$AT}
KD=${KD:-$RUNS/kd_en_de}
STEPS=${STEPS:-0}
TOKENS=${TOKENS:-0}
SHAPE=${SHAPE:-quickstart}
EXTRA=${EXTRA:-}
BENCH_FLAGS=${BENCH_FLAGS:-}
STAGES=${STAGES:-at distill students eval}
# name:config argument:targets (mixed = raw with probability 0.5, else distilled; kd = distilled only; raw = the
# training split's own targets, no KD needed):init
# (ft = fine-tuned from AT, scratch = random initialisation)
ROWS=${ROWS:-hrt_k2:k2:mixed:ft hrt_k3:k3:mixed:ft hrt_k4:k4:mixed:ft hrt_k2_no_curriculum:k2,nocl:mixed:ft \
hrt_k2_no_mixed:k2:kd:ft hrt_k2_no_finetuning:k2:mixed:scratch hrt_k2_rpr:k2,rpr:mixed:ft}
MAIN_ROWS=${MAIN_ROWS:-hrt_k2 hrt_k3 hrt_k4}  # timed with every method; the other rows are the ablations
mkdir -p "$RUNS"

if has_stage at && [[ $OWN_AT == 1 ]]; then  # resumed where a kill left it; a finished run returns at once
  $PY train.py --config configs/quickstart.py --workdir "$AT"
fi

if has_stage distill && [[ ! -f $KD/manifest.json || $($PY -c "import json,sys; m=json.load(open('$KD/manifest.json')); print(int(m['done'] == m['sources']))") != 1 ]]; then
  $PY -m fastmt.distill --teacher "$TEACHER" --output_dir "$KD" --beam_size 4 --batch_size 32
fi

train_row() {  # train_row NAME CONFIG_ARG TARGETS INIT
  local name=$1 arg=$2 targets=$3 init=$4 flags=()
  if [[ $SHAPE != quickstart ]]; then arg="$arg,$SHAPE"; fi
  local settings="config=configs/hrt.py:$arg targets=$targets kd=$KD init=$init at=$AT steps=$STEPS tokens=$TOKENS"
  settings+=" extra=$EXTRA avg_dtype=${AVG_DTYPE:-float32}"
  if row_done "$RUNS/$name" "$settings"; then return; fi
  case $targets in
    mixed) flags+=(--config.dataset.distilled_dir="$KD" --config.dataset.p_raw=0.5) ;;
    kd) flags+=(--config.dataset.distilled_dir="$KD" --config.dataset.p_raw=0.0) ;;
    raw) ;;
    *) echo "unknown targets '$targets' for $name" >&2; return 2 ;;
  esac
  case $init in
    ft) flags+=(--config.init_from="$AT") ;;
    scratch) ;;
    *) echo "unknown init '$init' for $name" >&2; return 2 ;;
  esac
  claim_row "$RUNS/$name" "$settings"
  # shellcheck disable=SC2046
  $PY train.py --config "configs/hrt.py:$arg" --workdir "$RUNS/$name" "${flags[@]}" $(training_flags "$STEPS")
  average_row "$RUNS/$name" --dtype "${AVG_DTYPE:-float32}"
}

if has_stage students; then
  pids=()
  for spec in $ROWS; do
    IFS=: read -r name arg targets init <<< "$spec"
    if [[ ${PARALLEL:-0} == 1 ]]; then
      train_row "$name" "$arg" "$targets" "$init" > "$RUNS/$name.log" 2>&1 &
      pids+=($!)
    else
      train_row "$name" "$arg" "$targets" "$init"
    fi
  done
  wait_all ${pids[@]+"${pids[@]}"}
fi

if has_stage eval; then
  # The chunk-size rows (k = 2, 3, 4) with every method, timed at batch 32 and 1, then at batch 8; the
  # ablations (the other rows) for their BLEU (HRT and C_d = 1 greedy), briefly timed.
  main=() ablations=()
  for spec in $ROWS; do
    name=${spec%%:*}
    if [[ ! -d $RUNS/${name}_avg5 ]]; then continue; fi
    if [[ " $MAIN_ROWS " == *" $name "* ]]; then main+=("$RUNS/${name}_avg5"); else ablations+=("$RUNS/${name}_avg5"); fi
  done
  # The table is of this run's benches only: a group without rows this time (ROWS of ablations alone) has its
  # earlier bench set aside, not read beside the new one (it may be of another AT, KD or version of the code).
  set_aside() {
    if [[ ! -d $1 ]]; then return; fi
    rm -rf "$1.earlier"
    mv "$1" "$1.earlier"
    echo "$1: set aside as $1.earlier (no row this time)"
  }
  if [[ ${#main[@]} -eq 0 ]]; then set_aside "$RUNS/eval_b32"; set_aside "$RUNS/eval_b8"; fi
  if [[ ${#ablations[@]} -eq 0 ]]; then set_aside "$RUNS/eval_ablations"; fi
  if [[ ${#main[@]} -gt 0 ]]; then
    # shellcheck disable=SC2086
    $PY -m fastmt.bench --workdir "$AT" --split test --methods greedy,beam:5,hrt,hrt:5:1,hrt+rep8 \
      --compare "$(IFS=,; echo "${main[*]}")" --batch_size 32 --exactness_at_batch1=false --nofloor \
      --output_dir "$RUNS/eval_b32" $BENCH_FLAGS
    # shellcheck disable=SC2086
    $PY -m fastmt.bench --workdir "$AT" --split test --methods greedy,beam:5,hrt,hrt:5:1,hrt+rep8 \
      --compare "$(IFS=,; echo "${main[*]}")" --batch_size 8 --speed_sentences 0 --exactness_at_batch1=false \
      --nofloor --output_dir "$RUNS/eval_b8" $BENCH_FLAGS
  fi
  if [[ ${#ablations[@]} -gt 0 ]]; then
    # shellcheck disable=SC2086
    $PY -m fastmt.bench --workdir "$AT" --split test --methods greedy,hrt \
      --compare "$(IFS=,; echo "${ablations[*]}")" --batch_size 32 --speed_sentences 20 --large_batch_sentences 64 \
      --repeats 1 --exactness_at_batch1=false --nofloor --output_dir "$RUNS/eval_ablations" $BENCH_FLAGS
  fi
  write_table "$RUNS/table.md" $PY benchmarks/hrt_table.py --runs "$RUNS"
fi
