r"""fastmt's batch-1 greedy against a flax-free reference decoder written the way DESIGN.md's prototype was.

    python benchmarks/reference_greedy.py --workdir runs/quickstart --sentences 150 --repeats 5
    python benchmarks/reference_greedy.py --workdir runs/quickstart --export /tmp/ref.npz   # weights + sources
    python benchmarks/reference_greedy.py --from_export /tmp/ref.npz   # reference only; needs jax and numpy only

Issue [core] asks that fastmt's greedy be no slower than the prototype's (17.6 ms/sentence, measured once, on
another day). Absolute times on these shared machines drift by a quarter within an hour, so this script measures
the comparison the way every other speed claim here is measured: side by side, in one process.

The reference (`reference_greedy` below, plain jax.numpy) is what a quick prototype looks like: the same
pre-LayerNorm Transformer written out by hand over the checkpoint's parameter tree, flat [B, M, E] KV caches
written one position at a time with dynamic_update_slice, all steps in one lax.while_loop, parameters passed as
jit arguments as the flax examples do. Both decoders get the same padded sources and output caps as
`decode.py`; the script checks that their outputs are identical token for token, then times each sentence in
four blocks, fastmt / reference / reference / fastmt (so neither always runs first), each block half of
--repeats runs: a decoder's time is the mean of its two blocks' medians.

It prints each decoder's median ms/sentence, the median per-sentence ratio fastmt/reference (below 1 = fastmt
faster), and a least-squares split of each into a fixed part (encoder, dispatch) and a per-iteration part.
`--from_export` runs the reference alone on an exported file, so it can be timed under other JAX versions in
another virtual environment.
"""

import json
import time

from absl import app, flags
import jax
import jax.numpy as jnp
import numpy as np

FLAGS = flags.FLAGS

PAD, EOS, BOS = 0, 1, 2  # fastmt's special ids (fastmt/data/tokenizer.py)
LAYER_NORM_EPSILON = 1e-6  # flax.linen.LayerNorm's default


def _layer_norm(x, p):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) * jax.lax.rsqrt(var + LAYER_NORM_EPSILON) * p['scale'] + p['bias']


def _dense(x, p):
  """x [..., E] @ a kernel of any of fastmt's shapes ([E, F], [E, H, D] or [H, D, E]) flattened to 2D."""
  kernel, bias = p['kernel'], p['bias']
  width = x.shape[-1]
  return x @ kernel.reshape(width, -1) + bias.reshape(-1)


def _positions(positions, dim):
  half = dim // 2
  inv_timescales = jnp.exp(-jnp.log(10_000.0) * jnp.arange(half, dtype=jnp.float32) / half)
  angles = positions.astype(jnp.float32)[..., None] * inv_timescales
  return jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], -1)


