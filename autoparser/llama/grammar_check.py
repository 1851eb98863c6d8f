"""Check GBNF grammars (and lazy-grammar trigger patterns) with llama.cpp itself, without crashing.

llama-cpp-python hands a grammar straight to llama.cpp, and an invalid one takes the whole
process down. llama.cpp's own ``llama_sampler_init_grammar`` is the one entry point that fails
softly: it parses the grammar, returns NULL when the parser rejects it and otherwise returns a
sampler we free at once. :func:`validate_gbnf` wraps that call and turns a NULL into a
:class:`GrammarError` carrying llama.cpp's own error text (the parser prints syntax errors to the
C ``stderr``, which is captured for the duration of the call).

Token references in GBNF (verified in the ``llama-grammar.cpp`` vendored by llama-cpp-python
0.3.36, and by ``tests/llama/test_tiny_model.py``):

- ``<[123]>`` matches exactly the token with id 123. The parser does not check the id against
  the vocabulary, so :func:`validate_gbnf` does.
- ``<text>`` (for example ``<｜tool▁sep｜>`` or ``<think>``) is tokenized with special-token
  parsing on and must give exactly one token, else the grammar is rejected ("invalid token").
  The text runs to the first ``>``, so a token whose text has a ``>`` inside (not at its end)
  can only be referenced by id. Both CONTROL and USER_DEFINED tokens work.
- ``!<text>`` / ``!<[123]>`` match any single token except that one.
- A quoted literal such as ``"<think>"`` matches the *text*: the special token (whose piece is
  rendered with special tokens kept) or any run of ordinary tokens spelling it. Referencing the
  token forces the model to emit the real special token.
- Token references need a vocabulary. When none is available, named references are replaced by
  ``<[0]>`` for the check, so syntax is still verified but the names are not resolved.

Trigger patterns of lazy grammars are compiled by llama.cpp with ``std::regex`` (ECMAScript
syntax) and a pattern it rejects throws a C++ exception through the C API, which also kills the
process. :func:`validate_trigger_patterns` therefore accepts only a conservative common subset of
Python ``re`` and ECMAScript syntax.

Callers that know the model pass it (or its GGUF path) as ``vocab``; otherwise the GGUF named by
``$AUTOPARSER_VOCAB_GGUF`` is used, and without that the check runs with no vocabulary.
"""

from __future__ import annotations

import ctypes
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llama_cpp

from autoparser.llama import _native

VOCAB_ENV = "AUTOPARSER_VOCAB_GGUF"


class GrammarError(ValueError):
    """llama.cpp rejected a grammar or a trigger pattern; the message says why."""


@dataclass(frozen=True)
class TokenRef:
    """A token reference found in GBNF text: ``<[id]>`` or ``<text>``, possibly negated with ``!``."""

    start: int
    end: int
    body: str
    negated: bool

    @property
    def token_id(self) -> int | None:
        """The id of a ``<[id]>`` reference, else None."""
        match = re.fullmatch(r"\[(\d+)\]", self.body)
        return int(match.group(1)) if match else None


# --------------------------------------------------------------------------- vocabularies

_vocab_lock = threading.Lock()
_vocab_models: dict[str, Any] = {}


def default_vocab_path() -> Path | None:
    """The vocab GGUF used when the caller names none: ``$AUTOPARSER_VOCAB_GGUF``, if set and present.

    Without it, grammars are checked without a vocabulary (named token references are verified
    syntactically only): no fixed vocabulary can know every model's special tokens.
    """
    env = os.environ.get(VOCAB_ENV)
    if env:
        path = Path(env).expanduser()
        return path if path.is_file() else None
    return None


def load_vocab(path: str | os.PathLike[str]) -> int:
    """Return the llama.cpp vocab pointer of a GGUF, loading it vocab-only once per path (cached)."""
    key = str(Path(path).expanduser().resolve())
    with _vocab_lock:
        model = _vocab_models.get(key)
        if model is None:
            model = _native.load_model(key, vocab_only=True)
            _vocab_models[key] = model
    vocab = llama_cpp.llama_model_get_vocab(model)
    if not vocab:
        raise ValueError(f"no vocabulary in {key}")
    return vocab


def resolve_vocab(vocab: Any = None) -> int | None:
    """Turn what callers have at hand into a llama.cpp vocab pointer (None: no vocabulary).

    Accepts None (the vocab GGUF named by ``$AUTOPARSER_VOCAB_GGUF`` when set, else no vocab), a
    GGUF path, a raw vocab pointer (int or ``c_void_p``), an object with a ``vocab_ptr`` attribute
    (the engine), or a ``llama_cpp.Llama``/``LlamaModel``.
    """
    if vocab is None:
        path = default_vocab_path()
        return load_vocab(path) if path else None
    if isinstance(vocab, str | os.PathLike):
        return load_vocab(vocab)
    if isinstance(vocab, int):
        return vocab
    if isinstance(vocab, ctypes.c_void_p):
        return vocab.value
    if hasattr(vocab, "vocab_ptr"):
        return vocab.vocab_ptr
    model = getattr(vocab, "_model", vocab)  # llama_cpp.Llama keeps its LlamaModel in _model
    inner = getattr(model, "vocab", None)
    if inner is not None:
        return inner
    raise TypeError(f"cannot get a llama.cpp vocabulary from {type(vocab).__name__}")


