#!/usr/bin/env bash
# decode.py three times on one input, each a process of its own: with a cold persistent compilation cache (a new
# FASTMT_CACHE), again with it warm, and with it off (FASTMT_XLA_CACHE=0); prints each run's wall and compile
# seconds (decode.py's metrics) and whether the outputs are identical. docs/BENCHMARKS.md section 1.
#
#   WORKDIR=runs/quickstart INPUT=runs/acts200.src DECODE_FLAGS="--algorithm beam --beam_size 4" \
#     bash benchmarks/compile_cache.sh
set -euo pipefail
PY=${PY:-python}
WORKDIR=${WORKDIR:?a work directory}
INPUT=${INPUT:?a file of source lines}
OUT=${OUT:-runs/compile_cache}
DECODE_FLAGS=${DECODE_FLAGS:-}
rm -rf "$OUT"
mkdir -p "$OUT"
for run in cold warm off; do
  switch=()
  if [[ $run == off ]]; then switch=(FASTMT_XLA_CACHE=0); fi
  start=$(date +%s.%N)
  # shellcheck disable=SC2086
  env -u JAX_COMPILATION_CACHE_DIR FASTMT_CACHE="$OUT/cache" "${switch[@]}" $PY decode.py --workdir "$WORKDIR" \
    --input "$INPUT" --output "$OUT/hyp.$run" --metrics_json "$OUT/metrics.$run.json" $DECODE_FLAGS 2>/dev/null
  end=$(date +%s.%N)
  $PY -c "import json, sys; m = json.load(open('$OUT/metrics.$run.json'))
print(f'$run: wall {$end - $start:.1f} s, compile {m[\"compile_s\"]:.1f} s')"
done
cmp -s "$OUT/hyp.cold" "$OUT/hyp.warm" && cmp -s "$OUT/hyp.cold" "$OUT/hyp.off" && echo 'outputs identical' \
  || echo 'outputs DIFFER'
du -sh "$OUT/cache/xla"