def _attention(q, k, v, mask, num_heads):
  """q [B, T, E], k/v [B, K, E], mask bool broadcastable to [B, T, K] -> [B, T, E]."""
  b, t, e = q.shape
  split = lambda x: x.reshape(x.shape[0], x.shape[1], num_heads, e // num_heads)
  scores = jnp.einsum('bthd,bkhd->bhtk', split(q), split(k)) / jnp.sqrt(e // num_heads).astype(jnp.float32)
  weights = jax.nn.softmax(jnp.where(mask[:, None], scores, -1e9), -1)
  return jnp.einsum('bhtk,bkhd->bthd', weights, split(v)).reshape(b, t, e)


def _encode(params, source, num_heads):
  embedding = params['embed']['embedding']
  dim = embedding.shape[1]
  x = embedding[source] * np.sqrt(dim).astype(np.float32) + _positions(jnp.arange(source.shape[1]), dim)[None]
  mask = (source != PAD)[:, None, :]
  i = 0
  while f'encoder_{i}' in params:
    p = params[f'encoder_{i}']
    h = _layer_norm(x, p['LayerNorm_0'])
    a = p['MultiHeadAttention_0']
    h = _attention(_dense(h, a['query']), _dense(h, a['key']), _dense(h, a['value']), mask, num_heads)
    x = x + _dense(h, a['out'])
    h = _layer_norm(x, p['LayerNorm_1'])
    x = x + _dense(jax.nn.relu(_dense(h, p['FeedForward_0']['Dense_0'])), p['FeedForward_0']['Dense_1'])
    i += 1
  return _layer_norm(x, params['encoder_norm'])


def reference_greedy(params, source, max_len: int, num_heads: int):
  """Greedy decoding of source int32 [B, S] -> (tokens int32 [B, max_len], PAD after EOS; loop iterations).

  params: a fastmt Transformer's parameter tree (pre-LN, tied embeddings). Jit with max_len, num_heads static.
  """
  embedding = params['embed']['embedding']
  dim = embedding.shape[1]
  batch = source.shape[0]
  layers = [params[f'decoder_{i}'] for i in range(len(params)) if f'decoder_{i}' in params]
  encoded = _encode(params, source, num_heads)
  memory = [(_dense(encoded, p['cross_attention']['key']), _dense(encoded, p['cross_attention']['value']))
            for p in layers]
  cross_mask = (source != PAD)[:, None, :]
  caches = [(jnp.zeros((batch, max_len, dim)), jnp.zeros((batch, max_len, dim))) for _ in layers]
  tokens = jnp.zeros((batch, max_len + 1), jnp.int32).at[:, 0].set(BOS)

  def not_finished(state):
    step, _, done, _ = state
    return (step < max_len) & ~done.all()

  def advance(state):
    step, tokens, done, caches = state
    current = jax.lax.dynamic_slice_in_dim(tokens, step, 1, axis=1)
    x = embedding[current] * np.sqrt(dim).astype(np.float32) + _positions(step[None], dim)[None]
    self_mask = (jnp.arange(max_len) <= step)[None, None, :]
    new_caches = []
    for p, (k_cache, v_cache), (k_memory, v_memory) in zip(layers, caches, memory):
      a = p['self_attention']
      h = _layer_norm(x, p['self_norm'])
      k_cache = jax.lax.dynamic_update_slice(k_cache, _dense(h, a['key']), (0, step, 0))
      v_cache = jax.lax.dynamic_update_slice(v_cache, _dense(h, a['value']), (0, step, 0))
      new_caches.append((k_cache, v_cache))
      x = x + _dense(_attention(_dense(h, a['query']), k_cache, v_cache, self_mask, num_heads), a['out'])
      a = p['cross_attention']
      h = _layer_norm(x, p['cross_norm'])
      x = x + _dense(_attention(_dense(h, a['query']), k_memory, v_memory, cross_mask, num_heads), a['out'])
      h = _layer_norm(x, p['mlp_norm'])
      x = x + _dense(jax.nn.relu(_dense(h, p['mlp']['Dense_0'])), p['mlp']['Dense_1'])
    logits = _layer_norm(x[:, 0], params['decoder_norm']) @ embedding.T
    next_token = jnp.where(done, PAD, jnp.argmax(logits, -1).astype(jnp.int32))
    tokens = jax.lax.dynamic_update_slice(tokens, next_token[:, None], (0, step + 1))
    return step + 1, tokens, done | (next_token == EOS), new_caches

  step, tokens, _, _ = jax.lax.while_loop(
      not_finished, advance, (jnp.int32(0), tokens, jnp.zeros((batch,), bool), caches))
  return tokens[:, 1:], step


def _median_ms(fn, repeats):
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return 1000 * float(np.median(times))


def _fit(iterations, ms):
  """(fixed ms, µs per iteration) of a least-squares line through per-sentence times."""
  design = np.stack([np.ones(len(iterations)), iterations], 1)
  fixed, per_iteration = np.linalg.lstsq(design, ms, rcond=None)[0]
  return float(fixed), float(1000 * per_iteration)


def load_cases(workdir, split, sentences):
  """fastmt's Translator and, per sentence, (padded source [1, bucket], output cap) exactly as decode.py."""
  from fastmt import decode_lib, translate, workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  from fastmt.data import corpus  # pylint: disable=g-import-not-at-top
  translator = decode_lib.load_translator(workdir, translate.DecodeSettings())
  texts = [t for t in corpus.load_split(workdir_lib.load_train_config(workdir).dataset, split).sources
           if t.strip()][:sentences]
  cases = []
  for ids in translator.encode_sources(texts, translate.TranslationStats()):
    _, source, _ = next(translator.batches([ids], 1))
    # The bucket's cap for both decoders (the reference's is static): the same work, the same outputs.
    cases.append((source, translate.output_cap(translator.config, source.shape[1], translator.settings)))
  return translator, cases


def compare(translator, cases, repeats):
  config = translator.config
  if config.relative_key_distance or config.num_directions:  # the prototype has neither: it would not agree
    raise ValueError('the reference is a plain Transformer; this model has relative_key_distance='
                     f'{config.relative_key_distance}, num_directions={config.num_directions}')
  params, num_heads = translator.params, config.num_heads
  reference = jax.jit(reference_greedy, static_argnums=(2, 3))
  rows, mismatches = [], []
  for n, (source, cap) in enumerate(cases):
    ours = translator.decode_batch(source, [cap])
    theirs, _ = jax.block_until_ready(reference(params, source, cap, num_heads))
    if not np.array_equal(np.asarray(ours.tokens), np.asarray(theirs)):
      mismatches.append(n)
    run_ours = lambda: translator.decode_batch(source, [cap])
    run_theirs = lambda: jax.block_until_ready(reference(params, source, cap, num_heads))
    # A B B A: each decoder runs first in half of the repeats.
    half = max(1, repeats // 2)
    a1, b1 = _median_ms(run_ours, half), _median_ms(run_theirs, half)
    b2, a2 = _median_ms(run_theirs, half), _median_ms(run_ours, half)
    rows.append((int(ours.loop_iterations), (a1 + a2) / 2, (b1 + b2) / 2))
  iterations, ours_ms, theirs_ms = (np.array(c, float) for c in zip(*rows))
  return {
      'sentences': len(cases), 'identical_outputs': len(cases) - len(mismatches), 'mismatched': mismatches,
      'fastmt_ms_per_sentence': float(np.median(ours_ms)),
      'reference_ms_per_sentence': float(np.median(theirs_ms)),
      'ratio_fastmt_over_reference': float(np.median(ours_ms / theirs_ms)),
      'mean_iterations': float(iterations.mean()),
      'fastmt_fit_fixed_ms_per_iteration_us': _fit(iterations, ours_ms),
      'reference_fit_fixed_ms_per_iteration_us': _fit(iterations, theirs_ms),
      'jax_version': jax.__version__,
  }


def reference_only(path, repeats):
  """Times the reference alone on an --export file (for other JAX versions; no fastmt import)."""
  data = np.load(path)
  params = {}
  for key in data.files:
    if key.startswith('param/'):
      node = params
      *parents, leaf = key[len('param/'):].split('/')
      for name in parents:
        node = node.setdefault(name, {})
      node[leaf] = jnp.asarray(data[key])
  num_heads = int(data['num_heads'])
  reference = jax.jit(reference_greedy, static_argnums=(2, 3))
  rows, identical = [], 0
  count = sum(k.startswith('source/') for k in data.files)
  for n in range(count):
    source, cap = data[f'source/{n}'], int(data[f'cap/{n}'])
    tokens, steps = jax.block_until_ready(reference(params, source, cap, num_heads))
    identical += np.array_equal(np.asarray(tokens), data[f'fastmt_tokens/{n}'])
    ms = _median_ms(lambda: jax.block_until_ready(reference(params, source, cap, num_heads)), repeats)
    rows.append((int(steps), ms))
  iterations, ms = (np.array(c, float) for c in zip(*rows))
  return {'sentences': count, 'identical_to_exported_fastmt_outputs': identical,
          'reference_ms_per_sentence': float(np.median(ms)), 'mean_iterations': float(iterations.mean()),
          'reference_fit_fixed_ms_per_iteration_us': _fit(iterations, ms), 'jax_version': jax.__version__}


def export(translator, cases, path):
  arrays = {'num_heads': np.int32(translator.config.num_heads)}
  for keys, leaf in jax.tree_util.tree_flatten_with_path(translator.params)[0]:
    arrays['param/' + '/'.join(k.key for k in keys)] = np.asarray(leaf)
  for n, (source, cap) in enumerate(cases):
    arrays[f'source/{n}'], arrays[f'cap/{n}'] = source, np.int32(cap)
    arrays[f'fastmt_tokens/{n}'] = np.asarray(translator.decode_batch(source, [cap]).tokens)
  np.savez(path, **arrays)


def main(argv):
  del argv
  if FLAGS.from_export:
    result = reference_only(FLAGS.from_export, FLAGS.repeats)
  else:
    translator, cases = load_cases(FLAGS.workdir, FLAGS.split, FLAGS.sentences)
    if FLAGS.export:
      export(translator, cases, FLAGS.export)
      print(f'wrote {len(cases)} sources and the parameters to {FLAGS.export}')
      return
    result = compare(translator, cases, FLAGS.repeats)
  print(json.dumps(result, indent=1))
  if FLAGS.output_json:
    with open(FLAGS.output_json, 'w') as f:
      json.dump(result, f, indent=1)


def define_flags():
  flags.DEFINE_string('workdir', None, 'A train.py work directory.')
  flags.DEFINE_string('split', 'test', 'Split whose first sentences are decoded.')
  flags.DEFINE_integer('sentences', 150, 'Non-empty sentences to decode, from the start of the split.')
  flags.DEFINE_integer('repeats', 6, 'Timed runs per sentence and decoder (half in each order).')
  flags.DEFINE_string('export', None, 'Write the parameters, sources, caps and fastmt outputs here and stop.')
  flags.DEFINE_string('from_export', None, 'Time only the reference on a file written by --export.')
  flags.DEFINE_string('output_json', None, 'Also write the result here.')


if __name__ == '__main__':
  define_flags()
  app.run(main)
