"""What the engine plugins share, with no engine imported.

* `served_model(tokenizer)`: the analysis of the tokenizer's chat template (with its BOS/EOS),
  computed once per process and cached by the template's hash. Engines build parser objects
  several times per request; only the first one in a process pays for the analysis.
* `ServedModel.parser(...)`: autoparser parsers cached by tools, tool choice, parallel calls and
  thinking, so a request whose tool set was seen before builds nothing.
* `ReasoningSplit`: cuts raw model output into reasoning and the rest where autoparser's reading
  does (`ServedModel.reasoning_cut`). Engines ask their reasoning parser for exactly that cut
  (the rest then goes to their tool parser as text), which autoparser's message-level parser
  does not expose, so it is done here: a small linear scanner that holds back only what could
  still become a marker, and, where reasoning is implied, what it cannot yet tell apart.
* `ServedModel.answer_reader(...)`: the tool stage after that cut, which reads the rest as
  autoparser reads the answer after reasoning (`AfterReasoning`): a reasoning block written
  inside the answer is reasoning there, read by the language's own rules, not by this module;
  `ServedModel.answer_reasoning(thinking)`: whether a request reads such blocks at all.
* `ServedModel.answer_parser(...)`: the tool stage that reads no reasoning at all (with no
  reasoning stage before it, the whole output with reasoning as text);
  `ServedModel.answer_has_work(text)`: whether it reads a text as other than the text itself.
* `merge_deltas(...)`: autoparser's OpenAI delta dicts of one feed, merged into one delta.
* `template_inputs_note(analysis)`: where the template reads variables beyond the conversation
  (`Analysis.template_inputs`), what the client must pass. The engines render the template
  themselves, and a parser cannot add template variables before they do: vLLM calls a parser's
  `adjust_request` after the prompt is rendered, and SGLang's detectors see no request before it;
  so the plugin says so once, at start-up, and the client passes them in `chat_template_kwargs`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import secrets
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from autoparser.caching import BoundedCache

PLUGIN_NAME = "autoparser"
_PARSER_CACHE_SIZE = 128
_PARSER_CACHE_BYTES = 128 << 20
"""Parsers are cached by the request's tools, which the client chooses: bounded in estimated
bytes too (about 64 bytes of parser per byte of tools JSON, as the server's cache counts)."""


def _parser_weight(key: str, parser: Any) -> int:
    return 64 * len(key)
_ID_WINDOW = 4096
# reasoning cuts in token ids kept per model: a few per tokenizer (one per start state)
_ID_CACHE_SIZE = 64

# the keys of the analysis' `tools` object that hold marker texts
TOOL_MARKER_KEYS = ("section_start", "section_end", "call_start", "call_end", "call_separator", "name_start",
                    "name_end", "args_start", "args_end", "arg_start", "arg_key_end", "arg_end", "id_start", "id_end")


_LOG = logging.getLogger("autoparser.plugins")


class PluginError(ValueError):
    """The served model cannot be used with the autoparser plugin; the message says why."""


def template_of(tokenizer: Any) -> tuple[str, str, str]:
    """The tokenizer's chat template source, BOS and EOS text."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("default") or next(iter(template.values()), None)
    elif isinstance(template, list):
        named = {item.get("name"): item.get("template") for item in template if isinstance(item, dict)}
        template = named.get("default") or next(iter(named.values()), None)
    if not isinstance(template, str) or not template.strip():
        raise PluginError("the served tokenizer has no chat_template for autoparser to analyze")
    return template, _token_text(getattr(tokenizer, "bos_token", None)), _token_text(
        getattr(tokenizer, "eos_token", None))


def _token_text(token: Any) -> str:
    if token is None:
        return ""
    return token if isinstance(token, str) else str(getattr(token, "content", token))


def template_key(source: str, bos: str, eos: str) -> str:
    return hashlib.sha256("\0".join((source, bos, eos)).encode("utf-8")).hexdigest()


@dataclass
class ServedModel:
    """One analyzed chat template and the parsers built from it."""

    key: str
    analysis: Any
    _parsers: BoundedCache = field(default_factory=lambda: BoundedCache(
        max_items=_PARSER_CACHE_SIZE, max_bytes=_PARSER_CACHE_BYTES, weigh=_parser_weight), repr=False)
    _ids: dict[tuple[int, Any], tuple[Any, Any]] = field(default_factory=dict, repr=False)
    _answer_reasoning: dict[tuple[bool | None, bool], bool] = field(default_factory=dict, repr=False)

    def markers(self) -> list[str]:
        """Every marker string the analysis names (key-templated ones left out)."""
        a = self.analysis
        tools = a.tools.to_dict()
        candidates = [a.reasoning.start, a.reasoning.end, a.content.start, a.content.end,
                      *(tools[key] for key in TOOL_MARKER_KEYS), *a.stop, *a.preserved_tokens]
        seen: dict[str, None] = {}
        for marker in candidates:
            if marker and marker.strip() and "{" not in marker:
                seen.setdefault(marker, None)
        return list(seen)

    def thinking(self, template_kwargs: dict[str, Any] | None) -> bool | None:
        """The thinking switch a request set through its chat template arguments, or None."""
        toggle = self.analysis.reasoning.toggle
        if not template_kwargs or not toggle or toggle not in template_kwargs:
            return None
        value = template_kwargs[toggle]
        if value == self.analysis.reasoning.toggle_off:
            return False
        if value == self.analysis.reasoning.toggle_on:
            return True
        return bool(value)

    def reasoning_markers(self) -> tuple[str, str, list[str]]:
        """Reasoning start, end, and the markers that end reasoning no end marker closed (for
        finding where reasoning ends in token ids)."""
        cut = self.opened_cut()
        return cut.start, cut.end, list(cut.interrupts)

    def opened_cut(self) -> Any:
        """The reasoning cut of an output whose prompt opened reasoning, whatever a request's
        start: its markers are every request's."""
        from autoparser.language.build import Request, reasoning_cut

        reasoning = dataclasses.replace(self.analysis.reasoning, forced_open=True)
        return reasoning_cut(dataclasses.replace(self.analysis, reasoning=reasoning), Request(thinking=True))

    def reasoning_cut(self, thinking: bool | None, prompt: str | None = None) -> Any:
        """Where autoparser's reading separates reasoning from the answer for one request
        (`autoparser.language.build.ReasoningCut`); `prompt`: the rendered prompt, where the
        engine gives it. Cheap: no language is built."""
        from autoparser.language.build import Request, reasoning_cut

        return reasoning_cut(self.analysis, Request(thinking=thinking, prompt=prompt))

    def reasoning_ids(self, tokenizer: Any, cut: Any) -> Any:
        """Where reasoning ends in `tokenizer`'s ids for one cut (`reasoning_cut`), as
        autoparser's parser finds it (`autoparser.language.token_ids.ReasoningIds`, what
        `Parser.reasoning_ids` gives); built once per tokenizer and cut."""
        from autoparser.language.token_ids import ReasoningIds, decoder, encoder

        key = (id(tokenizer), cut)
        kept = self._ids.get(key)
        if kept is None or kept[0] is not tokenizer:
            if len(self._ids) >= _ID_CACHE_SIZE:
                self._ids.clear()
            kept = self._ids[key] = (tokenizer, ReasoningIds(cut, encoder(tokenizer), decoder(tokenizer)))
        return kept[1]

    def reasoning_split(self, thinking: bool | None, prompt: str | None = None,
                        stream_reasoning: bool = True) -> ReasoningSplit:
        """A new cut of one output into reasoning and the rest, as autoparser reads it."""
        return ReasoningSplit(self.reasoning_cut(thinking, prompt), stream_reasoning)

    def answer_parser(self, tools: list[dict[str, Any]] | None, tool_choice: Any,
                      parallel_tool_calls: bool, response_format: dict[str, Any] | None = None) -> Any:
        """The tool stage's parser: it reads text the engine's reasoning stage already cut off,
        or (an engine with no reasoning stage) the whole output with reasoning as ordinary text,
        markers included; either way no reasoning at all, whatever the template's switch.
        `response_format`: the request's, where the engine passes it on."""
        return self.parser(tools, tool_choice, parallel_tool_calls, None, reasoning_as_text=True,
                           response_format=response_format)

    def answer_reasoning(self, thinking: bool | None, first_turn: bool = True) -> bool:
        """Whether the whole parse of a request with this thinking switch reads reasoning blocks
        inside the answer (`ReasoningCut.in_answer`), told without the request's prompt (the tool
        stage never sees it): as after the prompt of a first turn with that switch (a prompt
        that closes reasoning leaves none to read, `request.start_state`). A request whose own
        prompt leaves the output elsewhere (a turn after a tool result where the template opens
        reasoning itself, a continued assistant message) may be read otherwise than by the
        whole parse there. `first_turn` off: as without any prompt (an engine whose reasoning
        stage sees none either, so that both stages read alike)."""
        from autoparser.language.request import CLOSED

        kept = self._answer_reasoning.get((thinking, first_turn))
        if kept is None:
            cut = self.reasoning_cut(thinking, self._first_turn_prompt(thinking) if first_turn else None)
            kept = self._answer_reasoning[(thinking, first_turn)] = cut.in_answer and cut.start_state != CLOSED
        return kept

    def _first_turn_prompt(self, thinking: bool | None) -> str | None:
        """The prompt of a conversation of one user message with this thinking switch: where it
        leaves the output (reasoning opened, closed, or free) stands for the request's own."""
        kwargs = self.analysis.thinking_kwargs(thinking)
        try:
            return self.analysis.render([{"role": "user", "content": "Hello"}], add_generation_prompt=True, **kwargs)
        except Exception:  # a template that renders no such conversation: as without a prompt
            return None

    def answer_reader(self, tools: list[dict[str, Any]] | None, tool_choice: Any, parallel_tool_calls: bool,
                      thinking: bool | None, response_format: dict[str, Any] | None = None,
                      first_turn: bool = True) -> Any:
        """The tool stage's parser where the reasoning the output began with was cut off before
        it (`ReasoningSplit`): it reads the rest as autoparser reads the answer after that
        reasoning, reasoning blocks written inside it included (their text is reasoning, their
        markers markup); where the request reads no reasoning (`answer_reasoning`), as
        `answer_parser` does."""
        if not self.answer_reasoning(thinking, first_turn):
            return self.answer_parser(tools, tool_choice, parallel_tool_calls, response_format)
        cut = self.reasoning_cut(thinking)
        from autoparser.language.request import OPEN

        # the rest is read as what follows a closed reasoning block: that block, empty, first
        closed = cut.end if cut.start_state == OPEN else cut.start + cut.end
        parser = self.parser(tools, tool_choice, parallel_tool_calls, thinking, response_format=response_format)
        return AfterReasoning(parser, closed)

    def answer_has_work(self, text: str) -> bool:
        """Whether the tool stage reads `text` as other than the text itself: a call's opener in
        it, or, read with any tool name, calls or markup or surrounding whitespace to drop
        (engines pass text on unparsed where their tool parser says it holds no call)."""
        markers = self.analysis.tools.markers
        opener = (markers.section_start or markers.call_start).strip() if self.analysis.tools.supported else ""
        if opener and opener in text:
            return True
        message = self.answer_parser(None, "auto", True).parse(text)
        return bool(message["tool_calls"]) or (message["content"] or "") != text

    def parser(self, tools: list[dict[str, Any]] | None, tool_choice: Any, parallel_tool_calls: bool,
               thinking: bool | None, reasoning_as_text: bool = False,
               response_format: dict[str, Any] | None = None) -> Any:
        """An autoparser parser for this request shape, built once and then reused.

        `reasoning_as_text`: the reasoning markers are ordinary text (no reasoning is read).
        `response_format`: the request's OpenAI `response_format` (a JSON answer in a code fence
        is read as that JSON)."""
        key = json.dumps([tools, tool_choice, parallel_tool_calls, thinking, reasoning_as_text, response_format],
                         sort_keys=True, default=str)
        parser = self._parsers.lookup(key)
        if parser is not None:
            return parser
        analysis = self.analysis
        if reasoning_as_text:
            from autoparser import ReasoningAnalysis

            analysis = dataclasses.replace(analysis, reasoning=ReasoningAnalysis())
        parser = analysis.parser(tools=tools or None, thinking=thinking, parallel_tool_calls=parallel_tool_calls,
                                 tool_choice=tool_choice, response_format=response_format)
        self._parsers.store(key, parser)
        return parser


_MODELS: dict[str, ServedModel] = {}
_MODELS_LOCK = threading.Lock()


def served_model(tokenizer: Any) -> ServedModel:
    """The analysis of `tokenizer`'s chat template, computed once per process."""
    source, bos, eos = template_of(tokenizer)
    key = template_key(source, bos, eos)
    model = _MODELS.get(key)
    if model is not None:
        return model
    with _MODELS_LOCK:
        model = _MODELS.get(key)
        if model is None:
            from autoparser import analyze

            try:
                analysis = analyze(source, bos_token=bos, eos_token=eos)
            except Exception as exc:  # surfaced once, at the engine's startup check
                raise PluginError(f"autoparser could not analyze the chat template: {exc}") from exc
            model = _MODELS[key] = ServedModel(key, analysis)
            note = template_inputs_note(analysis)
            if note:
                _LOG.warning(note)
    return model


_INPUT_WORDS = {"tools_text": "the request's tool definitions as JSON text", "text": "any text, empty will do",
                "documents": "a list of documents, at least one: the template writes tool calls only with them"}


def template_inputs_note(analysis: Any) -> str | None:
    """What a client must pass in `chat_template_kwargs` where the template reads variables beyond
    the conversation, which the engine does not give (None where it reads none)."""
    inputs: dict[str, str] = dict(analysis.template_inputs)
    if not inputs:
        return None
    wanted = ", ".join(f"'{name}' ({_INPUT_WORDS.get(kind, _INPUT_WORDS['text'])})"
                       for name, kind in sorted(inputs.items()))
    return ("the chat template reads variables beyond the conversation, which the engine renders without: "
            f"pass {wanted} in each request's chat_template_kwargs, or the prompt is not the one the "
            "template was analyzed with")


def token_ids(tokenizer: Any, text: str) -> tuple[int, ...]:
    """The ids `text` encodes to on its own, without BOS or other added tokens."""
    if not text:
        return ()
    return tuple(tokenizer.encode(text, add_special_tokens=False))


def special_markers(tokenizer: Any, markers: Sequence[str]) -> list[str]:
    """The markers that are one special token, which a detokenizer skipping specials would drop."""
    specials = set(getattr(tokenizer, "all_special_ids", None) or ())
    added = getattr(tokenizer, "get_added_vocab", None)
    added_ids = set((added() or {}).values()) if callable(added) else set()
    found = []
    for marker in markers:
        ids = token_ids(tokenizer, marker)
        if len(ids) == 1 and (ids[0] in specials or (ids[0] in added_ids and _is_special(tokenizer, ids[0]))):
            found.append(marker)
    return found


def _is_special(tokenizer: Any, token_id: int) -> bool:
    decoder = getattr(tokenizer, "added_tokens_decoder", None)
    token = decoder.get(token_id) if isinstance(decoder, dict) else None
    return bool(getattr(token, "special", False))


class TrimmedText:
    """Streams text without its surrounding whitespace, as autoparser's message fields are:
    whitespace before the first visible character is dropped, a whitespace run is held until
    visible text follows it, and what is still held at the end is dropped."""

    __slots__ = ("held", "started")

    def __init__(self) -> None:
        self.held = ""
        self.started = False

    def push(self, text: str) -> str:
        if not self.started:
            text = text.lstrip()
            if not text:
                return ""
            self.started = True
        visible = text.rstrip()
        if not visible:
            self.held += text
            return ""
        out = self.held + visible
        self.held = text[len(visible):]
        return out


class AfterReasoning:
    """A parser of the output that reads only the answer after reasoning another stage cut off:
    its reading is that of the output with an empty, closed reasoning block (`closed`) first,
    which adds no reasoning, so reasoning blocks later in the answer are read as the whole
    parse reads them after a leading block."""

    def __init__(self, parser: Any, closed: str) -> None:
        self.parser = parser
        self.closed = closed

    def parse(self, text: str) -> dict[str, Any]:
        return self.parser.parse(self.closed + text)

    def stream(self) -> Any:
        stream = self.parser.stream()
        stream.feed(self.closed)  # an empty block: no delta comes of it
        return stream


class ReasoningSplit:
    """Cuts raw output into reasoning and the rest where autoparser's reading does
    (`ReasoningCut`), in linear time; the rest is then read as the answer after reasoning
    (`ServedModel.answer_reader`), or with no reasoning at all (`ServedModel.answer_parser`).

    From the start state: inside reasoning the prompt opened (a start marker the output repeats
    first is dropped); free to open it with the start marker (an end marker alone first is an
    empty block); where reasoning is implied, text up to an end marker is reasoning unless an
    answer opener comes first (all of it is held until that is known, as autoparser holds it).
    Reasoning ends at its end marker (dropped) or at an interrupt (kept in the rest).
    Unterminated reasoning stays reasoning.
    """

    OPENING, IMPLIED, INSIDE, DONE = "opening", "implied", "inside", "done"

    def __init__(self, cut: Any, stream_reasoning: bool = True) -> None:
        from autoparser.language.request import CLOSED, OPEN

        self.cut = cut
        # off: the reasoning comes out whole, once it is over (SGLang's `stream_reasoning=False`)
        self.stream_reasoning = stream_reasoning
        self._unsent = ""
        self.start, self.end = cut.start, cut.end
        self.start_alone = cut.start_alone  # the start marker's tag, opening reasoning by itself too
        # the start marker's word is no word of it where a word character follows (the tag alone opened)
        self.start_bounded = cut.start_bounded and _is_word(cut.start[-1:])
        self.interrupts = [m for m in cut.interrupts if m]
        self.implied = bool(cut.implied) and cut.start_state != OPEN
        self.answer_openers = [m for m in cut.answer_openers if m]
        if cut.start_state == CLOSED or not self.end:
            self.state = self.DONE
        else:
            self.state = self.INSIDE if cut.start_state == OPEN else self.OPENING
        # inside from the start, the output may still repeat the start marker the prompt wrote
        self._fresh = self.state == self.INSIDE and bool(self.start)
        self._held = ""
        self._implied_parts: list[str] = []  # implied reasoning or answer, not yet told apart
        self._implied_tail = ""  # its end, where a marker may have begun
        self._reasoning = TrimmedText()

    @property
    def ended(self) -> bool:
        return self.state == self.DONE

    def feed(self, text: str) -> tuple[str, str]:
        """(reasoning, rest) newly known after `text`; reasoning without surrounding whitespace."""
        reasoning, rest = self._feed(text)
        return self._deliver(self._reasoning.push(reasoning) if reasoning else ""), rest

    def split(self, text: str) -> tuple[str, str]:
        """(reasoning, rest) of a whole output, by a fresh split of the same cut."""
        split = ReasoningSplit(self.cut)
        reasoning, rest = split.feed(text)
        more_reasoning, more_rest = split.finish()
        return reasoning + more_reasoning, rest + more_rest

    def _deliver(self, reasoning: str) -> str:
        if self.stream_reasoning:
            return reasoning
        self._unsent += reasoning
        if self.state != self.DONE:
            return ""
        reasoning, self._unsent = self._unsent, ""
        return reasoning

    def _feed(self, text: str) -> tuple[str, str]:
        if self.state == self.DONE:
            return "", text
        if self.state == self.IMPLIED:
            return self._implied(text)
        held = self._held + text
        self._held = ""
        if self.state == self.OPENING or self._fresh:
            stripped = held.lstrip()
            if not stripped or any(m.startswith(stripped) and m != stripped for m in self._openings()) or (
                    self.start_bounded and stripped == self.start):  # a word character may follow it
                self._held = held
                return "", ""
            if self.state == self.OPENING:
                return self._opened(held, stripped)
            self._fresh = False
            opener = self._opener(stripped)
            if opener:
                held = stripped[len(opener):]
        return self._inside(held)

    def _openings(self) -> list[str]:
        """What the output may begin with that decides how it starts."""
        if self._fresh:
            return [self.start]
        return [m for m in (self.start, self.end) if m]

    def _opener(self, stripped: str) -> str:
        """The start marker the output begins with: whole, else its tag alone ("": neither)."""
        return next((m for m in (self.start, self.start_alone) if m and stripped.startswith(m) and not (
            m == self.start and self.start_bounded and _is_word(stripped[len(m):len(m) + 1]))), "")

    def _opened(self, held: str, stripped: str) -> tuple[str, str]:
        opener = self._opener(stripped)
        if opener:
            self.state = self.INSIDE
            return self._inside(stripped[len(opener):])
        if stripped.startswith(self.end):  # an empty reasoning block
            self.state = self.DONE
            return "", stripped[len(self.end):]
        if self.implied:
            self.state = self.IMPLIED
            return self._implied(held)
        self.state = self.DONE
        return "", held

    def _implied(self, text: str) -> tuple[str, str]:
        """Text the output did not open as reasoning: reasoning if its end marker comes before
        any answer opener, else all of it is the answer. Held in parts; only the new text (and
        the end of the old, where a marker may have begun) is searched."""
        window = self._implied_tail + text
        cut, which = -1, ""
        for marker in [self.end, *self.answer_openers]:
            at = window.find(marker)
            if at >= 0 and (cut < 0 or at < cut):
                cut, which = at, marker
        if cut < 0:
            self._implied_parts.append(text)
            keep = max(len(m) for m in [self.end, *self.answer_openers]) - 1
            self._implied_tail = window[-keep:] if keep else ""
            return "", ""
        held = "".join(self._implied_parts)
        whole, at = held + text, len(held) - len(self._implied_tail) + cut
        self._implied_parts, self._implied_tail = [], ""
        self.state = self.DONE
        if which == self.end:
            return whole[:at], whole[at + len(self.end):]
        return "", whole

    def _inside(self, text: str) -> tuple[str, str]:
        cut, resume = -1, -1
        for marker, keep in [(self.end, False)] + [(m, True) for m in self.interrupts]:
            at = text.find(marker) if marker else -1
            if at >= 0 and (cut < 0 or at < cut):
                cut, resume = at, at if keep else at + len(marker)
        if cut >= 0:
            self.state = self.DONE
            return text[:cut], text[resume:]
        hold = self._partial_marker(text)
        self._held = text[len(text) - hold:] if hold else ""
        return text[: len(text) - hold], ""

    def _partial_marker(self, text: str) -> int:
        """Length of the longest end of `text` that begins a marker."""
        longest = 0
        for marker in [self.end, *self.interrupts]:
            for size in range(min(len(marker) - 1, len(text)), longest, -1):
                if marker.startswith(text[-size:]):
                    longest = size
                    break
        return longest

    def finish(self) -> tuple[str, str]:
        held, self._held = self._held, ""
        opener = self._opener(held.lstrip()) if self.state == self.OPENING or self._fresh else ""
        if opener:  # the output ended on the start marker's tag alone (held: the word might follow)
            held, self.state = held.lstrip()[len(opener):], self.INSIDE
        if self.state == self.IMPLIED:
            held, self._implied_parts = "".join(self._implied_parts), []
        state, self.state = self.state, self.DONE
        if state == self.INSIDE:
            return self._deliver(self._reasoning.push(held) if held else ""), ""
        return self._deliver(""), held


def _is_word(char: str) -> bool:
    return bool(char) and (char.isalnum() or char == "_")


def merge_deltas(deltas: list[dict[str, Any]]) -> tuple[str, str, list[dict[str, Any]]]:
    """One feed's deltas as (reasoning, content, tool call fragments); fragments of one call that
    follow each other are joined, and the first fragment of a call keeps its id, type and name."""
    reasoning: list[str] = []
    content: list[str] = []
    calls: list[dict[str, Any]] = []
    for delta in deltas:
        if delta.get("reasoning_content"):
            reasoning.append(delta["reasoning_content"])
        if delta.get("content"):
            content.append(delta["content"])
        for call in delta.get("tool_calls") or []:
            arguments = (call.get("function") or {}).get("arguments") or ""
            if calls and calls[-1]["index"] == call["index"] and "id" not in call:
                calls[-1]["arguments"] += arguments
                continue
            calls.append({"index": call["index"], "id": call.get("id"),
                          "name": (call.get("function") or {}).get("name"), "arguments": arguments})
    return "".join(reasoning), "".join(content), calls


class CallIds:
    """Call ids unique to one request although its parser is shared with other requests.

    An id the model wrote itself (a format's own call id) appears in the output just before its
    call and is passed through; any other id was made up by the parser,
    which a shared parser may hand out again, so it is replaced by a fresh random one."""

    def __init__(self) -> None:
        self._recent: deque[str] = deque()
        self._size = 0
        self._given: dict[str, str] = {}

    def saw(self, text: str) -> None:
        """Remember the end of the output so far (the last few KB)."""
        if not text:
            return
        self._recent.append(text)
        self._size += len(text)
        while self._size - len(self._recent[0]) >= _ID_WINDOW:
            self._size -= len(self._recent.popleft())

    def unique(self, call_id: str | None, text: str | None = None) -> str:
        """The id to report for `call_id`; `text` is the whole output when parsing it at once."""
        if call_id in self._given:
            return self._given[call_id]
        written = text if text is not None else "".join(self._recent)
        given = call_id if call_id and call_id in written else f"call_{secrets.token_hex(12)}"
        self._given[call_id or given] = given
        return given
