"""Reasoning markers, forced-open reasoning and the thinking switch.

Three independent kinds of evidence, each confirmed by rendering:

1. the switch: a variable the template reads that changes the generation prompt when flipped;
   comparing the two prompts shows the start marker, and often the end marker;
2. the history: an assistant message carrying reasoning (`reasoning_content` and its aliases)
   renders it between the start and end markers;
3. stripping: templates that drop earlier reasoning from content cut it at the end marker, so
   content `R<marker>C` rendering as just `C` proves `<marker>` ends reasoning (in the last reply,
   or in an earlier one when only past turns are cut).

Where the history shows no reasoning at all, the prompt still can: a switch that writes an empty
marker pair into the system text ("write your thoughts between <think></think>"), a generation
prompt that ends with a marker whose closing counterpart the template cuts at, or with a line of
text the reply itself never repeats. Reasoning may also be a typed block of the content
(`{"type": "thinking", "thinking": ...}`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from jinja2 import nodes

from autoparser.analysis import ReasoningAnalysis
from autoparser.analyzers.diff import (
    char_common_prefix,
    common_prefix,
    is_compound,
    is_marker,
    is_unit_marker,
    markers_in,
    segments,
    units,
)
from autoparser.analyzers.probes import (
    ARGS_A,
    CONTENT_TEXT,
    ID_A,
    NAME_A,
    PROBE_TOOLS,
    REASONING_FIELDS,
    REASONING_TEXT,
    Prober,
)
from autoparser.analyzers.prompt import generation_prompt
from autoparser.render import check_template_size, compile_template, get_environment

STANDARD_VARIABLES = {
    "messages", "tools", "add_generation_prompt", "bos_token", "eos_token", "raise_exception",
    "strftime_now", "range", "namespace", "documents", "tools_in_user_message", "date_string",
    "custom_tools", "builtin_tools", "unk_token", "pad_token", "tool", "message", "loop",
}
MAX_TOGGLE_CANDIDATES = 12


@dataclass
class TemplateFacts:
    """What the template's syntax tree says, before any rendering."""

    variables: list[str] = field(default_factory=list)
    literals: list[str] = field(default_factory=list)
    compared: dict[str, list[str]] = field(default_factory=dict)  # strings each variable is compared with


def template_facts(source: str) -> TemplateFacts:
    check_template_size(source)
    try:
        ast = get_environment().parse(source)
    except Exception:
        compile_template(source)  # raises a clear error for a template that does not compile
        raise
    facts = _TreeFacts()
    facts.visit(ast)
    compile_template(source, ast)  # after the walk: compiling may rewrite the tree
    variables = sorted({name for name, ctx in facts.first_use.items() if ctx == "load"} - STANDARD_VARIABLES)
    compared = {name: list(dict.fromkeys(values)) for name, values in facts.compared.items() if name in variables}
    return TemplateFacts(variables=variables, literals=list(dict.fromkeys(facts.literals)), compared=compared)


# fields visited in evaluation order where it differs from the node's own field order: a value is
# read before its target is written (`{% set think = think | default(false) %}` reads `think`)
_EVALUATION_ORDER = {nodes.Assign: ("node", "target"), nodes.AssignBlock: ("filter", "body", "target"),
                     nodes.For: ("iter", "target", "test", "body", "else_"),
                     nodes.With: ("values", "targets", "body")}


class _TreeFacts:
    """One walk over the syntax tree: the variables read before the template sets them (the ones a
    caller can pass), and the string literals. A cheap stand-in for jinja2's `meta`, whose
    code-generator pass costs as much as compiling the template again."""

    def __init__(self) -> None:
        self.first_use: dict[str, str] = {}
        self.literals: list[str] = []
        self.compared: dict[str, list[str]] = {}

    def visit(self, node: nodes.Node) -> None:
        if isinstance(node, nodes.Compare):
            self._compared(node)
        if isinstance(node, nodes.Name):
            self.first_use.setdefault(node.name, node.ctx)
        elif isinstance(node, nodes.Macro):
            self.first_use.setdefault(node.name, "store")
        elif isinstance(node, nodes.Const):
            if isinstance(node.value, str) and node.value:
                self.literals.append(node.value)
        elif isinstance(node, nodes.TemplateData):
            self.literals.append(node.data)
        order = _EVALUATION_ORDER.get(type(node))
        if order is None:
            for child in node.iter_child_nodes():
                self.visit(child)
            return
        for name in order:
            value = getattr(node, name, None)
            for child in value if isinstance(value, list) else [value]:
                if isinstance(child, nodes.Node):
                    self.visit(child)


    def _compared(self, node: nodes.Compare) -> None:
        """`name == 'on'`, `name != "off"`: the strings a variable is compared with."""
        operands = [node.expr, *(op.expr for op in node.ops)]
        names = [o.name for o in operands if isinstance(o, nodes.Name)]
        strings = [o.value for o in operands if isinstance(o, nodes.Const) and isinstance(o.value, str) and o.value]
        if len(names) == 1 and strings and all(op.op in ("eq", "ne") for op in node.ops):
            self.compared.setdefault(names[0], []).extend(strings)


