"""spec:auto: the window width chosen by timing (fastmt/width.py), on fake translators with a fake clock, and
end to end through the bench on the tiny trained model (output == greedy)."""

import json
import pathlib
import subprocess
import sys

import pytest

from fastmt import width
from fastmt.errors import FastmtError

REPO = pathlib.Path(__file__).resolve().parents[1]


class FakeClock:
  def __init__(self):
    self.now = 0.0

  def __call__(self):
    return self.now


class FakeTranslator:
  """Costs `seconds_by_batch[batch_size]` of the fake clock per translate call; returns its name per line.
  compiles: seconds of compiling its calls report, in turn (then none), added to the clock too."""

  def __init__(self, name, clock, seconds_by_batch, compiles=()):
    self.name, self.clock, self.seconds_by_batch, self.calls = name, clock, seconds_by_batch, []
    self.compiles = list(compiles)

  def translate(self, texts, batch_size=32):
    from fastmt.translate import TranslationStats  # pylint: disable=g-import-not-at-top
    self.calls.append((len(texts), batch_size))
    stats = TranslationStats(compile_seconds=self.compiles.pop(0) if self.compiles else 0.0)
    self.clock.now += self.seconds_by_batch[batch_size] + stats.compile_seconds
    return [self.name] * len(texts), stats


def auto(costs, **kwargs):
  """An AutoWidthTranslator over fake translators: costs = {width: {batch_size: seconds per pass}}."""
  clock = FakeClock()
  translators = {w: FakeTranslator(f'W{w}', clock, c) for w, c in costs.items()}
  return width.AutoWidthTranslator(translators, [f's{i}' for i in range(100)], clock=clock, log=lambda m: None,
                                   **kwargs), translators


def test_the_fastest_width_is_chosen_per_batch_size_and_only_once():
  # A wide window pays at batch 1 (W=3 fastest), at batch 32 none does: greedy's step.
  chooser, translators = auto({1: {1: 1.0, 32: 1.0}, 2: {1: 0.8, 32: 1.3}, 3: {1: 0.7, 32: 1.6}})
  assert chooser.translate(['a', 'b'], batch_size=1)[0] == ['W3', 'W3']
  assert chooser.translate(['a'], batch_size=32)[0] == ['W1']
  assert chooser.width_for(1) == 3 and chooser.width_for(32) == 1
  assert chooser.choices[1][1] == pytest.approx({1: 1.0, 2: 0.8, 3: 0.7})
  assert chooser.choices[1][2] == pytest.approx(6 * (1.0 + 0.8 + 0.7))  # what the choice took: its 18 passes
  # Calibration: one warm-up pass and 5 timed ones per width and batch size, on max(24, 2 B) sentences; at
  # batch 32 the widths 30% and 60% behind greedy after the first round are timed no further.
  for w in (1, 2, 3):
    assert translators[w].calls.count((24, 1)) == 6
    assert translators[w].calls.count((64, 32)) == (6 if w == 1 else 2)
  assert chooser.choices[32][1] == pytest.approx({1: 1.0, 2: 1.3, 3: 1.6})
  assert chooser.choices[32][2] == pytest.approx(6 * 1.0 + 2 * (1.3 + 1.6))
  calls = len(translators[3].calls)
  chooser.translate(['a'], batch_size=1)
  assert len(translators[3].calls) == calls + 1  # chosen before: no new calibration


def test_a_compile_during_the_timed_passes_is_not_counted_as_decoding():
  # A shape dropped under vm.max_map_count (fastmt.executables) compiles again in a timed pass: three of W=2's
  # five timed passes compile for 5 s each (after 3 s in its warm-up). Counted, W=2 (0.8 s) would lose to greedy.
  clock = FakeClock()
  translators = {1: FakeTranslator('W1', clock, {1: 1.0}),
                 2: FakeTranslator('W2', clock, {1: 0.8}, compiles=[3.0, 5.0, 5.0, 5.0])}
  chooser = width.AutoWidthTranslator(translators, ['s'] * 30, clock=clock, log=lambda m: None)
  assert chooser.width_for(1) == 2
  assert chooser.choices[1][1] == pytest.approx({1: 1.0, 2: 0.8})


