r"""How often prompt-lookup drafts (--drafter ngram) are right, teacher-forced on a model's greedy outputs.

    python benchmarks/lookup_probe.py --workdir runs/quickstart --widths 2,3,4 --ngrams 1,2,3 --sentences 300
    python benchmarks/lookup_probe.py --workdir runs/quickstart --ngrams 3\>2 --memory_tokens 0,2000,10000

For each sentence of the split (validation by default: never tune on test): the model's greedy output y; at
every cut m (the committed prefix y[:m], BOS first) the lookup of fastmt.decoding.drafts.lookup_drafts with a
key of n tokens, in the output so far and the source ids. Since spec's output is greedy's, these are exactly
the drafts decoding meets. Prints, per key length n and window W:
  found       share of cuts with a draft (where the output repeats itself or copies its source)
  accept|draft  tokens a W-wide call commits when fed the draft (1 + the draft's leading tokens right,
              up to W - 1): what a wide call buys where the gate lets it through
  calls       verification calls per sentence with the gate at batch 1 (W wide only at a draft, else one
              position), against greedy's (= tokens per sentence)
  break-even  the cost of a W-wide call, in 1-position calls, below which the gated decoder beats greedy
              at batch 1: (greedy calls - narrow calls) / wide calls
A gate pays at batch 1 when break-even exceeds the measured cost ratio (fastmt.bench's step-cost curve).
The probe counts drafts only: Jacobi's own guesses, which an always-wide call may also hit, are not modelled.
An output that reached its cap without EOS is probed as if EOS followed it (a small skew; the decode reports
how many there were).

--memory_tokens M (a what-if, not a drafter fastmt has): the lookup also searches the last M tokens of the
model's greedy outputs of the split's earlier sentences (each followed by EOS), after the row's own output and
its source: the pool of "earlier sentences" that lookahead decoding keeps. Only sentences before the probed
one, in the split's order, are in it, as in a translator that remembers what it has translated.
"""

import numpy as np
from absl import app, flags, logging

from fastmt import workdir as workdir_lib
from fastmt.data import corpus
from fastmt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from fastmt.decoding import drafts
from fastmt.translate import DecodeSettings, Translator

FLAGS = flags.FLAGS
flags.DEFINE_string('workdir', None, 'An AT work directory (the verifier).')
flags.DEFINE_list('widths', ['2', '3', '4'], 'Window widths W.')
flags.DEFINE_list('ngrams', ['1', '2', '3', '3>2'], 'Key lengths n; "3>2" = the longest match: a key of 3 where one '
                  'matches, else of 2.')
flags.DEFINE_string('split', 'validation', 'Split (never test for tuning).')
flags.DEFINE_integer('sentences', 300, 'First N sentences of the split.')
flags.DEFINE_list('memory_tokens', ['0'], 'Sizes M of a memory of the earlier sentences\' outputs to probe (0 = none).')
flags.DEFINE_enum('order', 'split', ['split', 'length'], 'The order the memory fills in: the split\'s (a document, '
                  'sentence after sentence) or by source length (what a Translator decodes first: it sorts each '
                  'chunk of its input by length into batches).')


def leading_right(draft: np.ndarray, truth: list) -> int:
  """How many of the draft's first tokens equal the true continuation."""
  right = 0
  for guess, token in zip(draft, truth):
    if guess != token:
      break
    right += 1
  return right


def gated_calls(found: np.ndarray, right: np.ndarray, length: int, width: int) -> tuple[int, int]:
  """(narrow, wide) calls of the gated decoder at batch 1 over an output of `length` tokens (EOS included):
  at cut m a draft (found[m]) makes a W-wide call committing 1 + min(right[m], W - 1) tokens, else one
  position commits one."""
  m, narrow, wide = 0, 0, 0
  while m < length:
    if found[m]:
      wide += 1
      m += min(1 + min(int(right[m]), width - 1), length - m)
    else:
      narrow += 1
      m += 1
  return narrow, wide


