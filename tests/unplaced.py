"""Nothing lost, punctuation included: which characters of an output the message has no place for.

Every non-whitespace character the model wrote is markup the reading consumed (a marker the
analysis names, the syntax of a call returned as a call) or it is in the message. Which syntax a
returned call consumed is told by the reader itself, on the prefixes of the output: the calls a
message returns (names, arguments, whether each is complete) are the same from some prefix on,
and everything written after that prefix made no call, so all of it, markers aside, must be found
in the reasoning and the content, in the order written. An output where no call is returned is
the case where that prefix is empty: all of it is reasoning or content.

Nothing is shown twice either (`shown_twice`): counted with each call as its format writes it,
the message holds no character more often than the output.
"""

from __future__ import annotations

import copy
import json
import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from autoparser.language.build import Request, reasoning_cut
from autoparser.language.markers import flexible_pattern
from autoparser.language.request import core

MARKER_KEYS = ("section_start", "section_end", "call_start", "call_end", "call_separator", "name_start",
               "name_end", "args_start", "args_end", "arg_start", "arg_key_end", "arg_key_end_json", "arg_end",
               "arg_separator", "id_start", "id_end", "call_index")


_DERIVED: dict[tuple[int, str], tuple[Any, Any, list[str]]] = {}


def _once_per_analysis(derive: Callable[[Any], list[str]]) -> Callable[[Any], list[str]]:
    """`derive(analysis)`, derived again only where the analysis changed since (it is kept with a
    copy of it to tell): the checks ask for an analysis's markers many times an output."""
    def derived(analysis: Any) -> list[str]:
        if isinstance(analysis, dict):
            return derive(analysis)
        key = (id(analysis), derive.__name__)
        kept = _DERIVED.get(key)
        if kept is None or kept[0] is not analysis or kept[1] != analysis:
            if len(_DERIVED) > 512:
                _DERIVED.clear()
            kept = _DERIVED[key] = (analysis, copy.deepcopy(analysis), derive(analysis))
        return list(kept[2])
    derived.__doc__, derived.__name__ = derive.__doc__, derive.__name__
    return derived


@_once_per_analysis
def marker_patterns(analysis: Any) -> list[str]:
    """Regular expressions of the markers the analysis names, longest first (a marker's own
    holes, a key in an end tag or a call's index, match any such text)."""
    data = analysis.to_dict()
    texts = [data["reasoning"]["start"], data["reasoning"]["end"], data["content"]["start"],
             data["content"]["end"], *data["stop"], *(data["tools"].get(key) or "" for key in MARKER_KEYS),
             *reading_markers(analysis)]
    patterns = []
    for text in sorted({core(t) for t in texts if core(t)}, key=lambda t: (-len(t), t)):
        patterns.append(re.sub(r"\\\{\w+\\\}", r"[^<>\\s]*", flexible_pattern(text)))
    return patterns


GENERATED_ID = re.compile(r"call_[0-9a-f]{24}")


def calls_of(message: dict[str, Any]) -> tuple:
    """What a message returns as calls: ids the model wrote, names, arguments, and which is complete."""
    return tuple((None if GENERATED_ID.fullmatch(c["id"]) else c["id"], c["function"]["name"],
                  c["function"]["arguments"], bool(c.get("incomplete"))) for c in message["tool_calls"])


def _added(before: str | None, after: str | None) -> str:
    """What `after` holds past `before` (all of it where it does not go on from it)."""
    before, after = before or "", after or ""
    return after[len(before):] if after.startswith(before) else after