def test_the_bench_leaves_a_compile_in_a_timed_pass_out_of_its_time(monkeypatch):
  from fastmt import bench  # pylint: disable=g-import-not-at-top
  clock = FakeClock()
  monkeypatch.setattr(bench.time, 'perf_counter', clock)
  translators = {'greedy': FakeTranslator('g', clock, {1: 1.0}),
                 'spec:4': FakeTranslator('s', clock, {1: 0.5}, compiles=[2.0, 0.0, 7.0])}  # warm-up, timed
  times, _ = bench._interleaved_times(translators, ['a', 'b'], 1, repeats=3)
  assert times == {'greedy': [1.0, 1.0, 1.0], 'spec:4': [0.5, 0.5, 0.5]}


class NoisyTranslator(FakeTranslator):
  """A FakeTranslator whose passes cost `seconds[i]` in turn (the last one after that), at any batch size."""

  def __init__(self, name, clock, seconds):
    super().__init__(name, clock, {})
    self.seconds = list(seconds)

  def translate(self, texts, batch_size):
    self.seconds_by_batch[batch_size] = self.seconds.pop(0) if len(self.seconds) > 1 else self.seconds[0]
    return super().translate(texts, batch_size)


def test_only_a_width_behind_greedy_by_the_prune_margin_is_timed_no_further():
  clock = FakeClock()
  # Passes: a warm-up, then one a round. W=2 is slow in its first timed round only (a noisy pass, 12% behind
  # greedy's slowest: kept, and then the fastest); W=3 is 20% behind in every round (dropped after the first).
  translators = {1: NoisyTranslator('W1', clock, [1.0, 1.0, 0.95, 1.0]),
                 2: NoisyTranslator('W2', clock, [1.0, 1.12, 0.8]),
                 3: NoisyTranslator('W3', clock, [1.0, 1.2])}
  chooser = width.AutoWidthTranslator(translators, ['s'] * 30, clock=clock, log=lambda m: None)
  assert chooser.width_for(1) == 2
  assert [len(translators[w].calls) for w in (1, 2, 3)] == [6, 6, 2]
  assert chooser.choices[1][1] == pytest.approx({1: 1.0, 2: 0.8, 3: 1.2})
  # prune_margin=None: every width timed in every round.
  translators = {w: FakeTranslator(f'W{w}', clock, {1: c}) for w, c in ((1, 1.0), (2, 1.5))}
  chooser = width.AutoWidthTranslator(translators, ['s'] * 30, clock=clock, log=lambda m: None, prune_margin=None)
  assert chooser.width_for(1) == 1 and len(translators[2].calls) == 6


def test_a_wide_window_must_beat_greedy_by_the_margin():
  chooser, _ = auto({1: {1: 1.0}, 2: {1: 0.99}})  # 1% faster: within a timing's noise
  assert chooser.width_for(1) == 1
  chooser, _ = auto({1: {1: 1.0}, 2: {1: 0.99}}, margin=0.0)
  assert chooser.width_for(1) == 2


def test_the_candidates_are_greedy_and_spec_at_every_width():
  from fastmt.translate import DecodeSettings  # pylint: disable=g-import-not-at-top
  candidates = width.candidate_settings(DecodeSettings('spec', drafter='ngram', output_length_ratio=1.5))
  assert sorted(candidates) == [1, *width.WIDTHS]
  assert (candidates[1].algorithm, candidates[1].output_length_ratio) == ('greedy', 1.5)  # the same output caps
  for w in width.WIDTHS:
    assert (candidates[w].algorithm, candidates[w].block_size, candidates[w].drafter) == ('spec', w, 'ngram')
  with pytest.raises(FastmtError, match="is --algorithm spec's"):
    width.candidate_settings(DecodeSettings('pgj'))
  # The int8 copy's drafts hold up over wider windows (docs/BENCHMARKS.md section 7): its candidates go to 8.
  assert sorted(width.candidate_settings(DecodeSettings('spec', drafter='int8'))) == [1, 2, 4, 6, 8]
  from fastmt import bench  # pylint: disable=g-import-not-at-top
  assert bench.parse_method('spec:auto+int8', allow_auto=True)[1].block_size == 8
  assert bench.parse_method('spec:auto+ngram8', allow_auto=True)[1].block_size == 4


