r"""Inference variants on XLA:CPU side by side: the output projection's layout and how matmuls reach YNNPACK.

    python benchmarks/cpu_variants.py --workdir runs/quickstart --methods greedy,pgj:3 --limit 300 \
        --variants tied,E^T,E^T+individual_dot,E^T+no_ynn

Every method runs once per variant in one process, interleaved (fastmt.bench.measure), labelled
`method[variant]`; speed-ups are to the first method's first variant, and '= greedy' counts its outputs
against that one. Variants:
  tied            the tied projection read through a transpose (Flax's Embed.attend) at every step
  E^T             calls over several positions or rows project with a contiguous [E, V] copy made once
                  (Translator transposed_output, the library default since 2026-11-23)
  default         whatever Translator does by default (XLA's default fusions)
  individual_dot  XLA:CPU hands each matmul to YNNPACK on its own (xla_cpu_experimental_ynn_fusion_type =
                  individual_dot) instead of fusing whole layer stacks into one YNNPACK graph
  no_ynn          no YNNPACK fusions at all (XLA's own kernels)
  kernel          products of at most 8 rows through fastmt's float32 kernel (Translator float32_kernel, fastmt.few_rows)
and '+'-joined combinations (E^T+individual_dot). Compile options are per executable, so variants that
differ in them still share one process.
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
flags.DEFINE_list('variants', ['tied', 'E^T'], 'Variants (see the module docstring), the first is the baseline.')
flags.DEFINE_string('split', 'test', 'Split to translate.')
flags.DEFINE_integer('limit', 300, 'Sentences (0 = all).')
flags.DEFINE_integer('batch_size', 32, 'The large batch.')
flags.DEFINE_integer('speed_sentences', 100, 'Sentences timed at batch 1.')
flags.DEFINE_integer('large_batch_sentences', 256, 'Sentences timed at --batch_size.')
flags.DEFINE_integer('repeats', 5, 'Timed repeats (median reported).')
flags.DEFINE_string('output', None, 'Write the results as JSON here.')

YNN = 'xla_cpu_experimental_ynn_fusion_type'
PARTS = {'default': {}, 'tied': {'transposed_output': False}, 'E^T': {'transposed_output': True},
         'individual_dot': {'compiler_options': {YNN: 'LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT'}},
         'no_ynn': {'compiler_options': {YNN: ''}}, 'kernel': {'float32_kernel': True}}


def variant_kwargs(variant: str) -> dict:
  kwargs = {}
  for part in variant.split('+'):
    if part not in PARTS:
      raise ValueError(f'Unknown variant part {part!r}; use {sorted(PARTS)} joined by +')
    kwargs.update(PARTS[part])
  return kwargs


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
    table = decode_lib.load_draft_table(workdir) if registry.uses_draft_table(settings) else None
    for variant in FLAGS.variants:
      translators[f'{label}[{variant}]'] = Translator(
          *precision.for_inference(config, params, dtype), tokenizer, settings, draft_table=table,
          objective=objective, objective_options=options, **variant_kwargs(variant))
  baseline = next(iter(translators))
  results, _, _ = bench.measure(translators, sources, references, FLAGS.batch_size, FLAGS.speed_sentences,
                                FLAGS.large_batch_sentences, FLAGS.repeats, exactness_at_batch1=False,
                                baseline=baseline)
  print(bench.format_table(results, FLAGS.batch_size))
  if FLAGS.output:
    with open(FLAGS.output, 'w') as f:
      json.dump({'results': [r.__dict__ for r in results],
                 'environment': bench.environment_facts(workdir=workdir, methods=FLAGS.methods,
                                                        variants=FLAGS.variants, sentences=len(sources))}, f,
                indent=1)


if __name__ == '__main__':
  flags.mark_flag_as_required('workdir')
  app.run(main)