def marker_literals(facts: TemplateFacts) -> list[str]:
    found: list[str] = []
    for literal in facts.literals:
        for marker in markers_in(literal):
            if marker not in found:
                found.append(marker)
    return found


@dataclass
class Toggle:
    name: str
    on: Any
    off: Any
    prompt_on: str
    prompt_off: str
    after_prompt: bool = False  # the switch writes after the whole prompt, not in the generation prompt


def find_toggle(prober: Prober, facts: TemplateFacts) -> Toggle | None:
    """The variable that switches thinking: flipping it changes the generation prompt."""
    ranked = sorted(facts.variables, key=lambda v: (not _sounds_like_thinking(v), v))
    found: list[Toggle] = []
    for name in ranked[:MAX_TOGGLE_CANDIDATES]:
        on = generation_prompt(prober, **{name: True})
        off = generation_prompt(prober, **{name: False})
        if on is not None and off is not None and on != off and (_adds_markers(on, off) or _channels(on, off)):
            found.append(Toggle(name, True, False, on, off))
    if not found:
        found = _string_toggles(prober, facts, ranked[:MAX_TOGGLE_CANDIDATES])
    if not found:
        found = _tail_toggles(prober, ranked[:MAX_TOGGLE_CANDIDATES])
    if not found:
        return None
    return _confirmed_toggle(prober, found)


def _tail_toggles(prober: Prober, names: list[str]) -> list[Toggle]:
    """A switch that leaves the generation prompt alone (a template that writes none) but ends the
    whole prompt differently: with thinking off, an empty marker pair after the last turn. Its
    prompts are what each value writes after the part both share."""
    found = []
    for name in names:
        on, off = prober.prompt(**{name: True}), prober.prompt(**{name: False})
        if on is None or off is None or not (off.startswith(on) or on.startswith(off)) or on == off:
            continue
        shared = min(len(on), len(off))
        toggle = Toggle(name, True, False, on[shared:], off[shared:], after_prompt=True)
        if _adds_markers(toggle.prompt_on, toggle.prompt_off) and _opens_and_closes(toggle):
            found.append(toggle)
    return found


MAX_SWITCH_VALUES = 6


def _string_toggles(prober: Prober, facts: TemplateFacts, names: list[str]) -> list[Toggle]:
    """A switch compared with strings (`thinking_mode == "enabled"`): two of its values whose
    prompts open reasoning and close it, the opening one being "on"."""
    found = []
    for name in names:
        values = facts.compared.get(name, [])[:MAX_SWITCH_VALUES]
        prompts = {value: generation_prompt(prober, **{name: value}) for value in values}
        for on in values:
            for off in values:
                toggle = Toggle(name, on, off, prompts[on] or "", prompts[off] or "")
                if on != off and prompts[on] is not None and prompts[off] is not None and \
                        prompts[on] != prompts[off] and _adds_markers(prompts[on], prompts[off]) and \
                        _opens_and_closes(toggle):
                    found.append(toggle)
    return found


def _opens_and_closes(toggle: Toggle) -> bool:
    start, end, _forced, _closed = _markers_from_toggle(toggle)
    return bool(start and end and end in closing_counterpart(start))


def find_system_text_toggle(prober: Prober, facts: TemplateFacts) -> tuple[Toggle, str, str] | None:
    """A switch that leaves the generation prompt alone but writes an empty marker pair into the
    prompt's instructions ("write your thoughts between <think></think>"): the pair it adds is
    the reasoning's markers. Returns the toggle and the pair."""
    ranked = sorted(facts.variables, key=lambda v: (not _sounds_like_thinking(v), v))
    for name in ranked[:MAX_TOGGLE_CANDIDATES]:
        on, off = prober.prompt(**{name: True}), prober.prompt(**{name: False})
        if on is None or off is None or on == off:
            continue
        shared = len(common_prefix(on, off))
        pair = _empty_pair(on[shared:]) or instructed_phrases(on[shared:])
        if pair and pair not in (_empty_pair(off[shared:]), instructed_phrases(off[shared:])):
            gp_on, gp_off = generation_prompt(prober, **{name: True}), generation_prompt(prober, **{name: False})
            return Toggle(name, True, False, gp_on or "", gp_off or ""), pair[0], pair[1]
    return None


