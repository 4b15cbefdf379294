r"""DDGviz: the decoding dependency graph of Jacobi decoding, as a PNG (matplotlib) and a self-contained HTML page.

One row per Jacobi iteration, one column per output position. A cell shows what the iteration predicted for
that position: green when it already equals the final output, red when not, grey once the position was
final before the iteration. A thick frame marks the tokens the iteration committed; tokens committed in the
same iteration became final together: they depend on nothing the iteration had not already fixed. The
bottom row is the output with the iteration at which each token became final.

    python decode.py --workdir runs/quickstart --input src.txt --output - --algorithm pgj --block_size 3 \
        --ddgviz docs/ddgviz
    from fastmt import ddgviz; ddgviz.draw_sentences(translator, ['In the beginning ...'], settings, 'out/')
"""

import dataclasses
import functools
import html
import os

import jax
import jax.numpy as jnp
import numpy as np

from fastmt import models
from fastmt.decoding import jacobi, registry
from fastmt.errors import FastmtError
from fastmt.data.tokenizer import EOS_ID, PAD_ID
from fastmt.translate import DecodeSettings, TranslationStats, Translator, draft_model_for, make_step_fn, output_cap


@dataclasses.dataclass
class SentenceTrace:
  source: str
  pieces: list[str]  # final output pieces (EOS as '</s>')
  final: np.ndarray  # int [m]
  starts: np.ndarray  # int [I]
  predictions: np.ndarray  # int [I, W]
  probabilities: np.ndarray  # float [I, W]
  accepted: np.ndarray  # int [I]
  piece_of: dict  # id -> piece text
  method: str
  widths: np.ndarray | None = None  # int [I]: each iteration's window (HGJ's greedy phase: 1); None = all W

  @property
  def final_at(self) -> np.ndarray:
    """Iteration (1-based) at which each output position became final."""
    at = np.zeros(len(self.final), int)
    for k, (n, a) in enumerate(zip(self.starts, self.accepted)):
      at[n:n + a] = k + 1
    return at


def trace_sentence(translator: Translator, source: str, settings: DecodeSettings) -> SentenceTrace:
  """Runs Jacobi or speculative decoding (settings.algorithm in pj/pgj/hgj/spec) on one sentence; its trace."""
  config, tokenizer = translator.config, translator.tokenizer
  ids = translator.encode_sources([source], TranslationStats())[0]
  bucket = next(b for b in translator.buckets if b >= len(ids))
  src = np.zeros((1, bucket), np.int32)
  src[0, :len(ids)] = ids
  max_len = output_cap(config, bucket, settings)  # the bucket's bound, as Translator compiles it
  row_caps = np.array([output_cap(config, len(ids), settings)], np.int32)  # the sentence's own cap
  block = max_len if settings.algorithm == 'pj' else settings.block_size
  parallel = (min(settings.parallel_length, max_len) if settings.parallel_length else max_len
              ) if settings.algorithm == 'hgj' else max_len
  draft_table = None
  if registry.uses_draft_table(settings):
    if translator.draft_table is None and registry.needs_draft_table(settings):
      raise FastmtError("the bigram draft table needs a Translator with a draft table")
    draft_table = translator.draft_table
  mask_id = None
  if settings.algorithm == 'spec' and settings.drafter == 'self':
    mask_id = settings.draft_mask_id if settings.draft_mask_id is not None else translator.settings.draft_mask_id
    if mask_id is None:
      raise FastmtError("--drafter self needs a Translator for a selfdraft model (it resolves the <mask> id)")
  draft_settings = None  # --drafter model / int8: the translator's settings carry the drafter's shape (and <mask>)
  if settings.algorithm == 'spec' and settings.drafter in ('model', 'int8'):
    if translator.drafter is None or translator.settings.drafter != settings.drafter:  # its drafter is what runs
      raise FastmtError(f'--drafter {settings.drafter} needs a Translator built with that drafter '
                        + ('(draft_model=)' if settings.drafter == 'model' else '(settings with drafter=\'int8\')'))
    draft_settings = translator.settings
  # The translator's own projection (E^T for multi-position calls), so the trace is of the same computation.
  result, trace = _traced_decode(translator.params, jnp.asarray(src), jnp.asarray(row_caps), draft_table,
                                 translator.output_projection, translator.drafter if draft_settings else None,
                                 translator.clusters,  # --projection clustered: what the translator decodes with
                                 config=config, max_len=max_len, block=block, parallel=parallel, mask_id=mask_id,
                                 lookup=settings.algorithm == 'spec' and settings.drafter == 'ngram',
                                 draft_settings=draft_settings, pool=settings.ngram_pool)
  tokens = np.asarray(result.tokens[0])
  eos = np.flatnonzero(tokens == EOS_ID)
  length = int(eos[0]) + 1 if len(eos) else int(row_caps[0])  # no EOS: the output ran to its own cap
  iterations = int(np.count_nonzero(np.asarray(trace.accepted[:, 0])))
  final = tokens[:length]
  vocab_pieces = {}
  predictions = np.asarray(trace.predictions[:iterations, 0])
  for token in set(final.tolist()) | set(predictions.ravel().tolist()):
    vocab_pieces[token] = {EOS_ID: '</s>', PAD_ID: '<pad>'}.get(token) or tokenizer.pieces([token])[0]
  return SentenceTrace(source, [vocab_pieces[t] for t in final.tolist()], final,
                       np.asarray(trace.start[:iterations, 0]), predictions,
                       np.asarray(trace.probabilities[:iterations, 0]), np.asarray(trace.accepted[:iterations, 0]),
                       vocab_pieces, f'{settings.algorithm} b={block}' + (f' l={parallel}' if parallel < max_len else '') +
                       (f' drafter={settings.drafter}' if settings.algorithm == 'spec' else
                        f' init={settings.jacobi_init}')
                       + (f' pool={settings.ngram_pool}' if settings.ngram_pool else '')
                       + (' clustered' if translator.clusters is not None else ''),
                       np.asarray(trace.widths[:iterations]))


