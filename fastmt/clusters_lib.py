r"""Offline side of the clustered projection: record decoder states, fit k-means, save and load per direction.

    python -m fastmt.clusters_lib --workdir runs/quickstart --direction en_de --num_clusters 500 --top_k 5

Unlabelled source text is enough: the model translates it greedily, then a teacher-forced pass over its own
outputs records the decoder's final hidden state and top-K tokens at every output position. Files go to
<workdir>/clusters/<direction>/ (orbax arrays + metadata.json with a fingerprint of the model and vocabulary).
"""

import hashlib
import json
import os

from absl import flags, logging
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from fastmt import cli, files, models, projection, workdir as workdir_lib
from fastmt.data import corpus
from fastmt.data.batching import pad_batch
from fastmt.decoding import registry
from fastmt import translate
from fastmt.translate import DecodeSettings, Translator
from fastmt.errors import FastmtError, MissingError

METADATA = 'metadata.json'


def fingerprint(model_config, tokenizer, params, weights_fingerprint: str | None = None) -> str:
  """What clusters depend on: the model's shape, the exact vocabulary and the weights (the hidden states they
  were fitted on, and the embedding rows they index, change with every checkpoint). weights_fingerprint: the
  float32 weights' workdir.weights_fingerprint, taken before a cast (a bfloat16 or int8 model's own params no
  longer hold those values); None = that of params."""
  with open(tokenizer.model_path, 'rb') as f:
    vocab_hash = hashlib.sha256(f.read()).hexdigest()[:16]
  return (f'{model_config.vocab_size}x{model_config.emb_dim}-spm{vocab_hash}'
          f'-weights{weights_fingerprint or workdir_lib.weights_fingerprint(params)}')