def _empty_pair(text: str) -> tuple[str, str] | None:
    """The first marker directly followed by its own closing counterpart: `<think></think>`."""
    pairs = empty_pairs(text)
    return pairs[0] if pairs else None


def empty_pairs(text: str) -> list[tuple[str, str]]:
    """Every marker directly followed by its own closing counterpart, in order: the instructions
    "thoughts between <think></think>, response between <response></response>" name two."""
    segs = segments(text)
    return [(segs[at], segs[at + 1]) for at in range(len(segs) - 1)
            if is_marker(segs[at]) and segs[at + 1] in closing_counterpart(segs[at])]


def instructed_answer_pair(text: str) -> tuple[str, str] | None:
    """A marker pair the instructions show around an elided answer (`[BEGIN ANSWER] ... [END ANSWER]`):
    the model writes the answer between them, after the reasoning the instructions ask for first."""
    segs = [s for s in segments(text) if not s.isspace()]
    for at, seg in enumerate(segs):
        if not is_marker(seg):
            continue
        rest = segs[at + 1:]
        dots = 3 if rest[:3] == [".", ".", "."] else 1 if rest[:1] == ["\u2026"] else 0
        if dots and len(rest) > dots and rest[dots] in closing_counterpart(seg):
            return seg, rest[dots]
    return None


# a short quoted phrase ending in a colon: "write your thoughts after 'Here is my thought process:'"
_INSTRUCTED_PHRASE = re.compile(r"""(?:'([^'\n]{3,48}:)'|"([^"\n]{3,48}:)")""")


def instructed_phrases(text: str) -> tuple[str, str] | None:
    """Where the instructions name no markers but two quoted phrases ending in a colon, the first
    opens the thoughts and the second the answer, which ends them."""
    phrases = [one or two for one, two in _INSTRUCTED_PHRASE.findall(text)]
    return (phrases[0], phrases[1]) if len(phrases) >= 2 and phrases[0] != phrases[1] else None


def _confirmed_toggle(prober: Prober, found: list[Toggle]) -> Toggle:
    for candidate in found:
        others_off = {t.name: t.off for t in found if t is not candidate}
        others_on = {t.name: t.on for t in found if t is not candidate}
        if (generation_prompt(prober, **{candidate.name: True}, **others_off) == candidate.prompt_on
                and generation_prompt(prober, **{candidate.name: False}, **others_on) == candidate.prompt_off):
            return candidate
    return found[0]


_CHANNEL_WORD = re.compile(r"[A-Za-z][\w-]{0,23}")


def _channels(on: str, off: str) -> tuple[str, str] | None:
    """A switch that keeps the markers and changes the word between them: the prompt opens a
    named channel (`<|open|>think<|sep|>` on, `<|open|>response<|sep|>` off). Both channels,
    each marker-word-marker, or None."""
    shared = len(common_prefix(on, off))
    opener = next((m for m in reversed(markers_in(on[:shared])) if on[:shared].endswith(m)), "")
    if not opener:
        return None
    channels = []
    for prompt in (on, off):
        tail = prompt[shared:]
        closer = next((m for m in markers_in(tail) if tail.endswith(m)), "")
        word = tail[:len(tail) - len(closer)] if closer else ""
        if not _CHANNEL_WORD.fullmatch(word):
            return None
        channels.append((opener + word + closer, closer))
    (on_channel, on_closer), (off_channel, off_closer) = channels
    return (on_channel, off_channel) if on_closer == off_closer and on_channel != off_channel else None


def _sounds_like_thinking(name: str) -> bool:
    lowered = name.lower()
    return "think" in lowered or "reason" in lowered


def _adds_markers(a: str, b: str) -> bool:
    return set(markers_in(a)) != set(markers_in(b)) or a.count("<") != b.count("<")


