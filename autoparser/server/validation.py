"""Checks on a request body before anything else reads it: the edge every request passes once.

A request is untrusted input that later code (pydantic, the renderer, the tokenizer, the grammar
builder, llama.cpp) would otherwise meet in shapes it handles badly: JSON nested thousands deep,
integers thousands of digits long, strings holding lone surrogates (which cannot be encoded as
UTF-8), template variables that collide with the renderer's own parameters, tool names that the
grammar would force the model to write but the parser could never read back, and tool schemas
whose grammar would wedge the generation slot. Each becomes a 400 OpenAI error naming the field
(`param`), with a one-line log, before the request takes any other resource.

The checks that do not depend on HTTP (`check_tools`, `check_json_value`) raise `InvalidInput`,
so the command line reuses them for its tools file.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import re
import weakref
from collections.abc import Callable
from typing import Any

from autoparser.generators.schema_budget import SchemaError, check_schema

__all__ = [
    "MAX_BODY_INTEGER",
    "MAX_JSON_DEPTH",
    "MAX_SPECIAL_TEXTS",
    "TOOL_NAME",
    "InvalidInput",
    "PromptTooLong",
    "SpecialMask",
    "check_json_value",
    "check_template_kwargs",
    "check_tools",
    "check_fits",
    "checked_body",
    "fewest_tokens",
    "param_path",
    "tokenize_prompt",
]

log = logging.getLogger("autoparser.server")

MAX_JSON_DEPTH = 100
"""Deepest nesting of objects and arrays in a request (a tool schema nested ~48 levels fits)."""
MAX_BODY_INTEGER = 2 ** 64
"""Integers in a request beyond this magnitude are refused: no field means anything larger."""
TOOL_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
"""OpenAI's rule for function names; anything else the parser could not read back reliably."""

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class InvalidInput(ValueError):
    """A request (or tools file) that cannot be served; `param` names the offending field."""

    def __init__(self, message: str, param: str | None = None, code: str = "invalid_value"):
        super().__init__(message)
        self.param = param
        self.code = code


def param_path(parts: tuple[Any, ...] | list[Any]) -> str:
    """`("messages", 0, "content")` -> `"messages[0].content"`."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


# -- the body as a whole -----------------------------------------------------------------------


def checked_body(body: bytes | dict[str, Any], *, chat: bool = True) -> dict[str, Any]:
    """The request body (raw, or already decoded by another endpoint) as a JSON object that every
    later step can handle; `chat` adds the checks of a chat request's tools, template kwargs and
    response schema. Raises a 400 `APIError`."""
    from autoparser.server.errors import APIError

    try:
        data = body if isinstance(body, dict) else _decode(body)
        if not isinstance(data, dict):
            raise InvalidInput("The request body must be a JSON object.")
        check_json_value(data)
        if chat:
            _check_chat_fields(data)
    except SchemaError as exc:
        log.warning("400 %s: %s", exc.param or "request", exc)
        raise APIError(400, str(exc), param=exc.param, code="invalid_schema") from None
    except InvalidInput as exc:
        log.warning("400 %s: %s", exc.param or "request", exc)
        raise APIError(400, str(exc), param=exc.param, code=exc.code) from None
    return data


def _check_chat_fields(data: dict[str, Any]) -> None:
    if data.get("tools") is not None:
        check_tools(data["tools"])
    kwargs = data.get("chat_template_kwargs")
    if isinstance(kwargs, dict):
        check_template_kwargs(kwargs)
    schema = _response_schema(data)
    if schema is not None:
        check_schema(schema, owner="response_format", param="response_format.json_schema.schema")


def _decode(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidInput(f"The request body is not valid JSON: {exc}", code="invalid_json") from None
    except RecursionError:
        raise InvalidInput(f"The request body is nested deeper than {MAX_JSON_DEPTH} levels.",
                           code="invalid_json") from None
    except ValueError as exc:  # Python's limit on the digits of an integer
        raise InvalidInput(f"The request body holds a number that is too large: {exc}",
                           code="invalid_json") from None


def check_json_value(value: Any, root: tuple[Any, ...] = ()) -> None:
    """Nesting at most `MAX_JSON_DEPTH`, integers within `MAX_BODY_INTEGER`, strings that are
    valid Unicode (no lone surrogates, which `\\ud800` escapes can smuggle into JSON)."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(value, root)]
    while stack:
        node, path = stack.pop()
        if len(path) - len(root) >= MAX_JSON_DEPTH:
            raise InvalidInput(f"{param_path(path[:8])}...: JSON nested deeper than {MAX_JSON_DEPTH} levels.",
                               param=param_path(path[:len(root) + 1]) or None)
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, item in items:
            if isinstance(key, str):
                _check_string(key, path)
            if isinstance(item, dict | list):
                stack.append((item, (*path, key)))
            elif isinstance(item, str):
                _check_string(item, (*path, key))
            elif isinstance(item, int) and not isinstance(item, bool) and abs(item) > MAX_BODY_INTEGER:
                where = param_path((*path, key))
                raise InvalidInput(f"{where}: the integer ({len(str(abs(item)))} digits) is out of range.",
                                   param=where)