def probe(outputs, source_ids, ngrams, widths, memory_size: int):
  """The probe's counts over every sentence, with a memory of the earlier outputs' last memory_size tokens."""
  width_max = max(widths)
  tokens, earlier = 0, []
  found_count = {n: 0 for n in ngrams}
  accepted = {(n, w): 0 for n in ngrams for w in widths}
  calls = {(n, w): [0, 0] for n in ngrams for w in widths}
  for output, source in zip(outputs, source_ids):
    y = list(output) + [EOS_ID]
    length = len(y)
    history = np.full((length, length + 1), PAD_ID, np.int32)  # row m: BOS, y[:m]
    history[:, 0] = BOS_ID
    for m in range(length):
      history[m, 1:m + 1] = y[:m]
    memory = earlier[-memory_size:] if memory_size else []
    source_row = np.array(list(source) + [EOS_ID] + memory, np.int32)[None].repeat(length, 0)
    for n in ngrams:
      draft, found = None, np.zeros(length, bool)
      for key in (int(k) for k in n.split('>')):  # longest first: a shorter key only where a longer found none
        more, more_found = map(np.asarray, drafts.lookup_drafts(history, np.arange(length), width_max, key,
                                                                source_row))
        draft = more if draft is None else np.where(found[:, None], draft, more)
        found = found | more_found
      right = np.array([leading_right(draft[m], y[m:]) for m in range(length)])
      found_count[n] += int(found.sum())
      for w in widths:
        accepted[(n, w)] += int(np.minimum(1 + np.minimum(right, w - 1), length - np.arange(length))[found].sum())
        narrow, wide = gated_calls(found, right, length, w)
        calls[(n, w)][0] += narrow
        calls[(n, w)][1] += wide
    tokens += length
    earlier += y
  return tokens, found_count, accepted, calls


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  widths, ngrams = [int(w) for w in FLAGS.widths], FLAGS.ngrams
  config = workdir_lib.load_model_config(FLAGS.workdir)
  params, _ = workdir_lib.restore_params(FLAGS.workdir, config)
  tokenizer = workdir_lib.load_tokenizer(FLAGS.workdir)
  sources = [s for s in corpus.load_split(workdir_lib.load_train_config(FLAGS.workdir).dataset,
                                          FLAGS.split).sources[:FLAGS.sentences] if s.strip()]
  outputs, _ = Translator(config, params, tokenizer, DecodeSettings('greedy')).translate_ids(sources)
  source_ids = tokenizer.encode(sources)
  if FLAGS.order == 'length':  # Translator.batches' order: stable sort by source length
    order = sorted(range(len(sources)), key=lambda i: len(source_ids[i]))
    outputs, source_ids = [outputs[i] for i in order], [source_ids[i] for i in order]
  sentences = len(outputs)
  print('| memory | key n | W | found | accept/draft | calls/sent (narrow + wide) | break-even wide cost |')
  print('|---|---|---|---|---|---|---|')
  for memory_size in (int(m) for m in FLAGS.memory_tokens):
    tokens, found_count, accepted, calls = probe(outputs, source_ids, ngrams, widths, memory_size)
    for n in ngrams:
      for w in widths:
        narrow, wide = calls[(n, w)]
        per_draft = accepted[(n, w)] / max(found_count[n], 1)
        break_even = (tokens - narrow) / max(wide, 1)
        print(f'| {memory_size} | {n} | {w} | {found_count[n] / tokens:.3f} | {per_draft:.2f} | '
              f'{(narrow + wide) / sentences:.2f} ({narrow / sentences:.2f} + {wide / sentences:.2f}) | '
              f'{break_even:.2f} |', flush=True)
  print(f'{sentences} sentences of {FLAGS.split}, {tokens / sentences:.2f} greedy calls (tokens) per sentence')


if __name__ == '__main__':
  flags.mark_flag_as_required('workdir')
  app.run(main)
