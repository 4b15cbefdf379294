#!/usr/bin/env bash
# What a lent GPU needs to time models trained on this machine, in one folder that the device tool carries
# (its limit: 64 MiB for the working tree and everything carried together):
#   .gpu_carry/models/<row>_avg5   each model's parameters alone, in bfloat16 (no optimiser state: a sixth of a
#                                  checkpoint; they load as float32, the weights rounded to bfloat16), named as
#                                  benchmarks/fast_decoders_gpu.sh names its rows (MODELS_FROM). Bench the same
#                                  folders on the CPU, so that both machines' figures are of the same weights.
#                                  With it, its bigram draft table (decode_lib.load_draft_table).
#   .gpu_carry/tfds/...            the prepared Bible pair without its training split (FASTMT_CACHE): the benches
#                                  read the test and validation splits only; with TRAIN_SPLIT=1 the training
#                                  split too (18 MiB for en_de), for a fine-tuning on the GPU
#   .gpu_carry/kd/                 with KD=DIR, that distillation (fastmt.distill's output directory, its
#                                  targets gzipped: 0.3 of their size), for a fine-tuning on distilled targets
#   .whl/                          the wheels the GPU image lacks (the device tool's README: Python 3.12)
# Training on the GPU took most of the earlier runs' device time (docs/BENCHMARKS.md section 10: 340 of 540 s on
# an H200, no speed figure reached); with the models carried, the whole run goes to the benches.
#
#   ROWS="at_raw=runs/quickstart hrt_k2=runs/hrt_qs/hrt_k2_avg5" bash benchmarks/gpu_carry.sh
#   # then one device run (carry: .gpu_carry and .whl; timeout_s 580), whose command is:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
#     .whl/*.whl && export PYTHONPATH=/tmp/site || exit
#   MODELS_FROM=.gpu_carry/models FASTMT_CACHE=$PWD/.gpu_carry RUNS=/tmp/gpu KD_FROM=raw IB_ROWS= DRAFTER= \
#     TABLE_METHODS=greedy,hrt LATER_TABLE_METHODS=greedy,hrt:5:1 timeout 500 bash benchmarks/fast_decoders_gpu.sh
#   tar czf $OUT/gpu.tgz -C /tmp/gpu export $(cd /tmp/gpu && ls eval_*.log); cat /tmp/gpu/export/progress.txt
#   # (timeout: the export comes back even when the benches outlast the run; each bench writes its results at
#   # its end, so the first ones are the bars' figures.) Back here, the HRT table of what came back:
#   python benchmarks/hrt_table.py --runs DIR/export --b32 table.results.json,table_later.results.json \
#     --b8 table_b8.results.json
#
# Environment: ROWS (NAME=WORKDIR ...: each work directory's last checkpoint, parameters only, becomes
# .gpu_carry/models/NAME_avg5; one already there is kept: rm -rf .gpu_carry/models to start over; empty: no
# model, for a run that trains its models on the GPU, with TRAIN_SPLIT=1), DTYPE (how
# they are stored: bfloat16, the default, or float32: a quickstart-shape model takes 12 or 27 MiB), PAIR
# (default en_de), TRAIN_SPLIT (1: carry the training split), KD (a distillation to carry), PY.
# benchmarks/hrt_gpu.sh is the device run that fine-tunes HRT there from a carried AT model (its header: the
# whole command).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
PY=${PY:-.venv/bin/python}
ROWS=${ROWS?ROWS="NAME=WORKDIR ..." names the models to carry (ROWS= none: a run that trains on the GPU)}
PAIR=${PAIR:-en_de}
CARRY=.gpu_carry
LIMIT_MIB=64