def test_a_short_or_partly_blank_calibration_is_timed_at_the_batch_it_chooses_for():
  """One calibration sentence at batch 32 was timed as a batch of 1 (where spec pays) and stored as batch 32's
  choice; a list starting with blank lines was accepted, then timed on blanks only."""
  clock = FakeClock()
  translators = {w: FakeTranslator(f'W{w}', clock, {32: 1.0}) for w in (1, 2)}
  chooser = width.AutoWidthTranslator(translators, ['One sentence.'], clock=clock, log=lambda m: None)
  chooser.width_for(32)
  assert set(translators[1].calls) == {(64, 32)}  # the sentence repeated: 2 B sentences, full batches
  seen = []
  translators = {w: FakeTranslator(f'W{w}', clock, {8: 1.0}) for w in (1, 2)}
  translators[1].translate = lambda texts, batch_size: (seen.append(list(texts)), ([], _stats()))[1]
  width.AutoWidthTranslator(translators, [''] * 30 + ['God'] * 30, clock=clock, log=lambda m: None).width_for(8)
  assert seen and all(texts == ['God'] * 24 for texts in seen)  # none of the 30 blank lines timed


def _stats():
  from fastmt.translate import TranslationStats  # pylint: disable=g-import-not-at-top
  return TranslationStats()


def test_bad_candidates_are_clear_errors():
  clock = FakeClock()
  with pytest.raises(FastmtError, match='width 1'):
    width.AutoWidthTranslator({2: FakeTranslator('W2', clock, {1: 1.0})}, ['s'])
  for calibration in ([], ['', ' ', '\u200b']):  # blank lines decode nothing: a width chosen on them timed nothing
    with pytest.raises(FastmtError, match='calibration'):
      width.AutoWidthTranslator({1: FakeTranslator('W1', clock, {1: 1.0})}, calibration)


def test_spec_auto_in_the_bench_equals_greedy(trained_workdir, tiny_config):
  from fastmt import bench  # pylint: disable=g-import-not-at-top
  from fastmt.data import corpus  # pylint: disable=g-import-not-at-top
  assert bench.is_auto('spec:auto+ngram@int8') and not bench.is_auto('spec:4+ngram')
  assert bench.parse_method('spec:auto+ngram', allow_auto=True)[1].block_size == width.WIDTHS[-1]
  with pytest.raises(FastmtError, match='name a width'):  # the scripts that time one decoder's loop
    bench.parse_method('spec:auto+ngram')
  translators, _, _ = bench.build_translators(trained_workdir, ['greedy', 'spec:auto+ngram'])
  chooser = translators['spec:auto+ngram']
  assert isinstance(chooser, width.AutoWidthTranslator) and sorted(chooser.translators) == [1, 2, 3, 4]
  assert chooser.translators[1].settings.algorithm == 'greedy'
  assert {chooser.translators[w].settings.block_size for w in (2, 3, 4)} == {2, 3, 4}
  sources = corpus.load_split(tiny_config.dataset, 'test').sources[:6]
  greedy, _ = translators['greedy'].translate(sources, 2)
  for batch_size in (1, 2):
    assert chooser.translate(sources, batch_size)[0] == greedy  # whichever width won
  assert set(chooser.choices) == {1, 2}
  recorded = bench.auto_widths_of(translators)  # what results.json keeps of the choice
  assert set(recorded) == {'spec:auto+ngram'} and set(recorded['spec:auto+ngram']) == {'1', '2'}
  assert recorded['spec:auto+ngram']['2']['width'] == chooser.width_for(2)
  assert set(recorded['spec:auto+ngram']['2']['median_s']) == {'1', '2', '3', '4'}
  assert recorded['spec:auto+ngram']['2']['calibration_s'] > 0


