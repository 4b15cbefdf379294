"""fastmt.streaming.available_chunks: the items in order, in chunks of what has arrived."""

import threading
import time

import pytest

from fastmt.streaming import available_chunks


def test_chunks_hold_every_item_in_order_and_at_most_max_items():
  chunks = list(available_chunks(range(1000), 7))
  assert [i for chunk in chunks for i in chunk] == list(range(1000))
  assert all(1 <= len(chunk) <= 7 for chunk in chunks)
  assert list(available_chunks([], 3)) == []


def test_a_chunk_does_not_wait_for_items_that_have_not_arrived():
  second_asked = threading.Event()
  first_chunk_out = threading.Event()

  def slow():
    yield 'a'
    yield 'b'
    second_asked.set()
    if not first_chunk_out.wait(timeout=30):
      raise AssertionError('the first chunk waited for the third item')
    yield 'c'
  chunks = []
  for chunk in available_chunks(slow(), 5):
    if not chunks:
      second_asked.wait(timeout=30)  # 'a' and 'b' have both arrived (or the source is stuck: the next line fails)
    chunks.append(chunk)
    first_chunk_out.set()
  assert [i for chunk in chunks for i in chunk] == ['a', 'b', 'c'] and len(chunks) >= 2


def test_the_sources_error_comes_in_its_place():
  def broken():
    yield 1
    yield 2
    raise ValueError('line 3: invalid UTF-8')
  seen = []
  with pytest.raises(ValueError, match='line 3'):
    for chunk in available_chunks(broken(), 1):
      seen.extend(chunk)
  assert seen == [1, 2]
  with pytest.raises(ValueError, match='max_items must be >= 1'):
    next(available_chunks([1], 0))


def _readers():
  return [t for t in threading.enumerate() if t.name == 'fastmt-available-chunks']


def test_a_consumer_that_stops_early_stops_the_reader_and_leaves_the_rest_of_the_source():
  taken = []

  def endless():
    i = 0
    while True:
      taken.append(i)
      yield i
      i += 1
  before = set(_readers())
  chunks = available_chunks(endless(), 3)
  assert next(chunks)
  reader, = set(_readers()) - before
  for _ in range(3000):  # until the reader has filled the queue (two chunks) and waits to put one more
    if len(taken) >= 1 + 6 + 1:
      break
    time.sleep(0.01)
  taken_when_closed = len(taken)
  chunks.close()
  reader.join(timeout=30)
  assert not reader.is_alive()
  assert len(taken) <= taken_when_closed + 1  # at most the item it was reading when the consumer left
