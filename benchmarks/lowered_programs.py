r"""A hash of each decoder's lowered program (StableHLO) on a tiny random model: run it in two checkouts to
show that a change leaves a decoder's compiled program as it was (or not).

    python benchmarks/lowered_programs.py                                   # this checkout
    git worktree add /tmp/before 69ede87 && (cd /tmp/before && python /path/to/benchmarks/lowered_programs.py)

It imports fastmt and the tests' random model from the current directory's checkout. The programs are those
of greedy, beam (K = 1), PGJ and HGJ called as fastmt's Translator calls them for its own models (fastmt's
special ids, no row caps); equal hashes mean an identical program, so identical outputs and speed.
"""

import hashlib
import os
import sys

sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), 'tests')]

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from conftest import model_step, random_model  # noqa: E402
from fastmt import models  # noqa: E402
from fastmt.decoding import beam, greedy, jacobi  # noqa: E402


def main():
  model, params = random_model(0)
  step_fn = model_step(model, params, jnp.ones((2, 5), jnp.int32))
  cache = lambda rows, slots: models.init_cache(model.config, rows, slots)
  decoders = {'greedy': lambda: greedy.greedy_search(step_fn, cache(2, 16), 2, 16),
              'beam1': lambda: beam.beam_search(step_fn, cache(2, 16), 2, 1, 16),
              'pgj3': lambda: jacobi.pgj_decode(step_fn, cache(2, 32), 2, 16, 3),
              'hgj3': lambda: jacobi.hgj_decode(step_fn, cache(2, 32), 2, 16, 3, parallel_length=5)}
  print(f'fastmt from {os.path.dirname(os.path.dirname(os.path.abspath(models.__file__)))}')
  for name, decode in decoders.items():
    text = jax.jit(decode).lower().as_text(debug_info=False)
    print(name, hashlib.sha256(text.encode()).hexdigest()[:16])


if __name__ == '__main__':
  main()
