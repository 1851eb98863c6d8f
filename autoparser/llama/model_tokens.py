"""The token side of a loaded model: tokenize, detokenize, and the tables generation reads.

`ModelTokens` is the base of :class:`~autoparser.llama.engine.Engine` (and so of
:class:`~autoparser.llama.vocabulary.Vocabulary`, which loads no weights). It reads the
vocabulary once: every token's bytes, and its text where those are whole characters; the
special and end-of-generation tokens; on first use the vocabulary's prefix tree, and, per kind of
unfinished UTF-8 character, the tokens that would break it.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from typing import Any

import llama_cpp
import numpy as np

from autoparser.llama.grammar_check import find_token_refs
from autoparser.llama.lazy_guard import LazyTriggerGuard
from autoparser.llama.long_runs import tokenizer_pieces
from autoparser.llama.sampling import GrammarSpec
from autoparser.llama.token_trie import TokenTrie
from autoparser.llama.utf8 import continuation_state, incomplete_tail

_SPECIAL_ATTRS = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED


class ModelTokens:
    """Tokenizer methods on a loaded model.

    A subclass sets ``_model`` (the loaded model) and ``_local`` (a ``threading.local``), then
    calls :meth:`_read_vocabulary`.
    """

    _model: Any
    _local: threading.local

    def _read_chat_template(self) -> str | None:
        raw = llama_cpp.llama_model_chat_template(self._model, None)
        return raw.decode("utf-8", errors="replace") if raw else None

    def _special_text(self, token: int) -> str:
        return self.token_to_piece(token).decode("utf-8", errors="replace") if token >= 0 else ""

    def _collect_special_tokens(self) -> set[str]:
        """Texts of CONTROL and USER_DEFINED tokens; also records the ids of those and of EOG tokens."""
        specials = set()
        ids = []
        for token in range(self.n_vocab):
            attrs = llama_cpp.llama_vocab_get_attr(self.vocab_ptr, token)
            if attrs & _SPECIAL_ATTRS or llama_cpp.llama_vocab_is_eog(self.vocab_ptr, token):
                ids.append(token)
            if attrs & _SPECIAL_ATTRS:
                text = self._special_text(token)
                if text:
                    specials.add(text)
        self._special_ids = ids
        return specials

    def tokenize(self, text: str, parse_special: bool = True, add_bos: bool = False) -> list[int]:
        """Token ids of ``text``; with ``parse_special`` special-token texts become their tokens.

        Very long runs of characters are tokenized in pieces (:mod:`autoparser.llama.long_runs`):
        in one piece they can crash llama.cpp's pre-tokenizer.
        """
        if not self._model:
            raise RuntimeError("the engine is closed")
        pieces = tokenizer_pieces(text, self.special_tokens if parse_special else ())
        tokens = self._tokenize_piece(pieces[0], parse_special, add_bos)
        for piece in pieces[1:]:
            tokens += self._tokenize_piece(piece, parse_special, False)
        return tokens

    def _tokenize_piece(self, text: str, parse_special: bool, add_bos: bool) -> list[int]:
        data = text.encode("utf-8")
        capacity = len(data) + 8
        while True:
            buf = (llama_cpp.llama_token * capacity)()
            n = llama_cpp.llama_tokenize(
                self.vocab_ptr, data, len(data), buf, capacity, add_bos, parse_special
            )
            if n >= 0:
                return list(buf[:n])
            capacity = -n

    def token_id(self, text: str) -> int | None:
        """The id of ``text`` when it is exactly one token (special tokens included), else None."""
        tokens = self.tokenize(text, parse_special=True)
        if len(tokens) != 1:
            return None
        return tokens[0] if self.token_to_piece(tokens[0]) == text.encode("utf-8") else None

    def _read_vocabulary(self) -> None:
        """What the token methods read from the loaded model (also all a vocab-only model has)."""
        self.vocab_ptr: int = llama_cpp.llama_model_get_vocab(self._model)
        self.n_vocab: int = llama_cpp.llama_vocab_n_tokens(self.vocab_ptr)
        self.chat_template: str | None = self._read_chat_template()
        self.bos_token: str = self._special_text(llama_cpp.llama_vocab_bos(self.vocab_ptr))
        self.eos_token: str = self._special_text(llama_cpp.llama_vocab_eos(self.vocab_ptr))
        self.special_tokens: set[str] = self._collect_special_tokens()
        self.eog_ids = [t for t in range(self.n_vocab) if llama_cpp.llama_vocab_is_eog(self.vocab_ptr, t)]
        self.eog_set = frozenset(self.eog_ids)
        # every token's bytes, looked up once: the generation loop needs them for each token
        self.pieces: list[bytes] = [self.token_to_piece(t) for t in range(self.n_vocab)]
        # and their text where the bytes are whole characters: after complete text such a token
        # needs no UTF-8 check and no incremental decoder
        self.texts: list[str | None] = [_whole_text(piece) for piece in self.pieces]
        self._trie: TokenTrie | None = None
        self._utf8_breaking: dict[tuple[int, int, int], np.ndarray] = {}
        self._utf8_masks: dict[tuple[int, int, int], np.ndarray] = {}

    def token_to_piece(self, token: int, special: bool = True) -> bytes:
        """The bytes of one token; special tokens rendered as their text when ``special``."""
        buf = getattr(self._local, "piece_buf", None)
        if buf is None:  # one buffer per thread: the server tokenizes while the worker generates
            buf = self._local.piece_buf = ctypes.create_string_buffer(256)
        n = llama_cpp.llama_token_to_piece(self.vocab_ptr, token, buf, len(buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self.vocab_ptr, token, buf, len(buf), 0, special)
        return buf.raw[:n]

    def detokenize(self, tokens: Sequence[int], special: bool = True) -> str:
        """Text of a token sequence (special tokens kept when ``special``)."""
        return b"".join(self.token_to_piece(t, special) for t in tokens).decode("utf-8", errors="replace")

    def is_eog(self, token: int) -> bool:
        return token in self.eog_set

    def lazy_guard(self, grammar: GrammarSpec) -> LazyTriggerGuard:
        """The guard that keeps a lazy grammar's trigger from firing on a token the grammar rejects."""
        special = set(self._special_ids)
        return LazyTriggerGuard(
            self.vocab_ptr,
            grammar.gbnf,
            grammar.root,
            grammar.trigger_patterns,
            grammar.trigger_tokens,
            piece=self.token_to_piece,
            tokenize_text=lambda text: self.tokenize(text, parse_special=False),
            is_special=special.__contains__,
        )

    def grammar_token_ids(self, gbnf: str) -> list[int] | None:
        """Ids the grammar references as tokens; None when it negates one (the prefilter must stay off)."""
        ids: list[int] = []
        for ref in find_token_refs(gbnf):
            if ref.negated:
                return None
            if ref.token_id is not None:
                ids.append(ref.token_id)
            else:
                tokens = self.tokenize(f"<{ref.body}>", parse_special=True)
                if len(tokens) == 1:
                    ids.append(tokens[0])
        return ids

    def _token_trie(self) -> TokenTrie:
        """The vocabulary's prefix tree (built once), without special tokens: those match by id."""
        if self._trie is None:
            excluded = np.zeros(self.n_vocab, dtype=bool)
            excluded[self._special_ids] = True
            self._trie = TokenTrie(self.pieces, excluded)
        return self._trie

    def prepare_utf8_tables(self) -> None:
        """Build now the tables :meth:`tokens_breaking_utf8` and :meth:`utf8_breaking_mask` would
        build on first use, for every kind of unfinished character (a pass over the vocabulary each)."""
        leads = (b"\xc3", b"\xe0", b"\xe1", b"\xed", b"\xf0", b"\xf1", b"\xf4")
        for tail in (b"", *leads, b"\xe1\x80", b"\xf1\x80", b"\xf1\x80\x80"):
            self.utf8_breaking_mask(tail)

    def tokens_breaking_utf8(self, tail: bytes) -> np.ndarray:
        """The tokens whose bytes cannot follow ``tail``: a lone continuation byte after complete
        text; inside a character, anything but its next byte, end-of-generation tokens included
        (the output would end with half a character). Computed once per
        :func:`~autoparser.llama.utf8.continuation_state`, so that sampling leaves them out in one
        pass instead of rejecting them one pick at a time."""
        state = continuation_state(tail)
        found = self._utf8_breaking.get(state)
        if found is None:
            ends = self.eog_set if not tail else frozenset()
            found = np.array([t for t, piece in enumerate(self.pieces)
                              if t not in ends and incomplete_tail(tail + piece) is None], dtype=np.int64)
            self._utf8_breaking[state] = found
        return found

    def utf8_breaking_mask(self, tail: bytes) -> np.ndarray:
        """:meth:`tokens_breaking_utf8` as a boolean per vocabulary entry, end-of-generation
        tokens included inside a character; made once per kind of state and never written to."""
        state = continuation_state(tail)
        mask = self._utf8_masks.get(state)
        if mask is None:
            mask = np.zeros(self.n_vocab, dtype=bool)
            mask[self.tokens_breaking_utf8(tail)] = True
            if tail:
                mask[self.eog_ids] = True
            mask.flags.writeable = False
            self._utf8_masks[state] = mask
        return mask


def _whole_text(piece: bytes) -> str | None:
    try:
        return piece.decode("utf-8")
    except UnicodeDecodeError:
        return None
