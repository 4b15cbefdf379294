r"""Where HRT's batch-1 time goes, next to the AT model's: the encoder, the autoregressive steps and stage II.

    python benchmarks/hrt_cost.py --at runs/ib/at_kd_avg5 --hrt runs/hrt/hrt_k2_avg5 --sentences 100

Per test sentence at batch 1 (each its own source bucket and output cap, as fastmt.bench decodes), four jitted
functions are timed in rotation, compile time excluded, `--repeats` rounds, the median per sentence summed:
  at        the AT model's greedy decoding (encoder included)
  encoder   the AT model's encoder and cross-attention keys/values alone
  stage_1   the HRT model's encoder plus stage I (Skip-AT greedy over every k-th position)
  hrt       the HRT model's whole two-pass decoding (stage I + stage II)
(--max_repeats R: the HRT model's stage I and two passes with the repetition guard, as decode.py's; --dtype
bfloat16: both models in half precision, as decode.py --dtype bfloat16.)
Stage II's cost is hrt - stage_1. The bound "stage II free" = at / stage_1 is the most that fewer
autoregressive steps could give with this encoder; the measured speed-up is at / hrt. Run it on a quiet machine.
"""

import functools
import json
import statistics
import time

from absl import app, flags
import jax
import numpy as np

from fastmt import models, precision, translate, workdir as workdir_lib
from fastmt.data import corpus
from fastmt.data.tokenizer import EOS_ID
from fastmt.decoding import hrt

FLAGS = flags.FLAGS


def encoder_only(params, source, *, config):
  model = models.Transformer(config)
  encoded = model.apply({'params': params}, source, method=models.Transformer.encode)
  return model.apply({'params': params}, encoded, source, method=models.Transformer.memory)


def stage_one_only(params, source, caps, output_projection, *, config, settings):
  """The encoder and hrt_decode's stage I (hrt.stage_one_greedy), without stage II."""
  model = models.Transformer(config)
  memory = encoder_only(params, source, config=config)
  max_len = translate.output_cap(config, source.shape[1], settings)
  step_fn = translate.make_step_fn(model, params, memory, None, output_projection)
  cache = models.init_cache(config, source.shape[0], max_len)
  return hrt.stage_one_greedy(step_fn, cache, source.shape[0], max_len, settings.chunk_size,
                              settings.hrt_symbols[1], caps, settings.max_repeats).tokens


def padded_source(ids):
  bucket = next(b for b in translate.SOURCE_BUCKETS if b >= len(ids) + 1)
  source = np.zeros((1, bucket), np.int32)
  source[0, :len(ids)] = ids
  source[0, len(ids)] = EOS_ID
  return source


def main(argv):
  del argv
  at = translate_setup(FLAGS.at, 'greedy')
  two_pass = translate_setup(FLAGS.hrt, 'hrt', max_repeats=FLAGS.max_repeats)
  texts = corpus.load_split(workdir_lib.load_train_config(FLAGS.at).dataset, 'test').sources[:FLAGS.sentences]
  at_config, hrt_config = at.config, two_pass.config
  enc = jax.jit(functools.partial(encoder_only, config=at_config))
  first = jax.jit(functools.partial(stage_one_only, config=hrt_config, settings=two_pass.settings))
  totals = {name: 0.0 for name in ('at', 'encoder', 'stage_1', 'hrt')}
  calls = {'at': 0, 'hrt': 0}
  for text in texts:
    at_source = padded_source(at.tokenizer.encode([text])[0])
    hrt_source = padded_source(two_pass.tokenizer.encode([text])[0])
    cap = np.array([two_pass.row_cap(int((hrt_source != 0).sum()))], np.int32)
    runs = {
        'at': lambda: at.decode_batch(at_source),
        'encoder': lambda: enc(at.params, at_source),
        'stage_1': lambda: first(two_pass.params, hrt_source, cap, two_pass.output_projection),
        'hrt': lambda: two_pass.decode_batch(hrt_source),
    }
    calls['at'] += int(runs['at']().decoder_calls[0])
    calls['hrt'] += int(runs['hrt']().decoder_calls[0])
    jax.block_until_ready(runs['encoder']())
    jax.block_until_ready(runs['stage_1']())
    times = {name: [] for name in runs}
    for repeat in range(FLAGS.repeats):
      names = list(runs)[repeat % 4:] + list(runs)[:repeat % 4]
      for name in names:
        start = time.perf_counter()
        jax.block_until_ready(runs[name]())
        times[name].append(time.perf_counter() - start)
    for name, values in times.items():
      totals[name] += statistics.median(values)
  n = len(texts)
  ms = {name: 1000 * t / n for name, t in totals.items()}
  report = {
      'sentences': n, 'dtype': FLAGS.dtype, 'ms_per_sentence': ms,
      'decoder_calls_per_sentence': {name: c / n for name, c in calls.items()},
      'at_ms_per_call_after_encoder': (ms['at'] - ms['encoder']) / (calls['at'] / n),
      'stage_2_ms': ms['hrt'] - ms['stage_1'],
      'speedup_measured': ms['at'] / ms['hrt'],
      'speedup_if_stage_2_were_free': ms['at'] / ms['stage_1'],
      'speedup_if_stage_2_and_encoder_were_free': (ms['at'] - ms['encoder']) / (ms['stage_1'] - ms['encoder']),
  }
  print(json.dumps(report, indent=1))
  if FLAGS.output:
    with open(FLAGS.output, 'w') as f:
      json.dump(report, f, indent=1)


def translate_setup(workdir, algorithm, **settings):
  """The Translator fastmt.bench would build for this workdir and algorithm (E^T layout, resolved settings)."""
  config = workdir_lib.load_model_config(workdir)
  params, _ = workdir_lib.restore_params(workdir, config)
  config, params = precision.for_inference(config, params, FLAGS.dtype)
  return translate.Translator(config, params, workdir_lib.load_tokenizer(workdir), translate.DecodeSettings(algorithm, **settings),
                              objective=workdir_lib.load_objective(workdir),
                              objective_options=workdir_lib.load_objective_options(workdir))


if __name__ == '__main__':
  flags.DEFINE_string('at', None, 'The AT model (the baseline).')
  flags.DEFINE_string('hrt', None, 'The HRT model.')
  flags.DEFINE_integer('sentences', 100, 'First test sentences, each decoded alone.')
  flags.DEFINE_integer('repeats', 5, 'Timed rounds per sentence.')
  flags.DEFINE_string('output', '', 'Optional JSON file for the report.')
  flags.DEFINE_enum('dtype', 'float32', ['float32', 'bfloat16'], 'Both models\' precision (fastmt.precision).')
  flags.DEFINE_integer('max_repeats', 0, 'The HRT model\'s repetition guard (stage_1 and hrt; the AT baseline is '
                       'plain greedy): decode.py --max_repeats.')
  flags.mark_flags_as_required(['at', 'hrt'])
  app.run(main)
