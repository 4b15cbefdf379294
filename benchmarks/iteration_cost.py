r"""What one iteration of a decoder's loop costs, apart from what a sentence pays once: batch 1, real sentences.

    python benchmarks/iteration_cost.py \
        --runs greedy=runs/ib/at_kd_avg5,ib=runs/ib/ib_kd_avg5,ib=runs/ib/ib_sa_kd_avg5

The step-cost curve (fastmt.roofline, the bench's floor pass) times synthetic calls in a loop of its own; this
script times the decoders themselves. For each sentence and each METHOD=WORKDIR (a fastmt.bench method, e.g.
greedy, ib, pgj:3, and a work directory; a row is named WORKDIR's base name/METHOD), the Translator decodes
it twice at batch 1: with the sentence's own output cap (n loop iterations) and with a cap of 1 token (1
iteration; every decoder stops at its cap). Then

    per-iteration cost = (T(own cap) - T(cap 1)) / (n - 1),    fixed cost = T(cap 1) - per-iteration cost,

the fixed cost being what the sentence pays whatever its length: the encoder, the dispatch of the compiled
function, the loop's set-up and the recovery of the output. Methods are interleaved sentence by sentence,
each time the median of --repeats runs, compile excluded. Reported: mean ms/sentence, mean iterations,
mean fixed cost, and the per-iteration cost as total decoding time less the fixed costs over all iterations.
Only for decoders with one loop whose iterations are alike (greedy, ib, PJ, PGJ); not HGJ (wide iterations,
then one-position ones) or HRT (two stages). Run it on a quiet machine.

The bare loop (greedy and ib rows): the same sentence, padded as the Translator pads it, run through one
compiled program that encodes it and then makes exactly the decoder's n calls back to back (from the
decoder's start symbols, each call's inputs the previous call's argmax), with the decoder's own call
(greedy's one-position call; ib's z slots at their positions under the block mask M(h, c)) and its cache
length, and nothing else: no stopping test, no output buffer, no recovery of the natural order. A decoder's
time over its bare loop's says what its loop adds to its calls; the step-cost curve (fastmt.roofline) times
the same calls 64 at a time with nothing before them, so a loop of a sentence's few calls right after the
encoder can cost more per call than the curve says.
"""

import argparse
import json
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from fastmt import bench, models, roofline, workdir as workdir_lib
from fastmt.data import corpus
from fastmt.decoding import interleaved, registry
from fastmt.decoding.step import BOS_ID, best_tokens, causal_window_mask
from fastmt.translate import TranslationStats, make_step_fn, output_cap


def padded(translator, ids):
  """The sentence as Translator.batches lays it out at batch 1: its bucket's width, PAD after it."""
  bucket = next(b for b in translator.buckets if b >= len(ids))
  source = np.zeros((1, bucket), np.int32)
  source[0, :len(ids)] = ids
  return source


def encoded_memory(model, params, source):
  """What the decoder's calls read of a source: its encoding, in the cross-attention memory's layout."""
  encoded = model.apply({'params': params}, source, method=models.Transformer.encode)
  return model.apply({'params': params}, encoded, source, method=models.Transformer.memory)


def call_width(settings) -> int:
  """Positions per call of a greedy or ib decoder."""
  return 1 if settings.algorithm == 'greedy' else settings.interleaving.slots


def bare_loop(translator, bucket: int, encoder: bool = True):
  """A jitted (params, output_projection, source [1, bucket], calls) -> tokens: the encoder, then `calls` of the
  decoder's own calls back to back at batch 1 (module docstring); None for a method without one (PJ, PGJ).
  encoder=False: the third argument is the source's memory instead (encoded_memory), and the program is the
  calls alone (benchmarks/call_context.py)."""
  settings, config = translator.settings, translator.config
  algorithm = settings.algorithm
  if algorithm not in ('greedy', 'ib'):
    return None
  model = models.Transformer(config)
  max_len = output_cap(config, bucket, settings)
  cache_length = registry.get(algorithm).cache_length(max_len, settings)
  layout = settings.interleaving

  def call(step_fn, tokens, i, cache):
    if algorithm == 'ib':
      return interleaved._call(step_fn, layout, tokens, i, cache, cache_length)  # pylint: disable=protected-access
    offsets = jnp.full((1,), i, jnp.int32)
    return step_fn(tokens, offsets[:, None], causal_window_mask(offsets, 1, cache_length), cache, offsets)

  def run(params, output_projection, source_or_memory, calls):
    memory = encoded_memory(model, params, source_or_memory) if encoder else source_or_memory
    step_fn = make_step_fn(model, params, memory, output_projection=output_projection)

    def body(i, carry):
      logits, cache = call(step_fn, carry[1], i, carry[0])
      return cache, best_tokens(logits)
    start = jnp.asarray([[BOS_ID]] if algorithm == 'greedy' else [layout.start_ids], jnp.int32)  # [1, width]
    return jax.lax.fori_loop(0, calls, body, (models.init_cache(config, 1, cache_length), start))[1]
  return jax.jit(run)


