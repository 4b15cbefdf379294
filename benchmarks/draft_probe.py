r"""How good a self-drafter's drafts are, teacher-forced on its own greedy outputs (issue [spec]).

    python benchmarks/draft_probe.py --workdir runs/spec/selfdraft_w4_avg5 --widths 3,4 --sentences 150
    # a separate drafter (--drafter model) against the verifier's greedy outputs
    python benchmarks/draft_probe.py --workdir runs/spec_drafter/drafter_w3_avg5 --verifier runs/quickstart

For each sentence of the split: the model's greedy output y, then one training-layout pass with a block of
2W - 1 <mask> slots after every cut m (fastmt.objectives.selfdraft.block_mask): draft[m, j] is the mask's
guess for y[m + j] given y[:m]. Prints the share of drafts equal to greedy's token by distance j, and the
tokens per verification call that two ways of placing the drafts would get when every committed prefix is
greedy's (so a draft's context is exact; Jacobi's own shifted guesses are counted as never right):
  alternate  the built one (decoding/jacobi.py): a block after the window when the guesses are a draft and
             the window is accepted whole, else a block after the committed prefix on the next call
  both       both blocks in every call (4W - 2 positions per call instead of 2W)
With --verifier, y is that model's greedy output instead (a separate drafter, which drafts after the
committed prefix on every call: the "prefix" line), and the drafter's own causal slots are scored against y
too (its AT prediction of y[m] from y[:m]: what an autoregressive drafter of the same size would propose).
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
flags.DEFINE_string('verifier', None, 'A separate verifier\'s work directory: score the drafts against its greedy '
                    'outputs (--drafter model), not the drafter\'s own.')

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


def simulate_prefix(drafts: np.ndarray, y: list, width: int, causal: np.ndarray | None = None) -> int:
  """The same for a separate drafter (decoding/draft_model.py): before every call, the drafts at the cut n;
  with `causal`, the first of them is the drafter's causal slot's prediction instead (causal[n])."""
  n, calls = 0, 0
  while n < len(y):
    calls += 1
    accepted = 1
    guess = list(drafts[n])
    if causal is not None:
      guess[0] = causal[n]
    for j in range(width - 1):
      if n + j < len(y) - 1 and guess[j] == y[n + j]:
        accepted += 1
      else:
        break
    n += min(accepted, len(y) - n)
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
  vocab = config.vocab_size
  if FLAGS.verifier:  # its greedy outputs; drafts restricted to its vocabulary, as decoding restricts them
    verifier_config = workdir_lib.load_model_config(FLAGS.verifier)
    vocab = verifier_config.vocab_size
    outputs, _ = Translator(verifier_config, workdir_lib.restore_params(FLAGS.verifier, verifier_config)[0],
                            workdir_lib.load_tokenizer(FLAGS.verifier), DecodeSettings('greedy')).translate_ids(sources)
  else:
    outputs, _ = Translator(config, params, tokenizer, DecodeSettings('greedy')).translate_ids(sources)
  model = models.Transformer(config)

  @jax.jit
  def probe(source, decoder_input, cuts):
    drafted = (cuts[:, :, None] + jnp.arange(span)).reshape(1, -1)
    inputs = jnp.concatenate([decoder_input, jnp.full_like(drafted, mask_id)], 1)
    positions = jnp.concatenate([jnp.arange(MAX_LENGTH)[None], drafted], 1)
    logits = model.apply({'params': params}, source, inputs, positions,
                         selfdraft.block_mask(MAX_LENGTH, cuts, span))
    logits = logits[..., :vocab]
    return jnp.argmax(logits[:, MAX_LENGTH:], -1).reshape(CUTS, span), jnp.argmax(logits[0, :MAX_LENGTH], -1)

  agree, seen = np.zeros(span), np.zeros(span)
  causal_agree = 0
  calls = {(w, both): 0 for w in widths for both in ((None, 'causal') if FLAGS.verifier else (False, True))}
  tokens = 0
  for text, output in zip(sources, outputs):
    y = list(output) + [EOS_ID]
    if len(y) > CUTS:
      continue
    source = jnp.array([list(tokenizer.encode([text])[0]) + [EOS_ID]])
    decoder_input = np.zeros((1, MAX_LENGTH), np.int32)
    decoder_input[0, 0], decoder_input[0, 1:len(y)] = BOS_ID, y[:-1]
    cuts = np.minimum(np.arange(CUTS), len(y) - 1)[None].astype(np.int32)
    drafts, causal = map(np.asarray, probe(source, jnp.asarray(decoder_input), jnp.asarray(cuts)))
    causal_agree += int((causal[:len(y)] == np.array(y)).sum())
    for m in range(len(y)):
      for j in range(span):
        if m + j < len(y):
          agree[j] += drafts[m, j] == y[m + j]
          seen[j] += 1
    for w in widths:
      if FLAGS.verifier:
        calls[(w, None)] += simulate_prefix(drafts, y, w)
        calls[(w, 'causal')] += simulate_prefix(drafts, y, w, causal)
      else:
        calls[(w, False)] += simulate(drafts, y, w, False)
        calls[(w, True)] += simulate(drafts, y, w, True)
    tokens += len(y)
  print('drafts equal to greedy by distance:', ' '.join(f'{a:.3f}' for a in agree / np.maximum(seen, 1)))
  print(f'causal (AT) slots equal to greedy: {causal_agree / max(tokens, 1):.3f}')
  for w in widths:
    if FLAGS.verifier:
      print(f'W={w}: tokens per call, mask slots only {tokens / calls[(w, None)]:.2f}, the first draft from the '
            f'causal slot {tokens / calls[(w, "causal")]:.2f}')
    else:
      print(f'W={w}: tokens per call, alternate (built) {tokens / calls[(w, False)]:.2f}, '
            f'both blocks {tokens / calls[(w, True)]:.2f}')


if __name__ == '__main__':
  flags.mark_flag_as_required('workdir')
  app.run(main)
