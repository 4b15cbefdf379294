"""The order in which side-by-side timings run their methods, round after round (docs/BENCHMARKS.md's rule:
methods compared in one process, interleaved).

A rotation (round r starts at method r) moves every method through every position, but keeps the cyclic
order: each method always runs right after the same one, so whatever one method leaves behind (caches holding
another model's weights, a thread pool asleep or awake) always falls on the same neighbour. A Williams design
(a balanced Latin square) moves every method through every position and puts every method right after every
other equally often: over n rounds for an even number n of methods, 2n for an odd n.
"""


def round_order(items, round_index: int) -> list:
  """items in the order of round `round_index` (0, 1, ...) of a Williams design; rounds repeat after n rounds
  (n = len(items) even) or 2n (odd)."""
  items = list(items)
  n = len(items)
  if n <= 1:
    return items
  offsets, low, high = [0], 1, n - 1  # 0, 1, n-1, 2, n-2, ...: each difference between neighbours once
  while len(offsets) < n:
    offsets.append(low)
    low += 1
    if len(offsets) < n:
      offsets.append(high)
      high -= 1
  row = round_index % n
  order = [items[(row + offset) % n] for offset in offsets]
  if n % 2 and (round_index // n) % 2:  # an odd n needs the mirrored square as well
    order.reverse()
  return order
