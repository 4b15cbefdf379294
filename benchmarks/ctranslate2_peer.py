r"""fastmt's greedy decoding against CTranslate2's, on the same checkpoint, in one process.

    .venv/bin/pip install ctranslate2   # 4.x; CPU wheels bundle their own GEMM and OpenMP
    .venv/bin/python benchmarks/ctranslate2_peer.py --workdir runs/quickstart --checkpoint latest \
        --split test --output_dir /tmp/ct2_peer --repeats 5 --speed_sentences 150 --threads 1,2 \
        --fastmt_dtypes float32,int8,int8_layers

CTranslate2 is the usual answer to "how fast can a small Transformer translate on a CPU", so this script
puts fastmt next to it, on fastmt's own weights. It

1. converts the checkpoint with CTranslate2's Python spec API (`FastmtConverter` below, a
   `ctranslate2.converters.Converter`) into <output_dir>/ct2_float32 and <output_dir>/ct2_int8 (weights
   quantised by the converter);
2. checks that CTranslate2's greedy output (beam_size=1, float32) equals fastmt's greedy output token for
   token on the whole split (or --limit sentences) at batch 32 and on the batch-1 sentences, and gives the
   int8 model's agreement and every method's BLEU and chrF against the references;
3. times fastmt and CTranslate2 (float32 and int8, each with every --threads intra_threads value) at batch 1
   (median ms/sentence over --speed_sentences sentences) and batch 32 (sentences/s on the whole split),
   interleaved: in repeat r the methods run in an order rotated by r, so that each runs in every position
   equally often and a drift of the shared machine touches all of them alike.

Both sides do the same work: text in, text out. fastmt's time is `Translator.translate(texts, batch)`
(SentencePiece encoding, batching by length, decoding, detokenising); CTranslate2's is SentencePiece encoding
into pieces with the same model, the same length-sorted batches, `translate_batch` and detokenising. Warm-up
(XLA compilation of every shape; CTranslate2's first call) is excluded: each set is translated once first.

The outputs are comparable only if both decoders stop where fastmt stops: the source gets EOS and no BOS
(truncated to the model's max_length as fastmt does), the decoder starts from BOS, EOS may come first
(CTranslate2's min_decoding_length defaults to 1), and the output cap (EOS included) is fastmt's
`translate.output_cap` of each sentence's length with EOS (--output_cap=sentence) or of its batch's source
bucket (--output_cap=bucket, what fastmt/translate.py did before per-row caps). A CTranslate2 batch decodes
to its longest cap and each row is cut to its own cap afterwards; greedy decoding is per row, so the cut row
is what a per-row cap gives. Outputs at the cap are counted.

--fastmt_dtypes adds fastmt in other precisions (fastmt.quantize's int8: per-channel int8 weights, per-row
dynamic int8 activations, CTranslate2 int8's scheme) as methods of their own, with their time over
CTranslate2 int8's (the [quant] bar) and their BLEU, chrF and agreement next to fastmt float32's.

Prints a markdown table and writes <output_dir>/results.json (with the machine: nproc, CPU model, date,
load, versions). Ratios are fastmt's time over CTranslate2's: above 1 means CTranslate2 is faster.
"""

import datetime
import json
import os
import platform
import time

from absl import app, flags
import ctranslate2
from ctranslate2.specs import common_spec, transformer_spec
import jax
import jax.numpy as jnp
import numpy as np
import sacrebleu
import sentencepiece as spm

from fastmt import cli, decode_lib, precision, translate, workdir as workdir_lib
from fastmt.data import corpus
from fastmt.data.tokenizer import BOS_ID, EOS_ID, UNK_ID
from fastmt.layers import sinusoidal_positions

FLAGS = flags.FLAGS

LAYER_NORM_EPSILON = 1e-6  # flax.linen.LayerNorm's default; CTranslate2's default is 1e-5
COMPUTE_TYPES = ('float32', 'int8')


def _linear(spec, dense):
  """A flax Dense/DenseGeneral kernel of any of fastmt's shapes ([E, F], [E, H, D], [H, D, E]) into a
  CTranslate2 LinearSpec, whose weight is [out, in] (torch's layout); [H, D] flattens head-major on both sides."""
  # Copies: the converter quantises weights in place, and arrays from jax are read-only.
  kernel, bias = np.array(dense['kernel'], np.float32), np.array(dense['bias'], np.float32)
  out_features = bias.size
  spec.weight = np.ascontiguousarray(kernel.reshape(-1, out_features).T)
  spec.bias = bias.reshape(-1)