def _check_string(text: str, path: tuple[Any, ...]) -> None:
    found = _LONE_SURROGATE.search(text)
    if found:
        where = param_path(path) or "request"
        raise InvalidInput(f"{where}: the text holds a lone surrogate (\\u{ord(found.group()):04x}), "
                           "which is not valid Unicode.", param=where)


# -- particular fields -------------------------------------------------------------------------


def check_tools(tools: Any, param: str = "tools") -> None:
    """Tool definitions: a list of function tools whose names follow OpenAI's rule, unique,
    with parameter schemas the grammar can afford (see `schema_budget.check_schema`)."""
    if not isinstance(tools, list):
        raise InvalidInput(f"{param}: must be a list of tool definitions.", param=param)
    seen: set[str] = set()
    for index, tool in enumerate(tools):
        here = f"{param}[{index}]"
        if not isinstance(tool, dict) or not isinstance(tool.get("function"), dict):
            raise InvalidInput(f"{here}: a tool must be an object with a 'function' object.", param=here)
        function = tool["function"]
        name = function.get("name")
        if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
            shown = name if not isinstance(name, str) else name[:80]
            raise InvalidInput(f"{here}.function.name: {shown!r} is not a valid function name (1 to 64 "
                               "letters, digits, '_', '.', ':' or '-').", param=f"{here}.function.name")
        if name in seen:
            raise InvalidInput(f"{here}.function.name: {name!r} is defined twice.", param=f"{here}.function.name")
        seen.add(name)
        parameters = function.get("parameters")
        if parameters is not None:
            if not isinstance(parameters, dict):
                raise InvalidInput(f"{here}.function.parameters: must be a JSON Schema object.",
                                   param=f"{here}.function.parameters")
            check_schema(parameters, owner=f"tool {name}", param=f"{here}.function.parameters")


def _renderer_parameters() -> frozenset[str]:
    from autoparser.render import render_template

    return frozenset(name for name, p in inspect.signature(render_template).parameters.items()
                     if p.kind is not inspect.Parameter.VAR_KEYWORD)


def check_template_kwargs(kwargs: dict[str, Any], param: str = "chat_template_kwargs") -> None:
    """Template variables may not replace what the server sets nor the renderer's own parameters."""
    clashes = sorted(set(kwargs) & _renderer_parameters())
    if clashes:
        raise InvalidInput(f"{param}: may not set {', '.join(clashes)} (the server sets them).", param=param)


def _response_schema(data: dict[str, Any]) -> Any:
    fmt = data.get("response_format")
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        return None
    inner = fmt.get("json_schema")
    return inner.get("schema") if isinstance(inner, dict) else None


