"""The process's compiled decoders kept under vm.max_map_count (fastmt/executables.py): the least recently used
dropped first, an owner's programs gone with it, a clear error instead of XLA's abort, and a Translator that
meets more shapes than fit translating exactly as one that keeps them all."""

import gc
import logging
import weakref

import pytest

from fastmt import executables
from fastmt.errors import FastmtError
from fastmt.translate import DecodeSettings, Translator


class Owner:
  """A Translator's part the registry touches: its dict of compiled programs."""

  def __init__(self, *keys):
    self._compiled = {key: object() for key in keys}


def registry(held, limit=100, **kwargs):
  """A CompiledDecoders whose count is held() mappings of `limit`."""
  return executables.CompiledDecoders(count=held, limit=lambda: limit, **kwargs)


def test_the_least_recently_used_programs_are_dropped_until_under_the_high_water():
  a, b = Owner('a1', 'a2'), Owner('b1')
  live = lambda: 30 * (len(a._compiled) + len(b._compiled))  # 30 mappings a program
  decoders = registry(live)  # high water 75 of 100
  for owner, key in ((a, 'a1'), (b, 'b1'), (a, 'a2')):
    decoders.kept(owner, key)
  decoders.used(a, 'a1')  # a1 ran last: b1 is now the oldest, then a2
  assert live() == 90
  decoders.make_room()
  assert (sorted(a._compiled), sorted(b._compiled)) == (['a1', 'a2'], [])  # one drop is enough: 60
  assert decoders.dropped == 1
  decoders.make_room()  # under the high water: nothing more
  assert decoders.dropped == 1 and len(decoders) == 2


def test_each_drop_is_counted_again_so_a_large_program_ends_the_drops_sooner():
  owner = Owner('small', 'large', 'last')
  sizes = {'small': 5, 'large': 60, 'last': 30}
  decoders = registry(lambda: sum(sizes[k] for k in owner._compiled))  # 95
  for key in ('small', 'large', 'last'):
    decoders.kept(owner, key)
  decoders.make_room()  # 95 -> 90 -> 30
  assert list(owner._compiled) == ['last'] and decoders.dropped == 2


def test_an_owner_that_went_away_takes_its_programs_and_is_skipped():
  gone, kept = Owner('g'), Owner('k')
  held = [90]
  decoders = registry(lambda: held[0])
  decoders.kept(gone, 'g')
  decoders.kept(kept, 'k')
  del gone
  gc.collect()
  assert len(decoders) == 1
  decoders.make_room()  # the dead entry frees nothing it could count; the live one is dropped
  assert kept._compiled == {} and decoders.dropped == 1


def test_owners_that_went_away_do_not_pile_up_in_the_order():
  decoders = registry(lambda: 0)  # never over the limit: nothing drops them
  kept = Owner('k')
  decoders.kept(kept, 'k')
  for _ in range(5000):  # a trainer's validations: a Translator each, gone before the next
    decoders.kept(Owner('v'), 'v')
  assert len(decoders._order) <= executables.SWEEP_AT_LEAST and len(decoders) == 1
  decoders.used(kept, 'k')
  assert (weakref.ref(kept), 'k') in decoders._order


def test_jax_caches_are_cleared_before_a_compile_is_refused_with_a_clear_error():
  owner = Owner('p')
  held, cleared = [99], []
  clear = lambda: cleared.append(True)  # frees nothing: other mappings of the process hold the 99
  decoders = registry(lambda: held[0], clear_other_caches=clear)
  decoders.kept(owner, 'p')
  with pytest.raises(FastmtError, match=r'holds 99 memory mappings of the 100 .*vm\.max_map_count'):
    decoders.make_room()
  assert owner._compiled == {} and cleared == [True]  # dropped, then cleared, before giving up
  registry(lambda: 90, clear_other_caches=clear).make_room()  # past the high water, under refuse_at: compile
  assert cleared == [True]  # ... without clearing anything
  # Where clearing JAX's caches gives the mappings back (a test suite's jitted programs), the compile goes on.
  registry(lambda: held[0], clear_other_caches=lambda: held.__setitem__(0, 60)).make_room()
  assert held == [60]


