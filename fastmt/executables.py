"""The process's compiled decoders kept under Linux's limit on memory mappings (vm.max_map_count).

XLA:CPU loads every kernel of a compiled program as code and data mappings of its own: on this project's
machines about 250 mappings for the quickstart model's greedy decoder and 650 for its spec:8+int8 decoder (390
and 930 on a model of Transformer-base's shape), for each (rows, source bucket) shape a Translator compiles
(benchmarks/compiled_mappings.py). Linux lets a process hold vm.max_map_count mappings
(65,530 by default) however much memory is free, and XLA aborts the whole process ("LLVM compilation error:
Cannot allocate memory ... Unable to allocate section memory") when a compile meets that limit. A Translator
keeps every shape it met, so a server that sees many batch sizes and source lengths, or a benchmark of many
methods on a large model (docs/BENCHMARKS.md section 7), reached it.

So before each compile, `make_room` drops the least recently used compiled decoders of the whole process (any
Translator's) while the process holds more than HIGH_WATER of the limit; a dropped shape compiles again when
it is met again (its time counted in TranslationStats.compile_seconds, the drops in `dropped()`). Where dropping
every one still leaves the process past REFUSE_AT of the limit (other programs hold the mappings: jax.jit's
caches), JAX's compilation caches are cleared (jax.clear_caches; their programs compile again when called), and
only where that is not enough either is the compile refused, with a FastmtError instead of the abort. Dropping a
compiled program does give its mappings back (4 greedy shapes of the quickstart model: +1,012 mappings compiled,
+6 after dropping them). Where the limit cannot be read (not Linux), nothing is dropped.
"""

import collections
import logging
import threading
import weakref

from fastmt.errors import FastmtError

logger = logging.getLogger(__name__)  # named 'fastmt.<module>': users set its level or handlers by name

HIGH_WATER = 0.75  # drop compiled decoders while the process holds more than this share of the limit
REFUSE_AT = 0.95  # past this share with nothing left to drop, a compile is refused rather than risked
SWEEP_AT_LEAST = 1024  # entries remembered before the first sweep of owners that went away
MAPS_PATH = '/proc/self/maps'
LIMIT_PATH = '/proc/sys/vm/max_map_count'


def map_count(path: str = MAPS_PATH) -> int | None:
  """The memory mappings this process holds (lines of /proc/self/maps); None where there is no such file."""
  try:
    with open(path, 'rb') as f:
      return sum(1 for _ in f)
  except OSError:
    return None


def map_limit(path: str = LIMIT_PATH) -> int | None:
  """Linux's vm.max_map_count; None where it cannot be read."""
  try:
    with open(path) as f:
      return int(f.read().split()[0])
  except (OSError, ValueError, IndexError):
    return None


class CompiledDecoders:
  """Which compiled decoders of the process were used least recently, and dropping them under the limit.

  An owner (a Translator) keeps its compiled programs in its own dict `owner._compiled`, keyed by shape; this
  only remembers the order of use, through weak references, so an owner that goes away takes its programs with
  it. count and limit: functions returning the mappings held and allowed (tests pass fake ones).
  """

  def __init__(self, count=map_count, limit=map_limit, high_water: float = HIGH_WATER,
               refuse_at: float = REFUSE_AT, clear_other_caches=None):
    self.count, self.limit = count, limit
    self.clear_other_caches = clear_other_caches or _clear_jax_caches
    self.high_water, self.refuse_at = high_water, refuse_at
    self._order = collections.OrderedDict()  # (weakref to owner, key) -> None, the least recently used first
    self._lock = threading.Lock()
    self.dropped = 0  # compiled decoders dropped to stay under the limit, in this process
    # The order's length at which entries of owners that went away are swept out (a trainer builds a Translator
    # for every validation, each compiling its shapes): the sweep costs the length, so it waits for it to double.
    self._sweep_at = SWEEP_AT_LEAST

  def used(self, owner, key) -> None:
    """owner's program `key` ran (or was just compiled): it becomes the most recently used."""
    with self._lock:
      entry = (weakref.ref(owner), key)
      if entry in self._order:
        self._order.move_to_end(entry)

  def kept(self, owner, key) -> None:
    """owner compiled program `key`: the most recently used."""
    with self._lock:
      self._order[(weakref.ref(owner), key)] = None
      if len(self._order) >= self._sweep_at:
        for entry in [entry for entry in self._order if entry[0]() is None]:
          del self._order[entry]
        self._sweep_at = max(SWEEP_AT_LEAST, 2 * len(self._order))

  def make_room(self) -> None:
    """Drops least recently used programs while the process holds more than high_water of the limit; raises a
    FastmtError where it still holds more than refuse_at of it with nothing left to drop."""
    limit = self.limit()
    held = self.count() if limit else None
    if not limit or held is None or held <= self.high_water * limit:
      return
    with self._lock:
      before = self.dropped
      while held > self.high_water * limit and self._order:
        # One at a time, counted again after each: programs differ in size by the model and the algorithm
        # (a count reads /proc/self/maps, some ms at these sizes, only when over the high water).
        ref, key = self._order.popitem(last=False)[0]
        owner = ref()
        if owner is not None and owner._compiled.pop(key, None) is not None:  # pylint: disable=protected-access
          self.dropped += 1
          held = self.count()
      now_dropped = self.dropped - before
    if now_dropped:  # a warning the first time (a server's operator may raise the limit), then info
      logger.log(logging.WARNING if before == 0 else logging.INFO,
                 'Dropped %d compiled decoders to stay under vm.max_map_count (%d of %d mappings held now; %d '
                 'dropped in this process): a dropped shape compiles again when met', now_dropped, held, limit,
                 self.dropped)
    if held > self.refuse_at * limit:
      # What holds them is compiled elsewhere in the process (jax.jit's caches: a trainer's steps, a test
      # suite's hundreds of programs; a pytest worker reached 62,416 here). Those caches compile again on
      # their next call; clearing them is better than XLA's abort or a refusal.
      logger.warning('%d of %d memory mappings held with no compiled decoder left to drop: clearing JAX\'s '
                     'compilation caches (jax.clear_caches; their programs compile again when called)', held,
                     limit)
      self.clear_other_caches()
      held = self.count()
    if held > self.refuse_at * limit:
      raise FastmtError(
          f'This process holds {held} memory mappings of the {limit} Linux allows it (vm.max_map_count) and no '
          'compiled decoder is left to drop; compiling another could abort the process inside XLA. Raise the '
          'limit (sysctl -w vm.max_map_count=262144) or compile fewer programs in one process')

  def __len__(self) -> int:
    with self._lock:
      return sum(1 for ref, _ in self._order if ref() is not None)


def _clear_jax_caches() -> None:
  import gc  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  jax.clear_caches()
  gc.collect()  # the executables go with their last reference


# The one registry of the process: the limit is the process's, whatever Translator holds the programs.
PROCESS = CompiledDecoders()


def dropped() -> int:
  """Compiled decoders this process dropped to stay under vm.max_map_count."""
  return PROCESS.dropped
