"""The target orders of the interleaved decoders (IBDecoder, SA, IB+SA, IMDecoder): pure index arithmetic.

Spec: ../shared/papers/interleaved-bidirectional-decoder.txt, Eqs. 4, 6, 7, 9, 10, 12. A factorisation (h, c)
predicts z = h * c target words per decoder step: h directions, c consecutive words per direction.

* h = 1: one left-to-right direction, c words per step (SA, Wang et al. 2018).
* h even: the sentence is split into h / 2 segments; each segment is generated from both ends at once, a
  left-to-right direction (2s) and a right-to-left one (2s + 1) meeting in the middle (IBDecoder: h = 2, c = 1;
  IB+SA: h = 2, c = 2; IMDecoder: h = 4, c = 1 with learned direction embeddings).

Layout. The reordered sequence is a grid of steps x z slots; slot j of a step belongs to direction j // c and
is that direction's (j % c)-th word of the step. A sentence of n words (EOS excluded) takes S = n // z + 1
steps: steps 0 .. S-2 are full, and the last step holds the n - z (S - 1) remaining words (0 .. z-1 of them)
and EOS in every other slot, so that every reordered target contains at least one EOS and it sits in the last
step. That is the end-of-hypothesis rule of Algorithm 1: a hypothesis is complete once any word of a step is
EOS. The remaining words go to the segments in order (each takes up to 2c), and inside a segment to the
left-to-right direction first (up to c). For IBDecoder this is Eq. 6 exactly: [y1 yn, y2 yn-1, ...], the
left-to-right direction taking the middle word of an odd-length sentence, then EOS. Since slot j holds word
j % c of direction j // c, the last step's words fill its first slots: it is words, then EOS in every later
slot (the decoders' optional end_rule='layout' keeps to those combinations).

Where this departs from the paper (c > 1). Eq. 12 builds IB+SA from IBDecoder's y^bd, whose words alternate
between the two directions; grouped z at a time, a last step of r remaining words gives ceil(r / 2) to the
left-to-right direction and floor(r / 2) to the right-to-left one. The rule above gives the left-to-right
direction up to c first. For (2, 2) the two differ when n = 2 (mod 4): with n = 6, y4 is the right-to-left
direction's third word in the paper (position -3) and the left-to-right direction's fourth here (position 4,
the right-to-left slots EOS). Training and decoding share this layout (the models of docs/BENCHMARKS.md
section 5 were trained with it); the paper's would need end_rule='layout' to allow words in the first slots
of each direction. The order of the slots inside a step (left-to-right words, then right-to-left ones) does
not matter under M(h, c), where the slots of a step see each other. IMDecoder's segments (Eq. 9, "roughly
equal") take the remaining words in order, so for n = 2 (mod 4) they differ by two words (6 = 4 + 2).

Recovering the natural order needs no length: at the finishing step each direction keeps its words before
its first EOS; a segment is its left-to-right words followed by its right-to-left words reversed.

Positions (what is added to each decoder input; the input of slot j at step k is the word the slot produced
at step k - 1, or a start symbol at step 0 (Algorithm 1's z copies of [s] by default), and it carries the
position of the word it predicts):
* 'signed' (Eq. 7): the p-th word of a left-to-right direction (p = 1, 2, ...) has position p, the p-th of a
  right-to-left one -p: IBDecoder's 1, -1, 2, -2, ... keep the locality of each direction.
* 'step' (Eq. 10): the step index k; IMDecoder adds a learned embedding of the direction (slot // c) instead.
* 'vanilla': the index in the reordered sequence, 0, 1, 2, ... (the ablation of Table 2).

Mask M(h, c) (Eq. 4): a slot sees every slot of its own and earlier steps; 'causal' is the vanilla mask
M(1, 1) of the ablation (a slot sees earlier slots only, its own step's included up to itself).
"""

import dataclasses

import jax
import jax.numpy as jnp

from fastmt.data.tokenizer import BOS_ID, EOS_ID, MAX_DIRECTIONS, PAD_ID, direction_bos
from fastmt.errors import FastmtError

POSITIONS = ('signed', 'step', 'vanilla')
MASKS = ('interleaved', 'causal')
STARTS = ('bos', 'slot')


