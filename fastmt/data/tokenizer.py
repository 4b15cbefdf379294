"""A joint SentencePiece model over source and target text, trained by the pipeline into the work directory.

Special ids are fixed so that every other module can rely on them: PAD=0, EOS=1, BOS=2, UNK=3.

New vocabularies also reserve the symbols that other training objectives and decoders feed the decoder
(RESERVED_SYMBOLS, as SentencePiece user-defined symbols, so they are single pieces; Tokenizer encodes text
without them, so no text produces them, and drops them when it decodes): `<mask>` for CMLM and HRT's
Skip-CMLM, chunk-BOS `<bos_2>` ... `<bos_8>` for HRT's Skip-AT with chunk size k, and direction starts `<bos_dir_1>` ... `<bos_dir_7>` for the interleaved decoders' extra
directions. An AT model trained today can therefore be fine-tuned into an HRT, CMLM or interleaved model
without a new vocabulary. Vocabularies trained before the reservation still load; asking one for a symbol it
lacks (`special_id`) is a clear error.
"""

import io
import logging
import os
import random
import unicodedata

import numpy as np
import sentencepiece as spm

from fastmt.errors import FastmtError
from fastmt.files import write_whole

logger = logging.getLogger(__name__)  # named 'fastmt.<module>': users set its level or handlers by name

PAD_ID, EOS_ID, BOS_ID, UNK_ID = 0, 1, 2, 3
MASK = '<mask>'
MAX_CHUNK_SIZE = 8  # HRT chunk sizes k = 2 .. 8 get a start symbol of their own
MAX_DIRECTIONS = 8  # interleaved decoders with up to 8 directions (direction 0 starts with BOS)
RESERVED_SYMBOLS = ((MASK,) + tuple(f'<bos_{k}>' for k in range(2, MAX_CHUNK_SIZE + 1)) +
                    tuple(f'<bos_dir_{d}>' for d in range(1, MAX_DIRECTIONS)))


def chunk_bos(k: int) -> str:
  """The start symbol of HRT's Skip-AT sequence for chunk size k (k = 1 is plain BOS)."""
  if not 2 <= k <= MAX_CHUNK_SIZE:
    raise FastmtError(f'chunk size must be in 2..{MAX_CHUNK_SIZE}, got {k}')
  return f'<bos_{k}>'


def direction_bos(d: int) -> str:
  """The start symbol of an interleaved decoder's direction d >= 1 (direction 0 starts with BOS)."""
  if not 1 <= d < MAX_DIRECTIONS:
    raise FastmtError(f'direction must be in 1..{MAX_DIRECTIONS - 1}, got {d}')
  return f'<bos_dir_{d}>'


def _proto(model_path: str):
  from sentencepiece import sentencepiece_model_pb2  # pylint: disable=g-import-not-at-top
  proto = sentencepiece_model_pb2.ModelProto()
  with open(model_path, 'rb') as f:
    proto.ParseFromString(f.read())
  return proto


# SentencePiece's normalization rules (config.vocab_normalization): what a vocabulary rewrites text into before
# splitting it, and so the form every output is written in. 'nmt_nfkc' is SentencePiece's default.
NORMALIZATIONS = ('nmt_nfkc', 'nfkc', 'nmt_nfkc_cf', 'nfkc_cf', 'identity')


def extend_with_reserved(model_path: str, output_path: str) -> list[str]:
  """Writes model_path's vocabulary plus the RESERVED_SYMBOLS it lacks, appended as user-defined pieces.

  Every existing piece keeps its id and every text its segmentation (new pieces only match their own
  literal), so a model trained before the reservation can be fine-tuned into an HRT or interleaved one: its
  embedding table grows by the new rows (train.py's config.init_from does that). Returns the added symbols.
  """
  proto = _proto(model_path)
  present = {p.piece for p in proto.pieces}
  added = [s for s in RESERVED_SYMBOLS if s not in present]
  for symbol in added:
    piece = proto.pieces.add()
    piece.piece, piece.score = symbol, 0.0
    piece.type = piece.USER_DEFINED
  write_whole(output_path, proto.SerializeToString())
  return added


def extends(base_path: str, path: str) -> bool:
  """Whether vocabulary `path` is `base_path`'s, possibly with pieces appended (same ids, same segmentation)."""
  from google.protobuf.message import DecodeError  # pylint: disable=g-import-not-at-top
  try:
    base, other = _proto(base_path), _proto(path)
  except DecodeError:  # not a SentencePiece model at all: certainly not an extension
    return False
  if len(other.pieces) < len(base.pieces) or base.normalizer_spec != other.normalizer_spec:
    return False
  return all(a == b for a, b in zip(base.pieces, other.pieces))


SMALL_ENCODE_BATCH = 64  # Tokenizer.encode: fewer texts than this are encoded one call each


