"""The speculative window width chosen by timing: `spec:auto` (issue [spec]: the width chosen per drafter).

A window of W positions pays only where the tokens a call commits outweigh what a W-wide call costs more than
a one-position call, and that depends on the machine, the batch size, the model and the drafter: on 2 CPU cores
no drafter of docs/BENCHMARKS.md section 7 pays at batch 32, while on a GPU a wide call costs barely more than a
narrow one. So the width is measured where it runs, not modelled. Every candidate translates the same few
calibration sentences at the batch size asked (never the sentences being scored: the bench passes validation
sentences), one warm-up pass each (it compiles), then `repeats` rounds in a balanced order (fastmt.rounds); the
fastest median wins. A candidate far behind greedy after a round (its fastest pass slower than greedy's slowest by
`prune_margin`) is timed no further: it cannot win, and on 2 CPU cores at batch 32 the losing widths were most
of a calibration's minutes (docs/BENCHMARKS.md section 7). Width 1 is greedy's own step: every model that `spec`
decodes also decodes greedily, and `spec`'s output *is* that greedy output, so falling back changes no token, only
the speed. A wider window is chosen only if it beats greedy by `margin` (a timing's noise must not buy a loss). The
step-cost curve (fastmt.roofline) predicts a call's cost but not the drafter's own cost or the loop's bookkeeping;
timing the whole decoder counts all.
"""

import logging
import statistics
import time

from fastmt import rounds
from fastmt.errors import FastmtError

logger = logging.getLogger(__name__)  # named 'fastmt.<module>': users set its level or handlers by name

WIDTHS = (2, 3, 4)  # the candidate windows besides width 1 (greedy's step), for most drafters
# The model's own int8 copy drafts by decoding, so its drafts hold up the whole window: on the Transformer-base-
# sized model of docs/BENCHMARKS.md section 7, 2.88 / 3.76 / 5.42 / 6.96 tokens a call at W = 3 / 4 / 6 / 8, and
# at batch 1 on 2 cores 1.13-1.25x greedy at W = 3 up to 1.51-1.57x at W = 8 (the widest fastest) in the two runs
# that timed every width. Its candidates go that far.
DRAFTER_WIDTHS = {'int8': (2, 4, 6, 8)}
CALIBRATION_SPLIT = 'validation'  # what the widths are timed on by default: never a split being scored


def widths_for(drafter: str) -> tuple[int, ...]:
  """The candidate windows (besides width 1) of spec:auto with this drafter."""
  return DRAFTER_WIDTHS.get(drafter, WIDTHS)


def candidate_settings(settings):
  """{width: DecodeSettings} of the candidates for spec `settings`: greedy at width 1 (with the same output
  caps, so both decode the same sentences alike) and spec with these settings at each of widths_for(its
  drafter)."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  from fastmt.translate import DecodeSettings  # pylint: disable=g-import-not-at-top
  if settings.algorithm != 'spec':
    raise FastmtError(f'the window chosen by timing (--block_size auto, spec:auto) is --algorithm spec\'s, '
                      f'not {settings.algorithm}\'s')
  return {1: DecodeSettings('greedy', output_length_ratio=settings.output_length_ratio),
          **{w: dataclasses.replace(settings, block_size=w) for w in widths_for(settings.drafter)}}


def calibration_sentences(workdir: str, split: str = CALIBRATION_SPLIT) -> list[str]:
  """The source sentences of a split of the work directory's dataset (default: validation)."""
  from fastmt import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  from fastmt.data import corpus  # pylint: disable=g-import-not-at-top
  return corpus.load_split(workdir_lib.load_train_config(workdir).dataset, split).sources


