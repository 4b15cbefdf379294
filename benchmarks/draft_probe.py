r"""How good a self-drafter's drafts are, teacher-forced on its own greedy outputs (issue [spec]).

    python benchmarks/draft_probe.py --workdir runs/spec/selfdraft_w4_avg5 --widths 3,4 --sentences 150

For each sentence of the split: the model's greedy output y, then one training-layout pass with a block of
2W - 1 <mask> slots after every cut m (fastmt.objectives.selfdraft.block_mask): draft[m, j] is the mask's
guess for y[m + j] given y[:m]. Prints the share of drafts equal to greedy's token by distance j, and the
tokens per verification call that two ways of placing the drafts would get when every committed prefix is
greedy's (so a draft's context is exact; Jacobi's own shifted guesses are counted as never right):
  alternate  the built one (decoding/jacobi.py): a block after the window when the guesses are a draft and
             the window is accepted whole, else a block after the committed prefix on the next call
  both       both blocks in every call (4W - 2 positions per call instead of 2W)
"""

import numpy as np
from absl import app, flags, logging
import jax
import jax.numpy as jnp

from fastmt import models, workdir as workdir_lib
from fastmt.data import corpus
from fastmt.data.tokenizer import BOS_ID, EOS_ID
from fastmt.objectives import selfdraft
from fastmt.translate import DecodeSettings, Translator

FLAGS = flags.FLAGS
flags.DEFINE_string('workdir', None, 'A selfdraft work directory.')
flags.DEFINE_list('widths', ['3', '4'], 'Window widths W to simulate.')
flags.DEFINE_string('split', 'validation', 'Split (never test for tuning).')
flags.DEFINE_integer('sentences', 150, 'First N sentences of the split.')

MAX_LENGTH, CUTS = 128, 64  # one compiled shape: outputs up to 64 tokens are probed


def simulate(drafts: np.ndarray, y: list, width: int, both: bool) -> int:
  """Verification calls to produce y when guesses come from the drafts (see the module docstring)."""
  n, calls, guess, guess_is_draft = 0, 0, None, False
  while n < len(y):
    calls += 1
    accepted = 1
    if guess is not None:
      for j in range(width - 1):
        if n + j < len(y) - 1 and guess[j] == y[n + j]:
          accepted += 1
        else:
          break
    accepted = min(accepted, len(y) - n)
    window_draft = guess is not None and accepted == width and (both or guess_is_draft)
    if window_draft:  # the block after the window (cut n + W - 1) saw only verified inputs
      cut = n + width - 1
      guess = [drafts[cut, j] for j in range(1, width)] if cut < len(y) else None
      guess_is_draft = True
    elif both or not guess_is_draft:  # the block after the committed prefix (cut n)
      guess = [drafts[n, j] for j in range(accepted, accepted + width - 1)]
      guess_is_draft = True
    else:  # Jacobi's shifted predictions
      guess, guess_is_draft = None, False
    n += accepted
  return calls


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  widths = [int(w) for w in FLAGS.widths]
  span = 2 * max(widths) - 1
  config = workdir_lib.load_model_config(FLAGS.workdir)
  params, _ = workdir_lib.restore_params(FLAGS.workdir, config)
  tokenizer = workdir_lib.load_tokenizer(FLAGS.workdir)
  mask_id = selfdraft.mask_id_of(tokenizer)
  sources = [s for s in corpus.load_split(workdir_lib.load_train_config(FLAGS.workdir).dataset,
                                          FLAGS.split).sources[:FLAGS.sentences] if s.strip()]
  outputs, _ = Translator(config, params, tokenizer, DecodeSettings('greedy')).translate_ids(sources)
  model = models.Transformer(config)

  @jax.jit
  def probe(source, decoder_input, cuts):
    drafted = (cuts[:, :, None] + jnp.arange(span)).reshape(1, -1)
    inputs = jnp.concatenate([decoder_input, jnp.full_like(drafted, mask_id)], 1)
    positions = jnp.concatenate([jnp.arange(MAX_LENGTH)[None], drafted], 1)
    logits = model.apply({'params': params}, source, inputs, positions,
                         selfdraft.block_mask(MAX_LENGTH, cuts, span))
    return jnp.argmax(logits[:, MAX_LENGTH:], -1).reshape(CUTS, span)

  agree, seen = np.zeros(span), np.zeros(span)
  calls = {(w, both): 0 for w in widths for both in (False, True)}
  tokens = 0
  for text, output in zip(sources, outputs):
    y = list(output) + [EOS_ID]
    if len(y) > CUTS:
      continue
    source = jnp.array([list(tokenizer.encode([text])[0]) + [EOS_ID]])
    decoder_input = np.zeros((1, MAX_LENGTH), np.int32)
    decoder_input[0, 0], decoder_input[0, 1:len(y)] = BOS_ID, y[:-1]
    cuts = np.minimum(np.arange(CUTS), len(y) - 1)[None].astype(np.int32)
    drafts = np.asarray(probe(source, jnp.asarray(decoder_input), jnp.asarray(cuts)))
    for m in range(len(y)):
      for j in range(span):
        if m + j < len(y):
          agree[j] += drafts[m, j] == y[m + j]
          seen[j] += 1
    for (w, both) in calls:
      calls[(w, both)] += simulate(drafts, y, w, both)
    tokens += len(y)
  print('drafts equal to greedy by distance:', ' '.join(f'{a:.3f}' for a in agree / np.maximum(seen, 1)))
  for w in widths:
    print(f'W={w}: tokens per call, alternate (built) {tokens / calls[(w, False)]:.2f}, '
          f'both blocks {tokens / calls[(w, True)]:.2f}')


if __name__ == '__main__':
  flags.mark_flag_as_required('workdir')
  app.run(main)