class Tokenizer:
  """Thin wrapper over a SentencePieceProcessor with fastmt's special ids."""

  def __init__(self, model_path: str):
    self.model_path = model_path
    try:
      self._sp = spm.SentencePieceProcessor(model_file=model_path)
    except RuntimeError as e:  # sentencepiece's error for a damaged file; a resumed run showed its traceback
      raise FastmtError(f'{model_path} is not a SentencePiece model ({str(e).strip()[:200]})') from None
    if (self._sp.pad_id(), self._sp.eos_id(), self._sp.bos_id(), self._sp.unk_id()) != (
        PAD_ID, EOS_ID, BOS_ID, UNK_ID):
      raise FastmtError(f'{model_path} was not trained with fastmt special ids (pad 0, eos 1, bos 2, unk 3)')
    # The reserved symbols are user-defined pieces, which SentencePiece matches wherever their literal occurs:
    # text that contains "<mask>" (XML, code, a corpus about masks) would encode to the mask id that CMLM and
    # HRT train on, and a model's <bos_k> would come out as text. Text is encoded with a copy of the vocabulary
    # in which they are UNUSED (never produced; every other piece, id and segmentation the same), so a literal
    # "<mask>" is spelled with ordinary pieces; decode drops their ids.
    proto = _proto(model_path)
    reserved = [i for i, piece in enumerate(proto.pieces) if piece.piece in RESERVED_SYMBOLS]
    self._reserved_ids = frozenset(reserved)
    self._text_sp = self._sp
    # What a line the vocabulary cannot spell encodes to: <unk>, bare word boundaries, and a multilingual
    # model's language tag (user-defined pieces other than the reserved ones) in front of them.
    boundary = self._sp.piece_to_id('\u2581')
    tags = {i for i, piece in enumerate(proto.pieces)
            if piece.type == piece.USER_DEFINED and piece.piece not in RESERVED_SYMBOLS}
    self._unreadable_ids = frozenset({UNK_ID} | tags |
                                     ({boundary} if self._sp.id_to_piece(boundary) == '\u2581' else set()))
    if reserved:
      for i in reserved:
        proto.pieces[i].type = proto.pieces[i].UNUSED
      self._text_sp = spm.SentencePieceProcessor(model_proto=proto.SerializeToString())

  @property
  def vocab_size(self) -> int:
    return self._sp.get_piece_size()

  def encode(self, texts: list[str]) -> list[np.ndarray]:
    """Token ids without BOS/EOS, one int32 array per text.

    SentencePiece's list call pays ~0.1 ms to set up however short the list (one sentence: 0.12 ms against
    0.005 ms for the single-string call; benchmarks/dispatch_cost.py), which a batch-1 translation pays per line;
    short lists go text by text, long ones through the list call (the same ids either way).
    """
    texts = list(texts)
    if len(texts) < SMALL_ENCODE_BATCH:
      return [np.asarray(self._text_sp.encode(text), np.int32) for text in texts]
    return [np.asarray(ids, np.int32) for ids in self._text_sp.encode(texts)]

  def decode(self, ids_batch) -> list[str]:
    """Detokenises rows of ids; stops each row at its first EOS and ignores PAD, BOS and the reserved symbols
    (<mask>, <bos_k>, <bos_dir_d>: a decoder's inputs, never text)."""
    texts = []
    for ids in ids_batch:
      ids = [int(i) for i in ids]
      if EOS_ID in ids:
        ids = ids[:ids.index(EOS_ID)]
      texts.append(self._sp.decode([i for i in ids if i not in (PAD_ID, BOS_ID) and i not in self._reserved_ids]))
    return texts

  @property
  def normalization(self) -> str:
    """The vocabulary's SentencePiece normalization rule ('nmt_nfkc' unless trained otherwise; NORMALIZATIONS)."""
    return _proto(self.model_path).normalizer_spec.name or 'nmt_nfkc'

  def normalized(self, text: str) -> str:
    """`text` as this vocabulary rewrites it (whitespace runs as one space): the form its outputs are in."""
    return ' '.join(self._text_sp.normalize(text).replace('\u2581', ' ').split())

  @property
  def text_processor(self) -> spm.SentencePieceProcessor:
    """The SentencePieceProcessor that encode() uses (the reserved symbols unused; the same ids and pieces):
    for tools that need SentencePiece's own calls, e.g. pieces rather than ids."""
    return self._text_sp

  def spells_nothing(self, ids) -> bool:
    """Whether ids are only <unk>, bare word boundaries ('▁') and language tags: text in characters this
    vocabulary lacks (another script, emoji), which a model can only answer with an invented sentence."""
    return all(int(i) in self._unreadable_ids for i in ids)

  def has_piece(self, symbol: str) -> bool:
    """Whether `symbol` is one piece of this vocabulary (a language tag of a multilingual model, say)."""
    piece_id = self._sp.piece_to_id(symbol)
    return piece_id != UNK_ID and self._sp.id_to_piece(piece_id) == symbol

  def special_id(self, symbol: str) -> int:
    """The id of a reserved symbol (RESERVED_SYMBOLS); an error for vocabularies trained without it."""
    if not self.has_piece(symbol):
      raise FastmtError(f'{self.model_path} has no {symbol} symbol: it was trained before fastmt reserved it. '
                        'Train a model with a new vocabulary (a new --workdir) to use this objective or decoder')
    return self._sp.piece_to_id(symbol)

  def pieces(self, ids) -> list[str]:
    return [self._sp.id_to_piece(int(i)) for i in ids]