# --------------------------------------------------------------------------- GBNF scanning


def find_token_refs(text: str) -> list[TokenRef]:
    """Token references outside comments, string literals and character classes, as llama.cpp reads them."""
    refs: list[TokenRef] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "#":
            i = _skip_until_newline(text, i)
        elif ch == '"':
            i = _skip_delimited(text, i + 1, '"')
        elif ch == "[":
            i = _skip_delimited(text, i + 1, "]")
        elif ch == "<" or (ch == "!" and text.startswith("<", i + 1)):
            negated = ch == "!"
            open_at = i + 1 if negated else i
            close = text.find(">", open_at)
            if close < 0:
                return refs  # the parser reports the missing '>' itself
            refs.append(TokenRef(i, close + 1, text[open_at + 1 : close], negated))
            i = close + 1
        else:
            i += 1
    return refs


def _skip_until_newline(text: str, i: int) -> int:
    end = text.find("\n", i)
    return len(text) if end < 0 else end + 1


def _skip_delimited(text: str, i: int, closer: str) -> int:
    """Index after the closing delimiter, honouring backslash escapes (an unclosed one runs to the end)."""
    n = len(text)
    while i < n:
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == closer:
            return i + 1
        i += 1
    return n


def _replace_named_refs(text: str, refs: Sequence[TokenRef]) -> str:
    """Replace ``<name>`` references by ``<[0]>`` so a grammar can be checked without a vocabulary."""
    out, last = [], 0
    for ref in refs:
        if ref.token_id is None:
            out.append(text[last : ref.start])
            out.append(("!" if ref.negated else "") + "<[0]>")
            last = ref.end
    out.append(text[last:])
    return "".join(out)


# --------------------------------------------------------------------------- validation


def validate_gbnf(text: str, root: str = "root", vocab: Any = None) -> None:
    """Raise :class:`GrammarError` unless llama.cpp accepts ``text`` as a GBNF grammar with start rule ``root``.

    ``vocab`` is anything :func:`resolve_vocab` accepts; token references are resolved against it.
    Never crashes the process: the grammar only ever reaches llama.cpp's soft-failing entry point.
    """
    vocab_ptr = resolve_vocab(vocab)
    sampler = _init_sampler(vocab_ptr, _prechecked(text, root, vocab_ptr), root)
    llama_cpp.llama_sampler_free(sampler)


def _prechecked(text: str, root: str, vocab_ptr: int | None) -> str:
    """Checks llama.cpp does not make (or would crash on); the text to hand it.

    Without a vocabulary, named token references are replaced by ``<[0]>`` so the syntax can
    still be checked.
    """
    if not isinstance(text, str):
        raise TypeError("grammar text must be a str")
    if not text.strip():
        raise GrammarError("empty grammar")
    if "\0" in text or "\0" in root:
        raise GrammarError("grammar contains a NUL character")
    _native.ensure_backend()
    refs = find_token_refs(text)
    if vocab_ptr is None:
        return _replace_named_refs(text, refs)
    _check_token_ids(refs, llama_cpp.llama_vocab_n_tokens(vocab_ptr))
    return text


def _init_sampler(
    vocab_ptr: int | None,
    text: str,
    root: str,
    lazy: bool = False,
    trigger_patterns: Sequence[str] = (),
    trigger_tokens: Sequence[int] = (),
):  # type: ignore[no-untyped-def]
    """One call into llama.cpp's grammar sampler constructor; :class:`GrammarError` for NULL.

    The lazy constructor parses the grammar (failing softly) before it compiles the trigger
    patterns, which is the step that can abort; patterns must be validated before coming here.
    """
    with _native.capture_errors() as errors:
        if not lazy:
            sampler = llama_cpp.llama_sampler_init_grammar(
                vocab_ptr, text.encode("utf-8"), root.encode("utf-8")
            )
        else:
            encoded = [p.encode("utf-8") for p in trigger_patterns]
            patterns_arr = (ctypes.c_char_p * max(1, len(encoded)))(*encoded)
            tokens_arr = (llama_cpp.llama_token * max(1, len(trigger_tokens)))(
                *[int(t) for t in trigger_tokens]
            )
            sampler = llama_cpp.llama_sampler_init_grammar_lazy_patterns(
                vocab_ptr,
                text.encode("utf-8"),
                root.encode("utf-8"),
                patterns_arr,
                len(encoded),
                tokens_arr,
                len(trigger_tokens),
            )
    if not sampler:
        raise GrammarError(_describe(errors) or "llama.cpp rejected the grammar")
    return sampler


def _check_token_ids(refs: Sequence[TokenRef], n_vocab: int) -> None:
    for ref in refs:
        token_id = ref.token_id
        if token_id is not None and token_id >= n_vocab:
            raise GrammarError(f"token <[{token_id}]> is outside the vocabulary of {n_vocab} tokens")


