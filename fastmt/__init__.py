"""fastmt: fast neural machine translation in JAX/Flax.

    import fastmt
    model = fastmt.load('runs/quickstart', checkpoint='best')
    model.translate(['In the beginning God created the heavens and the earth.'], algorithm='pgj', block_size=3)

  fastmt.load / fastmt.api   a trained work directory as a TranslationModel (translate, translate_iter)
  fastmt.decoding            greedy, beam, Jacobi (PJ/PGJ/HGJ): pure functions of any decoder-step callable
  fastmt.models              the Transformer and its explicit decoder step
  fastmt.objectives          training objectives (what the decoder learns to predict)
  fastmt.train_lib           train_and_evaluate(config, workdir)
  fastmt.workdir             configs, vocabulary and checkpoints of a work directory
  fastmt.bench               every method side by side; fastmt.ddgviz: Jacobi traces
  fastmt.errors              FastmtError: bad input, reported in one line by the command-line tools
"""

__version__ = '0.1.0'
__all__ = ['FastmtError', 'TranslationModel', 'load']


def load(workdir: str, checkpoint='latest', dtype: str = 'float32'):
  """A trained work directory as a fastmt.api.TranslationModel (see fastmt.api.load)."""
  from fastmt import api  # pylint: disable=g-import-not-at-top  (keeps `import fastmt` free of JAX)
  return api.load(workdir, checkpoint, dtype)


def __getattr__(name):
  if name == 'TranslationModel':
    from fastmt.api import TranslationModel  # pylint: disable=g-import-not-at-top
    return TranslationModel
  if name == 'FastmtError':
    from fastmt.errors import FastmtError  # pylint: disable=g-import-not-at-top
    return FastmtError
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
