r"""The decoders' compiled programs as fingerprints: sha256 of the StableHLO each method lowers to.

A change meant to act at trace time only (argument checks, messages) leaves every fingerprint as it was; run
this against two checkouts and compare, instead of timing two versions on a drifting machine:

    python benchmarks/lowered_programs.py --workdir runs/quickstart > new.txt
    PYTHONPATH=<a worktree of the older commit> python benchmarks/lowered_programs.py \
        --workdir runs/quickstart > old.txt
    diff old.txt new.txt    # nothing: the same programs run
"""

import hashlib
import re

from absl import app, flags
import jax
import jax.numpy as jnp

import fastmt
from fastmt import bench

FLAGS = flags.FLAGS
flags.DEFINE_string('workdir', None, 'A trained work directory.')
flags.DEFINE_list('methods', ['greedy', 'beam:4', 'pgj:3', 'hgj:3', 'spec:3+ngram', 'spec:3+int8', 'greedy@int8'],
                  'Bench method names (fastmt.bench.parse_method).')
flags.DEFINE_list('shapes', ['1x16', '32x32'], 'rows x source bucket.')


def fingerprint(translator, rows: int, bucket: int) -> str:
  spec = lambda shape: jax.ShapeDtypeStruct(shape, jnp.int32, sharding=translator.rows_sharding)
  recent = jax.ShapeDtypeStruct((translator.recent_size,), jnp.int32) if translator.recent_size else None
  # pylint: disable-next=protected-access
  text = translator._decode.lower(translator.params, spec((rows, bucket)), spec((rows,)),
                                  translator.clusters, translator.draft_table, translator.output_projection,
                                  translator.drafter, recent).as_text()
  text = re.sub(r'loc\(.*?\)', '', text)  # source locations: line numbers of the Python that traced it
  return hashlib.sha256(text.encode()).hexdigest()[:16]


def main(argv):
  del argv
  models = {}
  for method in FLAGS.methods:
    _, settings, dtype = bench.parse_method(method)
    model = models.setdefault(dtype, fastmt.load(FLAGS.workdir, dtype=dtype))
    translator = model._translator(settings, None, None)  # pylint: disable=protected-access  (bench's way)
    for shape in FLAGS.shapes:
      rows, bucket = map(int, shape.split('x'))
      print(f'{method} {shape} {fingerprint(translator, rows, bucket)}', flush=True)


if __name__ == '__main__':
  flags.mark_flag_as_required('workdir')
  app.run(main)