def _describe(errors: Sequence[str]) -> str:
    """The useful part of llama.cpp's error output: parser messages without the echoed grammar."""
    messages: list[str] = []
    for chunk in errors:
        for block in chunk.split("\n\n"):
            line = block.strip().splitlines()[0].strip() if block.strip() else ""
            if not line:
                continue
            if "error parsing grammar" in line or "grammar" in line or "left recursion" in line:
                line = line.split(": ", 1)[1] if line.startswith(("parse:", "llama_grammar")) else line
                if line not in messages:
                    messages.append(line)
    specific = [m for m in messages if m != "failed to parse grammar"]
    return "; ".join(specific or messages)[:500]


# --------------------------------------------------------------------------- trigger patterns

_ALLOWED_ESCAPES = set("dDsSwWbBfnrtv0\\.^$|?*+()[]{}/-")
_GROUP_OPENERS = ("(?:", "(?=", "(?!")


def validate_trigger_patterns(patterns: Sequence[str]) -> None:
    """Raise :class:`GrammarError` unless every pattern is safe for both Python ``re`` and ``std::regex``.

    llama.cpp compiles trigger patterns with ``std::regex`` (ECMAScript) and a compile error there
    aborts the process, so only constructs with the same meaning in both dialects pass: no
    lookbehind, named groups, inline flags or Python-only escapes; braces only as quantifiers.
    """
    for pattern in patterns:
        if not isinstance(pattern, str):
            raise GrammarError(f"trigger pattern must be a str, got {type(pattern).__name__}")
        if "\0" in pattern:
            raise GrammarError("trigger pattern contains a NUL character")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise GrammarError(f"invalid trigger pattern {pattern!r}: {exc}") from None
        problem = _ecmascript_problem(pattern)
        if problem:
            raise GrammarError(f"trigger pattern {pattern!r} is not portable to llama.cpp: {problem}")


def _ecmascript_problem(pattern: str) -> str | None:
    i, n = 0, len(pattern)
    in_class = False
    while i < n:
        ch = pattern[i]
        if ch == "\\":
            nxt = pattern[i + 1] if i + 1 < n else ""
            if nxt == "x" and re.match(r"[0-9A-Fa-f]{2}", pattern[i + 2 : i + 4]):
                i += 4
                continue
            if nxt == "u" and re.match(r"[0-9A-Fa-f]{4}", pattern[i + 2 : i + 6]):
                i += 6
                continue
            if nxt.isdigit() and nxt != "0" and not in_class:
                i += 2  # back-reference, same meaning in both dialects
                continue
            if nxt not in _ALLOWED_ESCAPES and not (nxt and not nxt.isalnum() and nxt.isascii()):
                return f"escape \\{nxt}"
            i += 2
            continue
        if in_class:
            if ch == "[" and pattern.startswith(("[:", "[=", "[."), i):
                return "POSIX class syntax inside [...]"
            if ch == "]":
                in_class = False
            i += 1
            continue
        if ch == "[":
            in_class = True
            i += 1
            if pattern.startswith("^", i):
                i += 1
            if pattern.startswith("]", i):
                return "']' first in a character class"
            continue
        if ch == "(" and pattern.startswith("(?", i) and not pattern.startswith(_GROUP_OPENERS, i):
            return "group syntax other than (?:...), (?=...), (?!...)"
        if ch == "{":
            quant = re.match(r"\{\d+(,\d*)?\}", pattern[i:])
            if not quant or i == 0:
                return "'{' that is not a quantifier"
            i += len(quant.group(0))
            if pattern.startswith("+", i):
                return "possessive quantifier"
            continue
        if ch in "}]":
            return f"unescaped '{ch}'"
        if ch in "*+?" and pattern.startswith("+", i + 1) and i > 0:
            return "possessive quantifier"
        i += 1
    return None


def create_grammar_sampler(
    vocab: Any,
    gbnf: str,
    root: str = "root",
    lazy: bool = False,
    trigger_patterns: Sequence[str] = (),
    trigger_tokens: Sequence[int] = (),
):  # type: ignore[no-untyped-def]
    """Build a llama.cpp grammar sampler (lazy with triggers when asked), checked like
    :func:`validate_gbnf`; raises :class:`GrammarError` instead of ever returning NULL.

    The caller owns the returned sampler and frees it with ``llama_sampler_free``.
    """
    vocab_ptr = resolve_vocab(vocab)
    if vocab_ptr is None:
        raise GrammarError("no vocabulary available to build a grammar sampler")
    gbnf = _prechecked(gbnf, root, vocab_ptr)
    if lazy:
        validate_trigger_patterns(trigger_patterns)
        n_vocab = llama_cpp.llama_vocab_n_tokens(vocab_ptr)
        bad = [t for t in trigger_tokens if not 0 <= int(t) < n_vocab]
        if bad:
            raise GrammarError(f"trigger tokens outside the vocabulary: {bad}")
        if not trigger_patterns and not trigger_tokens:
            raise GrammarError("a lazy grammar needs at least one trigger pattern or token")
    return _init_sampler(vocab_ptr, gbnf, root, lazy, trigger_patterns, trigger_tokens)
