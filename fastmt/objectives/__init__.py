"""Training objectives: what the decoder is taught to predict, from which inputs, under which mask.

An objective is a pure function `(batch, step) -> DecoderBatch` that runs inside the jitted train step:
`batch` is the data pipeline's dict of int32 arrays {source [B, S], decoder_input [B, T], target [B, T]}
(decoder_input = BOS + target shifted right, PAD = 0) and `step` the optimiser step (a traced scalar, for
curricula). The Transformer itself never changes: an objective only chooses the decoder's input tokens,
their positions, the self-attention mask, the targets and the loss weights.

`config.objective` names one; train.py records it in the work directory (fastmt.workdir), and decoding a
model with an algorithm it was not trained for is one clear error (fastmt.decoding.registry). Reorderings and
masks that a decoder needs as well live in fastmt/decoding/ and are imported from there, never the reverse.
"""

from typing import Callable

import flax.struct
import jax

from fastmt.errors import FastmtError
from fastmt.objectives import autoregressive


@flax.struct.dataclass
class DecoderBatch:
  """What one training step feeds the decoder and scores, for any objective."""
  source: jax.Array  # int32 [B, S]: encoder input, PAD = 0
  decoder_input: jax.Array  # int32 [B, T]
  positions: jax.Array  # int32 [B, T]: position of each decoder input (any integers)
  self_mask: jax.Array  # bool [B or 1, T, T]: which decoder inputs each input may attend to
  target: jax.Array  # int32 [B, T]: the token to predict at each input
  weights: jax.Array  # float32 [B, T]: loss weight of each prediction (0 = not scored)


Objective = Callable[[dict, jax.Array], DecoderBatch]

OBJECTIVES: dict[str, Objective] = {
    'at': lambda batch, step: DecoderBatch(**autoregressive.left_to_right(batch)),
}


def get(name: str) -> Objective:
  if name not in OBJECTIVES:
    raise FastmtError(f'Unknown training objective {name!r}; choose one of {sorted(OBJECTIVES)}')
  return OBJECTIVES[name]