mkdir -p "$CARRY/models"
for row in $ROWS; do
  name=${row%%=*} workdir=${row#*=}
  target=$CARRY/models/${name}_avg5
  if [[ -d $target ]]; then echo "$name: kept, $target holds $(tr -d '\n ' < "$target/averaged_from.json")"; continue; fi
  # One checkpoint, parameters only: what checkpoint averaging writes (of the last 1: the checkpoint itself).
  rm -rf "$target.tmp"
  $PY -m fastmt.checkpoint_average --workdir "$workdir" --last 1 --output "$target.tmp" --dtype "${DTYPE:-bfloat16}"
  # The bigram draft table of the training targets (tens of KiB), which the carried corpus cannot rebuild: the
  # bigram and n-gram drafters then guess on the GPU as they do here.
  $PY -c "import sys; from fastmt import decode_lib; decode_lib.load_draft_table(sys.argv[1])" "$target.tmp"
  mv "$target.tmp" "$target"
done

cache=${FASTMT_CACHE:-$HOME/.cache/fastmt}/tfds
source_dir=$(ls -d "$cache/bible/$PAIR"/*/ 2>/dev/null | grep -v incomplete | tail -1 || true)
if [[ -z $source_dir ]]; then echo "no prepared bible/$PAIR under $cache: train or bench once first" >&2; exit 1; fi
version=$(basename "$source_dir")
mkdir -p "$CARRY/tfds/bible/$PAIR/$version" "$CARRY/tfds/bible/.config"
cp "$cache/bible/.config/"* "$CARRY/tfds/bible/.config/" 2>/dev/null || true
for f in "$source_dir"*; do
  case $(basename "$f") in *-train.*) if [[ ${TRAIN_SPLIT:-0} == 1 ]]; then cp "$f" "$CARRY/tfds/bible/$PAIR/$version/"; fi ;;
    *) cp "$f" "$CARRY/tfds/bible/$PAIR/$version/" ;; esac
done

if [[ -n ${KD:-} ]]; then  # a finished distillation only: an unfinished one would fail the fine-tuning there
  $PY -c "import json,sys; m=json.load(open(sys.argv[1])); sys.exit(m['done'] != m['sources'])" "$KD/manifest.json" \
    || { echo "$KD is not a finished distillation" >&2; exit 1; }
  rm -rf "$CARRY/kd"  # never an earlier distillation's leftovers
  mkdir -p "$CARRY/kd"
  cp "$KD/manifest.json" "$KD/spm.model" "$CARRY/kd/"
  gzip -c "$KD/distilled.txt" > "$CARRY/kd/distilled.txt.gz"
fi

if [[ ! -d .whl ]]; then  # the image has jax, flax, optax, orbax, sentencepiece and sacrebleu; not these
  rm -rf .whl.tmp
  python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl.tmp array_record==0.8.6 dm_tree==0.1.10 docstring_parser==0.18.0 \
    googleapis_common_protos==1.76.0 immutabledict==4.3.1 importlib_resources==7.1.0 ml_collections==1.1.0 \
    simple_parsing==0.1.9 tensorboardx==2.6.5 tensorflow_datasets==4.9.10 \
    tensorflow_metadata==1.21.0 termcolor==3.3.0 toml==0.10.2 wcwidth==0.9.4
  # promise (tensorflow_datasets needs it) is published as source only: built here into a pure-Python wheel.
  python3 -m pip wheel --quiet --no-deps promise==2.3 -w .whl.tmp
  mv .whl.tmp .whl  # only a complete set: a later run skips the download
fi

# What the device tool sends besides the carried folders: tracked files and untracked ones git does not ignore.
tree=0
while IFS= read -r -d '' f; do
  if [[ -f $f ]]; then tree=$(( tree + $(stat -c %s "$f") )); fi
done < <(git ls-files -z -co --exclude-standard)
total=$(( tree + $(du -sb "$CARRY" | cut -f1) + $(du -sb .whl | cut -f1) ))
echo "working tree $(( tree / 1024 )) KiB + $CARRY $(du -sh "$CARRY" | cut -f1) + .whl $(du -sh .whl | cut -f1):" \
  "$(( total / 1048576 )) MiB of the ${LIMIT_MIB} MiB a device run takes"
if (( total > LIMIT_MIB * 1048576 )); then echo "too large for one device run: carry fewer models" >&2; exit 1; fi
