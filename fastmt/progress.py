"""Progress reporting that suits where stderr goes: a live tqdm bar on a terminal, periodic log lines otherwise.

A redirected log (nohup, a CI job, a notebook cell writing to a file) would otherwise fill with the carriage-
return updates of a bar; `LogProgress` writes one plain line every `every_seconds` instead, with the same
rate and ETA.
"""

import os
import sys
import time

import tqdm


class LogProgress:
  """The subset of tqdm's interface fastmt uses, as occasional plain lines on stderr."""

  def __init__(self, total=None, initial: int = 0, unit: str = 'it', desc: str = '', every_seconds: float = 30.0):
    self.total, self.n, self.unit, self.desc = total, initial, unit, desc
    self.every_seconds = every_seconds
    self._start_n, self._start = initial, time.perf_counter()
    self._last = self._start
    self.postfix = ''

  def update(self, n: int = 1) -> None:
    self.n += n
    now = time.perf_counter()
    if now - self._last >= self.every_seconds:
      self._last = now
      self._print(now)

  def _print(self, now) -> None:
    rate = (self.n - self._start_n) / max(now - self._start, 1e-9)
    parts = [f'{self.desc}: ' if self.desc else '', f'{self.n}']
    if self.total:
      parts.append(f'/{self.total} {self.unit}s ({100 * self.n / self.total:.0f}%)')
      if rate > 0:
        parts.append(f', ETA {time.strftime("%H:%M:%S", time.gmtime((self.total - self.n) / rate))}')
    else:
      parts.append(f' {self.unit}s')
    parts.append(f', {rate:.1f} {self.unit}s/s')
    if self.postfix:
      parts.append(f', {self.postfix}')
    print(''.join(parts), file=sys.stderr, flush=True)

  def set_postfix(self, **values) -> None:
    self.postfix = ', '.join(f'{k}={v}' for k, v in values.items())

  def write(self, message: str) -> None:
    print(message, file=sys.stderr, flush=True)

  def close(self) -> None:
    if self.n != self._start_n:
      self._print(time.perf_counter())


def progress(total=None, initial: int = 0, unit: str = 'it', desc: str = '', disable: bool = False,
             every_seconds: float = 30.0):
  """A tqdm bar on a terminal, LogProgress otherwise; `disable` (or TQDM_DISABLE=1) silences both."""
  if disable or os.environ.get('TQDM_DISABLE', '') not in ('', '0', 'false', 'False'):
    return tqdm.tqdm(total=total, initial=initial, disable=True)
  if sys.stderr.isatty():
    return tqdm.tqdm(total=total, initial=initial, unit=unit, desc=desc or None, dynamic_ncols=True,
                     file=sys.stderr)
  return LogProgress(total, initial, unit, desc, every_seconds)
