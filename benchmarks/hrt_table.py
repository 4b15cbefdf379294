r"""The HRT table from benchmarks/hrt.sh's fastmt.bench runs (eval_b32: batch 32 and batch 1; eval_b8: batch 8;
eval_ablations: BLEU of the ablation rows).

    python benchmarks/hrt_table.py --runs runs/hrt [--eval_prefix eval_after]
    # benchmarks/fast_decoders_gpu.sh's benches (a method measured in two of them: the first one's row), as
    # its export folder holds them (or its bench directories, eval_table,eval_table_later)
    python benchmarks/hrt_table.py --runs runs/gpu/export --b32 table.results.json,table_later.results.json \
        --b8 table_b8.results.json

Per model and method: test BLEU/chrF, decoder calls per sentence, and the speed-up against the AT model's
greedy at batch 1, 8 and 32 (each measured side by side in one process, interleaved repeats, median).
Methods: greedy (AT; on an HRT model, C_d = 1: its AT task alone), beam:5, hrt (b_at = b_nat = 1), hrt:5:1 and
hrt+rep8 (hrt with the repetition guard, max_repeats 8: docs/BENCHMARKS.md section 6).
"""

import argparse
import json
import os


def load(path):
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    return {r['method']: r for r in json.load(f)['results']}


def load_all(runs: str, named: str | None, default: str):
  """The rows of the benches named (comma-separated directories or .json files under runs; one that is
  missing is an error), or of the default directory if it exists; a method in two benches keeps the first
  one's row (each row's speed-ups are against the AT model's greedy of its own bench)."""
  rows = {}
  for name in (named or default).split(','):
    path = os.path.join(runs, name if name.endswith('.json') else os.path.join(name, 'results.json'))
    if named and not os.path.exists(path):
      raise SystemExit(f'no bench results at {path}')
    for method, row in load(path).items():
      rows.setdefault(method, row)
  return rows


def label(method: str) -> tuple[str, str]:
  model, _, name = method.rpartition('/')
  return (model.replace('_avg5', '') or 'AT'), name


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--runs', required=True)
  parser.add_argument('--eval_prefix', default='eval', help='Reads RUNS/PREFIX_b32 and RUNS/PREFIX_b8.')
  parser.add_argument('--b32', help='Instead: the benches of batch 32 and 1 under RUNS, comma-separated: directories '
                      'holding results.json, or results files (NAME.json).')
  parser.add_argument('--b8', help='Instead: the benches of batch 8 under RUNS, as --b32.')
  args = parser.parse_args()
  b32 = load_all(args.runs, args.b32, f'{args.eval_prefix}_b32')
  b8 = load_all(args.runs, args.b8, f'{args.eval_prefix}_b8')
  print('| model | method | BLEU | chrF | calls/sent | speed-up b1 | speed-up b8 | speed-up b32 |')
  print('|---|---|---|---|---|---|---|---|')
  for method, r in b32.items():
    model, name = label(method)
    at8 = b8.get(method, {}).get('speedup_large', float('nan'))
    print(f"| {model} | {name} | {r['bleu']:.2f} | {r['chrf']:.2f} | {r['decoder_calls_per_sentence']:.2f} | "
          f"{r['speedup_b1']:.2f} | {at8:.2f} | {r['speedup_large']:.2f} |")
  ablations = load(os.path.join(args.runs, 'eval_ablations', 'results.json'))
  if ablations:
    print('\n| model | method | BLEU | chrF | calls/sent |')
    print('|---|---|---|---|---|')
    for method, r in ablations.items():
      model, name = label(method)
      print(f"| {model} | {name} | {r['bleu']:.2f} | {r['chrf']:.2f} | {r['decoder_calls_per_sentence']:.2f} |")


if __name__ == '__main__':
  main()