def left_out(text: str, message: dict[str, Any], patterns: Sequence[str],
             earlier: dict[str, Any] | None = None) -> str:
    """The part of `text` (markers blanked, whitespace dropped) from the first character not found,
    in order, in the message's reasoning and content (what they hold past the `earlier`
    message's); empty when all of it is found. Reasoning may come before the answer or inside
    it (a reasoning block in the answer), so the text is matched as the two interleaved."""
    for pattern in patterns:
        text = re.sub(pattern, " ", text)
    wanted = "".join(text.split())
    earlier = earlier or {"reasoning_content": None, "content": None}
    reasoning, content = (_added(earlier[role], message[role]) for role in ("reasoning_content", "content"))
    places = {(0, 0)}  # how far into the reasoning and the content the text read so far is found
    for index, char in enumerate(wanted):
        after = set()
        for in_reasoning, in_content in places:
            if (at := reasoning.find(char, in_reasoning)) >= 0:
                after.add((at + 1, in_content))
            if (at := content.find(char, in_content)) >= 0:
                after.add((in_reasoning, at + 1))
        if not after:
            return wanted[index:]
        places = _earliest(after)
    return ""


def _earliest(places: set[tuple[int, int]]) -> set[tuple[int, int]]:
    """The places no other place is at or before in both texts (the rest can find no more)."""
    return {p for p in places if not any(q != p and q[0] <= p[0] and q[1] <= p[1] for q in places)}


ESCAPE_CUT = re.compile(r"(?<!\\)(?:\\\\)*\\\Z")  # an odd run of backslashes at the end: an escape cut in two


def losses_at_every_cut(output: str, parse: Callable[[str], dict[str, Any]], patterns: Sequence[str],
                        array: bool = False) -> list[tuple[str, str, dict[str, Any]]]:
    """(prefix, what it lost, its message) for each prefix of `output` that loses text: the text
    after the earliest prefix returning the same calls is not all in the reasoning and content
    (the bracket that closes an `array` of calls aside). A value cut inside an escape (`"a\\`)
    keeps its backslash, as `_call_spelled` counts it: the value's, not lost and not text."""
    first_with: dict[tuple, tuple[int, dict[str, Any]]] = {}
    losses = []
    for end in range(len(output) + 1):
        message = parse(output[:end])
        since, earlier = first_with.setdefault(calls_of(message), (end, message))
        written = output[since:end]
        if message["tool_calls"] and message["tool_calls"][-1].get("incomplete"):
            if ESCAPE_CUT.search(output[:since]) and written.startswith("\\"):
                # the earlier prefix ended inside an escape (`"a\`), whose backslash the value
                # shows already (`a\`): the `\` that completes it (`"a\\`) leaves the value so
                written = written[1:]
            # the quotes and brackets that close the value the call was last given are its syntax
            written = re.sub(r"^[\s\"')\]}]+", "", written)
        elif message["tool_calls"] and array:
            written = re.sub(r"^\s*]", "", written)
        lost = left_out(written, message, patterns, earlier)
        if lost:
            losses.append((output[:end], lost, message))
    return losses


# -- letters and digits ---------------------------------------------------------------------------

def key_alone_pattern(analysis: Any) -> str | None:
    """Where a key is an element of its own and the value's opener follows its closing tag
    (`<arg_key>k</arg_key>\n<arg_value>`), a key element closed with something else after it: the
    language reads it as a member with no value, markup the call consumes (`key_alone`); None for
    any other format."""
    t = analysis.tools
    closer, _, opener = t.arg_key_end.strip().partition(">")
    if not t.arg_start.strip() or not closer.startswith("</") or not opener.strip():
        return None
    return (rf"{re.escape(t.arg_start.strip())}[^<>\s]+{re.escape(closer + '>')}"
            rf"(?!\s*{re.escape(opener.strip())})(?=\s*\S)")


@_once_per_analysis
def marker_texts(analysis: Any) -> list[str]:
    """The markers the analysis names, as written (a call index in the name's end marker left out)."""
    data = analysis.to_dict() if hasattr(analysis, "to_dict") else analysis
    texts = [data["reasoning"]["start"], data["reasoning"]["end"], data["content"]["start"],
             data["content"]["end"], *data["stop"]]
    tools = data["tools"]
    for key in ("section_start", "section_end", "call_start", "call_end", "call_separator", "name_start",
                "name_end", "args_start", "args_end", "arg_start", "arg_key_end", "arg_key_end_json",
                "arg_end", "arg_separator", "id_start", "id_end"):
        texts.append(tools.get(key) or "")
    texts = [re.sub(r"[0-9]+", "", t) if t is tools.get("name_end") else t for t in texts]
    messages = data.get("messages") or {}
    texts += [messages.get("opener") or "", messages.get("separator") or ""]  # read between messages
    if not isinstance(analysis, dict):
        texts += reading_markers(analysis)
    return [core(t) for t in texts if core(t)]