def closing_counterpart(start: str) -> list[str]:
    """Plausible end markers for a start marker, by the usual tag conventions: a `/` before the
    word (`<think>`, `[THINK]`, `((think))`, `<|think|>`), or START/BEGIN turned into END."""
    out = []
    word_at = next((i for i, c in enumerate(start) if c.isalnum()), -1)
    if word_at > 0 and start[word_at - 1] != "/" and not start[word_at - 1].isspace():
        out.append(start[:word_at] + "/" + start[word_at:])
    if start.startswith("<") and not start.startswith("</") and start.endswith(">"):
        inner = start[1:]
        if "</" + inner not in out:
            out.append("</" + inner)
    for a, b in (("START", "END"), ("BEGIN", "END"), ("start", "end"), ("begin", "end"), ("Start", "End")):
        if a in start:
            out.append(start.replace(a, b, 1))
    return out


def opening_counterpart(end: str, literals: list[str]) -> str:
    for candidate in literals:
        if end in closing_counterpart(candidate):
            return candidate
    slash = end.find("/")
    if 0 < slash < len(end) - 1 and end[slash + 1].isalnum() and not any(c.isalnum() for c in end[:slash]):
        return end[:slash] + end[slash + 1:]
    return ""


def analyze_reasoning(prober: Prober, facts: TemplateFacts, warnings: list[str]) -> ReasoningAnalysis:
    toggle = find_toggle(prober, facts)
    on_kwargs = {toggle.name: toggle.on} if toggle else {}
    literals = marker_literals(facts)

    start, end = "", ""
    forced_open = closed_when_off = in_system_text = False
    if toggle:
        start, end, forced_open, closed_when_off = _markers_from_toggle(toggle)
    else:
        found = find_system_text_toggle(prober, facts)
        if found:
            toggle, start, end = found
            on_kwargs, in_system_text = {toggle.name: toggle.on}, True

    history_start, history_end, beside_tools_only = _markers_from_history(prober, on_kwargs)
    if history_end:
        start = start or history_start
        end = end or history_end
    if not end:
        end = _end_marker_from_stripping(prober, literals, on_kwargs)
    prompt_on = toggle.prompt_on if toggle else (generation_prompt(prober) or "")
    if end:
        start = _text_opening(prober, prompt_on, on_kwargs) or start
    start_inferred = bool(end and not start)
    if start_inferred:
        start = opening_counterpart(end, literals)
    if start and not end:
        end = next((c for c in closing_counterpart(start) if c in literals), "")
        if not end:
            end = _end_marker_from_stripping(prober, [c for c in closing_counterpart(start)], on_kwargs)
    if not start and not end and not toggle:
        pair = instructed_answer_pair(prober.prompt() or "")
        if pair:  # reasoning comes first, unmarked; the answer's opening marker ends it
            return ReasoningAnalysis(mode="tagged", start="", end=pair[0], start_inferred=True)
    if not start or not end:
        if toggle:
            warnings.append(f"the template switches thinking with '{toggle.name}', but its reasoning markers "
                            "could not be told apart")
        return ReasoningAnalysis()

    if end not in closing_counterpart(start):
        end = next((c for c in closing_counterpart(start) if c in literals), end)
    if not forced_open:
        forced_open = _ends_with_marker(prompt_on, start) or (
            not is_marker(start) and prompt_on.rstrip().endswith(start))
    start_inferred = start_inferred and not forced_open  # a prompt that opens reasoning writes it
    # "tools_only": the only evidence is reasoning kept beside tool calls in the history
    only_beside_tools = beside_tools_only and not toggle and not forced_open and start == history_start
    switch: dict[str, Any] = {}
    if toggle:
        unset = generation_prompt(prober)
        default_on = (prober.prompt() == prober.prompt(**on_kwargs) if in_system_text or toggle.after_prompt
                      else unset == toggle.prompt_on)
        # unset, a switch compared with strings may be in a third state where the model decides
        # (`adaptive`): not on, so a prompt that neither opens nor closes reasoning leaves the
        # output free to open it (`start_state`)
        switch = dict(toggle=toggle.name, toggle_on=toggle.on, toggle_off=toggle.off, default_on=default_on)
    return ReasoningAnalysis(mode="tools_only" if only_beside_tools else "tagged", start=start, end=end,
                             forced_open=forced_open, closed_when_off=closed_when_off,
                             rendered_in_history=bool(history_end), start_inferred=start_inferred, **switch)


