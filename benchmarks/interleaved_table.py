r"""The interleaved-decoder table from one fastmt.bench run (benchmarks/interleaved.sh writes both).

    python benchmarks/interleaved_table.py --runs runs/interleaved --eval_dir runs/interleaved/eval
    python benchmarks/interleaved_table.py ... --baseline_method greedy@int8   # a bench run with --baseline greedy@int8

Per model: test BLEU/chrF with greedy (AT) or ib (interleaved) and with beam 4, decoder calls per sentence,
measured speed-ups against AT-KD greedy at batch 1 and at the large batch (same process, interleaved repeats),
and the ideal batch-1 speed-up on this machine. (Training speed: benchmarks/train_speed.py, side by side.)

Ideal speed-up. A sentence costs the encoder plus its decoder calls; a call over z positions costs
step_cost(z), from the step-cost curve fastmt.bench measures (environment.greedy_floor.step_cost_ms_b1), and
the encoder t_encoder, which fastmt.bench measures beside it (encoder_ms_b1: roofline.encoder_cost_padded, each
timed source padded to its bucket as the Translator pads it; results written before 2026-11-25 timed the mean
length, encoder_ms_b1_mean_length since):
    ideal = (t_encoder + calls_AT x step_cost(1)) / (t_encoder + calls_model x step_cost(z)).
calls_AT and calls_model are counted on the batch-1 timed sentences, as the speed-up is (results.json since
2026-11-29; before, the whole split's calls at the large batch, another set of sentences).
Everything else a translation pays once (dispatch, the loop's set-up, detokenisation) is left out, which makes
the ideal a little higher than a perfect interleaved decoder could reach: a bar that errs against the method.
In another precision (a bench run with --baseline greedy@int8 and --methods greedy@int8,ib@int8,...), the rows are
that precision's (ib@int8 against greedy@int8) and the curve and encoder those of its step and encoder.
Results written before the bench measured the encoder (and whose curve still counted a 32nd of the encoder in
every call) take t_encoder as AT greedy's time minus its calls x step_cost(1), 0 if negative.
"""

import argparse
import json
import math
import os


def slots_of(runs: str, name: str, environment: dict, baseline: bool = False) -> tuple[int, int] | None:
  """(h, c) of row `name`: from results.json (fastmt.bench records every row's objective under its label's
  prefix, '' for the baseline's own rows), else from the run's work directory (results.json written before it
  did); None if neither says."""
  recorded = environment.get('objectives', {})
  entry = recorded.get('') if baseline else None
  if entry is None:
    entry = recorded.get(f'{name}_avg5', recorded.get(name))
  if entry is not None:
    options = entry.get('options') or {}
  else:
    path = os.path.join(runs, f'{name}_avg5', 'objective.json')
    if not os.path.exists(path):
      path = os.path.join(runs, name, 'objective.json')
    if not os.path.exists(path):
      return None
    with open(path) as f:
      options = json.load(f).get('options', {})
  return options.get('directions', 1), options.get('words_per_direction', 1)


def timed_calls(result: dict) -> float:
  """Decoder calls per sentence on the batch-1 timed sentences, as the speed-up's time is (results.json since
  2026-11-29); an older results.json has only the whole split's."""
  calls = result.get('decoder_calls_per_sentence_b1_timed')
  return result['decoder_calls_per_sentence'] if calls is None or math.isnan(calls) else calls


