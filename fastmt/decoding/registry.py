"""The decoding algorithms by name, with what each needs from the caller (rows, cache slots, settings).

Adding an algorithm is one entry here; `translate.py` and `decode.py` pick it up by name.
"""

import dataclasses
from typing import Any, Callable

from fastmt.decoding import beam, greedy


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


ALGORITHMS = {
    'greedy': Algorithm(
        run=lambda step_fn, cache, batch, max_len, s: greedy.greedy_search(step_fn, cache, batch, max_len)),
    'beam': Algorithm(
        run=lambda step_fn, cache, batch, max_len, s: beam.beam_search(
            step_fn, cache, batch, s.beam_size, max_len, s.alpha),
        rows_per_sentence=lambda s: s.beam_size,
        expand=lambda tree, s: beam.expand_to_beams(tree, s.beam_size),
        check=_check_beam),
}


def get(name: str) -> Algorithm:
  if name not in ALGORITHMS:
    raise ValueError(f'Unknown decoding algorithm {name!r}; choose one of {sorted(ALGORITHMS)}')
  return ALGORITHMS[name]


def validate(settings) -> None:
  get(settings.algorithm).check(settings)