def test_clearing_jax_caches_gives_their_mappings_back():
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  if executables.map_count() is None:
    pytest.skip('no /proc/self/maps here')
  programs = lambda first: [jax.jit(lambda x, i=i: jnp.tanh(x @ x.T + i).sum(0))(jnp.ones((8 + i, 16)))
                            for i in range(first, first + 20)]
  jax.block_until_ready(programs(0))  # what a process maps once, on its first programs, is not what is measured
  before = executables.map_count()
  jax.block_until_ready(programs(100))
  compiled = executables.map_count() - before
  assert compiled > 0  # 20 new programs hold mappings
  executables._clear_jax_caches()  # pylint: disable=protected-access
  assert executables.map_count() - before < compiled / 4, (compiled, executables.map_count() - before)


def test_nothing_is_dropped_where_the_limit_cannot_be_read():
  owner = Owner('p')
  for limit in (None, 0):
    decoders = executables.CompiledDecoders(count=lambda: 10 ** 6, limit=lambda limit=limit: limit)
    decoders.kept(owner, 'p')
    decoders.make_room()
  assert 'p' in owner._compiled
  assert executables.map_count('/nonexistent/maps') is None and executables.map_limit('/nonexistent') is None


def test_the_real_files_read_as_counts(tmp_path):
  assert executables.map_count() is None or executables.map_count() > 10  # a Python process maps its libraries
  limit = tmp_path / 'max_map_count'
  limit.write_text('65530\n')
  assert executables.map_limit(str(limit)) == 65530
  limit.write_text('garbage')
  assert executables.map_limit(str(limit)) is None


def test_the_first_drop_is_a_warning_then_info(caplog):
  owner = Owner(*'abcd')
  decoders = registry(lambda: 30 * len(owner._compiled))
  for key in 'abcd':
    decoders.kept(owner, key)
  with caplog.at_level(logging.INFO, logger='fastmt.executables'):
    decoders.make_room()  # 120 -> 60: two dropped
    owner._compiled.update(e=object(), f=object())
    decoders.kept(owner, 'e')
    decoders.kept(owner, 'f')
    decoders.make_room()
  assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.INFO]
  assert 'Dropped 2 compiled decoders' in caplog.records[0].getMessage()


def test_a_translator_over_the_limit_translates_as_one_that_keeps_everything(trained_float_parts, monkeypatch):
  # Sentences of three source buckets at batch 1: three programs, of which the fake limit lets two live.
  lines = ['God', ' '.join(['And God said, Let there be light.'] * 2), ' '.join(['the waters'] * 12), 'God']
  settings = DecodeSettings('spec', block_size=3, drafter='pad')
  expected, _ = Translator(*trained_float_parts, settings).translate(lines, batch_size=1)
  translator = Translator(*trained_float_parts, settings)
  decoders = registry(lambda: 40 * len(translator._compiled))  # two programs: 80 of 100, over the high water
  monkeypatch.setattr(executables, 'PROCESS', decoders)
  outputs, _ = translator.translate(lines, batch_size=1)  # three source buckets in turn: the first dropped
  assert outputs == expected
  assert decoders.dropped == 1 and len(translator._compiled) == 2 and (1, 8) not in translator._compiled
  again, again_stats = translator.translate(lines, batch_size=1)  # dropped shapes compile again, same output
  assert again == expected and again_stats.compile_seconds > 0


def test_threads_sharing_a_translator_over_the_limit_translate_exactly(trained_float_parts, monkeypatch):
  # One thread's compile drops the program another thread is about to run or is running: it keeps its own
  # reference, and a program dropped before its lookup compiles again. No KeyError, no other output.
  import concurrent.futures  # pylint: disable=g-import-not-at-top
  lines = ['God', ' '.join(['And God said, Let there be light.'] * 2), ' '.join(['the waters'] * 12)]
  expected, _ = Translator(*trained_float_parts).translate(lines, batch_size=1)
  translator = Translator(*trained_float_parts)
  decoders = registry(lambda: 40 * len(translator._compiled))  # two programs at most before a compile drops
  monkeypatch.setattr(executables, 'PROCESS', decoders)
  orders = [[0, 1, 2] * 2, [2, 1, 0] * 2]  # the two threads meet the buckets in opposite orders, twice

  def translate_in(order):
    return [translator.translate([lines[i]], batch_size=1)[0][0] for i in order]
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    results = list(pool.map(translate_in, orders))
  assert results == [[expected[i] for i in order] for order in orders]
  assert decoders.dropped >= 2