def _fused(spec, denses):
  """Several projections of the same input as one LinearSpec (CTranslate2 fuses Q/K/V, or K/V)."""
  parts = [common_spec.LinearSpec() for _ in denses]
  for part, dense in zip(parts, denses):
    _linear(part, dense)
  spec.weight = np.concatenate([p.weight for p in parts])
  spec.bias = np.concatenate([p.bias for p in parts])


def _layer_norm(spec, norm):
  spec.gamma = np.array(norm['scale'], np.float32)
  spec.beta = np.array(norm['bias'], np.float32)


def _pre_norm_block(spec, norm, attention=None, mlp=None):
  """A pre-LN self-attention block (Q/K/V fused, then out) or feed-forward block, with its LayerNorm."""
  _layer_norm(spec.layer_norm, norm)
  if attention is not None:
    _fused(spec.linear[0], [attention['query'], attention['key'], attention['value']])
    _linear(spec.linear[1], attention['out'])
  else:
    _linear(spec.linear_0, mlp['Dense_0'])
    _linear(spec.linear_1, mlp['Dense_1'])


class FastmtConverter(ctranslate2.converters.Converter):
  """A fastmt Transformer's parameter tree -> CTranslate2's TransformerSpec (pre-LN, ReLU, tied embeddings)."""

  def __init__(self, params, config, pieces):
    # Parts of a fastmt model that this spec has no place for: a converted model would silently compute
    # something else (CTranslate2's relative positions, OpenNMT's, add to the values too; HRT Eq. 4 does not).
    if config.relative_key_distance or config.num_directions:
      raise ValueError('the CTranslate2 peer converts plain Transformers: this model has '
                       f'relative_key_distance={config.relative_key_distance}, num_directions={config.num_directions}')
    self._params, self._config, self._pieces = params, config, pieces

  def _load(self):
    p, cfg = self._params, self._config
    spec = transformer_spec.TransformerSpec.from_config(
        (cfg.num_encoder_layers, cfg.num_decoder_layers), cfg.num_heads, pre_norm=True,
        activation=common_spec.Activation.RELU)
    embedding = np.array(p['embed']['embedding'], np.float32)  # [V, E]; a copy (int8 quantises in place)
    # CTranslate2's built-in sinusoids put sin and cos in the other order / another timescale; fastmt's own
    # table (computed by fastmt's function, so bit-identical) covers every position fastmt can reach.
    positions = np.array(sinusoidal_positions(jnp.arange(cfg.max_length), cfg.emb_dim), np.float32)
    for side in (spec.encoder, spec.decoder):
      embeddings = side.embeddings[0] if isinstance(side.embeddings, list) else side.embeddings
      embeddings.weight = embedding
      side.scale_embeddings = True  # x * sqrt(E), as fastmt's _embed
      side.position_encodings.encodings = positions
    spec.decoder.projection.weight = embedding  # tied output projection, no bias; saved once (aliased)

    for i, layer in enumerate(spec.encoder.layer):
      q = p[f'encoder_{i}']
      _pre_norm_block(layer.self_attention, q['LayerNorm_0'], attention=q['MultiHeadAttention_0'])
      _pre_norm_block(layer.ffn, q['LayerNorm_1'], mlp=q['FeedForward_0'])
    _layer_norm(spec.encoder.layer_norm, p['encoder_norm'])

    for i, layer in enumerate(spec.decoder.layer):
      q = p[f'decoder_{i}']
      _pre_norm_block(layer.self_attention, q['self_norm'], attention=q['self_attention'])
      attention = q['cross_attention']
      _layer_norm(layer.attention.layer_norm, q['cross_norm'])
      _linear(layer.attention.linear[0], attention['query'])
      _fused(layer.attention.linear[1], [attention['key'], attention['value']])
      _linear(layer.attention.linear[2], attention['out'])
      _pre_norm_block(layer.ffn, q['mlp_norm'], mlp=q['mlp'])
    _layer_norm(spec.decoder.layer_norm, p['decoder_norm'])

    spec.config.layer_norm_epsilon = LAYER_NORM_EPSILON
    # Vocabulary = SentencePiece pieces in id order, so CTranslate2's ids are fastmt's.
    spec.register_source_vocabulary(self._pieces)
    spec.register_target_vocabulary(self._pieces)
    spec.config.unk_token = self._pieces[UNK_ID]
    spec.config.bos_token = spec.config.decoder_start_token = self._pieces[BOS_ID]  # decoder starts at BOS
    spec.config.eos_token = self._pieces[EOS_ID]
    spec.config.add_source_bos = False
    spec.config.add_source_eos = False  # the script appends EOS itself, after truncating as fastmt does
    return spec