@functools.partial(jax.jit, static_argnames=('config', 'max_len', 'block', 'parallel', 'mask_id', 'lookup',
                                             'draft_settings', 'pool'))
def _traced_decode(params, source, row_caps, draft_table, output_projection, drafter=None, clusters=None, *, config,
                   max_len, block, parallel, mask_id, lookup=False, draft_settings=None, pool=0):
  model = models.Transformer(config)
  encoded = model.apply({'params': params}, source, method=models.Transformer.encode)
  memory = model.apply({'params': params}, encoded, source, method=models.Transformer.memory)
  cache = models.init_cache(config, source.shape[0], max_len + block * (1 if mask_id is None else 2))
  initializer = jacobi.pad_initializer if draft_table is None else jacobi.chain_initializer(draft_table)
  step_fn = make_step_fn(model, params, memory, clusters, output_projection=output_projection)
  return jacobi.jacobi_decode(step_fn, cache, source.shape[0], max_len, block,
                              parallel_length=parallel, initializer=initializer, return_trace=True,
                              row_caps=row_caps, mask_id=mask_id, trajectory_pool=pool,  # --ngram_pool
                              drafter=jacobi.ngram_drafter(source) if lookup else None,  # --drafter ngram
                              draft_model=None if draft_settings is None else draft_model_for(
                                  drafter, source, source.shape[0], max_len, draft_settings,
                                  config.vocab_size, encoded))  # --drafter model or int8


def _cells(trace: SentenceTrace):
  """Yields (iteration, position, piece, state, committed_now, probability); state in final/correct/wrong."""
  m = len(trace.final)
  for k, (n, a) in enumerate(zip(trace.starts, trace.accepted)):
    # HGJ's greedy phase predicts one position: the rest of its row is padding (drawn as red '<pad>' at p=0).
    width = trace.predictions.shape[1] if trace.widths is None else int(trace.widths[k])
    for pos in range(m):
      if pos < n:
        yield k, pos, '', 'final', False, None
      elif pos - n < width:
        token = int(trace.predictions[k, pos - n])
        state = 'correct' if token == int(trace.final[pos]) else 'wrong'
        yield k, pos, trace.piece_of[token], state, pos < n + a, float(trace.probabilities[k, pos - n])


_COLOURS = {'final': '#dddddd', 'correct': '#b7e4b0', 'wrong': '#f4b6b6'}


def _plain(text: str) -> str:
  """Text for a matplotlib label: a tab, form feed or other control character (no glyph: a warning a character)
  shown as a space; the callers turn off mathtext too, where 'pay $5 or $x^{' is a parse error."""
  return ''.join(c if c.isprintable() else ' ' for c in text)


def render_png(trace: SentenceTrace, path: str) -> None:
  # A Figure of its own, not pyplot: drawing a file must not switch the caller's backend (a notebook's inline
  # plots stopped showing after a DDGviz picture when this set matplotlib.use('Agg')).
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
  from matplotlib.patches import Rectangle  # pylint: disable=g-import-not-at-top
  iterations, m = len(trace.starts), len(trace.final)
  fig = Figure(figsize=(max(6, 0.75 * m + 1.5), 0.45 * (iterations + 2) + 1.2))
  ax = fig.subplots()
  for k, pos, piece, state, committed, prob in _cells(trace):
    ax.add_patch(Rectangle((pos, k), 1, 1, facecolor=_COLOURS[state], edgecolor='black' if committed else 'white',
                               linewidth=2.0 if committed else 0.5))
    if piece:
      ax.text(pos + 0.5, k + 0.5, _plain(piece), ha='center', va='center', fontsize=7, parse_math=False)
  final_at = trace.final_at
  for pos, piece in enumerate(trace.pieces):
    ax.text(pos + 0.5, iterations + 0.35, _plain(piece), ha='center', va='center', fontsize=7, weight='bold',
            parse_math=False)
    ax.text(pos + 0.5, iterations + 0.8, str(final_at[pos]), ha='center', va='center', fontsize=6, color='#555')
  ax.set_xlim(0, m)
  ax.set_ylim(iterations + 1.1, 0)
  ax.set_yticks([k + 0.5 for k in range(iterations)], [f'it {k + 1}' for k in range(iterations)], fontsize=7)
  ax.set_xticks([])
  ax.set_title(f'DDGviz {trace.method}: {iterations} iterations for {m} tokens\n{_plain(trace.source[:110])}',
               fontsize=8, parse_math=False)
  for side in ('top', 'right', 'bottom', 'left'):
    ax.spines[side].set_visible(False)
  fig.tight_layout()
  fig.savefig(path, dpi=110)