@dataclasses.dataclass(frozen=True)
class Interleaving:
  """A factorisation of the target: h directions x c words per direction per step (z = h * c)."""
  directions: int = 2  # h: 1 (SA) or even
  words_per_direction: int = 1  # c
  positions: str = 'signed'  # 'signed' (Eq. 7), 'step' (Eq. 10, IMDecoder) or 'vanilla' (ablation)
  mask: str = 'interleaved'  # 'interleaved' = M(h, c) (Eq. 4), 'causal' = M(1, 1) (ablation)
  direction_embeddings: bool = False  # add a learned embedding of each slot's direction (IMDecoder)
  # The decoder inputs of step 0: 'bos' = z copies of BOS, Algorithm 1's [s]^z (the slots already differ by
  # position or direction embedding; works with any vocabulary); 'slot' = BOS for slot 0 and the reserved
  # <bos_dir_j> for slot j (a vocabulary trained by fastmt since the reservation).
  start: str = 'bos'
  # The start ids, resolved by with_start_ids(tokenizer); never recorded (the record is the factorisation).
  start_ids: tuple[int, ...] = ()

  def __post_init__(self):
    h, c = self.directions, self.words_per_direction
    if h < 1 or c < 1:
      raise FastmtError(f'interleaving needs directions >= 1 and words_per_direction >= 1, got h={h}, c={c}')
    if h > 1 and h % 2:
      raise FastmtError(f'interleaving with {h} directions: h must be 1 (SA) or even (each segment is '
                        'generated from both ends, Eq. 9)')
    if h * c > MAX_DIRECTIONS:
      raise FastmtError(f'interleaving predicts z = h * c = {h * c} words per step; at most {MAX_DIRECTIONS} '
                        'have start symbols')
    if self.positions not in POSITIONS:
      raise FastmtError(f'interleaving positions must be one of {POSITIONS}, got {self.positions!r}')
    if self.mask not in MASKS:
      raise FastmtError(f'interleaving mask must be one of {MASKS}, got {self.mask!r}')
    if self.start not in STARTS:
      raise FastmtError(f'interleaving start must be one of {STARTS}, got {self.start!r}')
    if self.start_ids and len(self.start_ids) != h * c:
      raise FastmtError(f'{len(self.start_ids)} start ids for {h * c} slots')

  @property
  def slots(self) -> int:
    """z: words predicted per decoder step."""
    return self.directions * self.words_per_direction

  def record(self) -> dict:
    """The JSON-able factorisation (objective.json), without the tokenizer's ids."""
    return {k: v for k, v in dataclasses.asdict(self).items() if k != 'start_ids'}

  def with_start_ids(self, tokenizer) -> 'Interleaving':
    """The same factorisation with its start ids ('slot' reads the reserved symbols from `tokenizer`: a clear
    error for a vocabulary trained before fastmt reserved them)."""
    if self.start == 'bos':
      return dataclasses.replace(self, start_ids=(BOS_ID,) * self.slots)
    ids = (BOS_ID,) + tuple(tokenizer.special_id(direction_bos(j)) for j in range(1, self.slots))
    return dataclasses.replace(self, start_ids=ids)

  def steps_for(self, length: int) -> int:
    """Steps (decoder calls) for `length` tokens, EOS included: every target of that length or less fits."""
    return -(-length // self.slots)


def _slot_grid(layout: Interleaving, num_steps: int):
  """Per slot of a num_steps x z grid (flattened, [num_steps * z]): step k, direction d, word w in the step."""
  z, c = layout.slots, layout.words_per_direction
  flat = jnp.arange(num_steps * z, dtype=jnp.int32)
  step, slot = flat // z, flat % z
  return step, slot // c, slot % c


def source_indices(layout: Interleaving, lengths: jax.Array, num_steps: int) -> jax.Array:
  """Where each reordered slot's word comes from in the natural order.

  Args:
    lengths: int [B], words per sentence (EOS excluded).
  Returns:
    int32 [B, num_steps * z]: the natural index of the slot's word, -1 for EOS (the last step's empty slots)
    and -2 for PAD (steps after the last).
  """
  h, c, z = layout.directions, layout.words_per_direction, layout.slots
  n = lengths.astype(jnp.int32)[:, None]  # [B, 1]
  step, direction, word = (a[None, :] for a in _slot_grid(layout, num_steps))
  per_segment = c if h == 1 else 2 * c  # words a segment takes per step
  num_segments = 1 if h == 1 else h // 2
  last = n // z  # the last step (S - 1)
  remaining = n - z * last  # words in the last step, 0 .. z-1
  segment = direction // 2 if h > 1 else jnp.zeros_like(direction)
  right_to_left = (direction % 2 == 1) if h > 1 else jnp.zeros_like(direction, bool)
  # Words of each segment: full steps, plus its share of the last step's words (segments in order).
  share = lambda s: jnp.clip(remaining - per_segment * s, 0, per_segment)
  seg_length = per_segment * last + share(segment)
  seg_start = per_segment * last * segment + sum(
      jnp.where(segment > s, share(s), 0) for s in range(num_segments))
  left_count = c * last + jnp.minimum(share(segment), c)  # words of the segment's left-to-right direction
  right_count = seg_length - left_count
  p = step * c + word  # index of the word within its direction
  valid = jnp.where(right_to_left, p < right_count, p < left_count)
  natural = jnp.where(right_to_left, seg_start + seg_length - 1 - p, seg_start + p)
  return jnp.where(valid, natural, jnp.where(step <= last, -1, -2)).astype(jnp.int32)


def reorder(layout: Interleaving, words: jax.Array, lengths: jax.Array, num_steps: int) -> jax.Array:
  """Natural-order words [B, T] (n_b words each, then anything) -> reordered [B, num_steps * z] with EOS in
  the last step's empty slots and PAD after it (Eq. 6 / Eq. 9 generalised; see the module docstring)."""
  index = source_indices(layout, lengths, num_steps)
  gathered = jnp.take_along_axis(words, jnp.maximum(index, 0), axis=1)
  return jnp.where(index >= 0, gathered, jnp.where(index == -1, EOS_ID, PAD_ID)).astype(jnp.int32)


def positions(layout: Interleaving, num_steps: int) -> jax.Array:
  """int32 [num_steps * z]: the position of each slot (the word it predicts), as layout.positions says."""
  step, direction, word = _slot_grid(layout, num_steps)
  if layout.positions == 'step':
    return step
  if layout.positions == 'vanilla':
    return jnp.arange(num_steps * layout.slots, dtype=jnp.int32)
  p = step * layout.words_per_direction + word + 1
  right_to_left = (direction % 2 == 1) if layout.directions > 1 else jnp.zeros_like(direction, bool)
  return jnp.where(right_to_left, -p, p).astype(jnp.int32)


def directions(layout: Interleaving, num_steps: int) -> jax.Array:
  """int32 [num_steps * z]: each slot's direction, 0 .. h-1 (the index of its direction embedding)."""
  return _slot_grid(layout, num_steps)[1]


def self_mask(layout: Interleaving, num_queries: int, num_keys: int, query_offset=0) -> jax.Array:
  """bool [num_queries, num_keys]: which reordered slots each slot may attend to.

  Query i is slot query_offset + i. 'interleaved' = M(h, c) of Eq. 4 (0-based: step(i) >= step(j), the whole
  own step included); 'causal' = M(1, 1).
  """
  query = query_offset + jnp.arange(num_queries)[:, None]
  key = jnp.arange(num_keys)[None, :]
  if layout.mask == 'causal':
    return key <= query
  return key // layout.slots <= query // layout.slots


def shift_right(layout: Interleaving, reordered: jax.Array) -> jax.Array:
  """Decoder inputs: each slot gets the word its slot produced one step earlier; step 0 the start symbols."""
  if not layout.start_ids:
    raise FastmtError('the interleaving has no start ids; call with_start_ids(tokenizer) first')
  starts = jnp.broadcast_to(jnp.asarray(layout.start_ids, jnp.int32), reordered.shape[:-1] + (layout.slots,))
  return jnp.concatenate([starts, reordered[..., :-layout.slots]], axis=-1)


def recover(layout: Interleaving, reordered: jax.Array, output_length: int) -> jax.Array:
  """Reordered words [B, num_steps * z] -> natural order [B, output_length]: words, EOS, then PAD.

  The hypothesis ends at its first step with an EOS in any slot (the finishing step); there each direction
  keeps its words before its first EOS. A row with no EOS keeps every slot and gets no EOS (it ran to its
  cap). Words beyond output_length are cut (EOS too, then: the caller counts that row as capped).
  """
  z, c, h = layout.slots, layout.words_per_direction, layout.directions
  batch, total = reordered.shape
  num_steps = total // z
  grid = reordered.reshape(batch, num_steps, h, c)
  is_eos = grid == EOS_ID
  step_has_eos = is_eos.any(axis=(2, 3))  # [B, S]
  has_eos = step_has_eos.any(axis=1)
  finish = jnp.where(has_eos, jnp.argmax(step_has_eos, axis=1), num_steps - 1)  # [B]
  step = jnp.arange(num_steps)[None, :, None, None]
  before_eos = jnp.cumsum(is_eos, axis=3) == 0  # within each direction's words of a step
  keep = (step < finish[:, None, None, None]) | ((step == finish[:, None, None, None]) & before_eos)
  keep &= grid != PAD_ID
  # Natural-order sort key: segment major; in a segment its left-to-right words by index, then its
  # right-to-left words by decreasing index.
  _, direction, word = _slot_grid(layout, num_steps)
  p = (jnp.arange(num_steps * z) // z) * c + word  # index within the direction
  big = num_steps * c + 1
  if h == 1:
    key = p
  else:
    segment, right_to_left = direction // 2, direction % 2 == 1
    key = segment * (2 * big) + jnp.where(right_to_left, 2 * big - 1 - p, p)
  keep = keep.reshape(batch, -1)
  key = jnp.where(keep, key[None, :], jnp.iinfo(jnp.int32).max)
  order = jnp.argsort(key, axis=1, stable=True)
  words = jnp.take_along_axis(reordered, order, axis=1)
  count = keep.sum(axis=1)
  index = jnp.arange(max(output_length, total))[None, :]
  words = jnp.pad(words, ((0, 0), (0, max(0, output_length - total))))
  out = jnp.where(index < count[:, None], words, jnp.where((index == count[:, None]) & has_eos[:, None],
                                                           EOS_ID, PAD_ID))
  return out[:, :output_length].astype(jnp.int32)
