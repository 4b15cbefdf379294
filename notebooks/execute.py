r"""Executes the notebooks top to bottom, as CI does (`make notebooks`), with the settings each one has at its top
(SMALL = True in the committed notebooks: minutes on 2 CPU cores).

    python notebooks/execute.py                       # every notebook; outputs to runs/notebooks/executed/
    python notebooks/execute.py --jobs 2              # two at a time (make notebooks: NOTEBOOK_JOBS, 2)
    python notebooks/execute.py --inplace             # write the outputs into the notebooks (to commit them)
    python notebooks/execute.py 03_ib_im_hrt          # some of them

Each runs in a fresh Jupyter kernel of this Python, from the repository root; a cell that raises fails the run
(with the cell and its traceback), after the notebooks before it have been written.

With --jobs N, up to N notebooks run at once, each in its own process, in the order of AFTER below: a notebook
starts once the notebooks it reuses the run directories of have finished (01's AT model, which every other
notebook resumes, would otherwise be trained by four processes into one directory). Much of a notebook's time on
a CPU is XLA compiling, which uses one core: on 2 cores, 02 and 03 at once took 30 minutes (the last 15 sharing
the cores with a test run; 2026-11-28), one after the other 38. Their timing tables are then measured while
another notebook runs: commit outputs of --jobs 1 (the default), whose speed-ups are the machine's own.
"""

import argparse
import glob
import os
import subprocess
import sys
import time

import nbclient
import nbformat

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = os.path.join(REPO, 'notebooks')

# What each notebook must wait for (by default, 01: it trains the AT model the others resume): notebooks whose run
# directories it reuses. 05 distils into the directory that 02 distils into (runs/notebooks/greedy_small, the same
# model and settings), so it must not start while 02 is writing it.
DEFAULT_AFTER = ('01_quickstart',)
AFTER = {
    '01_quickstart': (),
    '05_distillation_royalflush': ('01_quickstart', '02_parallel_decoding'),
}


def execute(path: str, output: str, timeout_s: int) -> float:
  """Runs one notebook; writes it with its outputs to `output`; returns the seconds it took."""
  book = nbformat.read(path, as_version=4)
  start = time.perf_counter()
  client = nbclient.NotebookClient(book, timeout=timeout_s, kernel_name='python3',
                                   resources={'metadata': {'path': REPO}})
  try:
    client.execute()
  finally:
    nbformat.write(book, output)  # the outputs so far, also of a failed run: where it stopped is visible
  return time.perf_counter() - start


def waits_for(name: str, selected) -> tuple:
  """The selected notebooks that `name` starts after (one run alone trains whatever it needs itself)."""
  return tuple(n for n in AFTER.get(name, DEFAULT_AFTER) if n in selected and n != name)


def run_in_parallel(names, args) -> list:
  """Runs `names` (in this order where they are ready) in child processes of this script, at most args.jobs at
  once, each after its waits_for; returns the names that failed or were skipped because one they wait for did."""
  pending, running, done, failed = list(names), {}, set(), []
  while pending or running:
    for name in list(pending):
      if any(n in failed for n in waits_for(name, names)):
        print(f'{name}: skipped, it waits for {[n for n in waits_for(name, names) if n in failed]}', flush=True)
        pending.remove(name)
        failed.append(name)
      elif len(running) < args.jobs and all(n in done for n in waits_for(name, names)):
        command = [sys.executable, os.path.abspath(__file__), name, '--jobs', '1', '--output_dir', args.output_dir,
                   '--cell_timeout_s', str(args.cell_timeout_s)] + (['--inplace'] if args.inplace else [])
        running[name] = subprocess.Popen(command)
        pending.remove(name)
    time.sleep(1)
    for name, process in list(running.items()):
      if process.poll() is not None:
        del running[name]
        (done.add(name) if process.returncode == 0 else failed.append(name))
  return failed


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('names', nargs='*', help='notebook names (without .ipynb); default: all')
  parser.add_argument('--inplace', action='store_true', help='write the outputs into the notebooks themselves')
  parser.add_argument('--output_dir', default=os.path.join(REPO, 'runs', 'notebooks', 'executed'))
  parser.add_argument('--cell_timeout_s', type=int, default=3600)
  parser.add_argument('--jobs', type=int, default=1, help='notebooks run at once (1: one after the other)')
  args = parser.parse_args()
  if args.jobs < 1:
    sys.exit(f'--jobs must be at least 1, not {args.jobs}')
  paths = sorted(glob.glob(os.path.join(NOTEBOOKS, '*.ipynb')))
  known = {os.path.basename(p)[:-len('.ipynb')]: p for p in paths}
  if args.names:
    unknown = sorted(set(args.names) - set(known))
    if unknown:
      sys.exit(f'Unknown notebooks {unknown}; known: {sorted(known)}')
  names = args.names or sorted(known)
  os.makedirs(args.output_dir, exist_ok=True)
  if args.jobs > 1 and len(names) > 1:
    start = time.perf_counter()
    failed = run_in_parallel(names, args)
    print(f'{len(names) - len(failed)} of {len(names)} notebooks ran in {time.perf_counter() - start:.0f} s '
          f'({args.jobs} at a time)' + (f'; failed: {failed}' if failed else ''), flush=True)
    sys.exit(1 if failed else 0)
  for name in names:
    path = known[name]
    output = path if args.inplace else os.path.join(args.output_dir, os.path.basename(path))
    print(f'{name} ...', flush=True)
    seconds = execute(path, output, args.cell_timeout_s)
    print(f'{name}: ran in {seconds:.0f} s -> {output}', flush=True)


if __name__ == '__main__':
  main()