def median_ms(fn, repeats: int) -> float:
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return 1000 * statistics.median(times)


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--runs', required=True, help='METHOD=WORKDIR,...; the first row is the baseline')
  parser.add_argument('--split', default='test')
  parser.add_argument('--sentences', type=int, default=100)
  parser.add_argument('--repeats', type=int, default=7)
  parser.add_argument('--output', help='Write the figures here as JSON.')
  parser.add_argument('--curve', action=argparse.BooleanOptionalAction, default=True,
                      help='Also time the step-cost curve at the bare loops\' widths, with the first row\'s model.')
  args = parser.parse_args()
  runs = {}
  for item in args.runs.split(','):
    method, workdir = item.split('=', 1)
    if bench.is_auto(method):
      parser.error(f'{method}: this script times one decoder\'s loop; name a width (spec:2+ngram), not auto')
    label = f'{os.path.basename(os.path.normpath(workdir))}/{method}'
    if label in runs:
      parser.error(f'two rows would be named {label}')
    runs[label] = (method, workdir)
  translators = {label: bench.build_translators(workdir, [method])[0][method]
                 for label, (method, workdir) in runs.items()}
  first = next(iter(runs.values()))[1]
  sources = corpus.load_split(workdir_lib.load_train_config(first).dataset, args.split).sources[:args.sentences]
  figures = {label: {part: {'total_ms': [], 'fixed_ms': []} for part in ('decoder', 'bare')} | {'iterations': []}
             for label in translators}
  bare_loops = {}  # (label, bucket) -> bare_loop
  for text in sources:
    for label, translator in translators.items():
      ids = translator.encode_sources([text], TranslationStats())[0]
      source, cap = padded(translator, ids), np.array([translator.row_cap(len(ids))], np.int32)
      one = np.ones((1,), np.int32)
      iterations = int(translator.decode_batch(source, cap).loop_iterations)  # compiles, if new
      translator.decode_batch(source, one)
      runs_of = {'decoder': (lambda: translator.decode_batch(source, cap),
                             lambda: translator.decode_batch(source, one))}
      key = (label, source.shape[1])
      if key not in bare_loops:
        bare_loops[key] = bare_loop(translator, source.shape[1])
      if bare_loops[key] is not None:
        loop, inputs = bare_loops[key], (translator.params, translator.output_projection, source)
        jax.block_until_ready(loop(*inputs, np.int32(1)))  # compiles, if new
        runs_of['bare'] = (lambda: jax.block_until_ready(loop(*inputs, np.int32(iterations))),
                           lambda: jax.block_until_ready(loop(*inputs, np.int32(1))))
      for part, (whole, first_call) in runs_of.items():
        total, first_only = median_ms(whole, args.repeats), median_ms(first_call, args.repeats)
        per_iteration = (total - first_only) / max(iterations - 1, 1)
        figures[label][part]['total_ms'].append(total)
        figures[label][part]['fixed_ms'].append(first_only - per_iteration)
      figures[label]['iterations'].append(iterations)
  summary = {}
  for label, f in figures.items():
    iterations = np.array(f['iterations'])
    summary[label] = {'iterations': iterations.mean()}
    for part, prefix in (('decoder', ''), ('bare', 'bare_')):
      if f[part]['total_ms']:
        total, fixed = np.array(f[part]['total_ms']), np.array(f[part]['fixed_ms'])
        summary[label].update({f'{prefix}ms_per_sentence': total.mean(), f'{prefix}fixed_ms': fixed.mean(),
                               f'{prefix}ms_per_iteration': (total.sum() - fixed.sum()) / iterations.sum()})
    if 'bare_ms_per_sentence' in summary[label]:
      summary[label]['decoder_over_bare'] = summary[label]['ms_per_sentence'] / summary[label]['bare_ms_per_sentence']
  base = next(iter(summary.values()))
  print('| method | ms/sentence | iterations | fixed ms | ms/iteration | iteration vs first | speed-up vs first |')
  print('|---|---|---|---|---|---|---|')
  for label, s in summary.items():
    print(f"| {label} | {s['ms_per_sentence']:.2f} | {s['iterations']:.2f} | {s['fixed_ms']:.2f} | "
          f"{s['ms_per_iteration']:.3f} | {s['ms_per_iteration'] / base['ms_per_iteration']:.2f}x | "
          f"{base['ms_per_sentence'] / s['ms_per_sentence']:.2f} |")
  bare_rows = {label: s for label, s in summary.items() if 'bare_ms_per_sentence' in s}
  if bare_rows:
    print('\nThe bare loops (the same calls, nothing else; module docstring):\n')
    print('| method | bare ms/sentence | decoder / bare | bare fixed ms | bare ms/iteration | iteration vs first '
          '| speed-up vs first |')
    print('|---|---|---|---|---|---|---|')
    for label, s in bare_rows.items():
      versus = (f"{s['bare_ms_per_iteration'] / base['bare_ms_per_iteration']:.2f}x | "
                f"{base['bare_ms_per_sentence'] / s['bare_ms_per_sentence']:.2f}") if 'bare_ms_per_sentence' in base \
          else '— | —'
      print(f"| {label} | {s['bare_ms_per_sentence']:.2f} | {s['decoder_over_bare']:.3f} | {s['bare_fixed_ms']:.2f} | "
            f"{s['bare_ms_per_iteration']:.3f} | {versus} |")
  curve = None
  if args.curve and bare_rows:  # the curve's calls of the rows' widths, the first row's model, in this process
    widths = sorted({call_width(translators[label].settings) for label in bare_rows})
    translator = next(iter(translators.values()))
    curve = roofline.step_cost_curve(translator.config, translator.params, widths=tuple(widths))
    print('\nStep-cost curve (64 calls a run, nothing before them): ' + ', '.join(
        f'{w}: {ms:.3f} ms ({ms / curve[widths[0]]:.2f}x)' for w, ms in curve.items()))
  if args.output:
    with open(args.output, 'w') as f:
      json.dump({'runs': runs, 'sentences': len(sources), 'repeats': args.repeats, 'summary': summary,
                 'step_cost_curve_ms': curve}, f, indent=1)


if __name__ == '__main__':
  main()