# -- special-token text inside untrusted text --------------------------------------------------


def untrusted_texts(value: Any) -> set[str]:
    """Every string inside the client's messages, tools or template variables, object keys
    included (tool property names, argument keys), except role names: text that must never
    become a control token, however much it looks like one."""
    found: set[str] = set()
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            found.add(node)
        elif isinstance(node, dict):
            found.update(k for k in node if isinstance(k, str))
            stack.extend(v for k, v in node.items() if k != "role")
            decoded = _decoded_arguments(node)
            if decoded is not None:  # the template sees the decoded keys and values too
                stack.append(decoded)
        elif isinstance(node, list | tuple):
            stack.extend(node)
    return found


def _decoded_arguments(node: dict[str, Any]) -> Any:
    """Tool-call arguments sent as JSON text, decoded, as the renderer decodes them (`\\u`
    escapes spell a special token only once decoded); None when there are none."""
    text = node.get("arguments")
    if not isinstance(text, str) or not text.lstrip().startswith(("{", "[")):
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


_SENTINEL_LEAD = "\U000fff00"
_SENTINEL_BASE = 0x100000  # plane 16, private use: one character per special token after the lead


class SpecialMask:
    """Special-token spellings in client text, swapped for private-use sentinels and back.

    The server renders the conversation twice when a client text spells a special token: as
    sent, and masked. Where the masked prompt, unmasked, equals the real one, the sentinels say
    exactly which spellings came from the client, wherever the template put them and however
    short the text (a message that is nothing but `<|im_end|>`), and those are tokenized as
    text. A template that transforms the text (so the two disagree) falls back to searching
    for the client's texts in the prompt.
    """

    def __init__(self, special_tokens: Any):
        tokens = sorted({token for token in special_tokens if token}, key=len, reverse=True)[:0xFFFE]
        self._spelling = {_SENTINEL_LEAD + chr(_SENTINEL_BASE + i): token for i, token in enumerate(tokens)}
        self._sentinel = {token: sentinel for sentinel, token in self._spelling.items()}
        self._tokens = re.compile("|".join(re.escape(token) for token in tokens)) if tokens else None
        self.runs = re.compile(f"(?:{re.escape(_SENTINEL_LEAD)}[\U00100000-\U0010fffd])+")

    def spelled_in(self, value: Any) -> bool:
        """Whether any text in `value` (keys included) spells a special token."""
        return self._tokens is not None and any(self._tokens.search(text) for text in untrusted_texts(value))

    def mask(self, value: Any) -> Any:
        """A copy of `value` with every special-token spelling in its texts and keys (roles
        excepted) replaced by its sentinel."""
        if self._tokens is None:
            return value
        return _map_texts(value, self._masked_text, self._masked_arguments)

    def _masked_text(self, text: str) -> str:
        assert self._tokens is not None
        return self._tokens.sub(lambda m: self._sentinel[m.group()], text)

    def _masked_arguments(self, node: dict[str, Any]) -> str | None:
        """Arguments JSON text whose decoded form spells special tokens (through `\\u` escapes),
        masked and re-encoded without escapes, so that the template prints the sentinels
        wherever it prints the arguments; None when masking the text itself is enough."""
        decoded = _decoded_arguments(node)
        if decoded is None or not self.spelled_in(decoded):
            return None
        masked = _decoded_arguments({"arguments": self._masked_text(node["arguments"])})
        if masked is not None and not self.spelled_in(masked):
            return None  # spelled out in the text: masked in place, its layout kept
        return json.dumps(self.mask(decoded), ensure_ascii=False)

    def unmask(self, text: str) -> str:
        return self.runs.sub(lambda m: self.spelling(m.group()), text)

    def spelling(self, run: str) -> str:
        """The special-token text a run of sentinels stands for."""
        return "".join(self._spelling.get(run[i:i + 2], "") for i in range(0, len(run), 2))


