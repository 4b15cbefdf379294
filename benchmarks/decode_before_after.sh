#!/usr/bin/env bash
# decode.py's default run on the test split, end to end: this checkout against an older commit (BEFORE).
#
#   WORKDIR=runs/quickstart BEFORE=9b667f9 REPEATS=2 bash benchmarks/decode_before_after.sh
#   DECODE_FLAGS="--batch_size 1" BEFORE=32249dd REPEATS=3 bash benchmarks/decode_before_after.sh   # batch 1
#
# Runs each side's `python decode.py --workdir W --input acts.src --output hyp --reference acts.ref
# --metrics_json m.json` with its own defaults (BEFORE: a first pass, a timed second pass and 100 sentences
# at batch 1; now: one streamed pass), alternating sides REPEATS times, and prints the wall time (process
# start to exit, `date`), the compile time each side reports, BLEU, and whether the outputs are identical.
# Then this checkout at --batch_size 1 against its default batch of 32: how many sentences differ (a
# sentence's translation must not depend on its batch-mates; float near-ties between shapes are the only
# allowed cause). Results: runs/decode_before_after/ (not committed).
set -euo pipefail
cd "$(dirname "$0")/.."
WORKDIR=${WORKDIR:-runs/quickstart}
BEFORE=${BEFORE:-9b667f9}
REPEATS=${REPEATS:-2}
DECODE_FLAGS=${DECODE_FLAGS:-}  # more decode.py flags for both sides (e.g. --batch_size 1)
PY=${PY:-.venv/bin/python}
OUT=runs/decode_before_after
mkdir -p "$OUT"
$PY -m fastmt.export_split --workdir "$WORKDIR" --split test --output_prefix "$OUT/acts" >/dev/null
BEFORE_DIR=$(mktemp -d)/before
git worktree add --detach "$BEFORE_DIR" "$BEFORE" >/dev/null 2>&1
trap 'git worktree remove --force "$BEFORE_DIR"' EXIT

run() {  # side, repeat, decode.py path, extra flags...
  local side=$1 r=$2 script=$3; shift 3
  local start end
  start=$(date +%s.%N)
  # PYTHONPATH: the BEFORE side imports its own fastmt, not this checkout's (installed editable).
  PYTHONPATH="$(dirname "$script")" TQDM_DISABLE=1 $PY "$script" --workdir "$WORKDIR" --input "$OUT/acts.src" \
      --output "$OUT/hyp.$side.$r" --reference "$OUT/acts.ref" --metrics_json "$OUT/metrics.$side.$r.json" \
      "$@" 2>"$OUT/log.$side.$r"
  end=$(date +%s.%N)
  echo "$side $r $(echo "$end - $start" | bc)" >>"$OUT/wall.txt"
}

rm -f "$OUT/wall.txt"
for r in $(seq 1 "$REPEATS"); do
  # shellcheck disable=SC2086
  run before "$r" "$BEFORE_DIR/decode.py" $DECODE_FLAGS
  # shellcheck disable=SC2086
  run after "$r" "$PWD/decode.py" $DECODE_FLAGS
done
run batch1 1 "$PWD/decode.py" --batch_size 1

$PY - "$OUT" "$REPEATS" <<'PY'
import json, statistics, sys
out, repeats = sys.argv[1], int(sys.argv[2])
walls = {}
for line in open(f'{out}/wall.txt'):
  side, r, seconds = line.split()
  walls.setdefault(side, []).append(float(seconds))
print('| side | wall s (each run) | compile s | sentences/s, compile excluded (each run) | BLEU | chrF |')
print('|---|---|---|---|---|---|')
for side in ('before', 'after', 'batch1'):
  runs = [json.load(open(f'{out}/metrics.{side}.{r}.json')) for r in range(1, len(walls[side]) + 1)]
  m = runs[0]
  rates = ', '.join(f"{x['sentences_per_s']:.1f}" if 'sentences_per_s' in x else '-' for x in runs)
  print(f"| {side} | {', '.join(f'{w:.1f}' for w in walls[side])} | {m['compile_s']:.1f} | {rates} | "
        f"{m['bleu']:.2f} | {m['chrf']:.2f} |")
read = lambda name: open(f'{out}/{name}', encoding='utf-8').read().split('\n')
before, after = read('hyp.before.1'), read('hyp.after.1')
same = before == after
changed = [i + 1 for i, (x, y) in enumerate(zip(before, after)) if x != y]
print(f'before == after, line for line: {same}; lines that differ: {changed[:20]}')
print(f"median wall: before {statistics.median(walls['before']):.1f} s, after {statistics.median(walls['after']):.1f} s,"
      f" ratio {statistics.median(walls['before']) / statistics.median(walls['after']):.2f}x")
b1, b32 = read('hyp.batch1.1'), read('hyp.after.1')
differ = [i + 1 for i, (a, b) in enumerate(zip(b1, b32)) if a != b]
print(f'batch 1 vs batch 32: {len(differ)} of {len(b32) - 1} lines differ {differ[:20]}')
json.dump({'walls': walls, 'before_equals_after': same, 'before_after_differ': changed, 'batch1_vs_32_differ': differ},
          open(f'{out}/summary.json', 'w'), indent=1)
PY
