r"""Where an iteration of exact speculative decoding with the int8 drafter goes (`spec:W+int8`, batch 1).

    python benchmarks/spec_cost.py --workdir runs/quickstart --widths 3,4,8 --sentences 20

An iteration of `spec:W+int8` is the model's int8 copy drafting W - 1 tokens (draft_model.draft_autoregressive:
a 2-position call, then W - 2 one-position calls) and one W-wide call of the float model that verifies them.
For each of the first --sentences test sentences (its own source bucket and output cap, as fastmt.bench
decodes) one jitted loop of --calls iterations is timed per part, compile time excluded, --repeats rotated
rounds, the median per sentence averaged over the sentences:
  none     the float encoder and cross-attention keys/values alone (subtracted from the others; the int8
           copy's own keys/values, once per loop, count in draft and both; draft alone does not use the float
           keys/values, a negligible difference over a loop's calls)
  step     one-position calls of the float model (greedy's step)
  verify   W-wide calls of the float model
  draft    draft_autoregressive's W - 1 int8 calls
  both     draft then verify: a whole iteration
  overlap  draft and verify with no data dependence between them (each fed its own previous output): whether
           XLA runs the two models' calls of one iteration at once, as drafting the next window while the
           current one is verified (parallel speculative decoding) would need; overlap / (draft + verify) near
           1 says it runs them one after the other
and, per sentence in the same rotation, the whole decoders as fastmt.bench runs them (their compiled
executables, encoder and every per-sentence cost included):
  greedy   the float model's greedy decoding
  spec     spec:W+int8 (the same output), with its loop iterations per sentence
Each call feeds the previous call's argmax (the data dependence of decoding), at write offsets that cycle
through the output cap. The report gives ms per call and each part over `step`; `tokens_per_step` is what an
iteration must commit (tokens per call, the bench's) to cost no more per token than greedy's step: both / step;
`loop_model_ms` is what spec would take per sentence at that price (none + iterations x both + the sentence's
other costs as greedy pays them), against `ms_per_sentence['spec']` measured.
--float32_kernel: the float model's products of at most 8 rows through fastmt's CPU kernel (Translator float32_kernel),
in every part and in both decoders.
Run it on a quiet machine; it runs on any backend (a GPU session: is a wide call cheap there?).
"""

import functools
import json
import statistics
import time

from absl import app, flags
import jax
import jax.numpy as jnp

from fastmt import kernels, models, translate, workdir as workdir_lib
from fastmt.data import corpus
from fastmt.data.tokenizer import EOS_ID
from fastmt.decoding import draft_model
from fastmt.decoding.step import best_tokens, causal_window_mask

FLAGS = flags.FLAGS
PARTS = ('none', 'step', 'verify', 'draft', 'both', 'overlap')


def part_loop(params, output_projection, drafter, source, *, config, settings, part: str, calls: int):
  """`calls` iterations of one part over one source; returns the last token (to block on)."""
  model = models.Transformer(config)
  encoded = model.apply({'params': params}, source, method=models.Transformer.encode)
  memory = model.apply({'params': params}, encoded, source, method=models.Transformer.memory)
  max_len = translate.output_cap(config, source.shape[1], settings)
  width = min(settings.block_size, max_len)
  step_fn = translate.make_step_fn(model, params, memory, None, output_projection)
  int8 = translate.draft_model_for(drafter, source, 1, max_len, settings, config.vocab_size, encoded)
  cache = models.init_cache(config, 1, max_len + width)
  cache_length = max_len + width
  tokens = jnp.ones((1, max_len + width + 1), jnp.int32)

  def body(i, carry):
    token, draft_token, cache, draft_cache = carry
    at = jnp.reshape(i % (max_len - width + 1), (1,)).astype(jnp.int32)  # a committed length in 0 .. cap - W
    if part in ('draft', 'both', 'overlap'):
      drafts, draft_cache = draft_model.draft_autoregressive(
          int8, draft_cache, tokens.at[:, at[0]].set(draft_token[0]), at, width)
      draft_token = drafts[:, -1]
      if part != 'overlap':  # overlap: the verification below does not wait for these drafts
        token = draft_token
    if part == 'step':
      logits, cache = step_fn(token[:, None], at[:, None], causal_window_mask(at, 1, cache_length), cache, at)
      token = best_tokens(logits[:, 0])
    if part in ('verify', 'both', 'overlap'):
      window = jnp.broadcast_to(token[:, None], (1, width))
      positions = at[:, None] + jnp.arange(width)[None, :]
      logits, cache = step_fn(window, positions, causal_window_mask(at, width, cache_length), cache, at)
      token = jnp.max(best_tokens(logits), axis=1)  # every position's argmax is used, as the commit rule does
    return token, draft_token, cache, draft_cache

  if part == 'none':  # the float encoder and cross-attention keys/values alone
    return sum(jnp.sum(leaf) for leaf in jax.tree_util.tree_leaves(memory))
  first = jnp.full((1,), EOS_ID + 1, jnp.int32)
  token, draft_token, _, _ = jax.lax.fori_loop(0, calls, body, (first, first, cache, int8.cache))
  return token + draft_token  # both chains' outputs are used, so neither is left out of the program


