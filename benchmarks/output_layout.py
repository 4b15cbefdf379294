r"""The tied output projection read through a transpose (the default) or laid out once as E^T, side by side.

    python benchmarks/output_layout.py --workdir runs/quickstart --methods greedy,pgj:3 --limit 300

Every method runs twice in one process, interleaved (fastmt.bench.measure): as `method` (logits = hidden @ E^T
computed from E [V, E] at every step, Flax's Embed.attend) and as `method/E^T` (Translator's transposed_output:
a contiguous [E, V] copy made once). Outputs must be identical (the same products, summed in the same order
or not: the table's '= greedy' column counts them against the first method). Speed-ups are to the first method.
"""

import json
import os
import sys

from absl import app, flags, logging

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fastmt import bench, decode_lib, precision, workdir as workdir_lib  # noqa: E402
from fastmt.data import corpus  # noqa: E402
from fastmt.decoding import registry  # noqa: E402
from fastmt.translate import Translator  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string('workdir', None, 'A train.py work directory.')
flags.DEFINE_list('methods', ['greedy', 'pgj:3'], 'Methods as in fastmt.bench.')
flags.DEFINE_string('split', 'test', 'Split to translate.')
flags.DEFINE_integer('limit', 300, 'Sentences (0 = all).')
flags.DEFINE_integer('batch_size', 32, 'The large batch.')
flags.DEFINE_integer('speed_sentences', 100, 'Sentences timed at batch 1.')
flags.DEFINE_integer('repeats', 5, 'Timed repeats (median reported).')
flags.DEFINE_string('output', None, 'Write the results as JSON here.')


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  workdir = FLAGS.workdir
  data = corpus.load_split(workdir_lib.load_train_config(workdir).dataset, FLAGS.split)
  sources, references = data.sources, data.targets
  if FLAGS.limit:
    sources, references = sources[:FLAGS.limit], references[:FLAGS.limit]
  config = workdir_lib.load_model_config(workdir)
  params, _ = workdir_lib.restore_params(workdir, config)
  tokenizer = workdir_lib.load_tokenizer(workdir)
  objective = workdir_lib.load_objective(workdir)
  options = workdir_lib.load_objective_options(workdir)
  translators = {}
  for method in FLAGS.methods:
    label, settings, dtype = bench.parse_method(method)
    table = decode_lib.load_draft_table(workdir) if registry.needs_draft_table(settings) else None
    for transposed in (False, True):
      translators[label + ('/E^T' if transposed else '')] = Translator(
          *precision.for_inference(config, params, dtype), tokenizer, settings, draft_table=table,
          objective=objective, objective_options=options, transposed_output=transposed)
  results, _, _ = bench.measure(translators, sources, references, FLAGS.batch_size, FLAGS.speed_sentences,
                                repeats=FLAGS.repeats, exactness_at_batch1=False, baseline=FLAGS.methods[0])
  print(bench.format_table(results, FLAGS.batch_size))
  if FLAGS.output:
    with open(FLAGS.output, 'w') as f:
      json.dump([r.__dict__ for r in results], f, indent=1)


if __name__ == '__main__':
  flags.mark_flag_as_required('workdir')
  app.run(main)
