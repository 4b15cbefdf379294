"""fastmt: fast neural machine translation in JAX/Flax.

    import fastmt
    model = fastmt.load('runs/quickstart')
    model.translate(['In the beginning God created the heavens and the earth.'], algorithm='pgj', block_size=3)

  fastmt.load / fastmt.api   a trained work directory as a TranslationModel (translate, translate_iter)
  fastmt.decoding            greedy, beam, Jacobi (PJ/PGJ/HGJ): pure functions of any decoder-step callable
  fastmt.models              the Transformer and its explicit decoder step
  fastmt.objectives          training objectives (what the decoder learns to predict)
  fastmt.train_lib           train_and_evaluate(config, workdir)
  fastmt.workdir             configs, vocabulary and checkpoints of a work directory
  fastmt.bench               every method side by side; fastmt.ddgviz: Jacobi traces
  fastmt.width               spec's window chosen by timing (greedy where no window pays)
  fastmt.quantize            8-bit weights (int8 inference; fastmt.kernels: its XLA:CPU kernel)
  fastmt.few_rows            float32 products of at most 8 rows through fastmt's own CPU kernel (float32_kernel)
  fastmt.precision           a model's weights for a decoding dtype (float32, bfloat16, int8, ...)
  fastmt.errors              FastmtError: bad input, reported in one line by the command-line tools
"""

__version__ = '0.1.0'
__all__ = ['FastmtError', 'TranslationModel', 'TranslationStats', 'load']


def _configs_of_a_source_checkout():
  """Makes the checkout's configs/ folder `fastmt.configs` when fastmt runs from a plain clone.

  setup.cfg installs configs/ as fastmt.configs (`pip install -e .`, `make setup`). A clone run without
  installing (`python train.py ...` with the dependencies present: a lent GPU machine, a Colab cell) would
  otherwise fail on `from fastmt import configs`; the folder beside this package is the same files. Only in
  fastmt's own checkout (its setup.cfg maps that folder so): another project's `configs` is never taken.
  """
  import importlib.util  # pylint: disable=g-import-not-at-top
  import os  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  if importlib.util.find_spec(f'{__name__}.configs') is not None:
    return
  checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  folder = os.path.join(checkout, 'configs')
  try:
    with open(os.path.join(checkout, 'setup.cfg'), encoding='utf-8') as f:
      ours = 'fastmt.configs = configs' in f.read()
  except OSError:
    ours = False
  if not ours or not os.path.isfile(os.path.join(folder, '__init__.py')):
    return
  spec = importlib.util.spec_from_file_location(f'{__name__}.configs', os.path.join(folder, '__init__.py'),
                                                submodule_search_locations=[folder])
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module
  try:
    spec.loader.exec_module(module)
  except BaseException:
    del sys.modules[spec.name]  # as the import system does: no half-made module stays behind
    raise
  setattr(sys.modules[__name__], 'configs', module)  # what the import system does for a found submodule


_configs_of_a_source_checkout()


def load(workdir: str, checkpoint='latest', dtype: str = 'float32', float32_kernel: bool = False):
  """A trained work directory as a fastmt.api.TranslationModel (see fastmt.api.load)."""
  from fastmt import api  # pylint: disable=g-import-not-at-top  (keeps `import fastmt` free of JAX)
  return api.load(workdir, checkpoint, dtype, float32_kernel)


def _submodules() -> list[str]:
  import pkgutil  # pylint: disable=g-import-not-at-top
  return [module.name for module in pkgutil.iter_modules(__path__) if not module.name.startswith('_')]


def __dir__():
  return sorted(set(globals()) | set(__all__) | set(_submodules()))


def __getattr__(name):
  # `fastmt.decoding` (any submodule) after a bare `import fastmt`, imported on first use: `import fastmt`
  # itself stays free of JAX.
  if not name.startswith('_') and name in _submodules():
    import importlib  # pylint: disable=g-import-not-at-top
    return importlib.import_module(f'{__name__}.{name}')
  if name == 'TranslationModel':
    from fastmt.api import TranslationModel  # pylint: disable=g-import-not-at-top
    return TranslationModel
  if name == 'TranslationStats':
    from fastmt.translate import TranslationStats  # pylint: disable=g-import-not-at-top
    return TranslationStats
  if name == 'FastmtError':
    from fastmt.errors import FastmtError  # pylint: disable=g-import-not-at-top
    return FastmtError
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