def _markers_from_toggle(toggle: Toggle) -> tuple[str, str, bool, bool]:
    on, off = toggle.prompt_on, toggle.prompt_off
    start = end = ""
    forced_open = closed_when_off = False
    if off.startswith(on):
        extra = markers_in(off[len(on):])
        on_markers = markers_in(on)
        if len(extra) >= 2:
            start, end = _opening_words(off[len(on):], extra[0], extra[1]), extra[1]
            closed_when_off = True
        elif extra and on_markers:
            start, end = _worded_opening(on, on_markers[-1]), extra[0]
            forced_open = closed_when_off = _ends_with_marker(on, start) or start != on_markers[-1]
    elif on.startswith(off):
        extra = markers_in(on[len(off):])
        if extra:
            start = extra[0]
            forced_open = _ends_with_marker(on, start)
            if len(extra) > 1:
                end = extra[1]
                forced_open = False
    elif channels := _channels(on, off):
        start, forced_open = channels[0], True  # off opens the answer's channel: reasoning is not open
    else:
        shared = len(common_prefix(on, off))
        on_rest, off_rest = markers_in(on[shared:]), markers_in(off[shared:])
        if len(off_rest) >= 2 and not on_rest:
            start, end = _opening_words(off[shared:], off_rest[0], off_rest[1]), off_rest[1]
            closed_when_off = True
        elif on_rest:
            start = on_rest[0]
            forced_open = _ends_with_marker(on, start)
            if len(off_rest) >= 2 and off_rest[0] == start:
                end = off_rest[1]
                closed_when_off = True
            elif off_rest and off_rest[-1] in closing_counterpart(start):
                end = off_rest[-1]
                closed_when_off = True
    return start, end, forced_open, closed_when_off


def _opening_words(text: str, start: str, end: str) -> str:
    """The start marker with a channel name that follows it (`<|channel>thought`), if any."""
    at = text.find(start)
    stop = text.find(end, at + len(start))
    opening = text[at:stop].strip() if at >= 0 and stop > at else start
    if opening != start and ("\n" in opening or len(opening) > 48 or " " in opening):
        return start
    return opening


def _worded_opening(text: str, marker: str) -> str:
    """`marker` and the one word `text` ends with right after it, on its own line (`<|channel>thought`
    and a line break): the word names the channel the marker opens. Else `marker`."""
    at = text.rfind(marker)
    word = text[at + len(marker):].rstrip() if at >= 0 else ""
    return marker + word if _CHANNEL_WORD.fullmatch(word) and text[at:].endswith(("\n", "\r")) else marker


def _ends_with_marker(text: str, marker: str) -> bool:
    segs = [s for s in segments(text) if not s.isspace()]
    joined = [s for s in units(text) if not s.isspace()]
    return (bool(segs) and segs[-1] == marker) or (bool(joined) and joined[-1] == marker)


def _markers_from_history(prober: Prober, kwargs: dict[str, Any]) -> tuple[str, str, bool]:
    """Markers around reasoning a past reply carries; some templates keep it only beside tool calls.

    The end marker is what the reply writes between its reasoning and whatever follows, whether
    an answer or a tool call: their common markup (`<|end|><|start|>assistant` re-opens a message
    in channel formats), or the first marker when only one of them renders.
    """
    shapeless: list[tuple[str, str]] = []  # (opening, closing) of no marker shape
    for name in REASONING_FIELDS:
        start, closings, beside_tools = "", [], True
        for message, tools, after in _reasoning_messages(prober, name):
            full = prober.conversation(message, tools=tools, **kwargs)
            if not full or REASONING_TEXT not in full:
                continue
            r_at = full.index(REASONING_TEXT)
            # a call is found by its name, or by its id where the template writes that instead
            found = [at for at in (full.find(text, r_at) for text in (after, ID_A if tools else after)) if at >= 0]
            if not found:
                continue
            next_at = min(found)
            closing = full[r_at + len(REASONING_TEXT):next_at]
            if not _opens_with_marker(closing):
                opening = _plain_opening(prober.output(message, tools=tools, **kwargs))
                if opening:
                    shapeless.append((opening, closing))
                continue
            start = start or _opening_before(full[:r_at], prober.output(message, tools=tools, **kwargs))
            closings.append(closing)
            beside_tools = beside_tools and tools is not None
            if len(closings) == 2 or (tools is not None and closings):
                break
        if closings:  # the start may be missing: the prompt may open the reasoning with plain text
            return start, _closing_marker(closings), beside_tools
    return (*_plain_pair(shapeless), False)


MAX_PLAIN_DELIMITER = 24


def _opens_with_marker(closing: str) -> bool:
    """Whether the text after reasoning opens with a marker; a marker after other text (`|#[CALLS]`)
    opens what follows the reasoning, not its end."""
    first = next((u for u in units(closing) if not u.isspace()), "")
    return is_unit_marker(first)