def width_report(config, params, tokenizer, texts, width: int, calls: int, repeats: int,
                 float32_kernel: bool = False) -> dict:
  settings = translate.DecodeSettings('spec', block_size=width, drafter='int8')
  translator = translate.Translator(config, params, tokenizer, settings, float32_kernel=float32_kernel)
  greedy = translate.Translator(config, params, tokenizer, float32_kernel=float32_kernel)
  loops = {part: jax.jit(functools.partial(part_loop, config=config, settings=translator.settings, part=part,
                                           calls=calls)) for part in PARTS}
  names = PARTS + ('greedy', 'spec')
  totals = {name: [] for name in names}
  iterations = {'greedy': 0, 'spec': 0}
  for text in texts:
    # the padded source of a one-sentence batch, as the Translator makes it (its bucket; EOS appended)
    _, source, _ = next(translator.batches(translator.encode_sources([text], translate.TranslationStats()), 1))
    runs = {part: functools.partial(loop, translator.params, translator.output_projection, translator.drafter,
                                    source) for part, loop in loops.items()}
    runs.update(greedy=lambda: greedy.decode_batch(source), spec=lambda: translator.decode_batch(source))
    for name, run in runs.items():
      out = jax.block_until_ready(run())  # compiled (once per bucket) and warm
      if name in iterations:
        iterations[name] += int(out.loop_iterations)
    times = {name: [] for name in names}
    for repeat in range(repeats):
      for name in names[repeat % len(names):] + names[:repeat % len(names)]:
        start = time.perf_counter()
        jax.block_until_ready(runs[name]())
        times[name].append(time.perf_counter() - start)
    for name in names:
      totals[name].append(statistics.median(times[name]))
  ms = {name: 1000 * statistics.mean(v) for name, v in totals.items()}
  per_call = {part: (ms[part] - ms['none']) / calls for part in PARTS if part != 'none'}
  per_sentence = {name: count / len(texts) for name, count in iterations.items()}
  # greedy's time besides its steps and the encoder: what a sentence pays either way (cache set-up, outputs)
  other = ms['greedy'] - ms['none'] - per_sentence['greedy'] * per_call['step']
  return {'width': width, 'sentences': len(texts), 'calls_per_loop': calls,
          'ms_per_call': per_call, 'encoders_ms': ms['none'],
          'over_step': {part: per_call[part] / per_call['step'] for part in ('verify', 'draft', 'both', 'overlap')},
          'overlap_over_sum': per_call['overlap'] / (per_call['verify'] + per_call['draft']),
          'tokens_per_step': per_call['both'] / per_call['step'],
          'iterations_per_sentence': per_sentence,
          'ms_per_sentence': {'greedy': ms['greedy'], 'spec': ms['spec']},
          'speedup_measured': ms['greedy'] / ms['spec'],
          'greedy_other_ms': other,
          'loop_model_ms': ms['none'] + per_sentence['spec'] * per_call['both'] + other}


def main(argv):
  del argv
  config = workdir_lib.load_model_config(FLAGS.workdir)
  params, _ = workdir_lib.restore_params(FLAGS.workdir, config)
  tokenizer = workdir_lib.load_tokenizer(FLAGS.workdir)
  texts = corpus.load_split(workdir_lib.load_train_config(FLAGS.workdir).dataset, FLAGS.split).sources
  texts = [t for t in texts[:FLAGS.sentences] if t.strip()]
  report = {'workdir': FLAGS.workdir, 'split': FLAGS.split, 'backend': jax.default_backend(),
            'float32_kernel': FLAGS.float32_kernel and kernels.available('float32'),
            'widths': [width_report(config, params, tokenizer, texts, int(w), FLAGS.calls, FLAGS.repeats,
                                    FLAGS.float32_kernel) for w in FLAGS.widths]}
  for row in report['widths']:
    calls = ', '.join(f'{part} {ms:.3f}' for part, ms in row['ms_per_call'].items())
    print(f"W = {row['width']}: ms per call: {calls}; over a step: verify {row['over_step']['verify']:.2f}, "
          f"draft {row['over_step']['draft']:.2f}, iteration {row['over_step']['both']:.2f} (tokens per call "
          f"needed to match greedy: {row['tokens_per_step']:.2f}); independent draft and verify "
          f"{row['over_step']['overlap']:.2f}, {row['overlap_over_sum']:.2f}x their sum")
    ms, iterations = row['ms_per_sentence'], row['iterations_per_sentence']['spec']
    print(f"  per sentence: greedy {ms['greedy']:.2f} ms, spec {ms['spec']:.2f} ms ({iterations:.2f} iterations; "
          f"{row['speedup_measured']:.3f}x greedy); the loop model's spec {row['loop_model_ms']:.2f} ms")
  print(json.dumps(report, indent=1))
  if FLAGS.output:
    with open(FLAGS.output, 'w') as f:
      json.dump(report, f, indent=1)


if __name__ == '__main__':
  flags.DEFINE_string('workdir', None, 'A float model (its int8 copy drafts).')
  flags.DEFINE_list('widths', ['3', '4', '8'], 'Window widths W.')
  flags.DEFINE_string('split', 'test', 'Which split\'s first sentences.')
  flags.DEFINE_integer('sentences', 20, 'First sentences of the split, each timed alone.')
  flags.DEFINE_integer('calls', 32, 'Iterations per timed loop.')
  flags.DEFINE_integer('repeats', 5, 'Timed rounds per sentence.')
  flags.DEFINE_string('output', '', 'Optional JSON file for the report.')
  flags.DEFINE_bool('float32_kernel', False, 'The float model\'s products of at most 8 rows through fastmt\'s CPU kernel.')
  flags.mark_flags_as_required(['workdir'])
  app.run(main)