def _map_texts(value: Any, change: Any, arguments: Any) -> Any:
    """`value` with `change` applied to every string and object key, except role names, and
    `arguments(node)` (when not None) replacing a node's `arguments`; walked without recursion
    (requests are nested at most `MAX_JSON_DEPTH`, but nothing here relies on it)."""
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    while stack:
        node, parent, slot = stack.pop()
        if isinstance(node, str):
            parent[slot] = change(node)
        elif isinstance(node, dict):
            copy: dict[Any, Any] = {}
            replaced = arguments(node)
            for key, item in node.items():
                new_key = change(key) if isinstance(key, str) else key
                copy[new_key] = item if key == "role" else None
                if key == "arguments" and replaced is not None:
                    copy[new_key] = replaced
                elif key != "role":
                    stack.append((item, copy, new_key))
            parent[slot] = copy
        elif isinstance(node, list | tuple):
            items: list[Any] = [None] * len(node)
            stack.extend((item, items, i) for i, item in enumerate(node))
            parent[slot] = items
        else:
            parent[slot] = node
    return root[0]


MAX_SPECIAL_TEXTS = 64
"""Most distinct client texts holding a special token's spelling one prompt may carry: each is
looked for in the prompt, and a conversation quoting chat markup in more places is not a chat."""


class PromptTooLong(ValueError):
    """The prompt cannot fit `limit` tokens, known before tokenizing it: `at_least` tokens."""

    def __init__(self, at_least: int):
        super().__init__(f"at least {at_least} tokens")
        self.at_least = at_least


def tokenize_prompt(engine: Any, prompt: str, untrusted: set[str], special_tokens: Any,
                    limit: int | None = None, masked: str | None = None,
                    mask: SpecialMask | None = None,
                    whole: Callable[[str], list[int]] | None = None) -> list[int]:
    """The prompt's tokens, with special-token text that came from the client read as text.

    The template's own markers are special tokens (`parse_special=True`); a client's text that
    holds a special token's spelling (`<|im_end|>` typed into a message) is tokenized as plain
    text, so a user cannot forge a turn boundary or a tool call. Prompts whose client texts hold
    no special-token spelling are tokenized in one call, exactly as before (by `whole`, where
    given: the same ids, e.g. from a beginning tokenized before, see `PrefixTokenizer`).

    With `masked` (the same conversation rendered with `mask.mask` applied to the client's
    input), the client's spellings are found by their sentinels (see `SpecialMask`); otherwise,
    or when the two renders disagree, by searching for the client's texts in the prompt, and a
    text made of nothing but special tokens (which that search cannot tell apart from the
    template's own markers) is refused.

    With `limit`, a prompt that has more tokens raises `PromptTooLong` early: before any
    tokenizing when its bytes alone say so (`fewest_tokens`), else after counting only as many
    tokens as the limit, so an oversized prompt never costs a full tokenization.
    """
    if limit is not None:
        check_fits(engine, prompt, limit)
    if masked is not None and mask is not None and mask.unmask(masked) == prompt:
        return _tokenize_masked(engine, masked, mask)
    spelled = _special_pattern(frozenset(token for token in special_tokens if token))
    forged = [] if spelled is None else [text for text in untrusted if spelled.search(text)]
    if any(not spelled.sub("", text).strip() for text in forged):  # type: ignore[union-attr]
        raise InvalidInput("A text in the request is made only of the model's special tokens, and the "
                           "chat template changes the text so that it cannot be kept apart from the "
                           "template's own markers.", param="messages")
    risky = sorted(forged, key=len, reverse=True)
    if not risky:
        return whole(prompt) if whole is not None else engine.tokenize(prompt, parse_special=True, add_bos=False)
    if len(risky) > MAX_SPECIAL_TEXTS:
        raise InvalidInput(f"{len(risky)} texts in the request spell special tokens of the model; "
                           f"at most {MAX_SPECIAL_TEXTS} may", param="messages")
    spans = re.compile("|".join(re.escape(text) for text in risky))
    tokens: list[int] = []
    at = 0
    for found in spans.finditer(prompt):
        if found.start() > at:
            tokens += engine.tokenize(prompt[at:found.start()], parse_special=True, add_bos=False)
        tokens += engine.tokenize(found.group(), parse_special=False, add_bos=False)
        at = found.end()
    if at < len(prompt):
        tokens += engine.tokenize(prompt[at:], parse_special=True, add_bos=False)
    return tokens