class Ct2Peer:
  """Text -> text with CTranslate2, doing what fastmt's Translator does around the model."""

  def __init__(self, model_dir, compute_type, threads, tokenizer, config, settings, buckets, cap_rule):
    self.translator = ctranslate2.Translator(model_dir, device='cpu', compute_type=compute_type,
                                             intra_threads=threads, inter_threads=1)
    # fastmt's own text processor (its reserved symbols unused), so both sides read the same pieces.
    self.tokenizer, self.sp = tokenizer, tokenizer.text_processor
    self.config, self.settings, self.buckets, self.cap_rule = config, settings, buckets, cap_rule
    self.eos = self.sp.id_to_piece(EOS_ID)

  def caps(self, lengths):
    """Output caps (EOS included) of sources with these lengths (EOS included), batched together."""
    if self.cap_rule == 'bucket':
      bucket = next(b for b in self.buckets if b >= max(lengths))
      return [translate.output_cap(self.config, bucket, self.settings)] * len(lengths)
    return [translate.output_cap(self.config, n, self.settings) for n in lengths]

  def translate_pieces(self, texts, batch_size):
    """(output pieces per input, outputs at the cap); empty inputs give empty outputs without decoding."""
    outputs = [[] for _ in texts]
    # fastmt's rule (Translator.decodable): a visible character, and at least one piece that is not <unk>.
    nonempty = [i for i, t in enumerate(texts) if translate.has_visible_text(t)]
    ids = self.sp.encode([texts[i] for i in nonempty])
    kept = [k for k, row in enumerate(ids) if row and not self.tokenizer.spells_nothing(row)]
    nonempty, encoded = [nonempty[k] for k in kept], [self.sp.id_to_piece(ids[k]) for k in kept]
    sources = [pieces[:self.config.max_length - 1] + [self.eos] for pieces in encoded]  # fastmt's truncation
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))  # fastmt's batches
    at_cap = 0
    for start in range(0, len(order), batch_size):
      indices = order[start:start + batch_size]
      caps = self.caps([len(sources[i]) for i in indices])
      results = self.translator.translate_batch(
          [sources[i] for i in indices], beam_size=1, max_decoding_length=max(caps), min_decoding_length=0,
          max_input_length=0, return_scores=False)
      for i, cap, result in zip(indices, caps, results):
        hypothesis = result.hypotheses[0][:cap]  # EOS is not returned: a row at its cap has cap pieces
        at_cap += len(hypothesis) == cap
        outputs[nonempty[i]] = hypothesis
    return outputs, at_cap

  def translate(self, texts, batch_size):
    pieces, _ = self.translate_pieces(texts, batch_size)
    return self.sp.decode(pieces)


def _machine():
  model = ''
  with open('/proc/cpuinfo') as f:
    for line in f:
      if line.startswith('model name'):
        model = line.split(':', 1)[1].strip()
        break
  return {
      'nproc': os.cpu_count(), 'usable_cpus': len(os.sched_getaffinity(0)), 'cpu_model': model,
      'date_utc': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
      'load_average_at_start': os.getloadavg(), 'python': platform.python_version(),
      'jax': jax.__version__, 'ctranslate2': ctranslate2.__version__, 'sentencepiece': spm.__version__,
      'sacrebleu': sacrebleu.__version__,
      'ct2_cpu_compute_types': sorted(ctranslate2.get_supported_compute_types('cpu')),
      'env': {k: v for k, v in os.environ.items() if k.startswith(('OMP_', 'GOMP_', 'CT2_', 'XLA_'))},
  }


def _scores(texts, references):
  """BLEU and chrF of texts against the references (sacreBLEU's defaults, as fastmt-bench and decode.py)."""
  scores = decode_lib.score(texts, references)
  return {'bleu': scores and scores.bleu, 'chrf': scores and scores.chrf}


def _identical(fastmt_ids, ct2_pieces, sp):
  """Sentences whose CTranslate2 output ids equal fastmt's, and the indices of the others."""
  mismatched = [i for i, (ours, theirs) in enumerate(zip(fastmt_ids, ct2_pieces))
                if [int(t) for t in ours] != [sp.piece_to_id(t) for t in theirs]]
  return len(fastmt_ids) - len(mismatched), mismatched


