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
  # The reader was waiting to put an item it had taken, not reading one: it takes nothing more (it once took
  # one more item and dropped it, lost to a caller that goes on reading the source).
  assert len(taken) == taken_when_closed


@pytest.mark.parametrize('source', ['sys.stdin', '(line for line in sys.stdin.buffer)'])
def test_a_program_that_ends_while_the_reader_waits_on_stdin_exits_with_its_own_status(source):
  """The reader waits in a read of stdin (a pipe kept open) when the program ends: its exit status is its own,
  not 134 from 'Fatal Python error: _enter_buffered_busy' (the interpreter closing the stdin that the reader's
  read holds locked; decode.py hit it on Ctrl-C and SIGTERM). A generator over sys.stdin.buffer is the case that
  aborted (-6) before the reader held stdin itself; sys.stdin as the source is held as `items` either way."""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  program = (f'import sys\nfrom fastmt.streaming import available_chunks\n'
             f'chunks = available_chunks({source}, 4)\nprint(next(chunks), flush=True)\n'
             'import time; time.sleep(0.3)  # the reader is back in its read of the open pipe\nsys.exit(3)\n')
  process = subprocess.Popen([sys.executable, '-c', program], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
  process.stdin.write(b'first line\n')
  process.stdin.flush()  # and kept open: the reader waits for a second line
  try:
    process.wait(timeout=60)  # not communicate(), which would close stdin: the reader would see its end
    stderr = process.stderr.read()
  finally:
    process.kill()
    process.stdin.close()
  assert process.returncode == 3, stderr.decode()
  assert b'Fatal Python error' not in stderr