def render_html(trace: SentenceTrace, path: str) -> None:
  iterations, m = len(trace.starts), len(trace.final)
  grid = [[''] * m for _ in range(iterations)]
  for k, pos, piece, state, committed, prob in _cells(trace):
    title = '' if prob is None else f' title="p={prob:.3f}"'
    border = 'border:2px solid #000;' if committed else ''
    grid[k][pos] = (f'<td style="background:{_COLOURS[state]};{border}"{title}>{html.escape(piece)}</td>')
  rows = []
  for k in range(iterations):
    cells = ''.join(c or '<td></td>' for c in grid[k])
    rows.append(f'<tr><th>it {k + 1} (+{int(trace.accepted[k])})</th>{cells}</tr>')
  final_at = trace.final_at
  rows.append('<tr><th>output</th>' + ''.join(f'<td><b>{html.escape(p)}</b></td>' for p in trace.pieces) + '</tr>')
  rows.append('<tr><th>final at</th>' + ''.join(f'<td>{a}</td>' for a in final_at) + '</tr>')
  page = f"""<!doctype html><html><head><meta charset="utf-8"><title>DDGviz</title><style>
body{{font-family:sans-serif;font-size:13px}} table{{border-collapse:collapse}}
td,th{{padding:2px 5px;border:1px solid #fff;text-align:center;white-space:nowrap}} th{{text-align:right}}
</style></head><body><h3>DDGviz — {html.escape(trace.method)}: {iterations} iterations for {m} tokens</h3>
<p>{html.escape(trace.source)}</p>
<p>Green: the prediction already equals the final output; red: not yet; grey: final before this iteration.
Framed: committed by this iteration (became final together). Hover a cell for its probability.</p>
<table>{''.join(rows)}</table></body></html>"""
  with open(path, 'w', encoding='utf-8') as f:
    f.write(page)


JACOBI_FAMILY = ('pj', 'pgj', 'hgj', 'spec')


def drawn_settings(settings: DecodeSettings) -> DecodeSettings:
  """The decoding DDGviz traces for `settings`: a Jacobi-family algorithm's own; greedy's as PGJ with the same
  block size (its output is greedy's, by the commit rule). Beam search and the interleaved and hybrid decoders
  have no Jacobi iterations to draw: a FastmtError, so that no other decoder's trace is drawn in their name."""
  if settings.algorithm in JACOBI_FAMILY:
    return settings
  if settings.algorithm == 'greedy' and settings.max_repeats:  # PGJ's error named pgj, which nobody asked for
    raise FastmtError('DDGviz draws greedy as PGJ, its exact equal, but PGJ has no repetition guard (max_repeats '
                      'changes the output): drop --max_repeats to draw greedy\'s iterations')
  if settings.algorithm == 'greedy':
    return dataclasses.replace(settings, algorithm='pgj')
  raise FastmtError(f'DDGviz draws Jacobi decoding ({", ".join(JACOBI_FAMILY)}, or greedy as PGJ, its exact '
                    f'equal); --algorithm {settings.algorithm} has no Jacobi iterations to draw')


def draw_sentences(translator: Translator, sources, settings: DecodeSettings, directory: str,
                   limit: int | None = None) -> list[str]:
  """Writes ddgviz_<n>.png and ddgviz_<n>.html for each source that decodes (not blank), the first `limit` of
  them (None: all), n its 1-based line number in `sources`; returns the paths. Greedy is drawn as PGJ
  (drawn_settings)."""
  settings = drawn_settings(settings)
  os.makedirs(directory, exist_ok=True)
  paths = []
  for i in translator.decodable(sources)[:limit]:  # a blank line has nothing to draw
    source = sources[i]
    trace = trace_sentence(translator, source, settings)
    for ext, render in (('png', render_png), ('html', render_html)):
      path = os.path.join(directory, f'ddgviz_{i + 1}.{ext}')
      render(trace, path)
      paths.append(path)
  return paths
