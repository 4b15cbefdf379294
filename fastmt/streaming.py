"""Chunks of a stream's items as they arrive, for translating an interactive or socket-fed input line by line.

Decoding reads its input a chunk of lines at a time (sorting a chunk by length makes batches of similar
lengths). A fixed-size chunk waits for all its lines: with a person typing into `fastmt-translate`, or a
generator fed by a queue or a socket, the first translation would come only after thousands of lines or the
end of the input. `available_chunks` instead makes each chunk of the items that have arrived: it waits for one,
then takes the others already there, up to a chunk's size. A reader thread pulls the items ahead of the
consumer (at most two chunks ahead, so memory stays bounded); a file's lines arrive far faster than they are
translated, so after the first chunk its chunks are full. A consumer that stops early (closes the generator,
or drops it) stops the reader too: it takes at most the item it is waiting for from the source, and no more.
The items it had read ahead (up to two chunks) are gone from the source with it: a caller that means to read
the rest of a stream itself after stopping should give this only the items it wants translated.
"""

import queue
import sys
import threading
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar('T')

_END = object()


class _Raised:  # an exception of the source, handed to the consumer in its place in the stream
  def __init__(self, error: BaseException):
    self.error = error


def available_chunks(items: Iterable[T], max_items: int) -> Iterator[list[T]]:
  """Lists of the items of `items` in order, each of at least one item and at most max_items: an item the
  source has not produced yet is waited for only when the chunk would otherwise be empty. An exception of the
  source is raised here in its place in the stream (the items before it come first, in earlier chunks or, in
  the chunk being filled, discarded with it, as when a fixed-size chunk's reading fails). Closing the generator
  stops the reader after the item it is reading; the reader is a daemon thread, so a source that never yields
  again (a silent socket) holds it but never the process's exit."""
  if max_items < 1:
    raise ValueError(f'max_items must be >= 1, got {max_items}')
  arrived = queue.Queue(maxsize=2 * max_items)  # >= 2: what the reader puts after the consumer's drain fits
  stopped = threading.Event()

  def read():
    # The reader holds stdin's text wrappers for as long as it lives. It may be waiting in a read of stdin (a
    # pipe, a terminal) holding its buffer's lock when the program ends (Ctrl-C, SIGTERM, an error); the
    # interpreter then frees sys.stdin, and closing it would take that lock: 'Fatal Python error:
    # _enter_buffered_busy', exit status 134, where the program meant 130, 143 or its own. What a live
    # thread's frame holds is never freed.
    stdin_wrappers = (sys.stdin, sys.__stdin__)  # noqa: F841  # pylint: disable=unused-variable
    try:
      source = iter(items)
      # The check comes before each pull, so also after a put that waited for the consumer: gone meanwhile, it
      # gets nothing more taken from the source (a `for` loop would pull one item more and drop it).
      while not stopped.is_set():
        try:
          item = next(source)
        except StopIteration:
          break
        arrived.put(item)
      else:
        return  # the consumer has gone: take nothing more from the source
    except BaseException as e:  # pylint: disable=broad-except  # re-raised by the consumer
      arrived.put(_Raised(e))
    else:
      arrived.put(_END)

  reader = threading.Thread(target=read, name='fastmt-available-chunks', daemon=True)
  reader.start()
  try:
    done = False
    while not done:
      chunk = []
      item = arrived.get()  # the one wait: the chunk is empty
      while True:
        if item is _END:
          done = True
          break
        if isinstance(item, _Raised):
          raise item.error
        chunk.append(item)
        if len(chunk) == max_items:
          break
        try:
          item = arrived.get_nowait()
        except queue.Empty:
          break
      if chunk:
        yield chunk
  finally:
    # Unblock a reader waiting on a full queue: after this drain it can put at most one item (the one it was
    # reading) and then _END or an error, and the queue holds at least two, before it sees `stopped`.
    stopped.set()
    while True:
      try:
        arrived.get_nowait()
      except queue.Empty:
        break
