r"""How many memory mappings one compiled decoder holds, and whether dropping it gives them back.

    python benchmarks/compiled_mappings.py --workdir runs/quickstart --methods greedy,spec:8+int8

Linux lets a process hold vm.max_map_count mappings (65,530 by default) and XLA:CPU aborts a compile that meets
the limit; fastmt.executables drops least recently used compiled decoders before that. This script compiles
each method's decoder at batch 1 for the first --buckets source buckets and prints the mappings each compile
added (/proc/self/maps), then the count after the translators are dropped. Linux only.
"""

import argparse
import gc

from fastmt import bench, executables


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--workdir', required=True)
  parser.add_argument('--methods', default='greedy', help='Comma-separated fastmt.bench methods.')
  parser.add_argument('--buckets', type=int, default=4, help='How many source buckets to compile at batch 1.')
  args = parser.parse_args()
  if executables.map_count() is None:
    raise SystemExit('No /proc/self/maps here: this script counts Linux memory mappings')
  print(f'vm.max_map_count {executables.map_limit()}; this process holds {executables.map_count()} mappings')
  for method in args.methods.split(','):
    translators = bench.build_translators(args.workdir, [method])[0]
    translator = translators[method]
    start = executables.map_count()
    for bucket in translator.buckets[:args.buckets]:
      before = executables.map_count()
      translator._executable(1, bucket, None)  # pylint: disable=protected-access
      print(f'{method}: rows 1, source bucket {bucket}: +{executables.map_count() - before} mappings')
    compiled = executables.map_count() - start
    del translators, translator
    gc.collect()
    print(f'{method}: {compiled:+d} mappings compiled; {executables.map_count() - start:+d} after dropping them')


if __name__ == '__main__':
  main()
