"""fastmt: fast neural machine translation in JAX/Flax.

  fastmt.models      the Transformer and its explicit decoder step
  fastmt.decoding    greedy, beam, Jacobi (PJ/PGJ/HGJ): pure functions of a decoder-step callable
  fastmt.train_lib   train_and_evaluate(config, workdir)
  fastmt.translate   Translator: text in, text out, in input order
  fastmt.bench       every method side by side; fastmt.ddgviz: Jacobi traces
"""

__version__ = '0.1.0'