def _rotated(methods, r):
  k = r % len(methods)
  return methods[k:] + methods[:k]


def time_batch1(methods, texts, repeats):
  """ms per sentence, per method: per sentence the median of `repeats` runs in rotated orders."""
  ms = {name: [] for name, _ in methods}
  for text in texts:
    runs = {name: [] for name, _ in methods}
    for r in range(repeats):
      for name, fn in _rotated(methods, r):
        start = time.perf_counter()
        fn([text], 1)
        runs[name].append(1000 * (time.perf_counter() - start))
    for name in runs:
      ms[name].append(float(np.median(runs[name])))
  return {name: np.array(v) for name, v in ms.items()}


def time_batched(methods, texts, batch_size, repeats):
  """Seconds for the whole set, per method and repeat, in rotated orders."""
  seconds = {name: [] for name, _ in methods}
  for r in range(repeats):
    for name, fn in _rotated(methods, r):
      start = time.perf_counter()
      fn(texts, batch_size)
      seconds[name].append(time.perf_counter() - start)
  return seconds


@cli.exit_on_user_error
def main(argv):
  del argv
  threads = [int(t) for t in FLAGS.threads.split(',')]
  config = workdir_lib.load_model_config(FLAGS.workdir)
  tokenizer = workdir_lib.load_tokenizer(FLAGS.workdir)
  params, step = workdir_lib.restore_params(FLAGS.workdir, config, FLAGS.checkpoint)
  settings = translate.DecodeSettings('greedy')
  fastmt = translate.Translator(config, params, tokenizer, settings)
  # fastmt in other precisions ('fastmt int8', ...): the same weights, quantized by fastmt.quantize.
  variants = {f'fastmt {d}': translate.Translator(*precision.for_inference(config, params, d), tokenizer, settings)
              for d in FLAGS.fastmt_dtypes if d != 'float32'}
  sp = tokenizer.text_processor  # the SentencePiece model fastmt's Tokenizer encodes text with
  data = corpus.load_split(workdir_lib.load_train_config(FLAGS.workdir).dataset, FLAGS.split)
  sources, references = list(data.sources), list(data.targets)
  if FLAGS.limit:
    sources, references = sources[:FLAGS.limit], references[:FLAGS.limit]
  decodable = fastmt.decodable(sources)  # blank lines are not decoded by either side
  speed_texts = [sources[i] for i in decodable][:FLAGS.speed_sentences]
  result = {'machine': _machine(), 'workdir': FLAGS.workdir, 'checkpoint_step': int(step),
            'split': FLAGS.split, 'sentences': len(sources), 'speed_sentences': len(speed_texts),
            'repeats': FLAGS.repeats, 'output_cap_rule': FLAGS.output_cap, 'model_config': json.loads(config.to_json()),
            'timed_work': {
                'fastmt': 'Translator.translate(texts, batch): SentencePiece encode, length-sorted batches, '
                          'jitted greedy decode, detokenise',
                'ctranslate2': 'SentencePiece encode to pieces (same model), the same length-sorted batches, '
                               'Translator.translate_batch(beam_size=1), detokenise'}}

  os.makedirs(FLAGS.output_dir, exist_ok=True)
  pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
  converter = FastmtConverter(params, config, pieces)
  model_dirs = {}
  for compute_type in COMPUTE_TYPES:
    model_dirs[compute_type] = converter.convert(os.path.join(FLAGS.output_dir, f'ct2_{compute_type}'),
                                                 quantization=compute_type, force=True)
  buckets = getattr(fastmt, 'buckets', None)  # only --output_cap=bucket needs them
  peers = {(c, t): Ct2Peer(model_dirs[c], c, t, tokenizer, config, settings, buckets, FLAGS.output_cap)
           for c in COMPUTE_TYPES for t in threads}
  methods = [('fastmt', fastmt.translate)] + [(name, v.translate) for name, v in variants.items()] + [
      (f'ct2 {c} t{t}', peer.translate) for (c, t), peer in peers.items()]

  # Identical outputs, batch 32 on the whole split (also fastmt's and CTranslate2's warm-up for batch 32).
  fastmt_out = fastmt.translate_ids(sources, FLAGS.batch_size)
  fastmt_ids, fastmt_stats = fastmt_out[0], fastmt_out[1]
  fastmt_texts, _ = fastmt.translate(sources, FLAGS.batch_size)
  checks = {'fastmt': {**_scores(fastmt_texts, references), 'outputs_at_cap': int(fastmt_stats.outputs_at_cap)}}
  # A fastmt output longer than its sentence's cap means this fastmt caps by bucket: use --output_cap=bucket.
  lengths = [len(s) for s in fastmt.encode_sources([sources[i] for i in decodable], translate.TranslationStats())]
  over = sum(len(fastmt_ids[i]) > translate.output_cap(config, n, settings) for i, n in zip(decodable, lengths))
  checks['fastmt']['outputs_longer_than_sentence_cap'] = over
  for (c, t), peer in peers.items():
    outputs, at_cap = peer.translate_pieces(sources, FLAGS.batch_size)
    identical, mismatched = _identical(fastmt_ids, outputs, sp)
    texts = sp.decode(outputs)
    checks[f'ct2 {c} t{t}'] = {
        'identical_token_sequences': identical, 'mismatched': mismatched[:50],
        'identical_texts': sum(a == b for a, b in zip(texts, fastmt_texts)),
        **_scores(texts, references), 'outputs_at_cap': at_cap}
  for name, variant in variants.items():
    ids, stats = variant.translate_ids(sources, FLAGS.batch_size)
    texts, _ = variant.translate(sources, FLAGS.batch_size)
    checks[name] = {'identical_token_sequences': sum(np.array_equal(a, b) for a, b in zip(ids, fastmt_ids)),
                    'identical_texts': sum(a == b for a, b in zip(texts, fastmt_texts)),
                    **_scores(texts, references), 'outputs_at_cap': int(stats.outputs_at_cap)}
  result['batch32_checks'] = checks

  # Batch 1: warm-up (compiles fastmt's batch-1 shapes) doubles as the batch-1 identity check.
  fastmt_b1 = [fastmt.translate_ids([t], 1)[0][0] for t in speed_texts]
  result['batch1_identical'] = {}
  for (c, t), peer in peers.items():
    outputs = [peer.translate_pieces([text], 1)[0][0] for text in speed_texts]
    result['batch1_identical'][f'ct2 {c} t{t}'] = _identical(fastmt_b1, outputs, sp)[0]
  for name, variant in variants.items():
    outputs = [variant.translate_ids([t], 1)[0][0] for t in speed_texts]
    result['batch1_identical'][name] = sum(np.array_equal(a, b) for a, b in zip(outputs, fastmt_b1))
  for _, fn in methods:
    for text in speed_texts:
      fn([text], 1)

  start = time.perf_counter()
  b1 = time_batch1(methods, speed_texts, FLAGS.repeats)
  b32 = time_batched(methods, sources, FLAGS.batch_size, FLAGS.repeats)
  result['timing_seconds'] = time.perf_counter() - start
  result['load_average_at_end'] = os.getloadavg()

  nonempty = len(decodable)
  rows = {}
  for name, _ in methods:
    rows[name] = {
        'batch1_ms_per_sentence': float(np.median(b1[name])),
        'batch1_ms_per_sentence_mean': float(np.mean(b1[name])),
        'batch1_ratio_fastmt_over_this': float(np.median(b1['fastmt'] / b1[name])),
        f'batch{FLAGS.batch_size}_seconds': b32[name],
        f'batch{FLAGS.batch_size}_sentences_per_s': nonempty / float(np.median(b32[name])),
        f'batch{FLAGS.batch_size}_ratio_fastmt_over_this': float(np.median(b32['fastmt']) / np.median(b32[name])),
    }
  # CTranslate2 at its best thread count, per compute type and batch size.
  best = {}
  for c in COMPUTE_TYPES:
    names = [f'ct2 {c} t{t}' for t in threads]
    b1_best = min(names, key=lambda n: rows[n]['batch1_ms_per_sentence'])
    b32_best = max(names, key=lambda n: rows[n][f'batch{FLAGS.batch_size}_sentences_per_s'])
    best[c] = {'batch1': b1_best, 'batch1_ratio_fastmt_over_best': rows[b1_best]['batch1_ratio_fastmt_over_this'],
               f'batch{FLAGS.batch_size}': b32_best,
               f'batch{FLAGS.batch_size}_ratio_fastmt_over_best':
                   rows[b32_best][f'batch{FLAGS.batch_size}_ratio_fastmt_over_this']}
  result['methods'] = rows
  result['ct2_best_threads'] = best
  # The [quant] bar: fastmt int8's time over CTranslate2 int8's (1 thread, and its best thread count).
  vs_ct2 = {}
  for name in variants:
    t1 = f'ct2 int8 t{threads[0]}'
    vs_ct2[name] = {
        f'batch1_time_over_{t1}': float(np.median(b1[name] / b1[t1])),
        'batch1_time_over_ct2_int8_best': float(np.median(b1[name] / b1[best['int8']['batch1']])),
        f'batch{FLAGS.batch_size}_time_over_{t1}': float(np.median(b32[name]) / np.median(b32[t1])),
        f'batch{FLAGS.batch_size}_time_over_ct2_int8_best':
            float(np.median(b32[name]) / np.median(b32[best['int8'][f'batch{FLAGS.batch_size}']])),
        'bleu_minus_fastmt_float32': checks[name]['bleu'] - checks['fastmt']['bleu'],
        'chrf_minus_fastmt_float32': checks[name]['chrf'] - checks['fastmt']['chrf']}
  result['fastmt_variants_vs_ct2_int8'] = vs_ct2

  bs = FLAGS.batch_size
  lines = [f'| method | b1 ms/sent (median of {len(speed_texts)}) | fastmt/this b1 | b{bs} sent/s | fastmt/this b{bs} '
           f'| identical to fastmt (b{bs}, of {len(sources)}) | identical b1 (of {len(speed_texts)}) | BLEU | chrF |',
           '|---|---|---|---|---|---|---|---|---|']
  for name, row in rows.items():
    check = checks[name]
    same32 = '-' if name == 'fastmt' else str(check['identical_token_sequences'])
    same1 = '-' if name == 'fastmt' else str(result['batch1_identical'][name])
    lines.append(f"| {name} | {row['batch1_ms_per_sentence']:.2f} | {row['batch1_ratio_fastmt_over_this']:.2f} "
                 f"| {row[f'batch{bs}_sentences_per_s']:.1f} | {row[f'batch{bs}_ratio_fastmt_over_this']:.2f} "
                 f"| {same32} | {same1} | {check['bleu']:.2f} | {check['chrf']:.2f} |")
  table = '\n'.join(lines)
  result['table'] = table
  print(table)
  print(f"checkpoint step {step}; outputs at the cap: fastmt {checks['fastmt']['outputs_at_cap']}, "
        + ', '.join(f"{n} {c['outputs_at_cap']}" for n, c in checks.items() if n != 'fastmt'))
  print('CTranslate2 best threads:', json.dumps(best))
  for name, ratios in vs_ct2.items():
    print(f'{name} vs CTranslate2 int8 (time ratio, below 1 = fastmt faster):',
          json.dumps({k: round(v, 3) for k, v in ratios.items()}))
  path = os.path.join(FLAGS.output_dir, 'results.json')
  with open(path, 'w') as f:
    json.dump(result, f, indent=1)
  print(f'wrote {path}')