def ideal_speedup(encoder_ms: float, at_calls: float, calls: float, curve: dict, z: int) -> float:
  """AT's time over the model's, each the encoder plus its decoder calls at the curve's cost for their width."""
  return (encoder_ms + at_calls * curve[1]) / (encoder_ms + calls * curve[z])


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--runs', required=True)
  parser.add_argument('--eval_dir', required=True)
  parser.add_argument('--baseline', default='at_kd')
  parser.add_argument('--baseline_method', default='greedy',
                      help="the bench's --baseline (greedy@int8: every row's decoders in int8, against int8 greedy)")
  args = parser.parse_args()
  suffix = args.baseline_method.partition('@')[1] + args.baseline_method.partition('@')[2]  # '' or '@int8'
  with open(os.path.join(args.eval_dir, 'results.json')) as f:
    data = json.load(f)
  results = {r['method']: r for r in data['results']}
  curve = {int(k): v for k, v in data['environment'].get('greedy_floor', {}).get('step_cost_ms_b1', {}).items()}
  at = results[args.baseline_method]
  floor = data['environment'].get('greedy_floor', {})
  priced = floor.get('priced_row', 'greedy')
  if floor and priced != args.baseline_method:  # the curve and encoder of another precision would price these rows
    raise SystemExit(f'The bench priced {priced}, not {args.baseline_method}: run it with --baseline '
                     f'{args.baseline_method}')
  encoder_ms = floor.get('encoder_ms_b1')
  if encoder_ms is None:  # an older results.json
    encoder_ms = at['ms_per_sentence_b1'] - at['decoder_calls_per_sentence'] * curve[1] if curve else float('nan')
  if encoder_ms < 0:
    # An old curve's calls (a 136-slot cache, a 32nd of the encoder in each) cost more than greedy's own; the
    # encoder's share cannot be read off it, and the ideal is then the decoder calls' alone (an upper bound).
    print(f'Note: AT greedy\'s time ({at["ms_per_sentence_b1"]:.2f} ms) is below its calls x step_cost(1) '
          f'({at["decoder_calls_per_sentence"] * curve[1]:.2f} ms): encoder share taken as 0.')
    encoder_ms = 0.0
  # Results since 2026-11-25 also keep the encoder timed at the mean source length, the ideal's encoder share
  # until then: shown beside, so that tables before and after compare.
  encoder_mean_ms = floor.get('encoder_ms_b1_mean_length')

  names = [args.baseline] + sorted({label.split('/')[0][:-len('_avg5')] for label in results if '/' in label})
  print(f'Baseline: {args.baseline} {args.baseline_method}, {at["ms_per_sentence_b1"]:.2f} ms/sentence at batch 1; encoder share '
        f'{encoder_ms:.2f} ms; step cost (ms, batch 1) by positions: '
        + ', '.join(f'{k}: {v:.3f} ({v / curve[1]:.2f}x)' for k, v in sorted(curve.items()) if k <= 8)
        + (f'; AT greedy\'s time less its calls at step_cost(1): '
           f'{at["ms_per_sentence_b1"] - at["decoder_calls_per_sentence"] * curve[1]:.2f} ms' if curve else '')
        + (f'; encoder at the mean source length (the ideal\'s share before 2026-11-25): {encoder_mean_ms:.2f} ms'
           if encoder_mean_ms is not None else ''))
  print()
  mean_column = ' measured / ideal, mean-length encoder |' if encoder_mean_ms is not None else ''
  print('| model | (h, c) | greedy BLEU | greedy chrF | greedy len ratio | beam 4 BLEU | beam 4 chrF | calls/sent '
        f'| speed-up b1 | ideal b1 | measured / ideal |{mean_column} speed-up b32 | beam 4 speed-up b1 |')
  print('|---' * (13 + bool(mean_column)) + '|')
  for name in names:
    slots = slots_of(args.runs, name, data['environment'], baseline=name == args.baseline)
    prefix = '' if name == args.baseline else f'{name}_avg5/'
    interleaved = prefix + 'ib' + suffix in results if slots is None else slots != (1, 1)  # unknown: what it ran
    greedy = results.get(prefix + ('ib' if interleaved else 'greedy') + suffix)
    beam = results.get(prefix + ('ib:4' if interleaved else 'beam:4') + suffix)
    if greedy is None:
      continue
    h, c = slots or ('?', '?')
    z = h * c if slots else None
    ideal = ideal_mean = float('nan')
    if curve and z in curve:
      ideal = ideal_speedup(encoder_ms, timed_calls(at), timed_calls(greedy), curve, z)
      if encoder_mean_ms is not None:
        ideal_mean = ideal_speedup(encoder_mean_ms, timed_calls(at), timed_calls(greedy), curve, z)
    mean_cell = f" {greedy['speedup_b1'] / ideal_mean:.2f} |" if mean_column else ''
    beam_cells = (f"{beam['bleu']:.2f} | {beam['chrf']:.2f}" if beam else '- | -')
    beam_speed = f"{beam['speedup_b1']:.2f}" if beam else '-'
    # hypothesis / reference length (BLEU's brevity penalty below 1); results.json before 2026-11-25 lack it
    length_ratio = greedy.get('length_ratio', float('nan'))
    print(f"| {name} | ({h}, {c}) | {greedy['bleu']:.2f} | {greedy['chrf']:.2f} | {length_ratio:.3f} | "
          f"{beam_cells} | {greedy['decoder_calls_per_sentence']:.2f} | {greedy['speedup_b1']:.2f} | {ideal:.2f} | "
          f"{greedy['speedup_b1'] / ideal:.2f} |{mean_cell} {greedy['speedup_large']:.2f} | {beam_speed} |")


if __name__ == '__main__':
  main()