def _plain_opening(output: str | None) -> str:
    """The text a reply writes before its reasoning, where it writes any: `#|`, `Let me think.`."""
    if not output or REASONING_TEXT not in output:
        return ""
    lead = output[: output.index(REASONING_TEXT)].strip()
    return lead if 0 < len(lead) <= MAX_PLAIN_DELIMITER and "\n" not in lead else ""


def _plain_pair(found: list[tuple[str, str]]) -> tuple[str, str]:
    """Delimiters of no marker shape around reasoning in the history (`#|...|#`, `Let me think.
    ... Done thinking.`): the same text opens every reply's reasoning, and the text every reply
    writes after it, up to what follows (an answer or a call), on its first line, closes it."""
    if len({opening for opening, _ in found}) != 1:
        return "", ""
    shared = found[0][1].strip()
    for _, closing in found[1:]:
        shared = char_common_prefix(shared, closing.strip())
    lines = shared.splitlines()
    end = lines[0].strip() if lines else ""
    return (found[0][0], end) if 0 < len(end) <= MAX_PLAIN_DELIMITER else ("", "")


def _reasoning_messages(prober: Prober, name: str) -> list[tuple[dict[str, Any], Any, str]]:
    blocks = [{"type": name, name: REASONING_TEXT}, {"type": "text", "text": CONTENT_TEXT}]
    messages: list[tuple[dict[str, Any], Any, str]] = [
        (prober.assistant(CONTENT_TEXT, **{name: REASONING_TEXT}), None, CONTENT_TEXT),
        ({"role": "assistant", "content": blocks}, None, CONTENT_TEXT)]
    for as_text in (False, True):
        call = prober.calls_message([(NAME_A, ARGS_A, ID_A)], as_text)
        call[name] = REASONING_TEXT
        messages.append((call, PROBE_TOOLS, NAME_A))
    return messages


def _closing_marker(closings: list[str]) -> str:
    first = next(s for s in units(closings[0]) if is_unit_marker(s))
    if len(closings) < 2 or is_compound(first):
        return first
    shared = common_prefix(closings[0].strip(), closings[1].strip()).strip()
    segs = segments(shared)
    if shared and len(shared) <= 48 and is_marker(segs[0]) and segs[0] == first:
        return shared
    return first


def _opening_before(before_reasoning: str, output: str | None) -> str:
    """The start marker: all markup the reply writes before its reasoning, else the prompt's last marker."""
    if output and REASONING_TEXT in output:
        lead = output[: output.index(REASONING_TEXT)].strip()
        if lead and len(lead) <= 64 and is_marker(segments(lead)[0]) and is_marker(segments(lead)[-1]):
            return lead
    before = [s for s in units(before_reasoning) if not s.isspace()]
    return before[-1] if before and is_unit_marker(before[-1]) else ""


def _end_marker_from_stripping(prober: Prober, candidates: list[str], kwargs: dict[str, Any]) -> str:
    for marker in candidates:
        message = prober.assistant(REASONING_TEXT + marker + CONTENT_TEXT)
        output = prober.output(message, **kwargs)
        if output and CONTENT_TEXT in output and REASONING_TEXT not in output:
            return marker
        # some templates cut reasoning from past turns only
        follow_up = {"role": "user", "content": prober.text("Probe follow-up from the user.")}
        full = prober.render(prober.history() + [message, follow_up], add_generation_prompt=True, **kwargs)
        if full and CONTENT_TEXT in full and REASONING_TEXT not in full:
            return marker
    return ""


def _text_opening(prober: Prober, prompt: str, kwargs: dict[str, Any]) -> str:
    """A line of plain text the generation prompt ends with, after its last marker, that a reply
    in the history does not repeat (`Here are my reasoning steps:`): the prompt opened the
    reasoning with it. A single word written right after that marker names the channel the
    marker opens (`<|channel>thought`): the opening is the marker and the word."""
    segs = segments(prompt)
    last = max((i for i, s in enumerate(segs) if is_marker(s)), default=-1)
    after = "".join(segs[last + 1:])
    lines = after.strip().splitlines()
    tail = lines[-1].strip() if lines else ""
    if not tail or len(tail) > 64 or not any(c.isalpha() for c in tail):
        return ""
    full = prober.conversation(prober.assistant(CONTENT_TEXT), **kwargs)
    if not full or CONTENT_TEXT not in full or tail in full:
        return ""
    if last >= 0 and after.startswith(tail) and _CHANNEL_WORD.fullmatch(tail):
        return segs[last] + tail
    return tail