def define_flags():
  flags.DEFINE_string('workdir', None, 'A train.py work directory.')
  cli.define_checkpoint_flag()
  flags.DEFINE_string('split', 'test', 'Split to translate (sources and references).')
  flags.DEFINE_integer('limit', 0, 'Only the first N sentences of the split (0 = all).')
  flags.DEFINE_string('output_dir', None, 'Writes ct2_float32/, ct2_int8/ (CTranslate2 models) and results.json.')
  flags.DEFINE_integer('repeats', 5, 'Timed runs per method (per sentence at batch 1), in rotated orders.')
  flags.DEFINE_integer('speed_sentences', 150, 'Non-empty sentences from the start of the split timed at batch 1.')
  flags.DEFINE_integer('batch_size', 32, 'The larger batch size.')
  flags.DEFINE_string('threads', '1,2', 'CTranslate2 intra_threads values, comma-separated.')
  flags.DEFINE_list('fastmt_dtypes', ['float32', 'int8'], "fastmt's precisions (decode.py --dtype values); "
                    "'fastmt' (float32) is the reference the others are compared with.")
  flags.DEFINE_enum('output_cap', 'sentence', ['sentence', 'bucket'],
                    "fastmt's output cap: of each sentence's length, or of its batch's source bucket.")
  flags.mark_flags_as_required(['workdir', 'output_dir'])


if __name__ == '__main__':
  define_flags()
  app.run(main, flags_parser=cli.parse_flags_or_exit)