def test_the_library_and_decode_py_choose_a_width_and_translate_as_greedy(trained_workdir, tiny_config, tmp_path):
  import fastmt  # pylint: disable=g-import-not-at-top
  model = fastmt.load(trained_workdir)
  chosen = model.choose_width(batch_size=2, drafter='ngram')
  # The timed translators stay compiled in the model: translating at the chosen width builds nothing new.
  assert len(model._translators) == 1 + len(width.WIDTHS)  # pylint: disable=protected-access
  # Settings spec ignores are warned of at the caller's line, as translate() does (they were taken without a
  # word), and a block_size, which the timing chooses; the same translators are timed again.
  with pytest.warns(UserWarning) as warned:
    model.choose_width(batch_size=2, calibration=['God'], drafter='ngram', beam_size=4, block_size=3)
  messages = [str(w.message) for w in warned]
  assert any('beam_size has no effect with algorithm spec' in m for m in messages), messages
  assert any('block_size=3 has no effect with choose_width' in m for m in messages), messages
  assert all(w.filename == __file__ for w in warned)
  assert len(model._translators) == 1 + len(width.WIDTHS)  # pylint: disable=protected-access
  at_chosen = dict(algorithm='spec', drafter='ngram', block_size=chosen) if chosen > 1 else dict(algorithm='greedy')
  model.translate(['God'], batch_size=2, **at_chosen)
  assert len(model._translators) == 1 + len(width.WIDTHS)  # pylint: disable=protected-access
  src = tmp_path / 'src.txt'
  src.write_text('And God said, Let there be light.\n\nGod created the heaven.\n', encoding='utf-8')
  greedy = model.translate(src.read_text().split('\n')[:3], batch_size=2)
  result = subprocess.run(
      [sys.executable, str(REPO / 'decode.py'), '--workdir', trained_workdir, '--input', str(src), '--output', '-',
       '--algorithm', 'spec', '--drafter', 'ngram', '--block_size', 'auto', '--batch_size', '2', '--noprogress',
       '--metrics_json', str(tmp_path / 'metrics.json')], capture_output=True, text=True, cwd=REPO)
  assert result.returncode == 0, result.stderr
  assert result.stdout.split('\n')[:3] == greedy and 'spec:auto at batch 2: width' in result.stderr
  recorded = json.loads((tmp_path / 'metrics.json').read_text())
  assert recorded['auto_width']['width'] in (1, *width.WIDTHS)
  decoded = recorded['settings']  # the settings that decoded: greedy's where width 1 won
  if recorded['auto_width']['width'] == 1:
    assert decoded['algorithm'] == 'greedy'
  else:
    assert (decoded['algorithm'], decoded['drafter'], decoded['block_size']) == (
        'spec', 'ngram', recorded['auto_width']['width'])
  assert set(recorded['auto_width']['median_s']) == {'1', '2', '3', '4'}
  for flags, message in ((['--algorithm', 'greedy', '--block_size', 'auto'], "is --algorithm spec's"),
                         (['--algorithm', 'spec', '--block_size', 'wide'], 'whole number or auto')):
    result = subprocess.run([sys.executable, str(REPO / 'decode.py'), '--workdir', trained_workdir, '--input',
                             str(src), *flags], capture_output=True, text=True, cwd=REPO)
    assert result.returncode != 0 and message in result.stderr and 'Traceback' not in result.stderr
    # one message: it was a warning that --block_size did nothing, then this error caused by it
    assert 'has no effect' not in result.stderr, result.stderr


def test_the_bench_checks_spec_auto_at_batch_1_too(trained_workdir, tiny_config):
  """fastmt-bench with spec:auto and its batch-1 identity pass (the default) crashed after translating the whole
  split ('AutoWidthTranslator' object has no attribute 'settings'): the pass asked each translator for its beam
  size, and spec:auto's chooser has none of its own."""
  from fastmt import bench  # pylint: disable=g-import-not-at-top
  from fastmt.data import corpus  # pylint: disable=g-import-not-at-top
  test = corpus.load_split(tiny_config.dataset, 'test')
  results, _, _ = bench.run_benchmark(
      trained_workdir, test.sources[:4], test.targets[:4], ['greedy', 'spec:auto+ngram'], batch_size=2,
      speed_sentences=2, large_batch_sentences=4, repeats=1, exactness_at_batch1=True, log=lambda *_: None)
  auto = next(r for r in results if r.method == 'spec:auto+ngram')
  assert auto.identical_to_greedy == '4/4 (b1: 4/4)'