def record_states(translator: Translator, sources, top_k: int, batch_size: int = 32):
  """Decoder hidden states [N, E] and their top-K tokens [N, K] at every greedy output position."""
  sources = list(sources)
  outputs, _ = translator.translate_ids(sources, batch_size)  # all of them: its warnings name the input's lines
  kept = [i for i, s in enumerate(sources) if s.strip()]
  sources, outputs = [sources[i] for i in kept], [outputs[i] for i in kept]
  source_ids = translator.encode_sources(sources, translate.TranslationStats())
  model = models.Transformer(translator.config)

  @jax.jit
  def states(params, source, decoder_input):
    encoded = model.apply({'params': params}, source, method=models.Transformer.encode)
    memory = model.apply({'params': params}, encoded, source, method=models.Transformer.memory)
    positions = jnp.broadcast_to(jnp.arange(decoder_input.shape[1]), decoder_input.shape)
    logits, hidden, _ = model.apply({'params': params}, decoder_input, positions,
                                    models.causal_mask(decoder_input.shape[1]), memory,
                                    method=models.Transformer.decode)
    return hidden, jax.lax.top_k(logits, top_k)[1]

  hidden_all, top_all = [], []
  for start in range(0, len(source_ids), batch_size):
    rows = range(start, min(start + batch_size, len(source_ids)))
    src = [source_ids[i][:-1] for i in rows]  # pad_batch appends EOS again
    tgt = [outputs[i] for i in rows]
    length = max(max(len(s) for s in src), max(len(t) for t in tgt)) + 1
    length = -(-length // 16) * 16  # a few shapes only
    batch = pad_batch(src, tgt, length, length)
    # Rows split over the translator's mesh (data parallel): pad to a multiple of its devices with PAD rows,
    # which have no targets and so record nothing.
    rows_total = translate.batch_rows(len(src), batch_size, translator.mesh.size)
    pad_rows = lambda x: np.pad(x, ((0, rows_total - len(x)), (0, 0)))
    put = lambda x: jax.device_put(pad_rows(x), translator.rows_sharding)
    hidden, top = states(translator.params, put(batch.source), put(batch.decoder_input))
    hidden, top = np.asarray(hidden)[:len(src)], np.asarray(top)[:len(src)]
    real = batch.target != 0
    hidden_all.append(hidden[real])
    top_all.append(top[real])
  return np.concatenate(hidden_all), np.concatenate(top_all)


def save_clusters(directory: str, clusters: projection.Clusters, metadata: dict) -> None:
  directory = os.path.abspath(directory)
  os.makedirs(directory, exist_ok=True)
  arrays = {'centroids': clusters.centroids, 'centroid_sq_norms': clusters.centroid_sq_norms,
            'active_sets': clusters.active_sets}
  # The metadata (with its fingerprint) goes first and comes back last, atomically: a rebuild killed half-way
  # leaves no metadata, so old fingerprints never vouch for new arrays (load_clusters: "No clusters").
  path = os.path.join(directory, METADATA)
  if os.path.exists(path):
    os.remove(path)
  checkpointer = ocp.StandardCheckpointer()
  checkpointer.save(os.path.join(directory, 'arrays'), arrays, force=True)
  checkpointer.wait_until_finished()
  files.write_whole(path, json.dumps({**metadata, 'vocab_size': clusters.vocab_size, 'capacity': clusters.capacity},
                                     indent=1))


def built_direction(directory: str) -> str | None:
  """The direction the clusters at `directory` were fitted on (None: no clusters there, or made before the
  metadata recorded it)."""
  path = os.path.join(directory, METADATA)
  if not os.path.isfile(path):
    return None
  with open(path, encoding='utf-8') as f:
    return json.load(f).get('direction')


def load_clusters(directory: str, model_config, tokenizer, params,
                  weights_fingerprint: str | None = None) -> projection.Clusters:
  """Loads clusters saved by save_clusters; another model's, checkpoint's or vocabulary's clusters are a clear
  error. params: the float32 parameters the clusters must have been built from, or weights_fingerprint theirs
  (fingerprint's: a model already cast to bfloat16 or int8)."""
  directory = os.path.abspath(directory)
  path = os.path.join(directory, METADATA)
  if not os.path.exists(path):
    raise MissingError(f'No clusters at {directory} (no {METADATA})')
  with open(path) as f:
    metadata = json.load(f)
  expected = fingerprint(model_config, tokenizer, params, weights_fingerprint)
  if metadata.get('fingerprint') != expected:
    raise FastmtError(f'Clusters at {directory} were built for model/vocabulary/weights '
                     f'{metadata.get("fingerprint")}, this model is {expected}: rebuild them with '
                     f'python -m fastmt.clusters_lib for this checkpoint')
  checkpointer = ocp.StandardCheckpointer()
  arrays_path = os.path.join(directory, 'arrays')
  # On this device whatever devices built them (clusters made on a TPU's cores, used on a CPU).
  arrays = checkpointer.restore(arrays_path, workdir_lib.on_this_device(checkpointer.metadata(arrays_path)))
  return projection.Clusters(jnp.asarray(arrays['centroids']), jnp.asarray(arrays['centroid_sq_norms']),
                             jnp.asarray(arrays['active_sets']), metadata['vocab_size'], metadata['capacity'])


def clusters_directory(workdir: str, direction: str) -> str:
  """Where fastmt-clusters saves a direction's clusters (decode.py's default --clusters)."""
  return os.path.join(workdir, 'clusters', direction)


def build_for_workdir(workdir: str, direction: str, sources, num_clusters: int, top_k: int,
                      iterations: int = 20, kmeans_batch: int | None = 8192, seed: int = 0, checkpoint='latest'):
  if num_clusters < 1 or top_k < 1:
    raise FastmtError(f'num_clusters and top_k must be >= 1, got {num_clusters} and {top_k}')
  if not any(s.strip() for s in sources):
    raise FastmtError('no source sentences to record decoder states from (an empty or blank input, or '
                      '--max_sentences 0)')
  model_config = workdir_lib.load_model_config(workdir)
  objective = workdir_lib.load_objective(workdir)
  try:  # before the checkpoint loads, and said as what it means here (fastmt-clusters has no --algorithm)
    registry.check_objective('greedy', objective)
  except FastmtError:
    if registry.default_algorithm(objective) == 'greedy':  # an objective this process does not know (a plugin's
      raise  # not imported): the registry's own message says what to import
    raise FastmtError(f'clusters are fitted to the decoder states of greedy decoding, which a model trained with '
                      f'objective {objective!r} does not decode with (it decodes with '
                      f'{registry.default_algorithm(objective)}): fastmt-clusters, and so the clustered projection, '
                      'are for models greedy decodes') from None
  if top_k > model_config.vocab_size:  # jax.lax.top_k's traceback, after the decoding
    raise FastmtError(f'top_k {top_k} is above the vocabulary size {model_config.vocab_size}')
  params, step = workdir_lib.restore_params(workdir, model_config, checkpoint)
  tokenizer = workdir_lib.load_tokenizer(workdir)
  translator = Translator(model_config, params, tokenizer, DecodeSettings('greedy'), objective=objective)
  hidden, top = record_states(translator, sources, top_k)
  if len(hidden) < num_clusters:
    raise FastmtError(f'{len(sources)} sentences gave {len(hidden)} decoder states, fewer than --num_clusters '
                      f'{num_clusters}: give more sentences (--max_sentences) or fewer clusters')
  centroids = projection.fit_kmeans(hidden, num_clusters, iterations, kmeans_batch, seed)
  clusters = projection.build_clusters(hidden, top, centroids, model_config.vocab_size)
  directory = clusters_directory(workdir, direction)
  save_clusters(directory, clusters, {'fingerprint': fingerprint(model_config, tokenizer, params),
                                      'direction': direction, 'checkpoint_step': step, 'states': len(hidden),
                                      'top_k': top_k, 'num_clusters': num_clusters})
  logging.info('Saved %d clusters (capacity %d) from %d states to %s', num_clusters, clusters.capacity,
               len(hidden), directory)
  return clusters


FLAGS = flags.FLAGS


def define_flags():
  """The CLI's flags, defined only when it runs as a program: importing this module as a library
  registers nothing, so any set of fastmt modules imports together."""
  flags.DEFINE_string('workdir', None, 'A train.py work directory.')
  cli.define_checkpoint_flag()
  cli.define_plugins_flag()
  flags.DEFINE_string('direction', None, 'Language direction name, e.g. en_de (the clusters sub-directory).')
  flags.DEFINE_string('input', None, 'Unlabelled source text; default: the workdir dataset\'s training sources.')
  flags.DEFINE_bool('tag_inputs', False, 'Prefix --input lines with the --direction\'s target-language tag '
                    '(multilingual models).')
  flags.DEFINE_integer('max_sentences', 5000, 'Source sentences to record.')
  flags.DEFINE_integer('num_clusters', 500, 'k-means centroids.')
  # The setting the benchmark chose on validation (docs/BENCHMARKS.md section 3): C=500, K=5.
  flags.DEFINE_integer('top_k', 5, 'Likely tokens per state that enter the active sets.')


def _check_direction_of_the_dataset(workdir: str, direction: str) -> None:
  """A Bible dataset names its directions ('bible/en_de': en_de; 'bible/en_de+en_fr': either); clusters saved
  under another name were recorded as of a direction the model never translates. Other datasets ('text',
  tfds) name none: any name is the user's."""
  dataset = workdir_lib.load_train_config(workdir).dataset
  name = dataset.name
  if not name.startswith('bible/'):
    return
  directions = name.split('/', 1)[1].split('+')
  if dataset.get('reverse') and len(directions) == 1:  # bible/en_de reversed translates de_en (en_de: as before)
    directions.insert(0, '_'.join(reversed(directions[0].split('_'))))
  if direction not in directions:
    raise FastmtError(f'--direction {direction!r}: {workdir} was trained on {name}, whose directions are '
                      f'{", ".join(directions)}')


def main(argv):
  del argv  # cli.run refuses positional arguments
  logging.set_verbosity(logging.WARNING)  # orbax and tfds log every read at INFO
  cli.import_plugins(FLAGS.plugins)  # a model trained with an objective of the user's own
  if FLAGS.max_sentences < 1:
    raise FastmtError(f'--max_sentences must be >= 1, got {FLAGS.max_sentences}')
  if FLAGS.num_clusters < 1 or FLAGS.top_k < 1:  # build_for_workdir says so too, after the corpus loaded
    raise FastmtError(f'num_clusters and top_k must be >= 1, got {FLAGS.num_clusters} and {FLAGS.top_k}')
  directory = clusters_directory(FLAGS.workdir, FLAGS.direction)
  if os.path.exists(directory) and not os.path.isdir(directory):  # found before minutes of decoding, not after
    raise FastmtError(f'{directory} (where the clusters of --direction {FLAGS.direction} go) is a file, not a '
                      'directory: move it away or choose another --direction name')
  _check_direction_of_the_dataset(FLAGS.workdir, FLAGS.direction)
  if FLAGS.tag_inputs and not FLAGS.input:
    logging.warning('--tag_inputs has no effect without --input (the dataset\'s own sources are read as the model '
                    'trained on them)')
  if FLAGS.tag_inputs and FLAGS.input:  # as decode.py: a tag the vocabulary lacks is spelt in pieces, not obeyed
    corpus.check_tag(corpus.language_tag(FLAGS.direction), FLAGS.direction,
                     workdir_lib.load_tokenizer(FLAGS.workdir), '--tag_inputs')
  if FLAGS.input:
    sources = corpus.read_lines(FLAGS.input)
    if FLAGS.tag_inputs:
      sources = corpus.tag_sources(sources, FLAGS.direction)
  else:
    dataset = workdir_lib.load_train_config(FLAGS.workdir).dataset
    train = corpus.load_split(dataset, corpus.training_split(dataset))
    sources = (train.select(FLAGS.direction) if train.directions is not None else train).sources
  clusters = build_for_workdir(FLAGS.workdir, FLAGS.direction, sources[:FLAGS.max_sentences], FLAGS.num_clusters,
                               FLAGS.top_k, checkpoint=FLAGS.checkpoint)
  print(f'Saved {FLAGS.num_clusters} clusters (capacity {clusters.capacity}) to {directory}')


def run():
  cli.run(main, define_flags, required=('workdir', 'direction'))


if __name__ == '__main__':
  run()
