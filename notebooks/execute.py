r"""Executes the notebooks top to bottom, as CI does (`make notebooks`), with the settings each one has at its top
(SMALL = True in the committed notebooks: minutes on 2 CPU cores).

    python notebooks/execute.py                       # every notebook; outputs to runs/notebooks/executed/
    python notebooks/execute.py --inplace             # write the outputs into the notebooks (to commit them)
    python notebooks/execute.py 03_ib_im_hrt          # some of them

Each runs in a fresh Jupyter kernel of this Python, from the repository root; a cell that raises fails the run
(with the cell and its traceback), after the notebooks before it have been written.
"""

import argparse
import glob
import os
import sys
import time

import nbclient
import nbformat

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = os.path.join(REPO, 'notebooks')


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


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('names', nargs='*', help='notebook names (without .ipynb); default: all')
  parser.add_argument('--inplace', action='store_true', help='write the outputs into the notebooks themselves')
  parser.add_argument('--output_dir', default=os.path.join(REPO, 'runs', 'notebooks', 'executed'))
  parser.add_argument('--cell_timeout_s', type=int, default=3600)
  args = parser.parse_args()
  paths = sorted(glob.glob(os.path.join(NOTEBOOKS, '*.ipynb')))
  if args.names:
    known = {os.path.basename(p)[:-len('.ipynb')]: p for p in paths}
    unknown = sorted(set(args.names) - set(known))
    if unknown:
      sys.exit(f'Unknown notebooks {unknown}; known: {sorted(known)}')
    paths = [known[name] for name in args.names]
  os.makedirs(args.output_dir, exist_ok=True)
  for path in paths:
    output = path if args.inplace else os.path.join(args.output_dir, os.path.basename(path))
    print(f'{os.path.basename(path)} ...', flush=True)
    seconds = execute(path, output, args.cell_timeout_s)
    print(f'{os.path.basename(path)}: ran in {seconds:.0f} s -> {output}', flush=True)


if __name__ == '__main__':
  main()