def reading_markers(analysis: Any) -> list[str]:
    """Markers the parser reads beyond those the analysis names: the reasoning start marker's tag,
    where it opens reasoning alone (`<|channel>` of `<|channel>thought`, its word left out)."""
    alone = reasoning_cut(analysis, Request(thinking=True)).start_alone
    return [alone] if alone else []


def letters(text: str) -> Counter:
    """Letters and digits, counted one by one (markers removed in between may join words)."""
    return Counter(re.findall(r"[^\W_]", text))


ESCAPE = re.compile(r"\\(?:x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[0-7]{1,3}|[\s\S])")


def as_json_spelling(text: str) -> str:
    """Python's constants as JSON spells them (`None` is `null`), case aside."""
    return re.sub(r"\bNone\b", "null", text).lower()


def literal_values(analysis: Any) -> bool:
    """Whether argument values are written as literals (escapes and all), not raw text."""
    t = analysis.tools
    return t.format == "tag_tagged" and (t.arg_python or not t.arg_string_raw)


def structural_words(analysis: Any, text: str) -> str:
    """The text with the markers (and a JSON call's own keys) blanked out.

    Where values are literals, an escape is an encoding of the character it stands for (and
    `None` is spelled `null` in JSON): those are compared as their decoded form.
    """
    if literal_values(analysis):
        # `None` is read as a word where the model wrote it, before markers are blanked out (as
        # the parser sees it: `pythonNone` right after a marker is no `None`)
        text = re.sub(r"\bNone\b", "null", text)
    for marker in sorted(marker_texts(analysis), key=len, reverse=True):
        text = re.sub(flexible_pattern(marker), " ", text)
    if literal_values(analysis):
        text = ESCAPE.sub(" ", text).lower()
    tools = analysis.tools
    if tools.format == "json":
        for key in {tools.name_field, tools.args_field, "arguments", "parameters", "type", tools.id_field or "",
                    tools.function_field or ""}:
            if key:
                text = text.replace(f'"{key}"', " ")
    elif (tools.section_start or "").rstrip().endswith("["):
        # a section that lists its calls also reads them as JSON call objects (json_listed_calls)
        text = re.sub(r'"(?:name|arguments|parameters)"(?=\s*:)', " ", text)
    return text


def produced_text(analysis: Any, message: dict[str, Any]) -> str:
    """All the text a message holds: reasoning, content, each call's id, name and arguments."""
    produced = " ".join([message["reasoning_content"] or "", message["content"] or ""]
                        + [f"{c['id']} {c['function']['name']} {c['function']['arguments']}"
                           for c in message["tool_calls"]])
    return as_json_spelling(produced) if literal_values(analysis) else produced


def lost_letters(analysis: Any, text: str, message: dict[str, Any]) -> Counter:
    """Letters and digits of the output found nowhere in the message (markers aside; a call
    object's `"type": "function"` is its structure too)."""
    text = re.sub(r'"type"\s*:\s*"function"', " ", text)
    arg_end = analysis.tools.arg_end.strip()
    if "{key}" in arg_end:  # an end tag that names the key (`</city>`)
        text = re.sub(re.escape(arg_end).replace(re.escape("{key}"), r"[^<>\s]*"), " ", text)
    name_end = analysis.tools.name_end.strip()
    if re.search("[0-9]", name_end):  # a call index in the name's end marker (`:0<|...|>`)
        text = re.sub(re.sub("[0-9]+", "[0-9]+", re.escape(name_end)), " ", text)
    return letters(structural_words(analysis, _without_recipients(analysis, text, message))) \
        - letters(produced_text(analysis, message))


