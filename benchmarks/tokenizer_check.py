r"""What fastmt's text encoding costs and changes since the reserved symbols are UNUSED when encoding text
(Tokenizer.text_processor) and unreadable lines are skipped (Tokenizer.spells_nothing), side by side in one run
against the plain SentencePiece model (Tokenizer.encode also wraps each line's ids in a NumPy array) of the same work directory.

    python benchmarks/tokenizer_check.py --workdir runs/quickstart --split test

Prints: lines whose ids differ between the two (0 expected on text without reserved-symbol literals), lines
that spell nothing, and the median microseconds per line of each batch-1 encode (one string per call, as a
batch-1 translation encodes), and of spells_nothing, over interleaved repeats.
"""

import argparse
import statistics
import time

import sentencepiece as spm

from fastmt import workdir as workdir_lib
from fastmt.data import corpus


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--workdir', required=True)
  parser.add_argument('--split', default='test')
  parser.add_argument('--repeats', type=int, default=7)
  args = parser.parse_args()
  tokenizer = workdir_lib.load_tokenizer(args.workdir)
  plain = spm.SentencePieceProcessor(model_file=tokenizer.model_path)
  lines = list(corpus.load_split(workdir_lib.load_train_config(args.workdir).dataset, args.split).sources)
  ours = [tokenizer.encode([line])[0].tolist() for line in lines]
  theirs = [plain.encode(line) for line in lines]
  differ = sum(a != b for a, b in zip(ours, theirs))
  unreadable = sum(bool(ids) and tokenizer.spells_nothing(ids) for ids in ours)
  text = tokenizer.text_processor
  times = {'plain sentencepiece': [], 'text_processor (reserved UNUSED)': [], 'fastmt Tokenizer.encode': [],
           'spells_nothing': []}
  for _ in range(args.repeats):  # interleaved
    start = time.perf_counter()
    for line in lines:
      plain.encode(line)
    times['plain sentencepiece'].append(time.perf_counter() - start)
    start = time.perf_counter()
    for line in lines:
      text.encode(line)
    times['text_processor (reserved UNUSED)'].append(time.perf_counter() - start)
    start = time.perf_counter()
    for line in lines:
      tokenizer.encode([line])
    times['fastmt Tokenizer.encode'].append(time.perf_counter() - start)
    start = time.perf_counter()
    for ids in ours:
      tokenizer.spells_nothing(ids)
    times['spells_nothing'].append(time.perf_counter() - start)
  print(f'{len(lines)} lines of {args.split}: ids differ on {differ}; {unreadable} spell nothing')
  for name, seconds in times.items():
    print(f'{name}: {1e6 * statistics.median(seconds) / len(lines):.2f} us per line (median of {args.repeats})')


if __name__ == '__main__':
  main()