def _tokenize_masked(engine: Any, masked: str, mask: SpecialMask) -> list[int]:
    """The masked prompt's tokens: its own text read with special tokens, each run of sentinels
    read as the plain text of the spellings it stands for."""
    tokens: list[int] = []
    at = 0
    for run in mask.runs.finditer(masked):
        if run.start() > at:
            tokens += engine.tokenize(masked[at:run.start()], parse_special=True, add_bos=False)
        tokens += engine.tokenize(mask.spelling(run.group()), parse_special=False, add_bos=False)
        at = run.end()
    if at < len(masked):
        tokens += engine.tokenize(masked[at:], parse_special=True, add_bos=False)
    return tokens


TYPICAL_TOKEN_BYTES = 8
"""Prompts longer than this many bytes per token of the limit are counted before tokenizing:
ordinary text averages three to five bytes a token, so a prompt that fits is rarely counted."""
COUNT_CHUNK = 1 << 16


def check_fits(engine: Any, prompt: str, limit: int) -> None:
    """Raise `PromptTooLong` when `prompt` certainly has more than `limit` tokens, at a cost
    bounded by the limit rather than by the prompt's length."""
    least = fewest_tokens(engine, prompt)
    if least <= limit and len(prompt) * 4 > limit * TYPICAL_TOKEN_BYTES:
        least = max(least, _count_tokens_above(engine, prompt, limit))
    if least > limit:
        raise PromptTooLong(least)


def _count_tokens_above(engine: Any, prompt: str, limit: int) -> int:
    """The prompt's tokens, counted in chunks cut at whitespace and stopping once past `limit`.

    A cut can change the tokens next to it by one or so either way; each chunk's count is taken
    one lower, so the total never overstates the tokens of the whole."""
    count, at = 0, 0
    while at < len(prompt) and count <= limit:
        end = min(len(prompt), at + COUNT_CHUNK)
        while end < len(prompt) and not prompt[end].isspace() and end - at < 2 * COUNT_CHUNK:
            end += 1
        count += max(0, len(engine.tokenize(prompt[at:end], parse_special=True, add_bos=False)) - 1)
        at = end
    return count


def fewest_tokens(engine: Any, text: str) -> int:
    """A lower bound on the tokens of `text`: its bytes over the longest token's (0 when unknown)."""
    longest = _longest_token_bytes(engine)
    return -(-len(text.encode("utf-8", "surrogatepass")) // longest) if longest else 0


_LONGEST: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def _longest_token_bytes(engine: Any) -> int:
    known = getattr(engine, "longest_token_bytes", None)
    if isinstance(known, int):  # a vocabulary that knows it (0: unknown) without reading every token
        return known
    if engine not in _LONGEST:
        n_vocab = getattr(engine, "n_vocab", None)
        pieces = (len(engine.token_to_piece(token)) for token in range(n_vocab)) if isinstance(n_vocab, int) else ()
        _LONGEST[engine] = max(pieces, default=0)
    return _LONGEST[engine]


@functools.lru_cache(maxsize=8)
def _special_pattern(specials: frozenset[str]) -> re.Pattern[str] | None:
    """Any special token's spelling (longest first), or None when there are none."""
    if not specials:
        return None
    return re.compile("|".join(re.escape(token) for token in sorted(specials, key=len, reverse=True)))