def _without_recipients(analysis: Any, text: str, message: dict[str, Any]) -> str:
    """Where a call's message names its tool in the header and again in the body
    (`to=f<|message|>` then `<invoke name="f">`: `call_body_named`), the text without one header
    (and its body marker) naming each call returned: the call returns the name once, and both
    are its syntax."""
    m = getattr(analysis, "messages", None)
    head, hole, tail = (m.call_header if m else "").partition("{name}")
    if not m or not m.call_body_named or not hole or not head.strip():
        return text
    for call in message["tool_calls"]:
        header = (re.escape(head.strip()) + r"\s*" + re.escape(call["function"]["name"]) + re.escape(tail.strip())
                  + r"\s*" + re.escape(m.body_start.strip()))
        text = re.sub(header, " ", text, count=1)
    return text


# -- nothing shown twice ----------------------------------------------------------------------------

CLOSERS = re.compile(r"[\"')\]}]+$")


def _call_spelled(tools: Any, call: dict[str, Any]) -> str:
    """A returned call as its format writes it, markers left out: a JSON call or JSON arguments
    with their punctuation (a lone backslash the output holds, an escape cut in two or none, is
    `\\\\` in JSON: counted once; a line break or tab it holds raw is escaped there: not
    counted), tagged arguments as their keys and values (a string's own text, without the quotes
    a template may put around it); an incomplete call without the closing quotes and brackets it
    was given."""
    name, arguments = call["function"]["name"], call["function"]["arguments"]
    # an id is the call's own text only where the format has a place for it (not a name's place)
    has_id = (tools.id_field if tools.format == "json" else tools.id_start or tools.id_end) and not tools.name_in_id
    written_id = call["id"] if has_id and not GENERATED_ID.fullmatch(call["id"]) else ""
    incomplete = bool(call.get("incomplete"))
    if tools.format == "tag_tagged":
        try:
            values = json.loads(arguments).items()
        except ValueError:
            values = [("", arguments)]
        pairs = [f"{key} {value if isinstance(value, str) else json.dumps(value)}" for key, value in values]
        return " ".join([name, written_id, *pairs])
    if tools.args_as_string:
        arguments = json.dumps(arguments)
    arguments = arguments.replace("\\\\", "\\")
    arguments = re.sub(r"\\[nrt]", " ", arguments)  # a control character the output may hold raw
    if incomplete:  # (where members follow them, an id; the call's own at its end below)
        arguments = CLOSERS.sub("", arguments)
    if tools.format == "tag_json":
        return " ".join([name, written_id, arguments])
    body = f'"{tools.name_field}": "{name}", "{tools.args_field}": {arguments}'
    if written_id and tools.id_field:
        body += f', "{tools.id_field}": "{written_id}"'
    spelled = f'{{"{tools.function_field}": {{{body}}}}}' if tools.function_field else f"{{{body}}}"
    return CLOSERS.sub("", spelled) if incomplete else spelled


def shown_twice(written: str, message: dict[str, Any], analysis: Any) -> Counter:
    """The characters the message holds more often than `written`, the output it was read from
    (whitespace aside): the reasoning, the content and each call as its format writes it
    (`_call_spelled`, its markers left out, an incomplete call without the closing quotes and
    brackets it was given) counted together. Empty unless a character written is given to two
    parts of the message (a call and the content, the reasoning and the content, two calls) or
    to one twice, or the message holds one the output never held (a value's brackets); a
    marker's characters count as the output's whether the message shows them (a call that
    failed, a marker cut off) or not, so a marker shown twice goes unseen."""
    tools = analysis.tools.flat_view()
    parts = [message["reasoning_content"] or "", message["content"] or "",
             *(_call_spelled(tools, call) for call in message["tool_calls"])]
    return Counter("".join("".join(parts).split())) - Counter("".join(written.split()))