MAX_SENTENCE_BYTES = 4192  # SentencePiece's max_sentence_length: it skips longer training lines


def train_tokenizer(texts: list[str], model_path: str, vocab_size: int, max_sentences: int = 300_000,
                    seed: int = 0, user_symbols: tuple[str, ...] = (), character_coverage: float = 1.0,
                    normalization: str = 'nmt_nfkc') -> Tokenizer:
  """Trains a joint unigram SentencePiece model on `texts` (sampled deterministically) and saves it.

  user_symbols: strings that must stay single pieces (a multilingual model's target-language tags).
  normalization: SentencePiece's normalization_rule_name (NORMALIZATIONS; config.vocab_normalization).
  character_coverage: the share of characters with a piece of their own (config.vocab_character_coverage).
  """
  texts = [t for t in texts if t.strip()]
  if len(texts) > max_sentences:
    texts = random.Random(seed).sample(texts, max_sentences)
  model = io.BytesIO()
  if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
    raise FastmtError(f'config.vocab_size must be a whole number >= 1, got {vocab_size!r}')
  if (isinstance(character_coverage, bool) or not isinstance(character_coverage, (int, float))
      or not 0.98 <= character_coverage <= 1):
    raise FastmtError(f'config.vocab_character_coverage must be in [0.98, 1] (SentencePiece\'s range), got '
                      f'{character_coverage!r}')
  if normalization not in NORMALIZATIONS:
    raise FastmtError(f'config.vocab_normalization must be one of {NORMALIZATIONS}, got {normalization!r}')
  if not texts:
    raise FastmtError('no training text to train a vocabulary on: the training split has no line with text')
  too_long = sum(len(t.encode('utf-8')) > MAX_SENTENCE_BYTES for t in texts)
  try:
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_writer=model, vocab_size=vocab_size, model_type='unigram',
        character_coverage=character_coverage, pad_id=PAD_ID, eos_id=EOS_ID, bos_id=BOS_ID, unk_id=UNK_ID,
        input_sentence_size=max_sentences, shuffle_input_sentence=False, num_threads=os.cpu_count() or 1,
        max_sentence_length=MAX_SENTENCE_BYTES, user_defined_symbols=list(user_symbols), minloglevel=2,
        normalization_rule_name=normalization)
  except RuntimeError as e:  # the corpus cannot give vocab_size pieces, or has more characters than that
    reason = (str(e).strip().splitlines() or [type(e).__name__])[-1]
    hint = 'set config.vocab_size'
    if 'required_chars' in reason:
      hint += ', or config.vocab_character_coverage below 1 (about 0.9995 for Chinese or Japanese)'
    if too_long:  # SentencePiece skipped them: a file with CR-only line endings reads as a few huge lines
      hint += (f'; {too_long} of the {len(texts)} lines are longer than {MAX_SENTENCE_BYTES} bytes, which '
               'SentencePiece skips (a file whose lines end in CR only reads as one line)')
    raise FastmtError(f'cannot train a {vocab_size}-piece vocabulary on {len(texts)} training sentences: '
                      f'{reason} ({hint})') from None
  write_whole(model_path, model.getvalue())
  logger.info('Trained a %d-piece SentencePiece model on %d sentences -> %s', vocab_size, len(texts),
              model_path)
  return Tokenizer(model_path)


def has_visible_text(line: str) -> bool:
  """Whether a line holds anything to translate: a character that is neither space nor invisible (Unicode's
  format and control characters: zero-width joiners, word joiners, soft hyphens, direction marks, the byte-order
  mark, NUL ...). SentencePiece drops some of those and encodes others as <unk>; a model given only <unk> would
  invent a sentence, so a line without a visible character is an empty input either way.

  Characters Python's Unicode tables do not know yet (an emoji newer than them) and private-use ones are
  visible: str.isprintable() says no to both, which once made such a line a silent empty input instead of an
  unreadable one (counted, and named in a warning, as the tokenizer gives it <unk>)."""
  return any(unicodedata.category(ch) not in _INVISIBLE_CATEGORIES and not ch.isspace() for ch in line)


# Control, format and surrogate characters (Cc, Cf, Cs); spaces and separators are ch.isspace().
_INVISIBLE_CATEGORIES = frozenset(('Cc', 'Cf', 'Cs'))
