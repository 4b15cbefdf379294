r"""Test perplexity of models under their own training objective, and the PMI estimate of the interleaved
paper's Table 3 (Appendix B, Eq. 13): PMI(model) = log ppl(model) - log ppl(base), in base-10 logs as the
paper's figures are (its Table 3: log10(6.95 / 4.04) = 0.235 for SA).

    python benchmarks/test_perplexity.py --base runs/ib/at_kd_avg5 \
        --workdirs runs/ib/sa_kd_avg5,runs/ib/ib_kd_avg5,runs/ib/ib_sa_kd_avg5,runs/ib/im_kd_avg5

Every model scores the test split's reference targets teacher-forced, exactly as training scores them (its
objective's reordering, positions and mask); the perplexity is exp(total NLL / reference tokens), the
reference tokens being the words plus one EOS per sentence for every model (an interleaved model's extra EOS
predictions in its last step count in its NLL, not in the denominator). A model that predicts two words
independently where the base predicts them one after the other has a higher perplexity by about their
average pointwise mutual information: the paper finds 0.235 for left-to-right SA and -0.014 for IBDecoder.
The paper's base for IBDecoder is a bidirectional model predicting one word per step; the base here is the
left-to-right AT model for every row, so only SA's row estimates exactly the paper's quantity.
"""

import argparse
import math
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fastmt import models, objectives, train_lib, workdir as workdir_lib  # noqa: E402
from fastmt.data import batching, corpus  # noqa: E402
from fastmt.data.tokenizer import PAD_ID  # noqa: E402


def test_nll(workdir: str, split: str = 'test', tokens_per_batch: int = 4096) -> tuple[float, int]:
  """(total NLL over the split's references, reference tokens) for a work directory's latest checkpoint."""
  config = workdir_lib.load_train_config(workdir)
  model_config = workdir_lib.load_model_config(workdir)
  params, _ = workdir_lib.restore_params(workdir, model_config)
  tokenizer = workdir_lib.load_tokenizer(workdir)
  name = workdir_lib.load_objective(workdir)
  objective = objectives.build(name, workdir_lib.load_objective_options(workdir), tokenizer,
                               config.num_train_steps)
  data = corpus.load_split(config.dataset, split)
  src, tgt, _, _ = batching.prepare_pairs(tokenizer.encode(data.sources), tokenizer.encode(data.targets),
                                          model_config.max_length, split=split)
  buckets = [b for b in config.bucket_lengths if b < model_config.max_length] + [model_config.max_length]
  batches, _ = batching.validation_batches(src, tgt, buckets, tokens_per_batch)  # every pair once
  model = models.Transformer(model_config)
  step = jax.jit(lambda p, b: train_lib.eval_step(p, b, config.num_train_steps, model.apply, objective))
  nll, tokens = 0.0, 0
  for batch in batches:
    arrays = {'source': batch.source, 'decoder_input': batch.decoder_input, 'target': batch.target}
    nll += float(step(params, {k: jnp.asarray(v) for k, v in arrays.items()})['nll'])
    tokens += int((np.asarray(batch.target) != PAD_ID).sum())
  return nll, tokens


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--base', required=True)
  parser.add_argument('--workdirs', required=True)
  parser.add_argument('--split', default='test')
  args = parser.parse_args()
  base_nll, base_tokens = test_nll(args.base, args.split)
  base_log_ppl = base_nll / base_tokens
  print('| model | objective | test ppl | estimated PMI |')
  print('|---|---|---|---|')
  print(f'| {os.path.basename(os.path.normpath(args.base))} | {workdir_lib.load_objective(args.base)} | '
        f'{math.exp(base_log_ppl):.3f} | 0 |')
  for workdir in args.workdirs.split(','):
    nll, tokens = test_nll(workdir, args.split)
    if tokens != base_tokens:
      raise SystemExit(f'{workdir} scores {tokens} reference tokens, the base {base_tokens}: another vocabulary?')
    log_ppl = nll / tokens
    options = workdir_lib.load_objective_options(workdir)
    factorisation = f" ({options['directions']}, {options['words_per_direction']})" if 'directions' in options else ''
    print(f'| {os.path.basename(os.path.normpath(workdir))} | {workdir_lib.load_objective(workdir)}{factorisation} | '
          f'{math.exp(log_ppl):.3f} | {(log_ppl - base_log_ppl) / math.log(10):.3f} |')


if __name__ == '__main__':
  main()
