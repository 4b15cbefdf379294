"""The decoding algorithms by name, with what each needs from the caller (rows, cache slots, settings).

Adding an algorithm is one entry here; `translate.py` and `decode.py` pick it up by name.
"""

import dataclasses
from typing import Any, Callable

from fastmt.decoding import beam, greedy, jacobi


@dataclasses.dataclass(frozen=True)
class Algorithm:
  run: Callable[..., Any]  # (step_fn, cache, batch_size, max_length, settings) -> DecodeOutput
  rows_per_sentence: Callable[[Any], int] = lambda settings: 1
  cache_length: Callable[[int, Any], int] = lambda max_length, settings: max_length
  expand: Callable[[Any, Any], Any] = lambda tree, settings: tree  # per-sentence -> per-row pytree
  check: Callable[[Any], None] = lambda settings: None  # raises ValueError on bad settings


def _check_beam(settings):
  if settings.beam_size < 1:
    raise ValueError(f'beam_size must be >= 1, got {settings.beam_size}')


def _check_jacobi(settings):
  if settings.block_size < 1:
    raise ValueError(f'block_size must be >= 1, got {settings.block_size}')
  if settings.parallel_length < 0:
    raise ValueError(f'parallel_length must be >= 0 (0 = the output cap), got {settings.parallel_length}')


def _hgj(step_fn, cache, batch, max_len, s):
  # parallel_length beyond this batch's output cap means "parallel to the end"; 0 means the cap too.
  parallel = min(s.parallel_length, max_len) if s.parallel_length else max_len
  return jacobi.hgj_decode(step_fn, cache, batch, max_len, s.block_size, parallel)


_jacobi_cache = lambda width: (lambda max_len, s: max_len + min(width(s, max_len), max_len))

ALGORITHMS = {
    'greedy': Algorithm(
        run=lambda step_fn, cache, batch, max_len, s: greedy.greedy_search(step_fn, cache, batch, max_len)),
    'beam': Algorithm(
        run=lambda step_fn, cache, batch, max_len, s: beam.beam_search(
            step_fn, cache, batch, s.beam_size, max_len, s.alpha),
        rows_per_sentence=lambda s: s.beam_size,
        expand=lambda tree, s: beam.expand_to_beams(tree, s.beam_size),
        check=_check_beam),
    'pj': Algorithm(
        run=lambda step_fn, cache, batch, max_len, s: jacobi.pj_decode(step_fn, cache, batch, max_len),
        cache_length=_jacobi_cache(lambda s, max_len: max_len)),
    'pgj': Algorithm(
        run=lambda step_fn, cache, batch, max_len, s: jacobi.pgj_decode(
            step_fn, cache, batch, max_len, s.block_size),
        cache_length=_jacobi_cache(lambda s, max_len: s.block_size),
        check=_check_jacobi),
    'hgj': Algorithm(run=_hgj, cache_length=_jacobi_cache(lambda s, max_len: s.block_size),
                     check=_check_jacobi),
}


def get(name: str) -> Algorithm:
  if name not in ALGORITHMS:
    raise ValueError(f'Unknown decoding algorithm {name!r}; choose one of {sorted(ALGORITHMS)}')
  return ALGORITHMS[name]


def validate(settings) -> None:
  get(settings.algorithm).check(settings)