class AutoWidthTranslator:
  """Translates with the fastest of several translators (by window width) at each batch size, chosen on first
  use of that batch size by timing them on `calibration` sentences.

  translators: {width: Translator}; width 1 must be the greedy translator (the fallback).
  calibration: sentences to time on (e.g. the validation split's first ones; not the ones being scored).
  """

  def __init__(self, translators: dict, calibration, repeats: int = 5, margin: float = 0.02,
               min_sentences: int = 24, prune_margin: float = 0.15, log=logger.info, clock=time.perf_counter):
    if 1 not in translators:
      raise FastmtError('spec:auto needs width 1 (greedy, the fallback) among its candidates')
    from fastmt.translate import has_visible_text  # pylint: disable=g-import-not-at-top
    # Only lines with something to translate: a slice of blank ones was timed as if it were text (the width then
    # came from noise) while the log counted them as calibration sentences.
    calibration = [t for t in calibration or [] if isinstance(t, str) and has_visible_text(t)]
    if not calibration:  # blank: nothing would be timed
      raise FastmtError('spec:auto needs calibration sentences (not blank) to time its candidate widths on')
    self.translators = dict(sorted(translators.items()))
    self.calibration = calibration
    self.repeats, self.margin, self.min_sentences, self.log = repeats, margin, min_sentences, log
    self.prune_margin = prune_margin  # None: every candidate timed every round
    self.clock = clock  # seconds; tests pass a fake one
    # batch size -> (chosen width, {width: median seconds per calibration pass}, seconds the choice took)
    self.choices = {}

  def width_for(self, batch_size: int) -> int:
    if batch_size not in self.choices:
      self.choices[batch_size] = self._choose(batch_size)
    return self.choices[batch_size][0]

  def _choose(self, batch_size: int):
    # The calibration sentences are not the user's: their warnings (outputs at the cap, truncated lines) would
    # contradict the user's own report, so they are silenced while timing.
    silenced = logging.root.manager.disable
    logging.disable(max(silenced, logging.WARNING))
    try:
      chosen, medians, seconds, sentences = self._timed_choice(batch_size)
    finally:
      logging.disable(silenced)
    self.log(f'spec:auto at batch {batch_size}: width {chosen} (median s per pass of {sentences} '
             f'calibration sentences: ' + ', '.join(f'W={w} {s:.3f}' for w, s in medians.items()) +
             f'; {seconds:.1f} s to choose)')
    return chosen, medians, seconds

  def _timed_choice(self, batch_size: int):
    began = self.clock()
    # Repeated in turn up to the sentences wanted: fewer than batch_size (one calibration sentence) timed a
    # smaller batch than the one chosen for, at batch 1 where spec pays and not at 32, where it may not.
    wanted = max(self.min_sentences, 2 * batch_size)
    sentences = (self.calibration * -(-wanted // len(self.calibration)))[:wanted]
    for translator in self.translators.values():
      translator.translate(sentences, batch_size)  # compiles this batch size's shapes
    times = {width: [] for width in self.translators}
    timed = list(self.translators)  # the candidates still timed
    for rep in range(self.repeats):
      for width in rounds.round_order(timed, rep):
        start = self.clock()
        _, stats = self.translators[width].translate(sentences, batch_size)
        # Less any compile: a shape dropped under vm.max_map_count (fastmt.executables) compiles again.
        times[width].append(self.clock() - start - stats.compile_seconds)
      if self.prune_margin is not None:
        # Every pass of greedy beats each of these by the margin: no round left can make one the choice.
        slowest_greedy = max(times[1])
        timed = [w for w in timed if w == 1 or min(times[w]) <= (1 + self.prune_margin) * slowest_greedy]
    medians = {width: statistics.median(t) for width, t in times.items()}
    fastest = min(medians, key=medians.get)
    chosen = fastest if medians[fastest] < (1 - self.margin) * medians[1] else 1
    return chosen, medians, self.clock() - began, len(sentences)

  def translate(self, texts, batch_size: int = 32):
    """(hypotheses, TranslationStats) of the width chosen for this batch size."""
    return self.translators[self.width_for(batch_size)].translate(texts, batch_size)
