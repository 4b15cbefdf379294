"""Run by tests/test_multidevice.py in a subprocess with XLA_FLAGS=--xla_force_host_platform_device_count=8:
trains the tiny config on 8 host devices and translates with a given work directory, writing JSON.

    python tests/multidevice_worker.py TRAIN_WORKDIR DECODE_WORKDIR OUTPUT_JSON
"""

import json
import sys

import jax

import conftest  # puts the repository on sys.path, as for the tests
from fastmt import api, clusters_lib, train_lib
from fastmt.configs import tiny


def main(train_workdir, decode_workdir, output):
  assert jax.device_count() == 8, jax.devices()
  config = tiny.get_config()
  config.dataset.name = 'text'
  for split in ('train', 'validation', 'test'):
    config.dataset[f'{split}_files'] = (str(conftest.DATA / 'genesis.en'), str(conftest.DATA / 'genesis.de'))
  config.num_train_steps = 10
  train_lib.train_and_evaluate(config, train_workdir)
  history = [json.loads(line) for line in open(f'{train_workdir}/train_history.jsonl')]
  model = api.load(decode_workdir)
  sentences = [line.rstrip('\n') for line in open(conftest.DATA / 'genesis.en', encoding='utf-8')][:20]
  translator = model.translator('greedy')
  hidden, _ = clusters_lib.record_states(translator, sentences[:5], top_k=2, batch_size=4)
  result = {
      'devices': jax.device_count(),
      'train_loss': {r['step']: r['train_loss'] for r in history if 'train_loss' in r},
      'valid_nll': {r['step']: r['valid_nll'] for r in history if 'valid_nll' in r},
      'greedy': translator.translate_ids(sentences, 32)[0],
      'pgj': model.translator('pgj', block_size=3).translate_ids(sentences, 32)[0],
      'beam': model.translator('beam', beam_size=2).translate_ids(sentences, 32)[0],
      'greedy_batch_1': translator.translate_ids(sentences[:3], 1)[0],
      # fewer sentences than devices: decoded on the first device alone, not one row a device
      'three_at_batch_32': translator.translate_ids(sentences[:3], 32)[0],
      'rows_compiled': sorted({rows for rows, _ in translator._compiled}),  # pylint: disable=protected-access
      'beam_batch_1': model.translator('beam', beam_size=2).translate_ids(sentences[:2], 1)[0],
      'spec_int8_batch_1': model.translator('spec', block_size=3, drafter='int8').translate_ids(sentences[:3], 1)[0],
      # int8 products through fastmt's CPU kernel (a custom call) on rows split over the devices.
      'greedy_int8': api.load(decode_workdir, dtype='int8').translator('greedy').translate_ids(sentences, 32)[0],
      'recorded_states': hidden.tolist(),
  }
  result = {k: ([ids.tolist() for ids in v] if isinstance(v, list) and v and hasattr(v[0], 'tolist') else v)
            for k, v in result.items()}
  with open(output, 'w') as f:
    json.dump(result, f)


if __name__ == '__main__':
  main(*sys.argv[1:])
