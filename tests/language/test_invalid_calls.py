"""Invalid call syntax is not a call: its text stays content, and nothing is lost.

A call written in Python call syntax becomes a call with its first key, but its first value may
still be malformed (`foo(x=1])`, `get_weather(city=)`); such a call is withdrawn, streamed or not,
and every character the model wrote comes back as content. A separator between calls belongs
to the call after it, so it is never dropped when that call turns out to be text.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import analyses
import corpora
import pytest
from analyses import WEATHER_TOOLS, streamed_in_random_chunks, streamed_in_two, without_generated_ids
from unplaced import losses_at_every_cut, marker_patterns

import autoparser
from autoparser.language import policy
from autoparser.language.interpret import LanguageStream
from autoparser.language.reading import Parser, reader

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "templates" / "paren_python_calls.jinja"
LFM = ("<|tool_call_start|>[", "]<|tool_call_end|>")
PAREN = ("((calls))[", "]((/calls))")
FORMATS = {
    "python-literals": (analyses.lfm2_python, LFM),
    "json-values-fixture": (lambda: autoparser.load(str(FIXTURE)), PAREN),
}
INVALID = ["foo(x=1])", "get_weather(city=)", "get_weather(city=, days=2)", "get_weather(days=3)])"]


def streamed(parser, text: str, seed: int) -> dict:
    return streamed_in_random_chunks(parser, text, seed, largest=6)


@pytest.mark.parametrize("body", INVALID)
@pytest.mark.parametrize("family", sorted(FORMATS))
def test_invalid_call_syntax_stays_content(family: str, body: str) -> None:
    make, (opener, closer) = FORMATS[family]
    parser = make().parser()
    text = f"Checking.{opener}{body}{closer}"
    message = parser.parse(text)
    assert message["tool_calls"] == []
    assert message["content"] == text
    for seed in range(8):
        again = streamed(parser, text, seed)
        assert again["content"] == text and again["tool_calls"] == []


@pytest.mark.parametrize("family", sorted(FORMATS))
def test_a_valid_call_before_an_invalid_one_is_kept(family: str) -> None:
    make, (opener, closer) = FORMATS[family]
    parser = make().parser(tools=WEATHER_TOOLS)
    text = f"{opener}get_weather(city=\"Paris\"), get_weather(city=){closer}"
    message = parser.parse(text)
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_weather"]
    assert message["content"] == ", get_weather(city=)"  # the separator stays with the text it introduced


@pytest.mark.parametrize("family", sorted(FORMATS))
def test_unclosed_quotes_lose_nothing(family: str) -> None:
    make, (opener, closer) = FORMATS[family]
    parser = make().parser()
    text = f"{opener}f(a='x 'y' 'z), g(b='p 'q' 'r){closer}"
    for message in [parser.parse(text)] + [streamed(parser, text, seed) for seed in range(8)]:
        written = (message["content"] or "") + "".join(c["function"]["arguments"]
                                                       for c in message["tool_calls"])
        for piece in ("x ", "y", "z)", ", g(b=", "p ", "q", "r)"):
            assert piece in written, (piece, message)


@pytest.mark.parametrize("value, read", [("'p 'r)", "p 'r)"), ("'abc' x)", "abc' x)"),
                                         ("'x 'y' 'z), g(b='p 'q' 'r)", "x 'y' 'z), g(b='p 'q' 'r)")])
@pytest.mark.parametrize("family", sorted(FORMATS))
def test_an_unclosed_quote_gives_its_text_back_once(family: str, value: str, read: str) -> None:
    """A quoted value whose quotes do not close it where the call could end is read on as the
    string's text up to the section's end marker, where that reading fails: the text it read is
    the value of the call, kept incomplete, and not content too; the prose after the section
    is content at once. Whole, a character at a time and split at every place alike."""
    make, (opener, closer) = FORMATS[family]
    parser = make().parser()
    message = analyses.whole_checked_by_streams(parser, f"{opener}f(a={value}{closer}After.")
    assert message["content"] == "After."
    [call] = message["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == {"a": read}
    assert call["incomplete"]


BRACKETED_PROSE = "See [1] and [the notes] or [a, b] then [x]: [done"


@pytest.mark.parametrize("with_tools", [False, True])
def test_a_bare_list_bracket_before_no_call_is_text_at_once(monkeypatch, with_tools: bool) -> None:
    """Where calls are a bare list (`[get_weather(city='Paris')]`, Llama 3.2 pythonic), a `[`
    opens calls only before a name and its `(` (`ir.Weak`): prose brackets are text with no call
    read there that fails (which cost a recovery each), whole and streamed; calls still read."""
    parser = analyses.llama32_pythonic().parser(tools=WEATHER_TOOLS if with_tools else None)
    failures = []
    give_up = LanguageStream._give_up
    monkeypatch.setattr(LanguageStream, "_give_up", lambda self: (failures.append(1), give_up(self))[1])
    message = analyses.whole_checked_by_streams(parser, BRACKETED_PROSE)
    assert message["content"] == BRACKETED_PROSE and not message["tool_calls"]
    assert not failures
    call = "[get_weather(city='Paris')]"
    message = analyses.whole_checked_by_streams(parser, f"{BRACKETED_PROSE} {call}")
    assert message["content"].strip() == BRACKETED_PROSE
    assert analyses.calls(message) == [("get_weather", {"city": "Paris"})]


@pytest.mark.parametrize("family", sorted(FORMATS))
def test_valid_calls_still_stream(family: str) -> None:
    make, (opener, _closer) = FORMATS[family]
    stream = make().parser(tools=WEATHER_TOOLS).stream()
    deltas = stream.feed(f"{opener}get_weather(city=\"Par")
    deltas += stream.feed("is")
    assert any(d.get("tool_calls") for d in deltas)



PARALLEL = sorted(name for name, make in analyses.FAMILIES.items() if make().tools.supported and make().tools.parallel)


@pytest.mark.parametrize("reasoning", [None, "Plan."])
@pytest.mark.parametrize("family", PARALLEL)
def test_the_call_after_a_broken_one_is_kept(family: str, reasoning: str | None) -> None:
    """A call whose value is missing (`"city": }`, `city=)`) does not take the next call with it,
    whatever ends a call in the format: a marker, or punctuation only (`}, {` in arrays of JSON
    calls, `), ` in Python call lists, a new line), where the reader goes on at the next call's
    opener (`ir.Language.resync`); streamed or not."""
    analysis = analyses.FAMILIES[family]()
    if reasoning is not None and not analysis.reasoning.end:
        pytest.skip("the format has no reasoning")
    pair = [("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Paris"})]
    text = analyses.render_output(analysis, reasoning, calls=pair)
    parser = analysis.parser(tools=WEATHER_TOOLS)
    if analyses.calls(parser.parse(text)) != pair:
        pytest.skip("the output needs its reasoning to be read as calls")
    broken = re.sub(r"""["']?Oslo["']?""", "", text, count=1)
    message = parser.parse(broken)
    assert analyses.calls(message)[-1:] == [("get_weather", {"city": "Paris"})], message
    for seed in range(4):
        assert analyses.calls(streamed(parser, broken, seed)) == analyses.calls(message)


@pytest.mark.parametrize("seed", range(4))
def test_reasoning_the_model_opened_may_begin_with_the_calls_opener(seed: int) -> None:
    """Only reasoning the model did not open gives way to calls written at once: after a start
    marker it wrote, the calls' opener is the reasoning's text up to the end marker."""
    parser = analyses.glm45().parser()
    text = "<think><tool_call>x</think>hi"
    for message in (parser.parse(text), streamed(parser, text, seed)):
        assert message["reasoning_content"] == "<tool_call>x"
        assert message["content"] == "hi"
        assert not message["tool_calls"]


# formats whose argument values are raw text closed by an end tag, each call with an opener
RAW_VALUES = ["deepseek_v32", "deepseek_v4", "glm4_tool_only", "glm45", "keyed_tags", "qwen3_coder"]
AFTER_RESTART = ("search", {"query": "Paris"})


def _restarted(analysis: autoparser.Analysis) -> str:
    """Two calls with the first value cut short (`Os`) where the second call begins: the model
    wrote the next call instead of the rest of the value and its end tag."""
    text = analyses.render_output(analysis, None, calls=[("get_weather", {"city": "Oslo"}), AFTER_RESTART])
    t = analysis.tools
    opener = t.call_start.strip() or t.name_start.strip()
    second = text.rindex(opener, 0, text.index("Paris"))
    assert second > text.index("Oslo")
    return text[:text.index("Oslo") + 2] + text[second:]


@pytest.mark.parametrize("family", RAW_VALUES)
def test_a_call_begun_again_inside_a_raw_value_ends_that_value(family: str) -> None:
    """The calls' or a call's opener written where a raw value runs ends the value: the call cut
    there is kept incomplete with what it was given, and the next call is read whole, not taken
    into the value up to its own end tag (a model that begins a call again is more common than a
    value that holds the opener as text); whole, one character at a time and in random chunks
    alike, and no prefix of the output loses what it wrote."""
    analysis = analyses.FAMILIES[family]()
    parser = analysis.parser(tools=WEATHER_TOOLS)
    text = _restarted(analysis)
    message = analyses.parse(analysis, text, tools=WEATHER_TOOLS)
    assert analyses.calls(message)[-1:] == [AFTER_RESTART], message
    first = message["tool_calls"][:-1]
    assert all(call.get("incomplete") for call in first), message  # else the cut call is content
    assert "Paris" not in (message["content"] or ""), message
    for seed in range(8):
        assert without_generated_ids(streamed(parser, text, seed)) == without_generated_ids(message)

    def parse(written: str) -> dict:
        whole = parser.parse(written)
        assert without_generated_ids(streamed_in_two(parser, written, len(written) // 2)) == \
            without_generated_ids(whole), written
        return whole

    losses = losses_at_every_cut(text, parse, marker_patterns(analysis), analysis.tools.array)
    assert not losses, losses[0]


@pytest.mark.parametrize("family", RAW_VALUES)
def test_a_raw_value_whose_end_tag_was_left_out_streams_as_whole_up_to_the_next_call(family: str) -> None:
    """The first value's end tag left out, the rest of its call written, then the next call: the
    value runs to where the next call begins and ends before the whitespace there, as the end tag
    would end it. A stream let that whitespace out as the value's text before the next call's
    opener was known (`_Text` held whitespace only before its own markers, not before a call
    begun again): `"3\n\n</function>\n</tool_call>\n"` streamed, without the last line break whole."""
    analysis = analyses.FAMILIES[family]()
    parser = analysis.parser(tools=WEATHER_TOOLS)
    text = analyses.render_output(analysis, None, calls=[("get_weather", {"city": "Oslo"}), AFTER_RESTART])
    end = analysis.tools.calls.arguments.end.strip().replace("{key}", "city")
    value_end = text.index(end, text.index("Oslo"))
    text = text[:value_end] + text[value_end + len(end):]
    message = without_generated_ids(parser.parse(text))
    assert analyses.calls(message)[-1:] == [AFTER_RESTART], message
    one_by_one = streamed_in_random_chunks(parser, text, 0, largest=1)
    for streamed_message in [one_by_one] + [streamed(parser, text, seed) for seed in range(8)]:
        assert without_generated_ids(streamed_message) == message


@pytest.mark.parametrize("family", RAW_VALUES)
def test_a_raw_value_may_mention_a_calls_opener(family: str) -> None:
    """A call's opener in a raw value with no call after it (not the name and the marker that
    follow it in a call) is the value's text, whole and streamed."""
    analysis = analyses.FAMILIES[family]()
    t = analysis.tools
    value = f"Write {(t.call_start.strip() or t.name_start.strip())} then a name."
    text = analyses.render_output(analysis, None, calls=[("get_weather", {"city": value})])
    message = analyses.parse(analysis, text, tools=WEATHER_TOOLS)
    assert analyses.calls(message) == [("get_weather", {"city": value})], message
    assert not message["tool_calls"][0].get("incomplete")


REASONING = sorted(name for name, make in analyses.FAMILIES.items()
                   if make().tools.supported and make().reasoning.mode != "none" and make().reasoning.end)


def _call_in_reasoning(analysis: autoparser.Analysis) -> tuple[str, str, str, Parser]:
    """The reasoning's opener the model writes ("" where the prompt opens it), the format's output
    of one call, that call with its value missing, and a parser with tools and thinking on;
    skipped where a call written in reasoning with no end marker after it is no call."""
    opener = "" if analysis.reasoning.forced_open else analysis.reasoning.start
    calls = analyses.render_output(analysis, None, calls=[("get_weather", {"city": "Oslo"})], stop=False)
    parser = analysis.parser(tools=WEATHER_TOOLS, thinking=True)
    if analyses.calls(parser.parse(opener + "Plan." + calls)) != [("get_weather", {"city": "Oslo"})]:
        pytest.skip("a call written in reasoning without its end marker is no call in this format")
    return opener, calls, re.sub(r"""["']?Oslo["']?""", "", calls, count=1), parser


@pytest.mark.parametrize("family", REASONING)
def test_a_broken_call_is_text_of_reasoning_that_no_end_marker_closes(family: str) -> None:
    """In reasoning no end marker has closed, a call that breaks never left the reasoning: its
    text, and the text after it, are reasoning, streamed or not, as they are where the end
    marker comes later (policy rule `nothing-lost`), a call section's opener of its own with them."""
    analysis = analyses.FAMILIES[family]()
    opener, _, broken, parser = _call_in_reasoning(analysis)
    text = opener + "Plan." + broken + " More."
    message = parser.parse(text)
    if [c for c in message["tool_calls"] if not c.get("incomplete")]:
        pytest.skip("the format reads the call without its value")
    for seed in range(4):
        assert without_generated_ids(streamed(parser, text, seed)) == without_generated_ids(message)
    later = parser.parse(text + analysis.reasoning.end + "Answer.")
    assert (message["reasoning_content"], message["content"] or "", message["tool_calls"]) == (
        text[len(opener):].strip(), "", [])
    assert (later["reasoning_content"], later["content"]) == (text[len(opener):].strip(), "Answer.")


CORPUS_REASONING = ["Qwen-Qwen3-0.6B.jinja", "vllm__tool_chat_template_deepseekr1.jinja"]


def _corpus_analysis(name: str) -> autoparser.Analysis:
    path = next((p for p in corpora.all_templates() if p.name == name), None)
    if path is None:
        pytest.skip(f"{name} is not in the corpora")
    return autoparser.load(str(path))


def _filler(length: int) -> str:
    return (" Then more words follow." * (length // 20 + 1))[:length]


def _most_held_one_character_at_a_time(parser, text: str, start: int, stop: int, markup: int = 0) -> int:
    """The most characters held (fed and not yet emitted as reasoning or content, less the
    `markup` characters fed before `start` that are no text: a call's) while `text[start:stop]`
    streamed one character at a time."""
    stream = parser.stream()
    fed = emitted = most = 0
    for at, char in enumerate(text):
        for delta in stream.feed(char):
            emitted += len(delta.get("reasoning_content") or "") + len(delta.get("content") or "")
        fed += 1
        if start <= at < stop:
            most = max(most, fed - markup - emitted)
    stream.finish()
    return most


def _markup(parser, text: str) -> int:
    """The characters of `text` its whole parse gives as no reasoning or content: markers, calls."""
    message = parser.parse(text)
    return len(text) - len(message["reasoning_content"] or "") - len(message["content"] or "")


def _every_split(parser, text: str) -> None:
    """Fed in two chunks cut anywhere, the message is the whole parse's."""
    whole = without_generated_ids(parser.parse(text))
    for cut in range(len(text) + 1):
        assert without_generated_ids(streamed_in_two(parser, text, cut)) == whole, cut


@pytest.mark.parametrize("after", ["", "end-marker", "call"], ids=["no-end-marker", "end-marker-later", "call-later"])
@pytest.mark.parametrize("template", ["qwen3", "deepseek_r1", "gpt_oss", *CORPUS_REASONING])
def test_a_broken_call_in_reasoning_gives_the_same_roles_however_long_the_text_after_it(template: str,
                                                                                       after: str) -> None:
    """Reasoning, a broken call, then text: 10 characters of it or more than the reader keeps
    behind its readings (4,096) give the same roles, whole and streamed. The broken call is text
    of the reasoning it was written in (policy rule `nothing-lost`): with no end marker, the
    reasoning holds it and the text after it; with the end marker after it, all before the marker
    is reasoning; a whole call later ends the reasoning where it begins. Nothing waits for the
    end marker: while the text after the broken call streams one character at a time, no more
    is held than the bound beyond a marker (CONTRACT section 5)."""
    analysis = analyses.FAMILIES[template]() if template in analyses.FAMILIES else _corpus_analysis(template)
    opener, calls, broken, parser = _call_in_reasoning(analysis)
    markers = reader(analysis, tools=WEATHER_TOOLS, thinking=True).language.markers()
    bound = policy.HOLD_BOUND + max(len(m) for m in markers)
    shapes = []
    for length in (10, 3 * 4096):
        filler = _filler(length)
        head = opener + "Plan." + broken
        text = head + filler + {"": "", "end-marker": analysis.reasoning.end + "Answer.", "call": calls}[after]
        message = without_generated_ids(parser.parse(text))
        for seed in range(3):
            assert without_generated_ids(streamed(parser, text, seed)) == message, (length, seed)
        shape = {key: (message[key] or "").replace(filler, "<filler>") for key in ("reasoning_content", "content")}
        shapes.append((shape, analyses.calls(message), [call.get("incomplete") for call in message["tool_calls"]]))
        held = _most_held_one_character_at_a_time(parser, text, len(head), len(head) + len(filler),
                                                  markup=_markup(parser, head + filler))
        assert held <= bound, (length, held)
        if length == 10:
            _every_split(parser, text)
            # (with a call later, a prefix cut inside the broken call reads the same calls as one
            # cut inside the later call, which the check takes for where that text began)
            assert after == "call" or not losses_at_every_cut(text, parser.parse, marker_patterns(analysis),
                                                              analysis.tools.array)
    assert shapes[0] == shapes[1]
    shape, found, incomplete = shapes[0]
    assert shape["reasoning_content"] == "Plan." + broken + "<filler>"
    assert shape["content"] == ("Answer." if after == "end-marker" else "")
    assert (found, incomplete) == (([("get_weather", {"city": "Oslo"})], [None]) if after == "call" else ([], []))


@pytest.mark.parametrize("after", ["", "end-marker"], ids=["no-end-marker", "end-marker-later"])
@pytest.mark.parametrize("template", ["qwen3", "deepseek_r1", "gpt_oss", *CORPUS_REASONING])
def test_a_valid_call_in_reasoning_lets_the_text_after_it_stream(template: str, after: str) -> None:
    """Reasoning no end marker has closed, a whole call, then text: the call ends the reasoning
    where it began, decided once the text after it has gone on for the hold-back bound without
    the end marker (policy rule `nothing-lost`), so that text is the answer and streams, one
    character at a time with no more held than the bound beyond a marker (CONTRACT section 5),
    instead of waiting to the end for an end marker that would make the call the reasoning's
    text; an end marker within the bound still does (10 characters after the call), one later is
    text of the answer (12,288). Whole and streamed alike, at every split."""
    analysis = analyses.FAMILIES[template]() if template in analyses.FAMILIES else _corpus_analysis(template)
    opener, calls, _, parser = _call_in_reasoning(analysis)
    markers = reader(analysis, tools=WEATHER_TOOLS, thinking=True).language.markers()
    bound = policy.HOLD_BOUND + max(len(m) for m in markers)
    end = analysis.reasoning.end + "Answer." if after else ""
    for length in (10, 3 * 4096):
        filler = _filler(length)
        head = opener + "Plan." + calls
        text = head + filler + end
        message = without_generated_ids(parser.parse(text))
        if end and length < policy.HOLD_BOUND:
            # the end marker came within the bound: the call was the reasoning's text
            assert analyses.calls(message) == []
            assert (message["reasoning_content"], message["content"]) == ((text[len(opener):].split(
                analysis.reasoning.end)[0]).strip(), "Answer.")
        else:
            assert analyses.calls(message) == [("get_weather", {"city": "Oslo"})]
            assert (message["reasoning_content"], message["content"]) == ("Plan.", (filler + end).strip())
        for seed in range(3):
            assert without_generated_ids(streamed(parser, text, seed)) == message, (length, seed)
        held = _most_held_one_character_at_a_time(parser, text, len(head), len(head) + len(filler),
                                                  markup=_markup(parser, head + filler))
        assert held <= bound, (length, held)
        if length == 10:
            _every_split(parser, text)
            assert not losses_at_every_cut(text, parser.parse, marker_patterns(analysis), analysis.tools.array)


# formats whose calls or sections open with a marker, their arguments written as JSON
OPENED_JSON = ["deepseek_r1", "deepseek_r1_0528", "deepseek_v31", "deepseek_v3_0324", "hermes", "kimi_k2",
               "mistral_compact", "qwen3", "qwen3_thinking"]
PAIR = [("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Paris"})]


def _cut_before_next_call(family: str, reasoning: str | None) -> tuple[Any, str, str, int]:
    """The analysis, a rendered pair of calls, the opener of the second one, and where the first
    call's string value is cut: after "Os" of "Oslo"."""
    analysis = analyses.FAMILIES[family]()
    if reasoning is not None and not analysis.reasoning.end:
        pytest.skip("the format has no reasoning")
    text = analyses.render_output(analysis, reasoning, calls=PAIR)
    opener = analysis.tools.call_start.strip() or analysis.tools.name_start.strip()
    cut = text.index("Oslo") + len("Os")
    return analysis, text, opener, cut


def _one_character_at_a_time(parser: Any, text: str) -> dict:
    stream = parser.stream()
    for char in text:
        stream.feed(char)
    stream.finish()
    return stream.message()


def _every_way(parser: Any, text: str) -> None:
    """Streamed one character at a time and in random chunks, the message is the whole parse's."""
    whole = without_generated_ids(parser.parse(text))
    assert without_generated_ids(_one_character_at_a_time(parser, text)) == whole
    for seed in range(4):
        assert without_generated_ids(streamed(parser, text, seed)) == whole, seed


def _broken_then_whole(parser: Any, analysis: Any, broken: str) -> dict:
    """The whole parse of `broken`, asserting that its first call keeps `Os`, incomplete, and the
    next call is whole, however the output streams, with nothing lost at any cut."""
    message = parser.parse(broken)
    assert analyses.calls(message) == [("get_weather", {"city": "Os"}), PAIR[1]], message
    assert [bool(c.get("incomplete")) for c in message["tool_calls"]] == [True, False]
    _every_way(parser, broken)
    assert not losses_at_every_cut(broken, parser.parse, marker_patterns(analysis), analysis.tools.array)
    return message


@pytest.mark.parametrize("reasoning", [None, "Plan."])
@pytest.mark.parametrize("family", OPENED_JSON)
def test_a_string_value_cut_by_the_next_calls_opener_keeps_that_call(family: str, reasoning: str | None) -> None:
    """A call whose JSON string value breaks off where the next call's opener begins
    (`{"city": "Os<tool_call>...`) is read again from that opener, though the string ran on past
    it and the call failed only later (policy rule `nothing-lost`): the broken call keeps what it
    had, incomplete, and the next call is whole; streamed however the chunks come, nothing lost."""
    analysis, text, opener, cut = _cut_before_next_call(family, reasoning)
    parser = analysis.parser(tools=WEATHER_TOOLS)
    if analyses.calls(parser.parse(text)) != PAIR:
        pytest.skip("the output needs its reasoning to be read as calls")
    broken = text[:cut] + text[text.rindex(opener, 0, text.index("Paris")):]
    message = _broken_then_whole(parser, analysis, broken)
    assert not (message["content"] or "").strip()


@pytest.mark.parametrize("family", OPENED_JSON)
def test_a_valid_string_holding_a_calls_opener_is_its_value(family: str) -> None:
    """Only a call that fails goes back to an opener inside its string: a valid JSON string that
    mentions the opener is the value, streamed however the chunks come."""
    analysis, text, opener, cut = _cut_before_next_call(family, None)
    parser = analysis.parser(tools=WEATHER_TOOLS)
    mentioned = text[:cut] + opener + text[cut:]
    message = parser.parse(mentioned)
    assert analyses.calls(message) == [("get_weather", {"city": f"Os{opener}lo"}), PAIR[1]]
    assert not any(c.get("incomplete") for c in message["tool_calls"])
    _every_way(parser, mentioned)


@pytest.mark.parametrize("family", OPENED_JSON)
def test_a_cut_string_goes_back_to_the_first_opener_it_ran_past(family: str) -> None:
    """Where the cut string runs past two openers (a stray one, then the next call's), reading
    starts again at the first: the broken call keeps only what came before it, the stray opener
    is content, and the next call is whole, streamed however the chunks come."""
    analysis, text, opener, cut = _cut_before_next_call(family, None)
    parser = analysis.parser(tools=WEATHER_TOOLS)
    twice = text[:cut] + opener + text[text.rindex(opener, 0, text.index("Paris")):]
    message = parser.parse(twice)
    assert analyses.calls(message) == [("get_weather", {"city": "Os"}), PAIR[1]]
    assert message["content"].strip() == opener
    _every_way(parser, twice)


@pytest.mark.parametrize("family", OPENED_JSON)
def test_a_backslash_before_the_next_calls_opener_breaks_off_the_string_too(family: str) -> None:
    """A string cut by the next call's opener right after a backslash (`"Os\\<tool_call>`: an
    escape the model never finished) breaks off there as well: the broken call keeps what came
    before the backslash, the backslash is content, the next call is whole, streamed however the
    chunks come, nothing lost."""
    analysis, text, opener, cut = _cut_before_next_call(family, None)
    parser = analysis.parser(tools=WEATHER_TOOLS)
    broken = text[:cut] + "\\" + text[text.rindex(opener, 0, text.index("Paris")):]
    message = _broken_then_whole(parser, analysis, broken)
    assert message["content"] == "\\"


# formats where only punctuation or a name begins a later call: arrays of JSON calls, and a call
# list whose first call the prompt opened (`>>>` then a name, and the first name alone)
UNMARKED_JSON = ["bare_json_array", "functionary_v32", "mistral_array"]


def _next_call_after_cut(family: str) -> tuple[Any, str, str]:
    """The analysis, a rendered pair of calls, and the text from where the first call ends
    (the separator and the second call, the output's end)."""
    analysis = analyses.FAMILIES[family]()
    text = analyses.render_output(analysis, None, calls=PAIR)
    alone = analyses.render_output(analysis, None, calls=PAIR[:1])
    return analysis, text, text[len(os.path.commonprefix([text, alone])):]


@pytest.mark.parametrize("family", UNMARKED_JSON)
def test_a_string_value_cut_by_the_next_calls_separator_keeps_that_call(family: str) -> None:
    """Where nothing but punctuation or a name begins a call (`[{"name": ..., "arguments":
    {"city": "Os, {"name": ...`), a JSON string cut by the next call's separator is read again
    from that separator (`ir.Language.resync`, any whitespace inside it): the broken call keeps
    what it had, incomplete, and the next call is whole; streamed however the chunks come,
    nothing lost at any cut."""
    analysis, text, rest = _next_call_after_cut(family)
    parser = analysis.parser(tools=WEATHER_TOOLS)
    broken = text[:text.index("Oslo") + len("Os")] + rest
    message = _broken_then_whole(parser, analysis, broken)
    assert not (message["content"] or "").strip()


@pytest.mark.parametrize("family", UNMARKED_JSON)
def test_a_valid_string_holding_the_next_calls_separator_is_its_value(family: str) -> None:
    """A valid JSON string that holds what begins a later call (as its format writes it,
    unescaped where JSON allows) is the value, streamed however the chunks come."""
    analysis, _, rest = _next_call_after_cut(family)
    value = "Os" + rest[:rest.index("get_weather") + len("get_weather")].replace('"', "'") + " lo"
    text = analyses.render_output(analysis, None, calls=[("get_weather", {"city": value}), PAIR[1]])
    parser = analysis.parser(tools=WEATHER_TOOLS)
    message = parser.parse(text)
    assert analyses.calls(message) == [("get_weather", {"city": value}), PAIR[1]]
    assert not any(c.get("incomplete") for c in message["tool_calls"])
    _every_way(parser, text)


# -- a broken call, then valid ones, in every format (`tools/broken_call_probe.py`) ------------------

probe = corpora.tool_module("broken_call_probe")
CALL_LISTS = {  # formats whose calls are the elements of a list, Python calls or JSON call objects
    "lfm2_python": analyses.lfm2_python,
    "paren_python_calls": lambda: autoparser.load(str(FIXTURE)),
    "tag_list_calls": lambda: autoparser.load(str(FIXTURE.with_name("tag_list_calls.jinja"))),
    "minicpm3_kwargs": analyses.minicpm3_kwargs,
    "bare_json_array": analyses.bare_json_array,
    "mistral_array": analyses.mistral_array,
}


@pytest.mark.parametrize("how", ["no-value", "bad-value", "no-close", "junk-name", "open-quote"])
@pytest.mark.parametrize("family", sorted(CALL_LISTS))
def test_the_calls_after_a_broken_one_in_a_list_are_kept(family: str, how: str) -> None:
    """Three calls in a list, the first broken (its value left out, a stray bracket after it, its
    closing left out, a character no name holds in its name, its closing quote left out): the
    two after it are calls, whole, however the output streams, and nothing is lost. A quoted
    value or a call read on over where a later call begins (`, get_weather`, `, {"name"`) broke
    off there (`ir.Language.resync`): the later call is read from there, the broken one keeps
    what it had, incomplete."""
    analysis = CALL_LISTS[family]()
    text = analyses.render_output(analysis, None, calls=probe.CALLS)
    broken = dict(probe.breakings(analysis, text)).get(how)
    if broken is None:
        pytest.skip("the format's values are not quoted")
    parser = analysis.parser(tools=WEATHER_TOOLS)
    assert probe.failures(analysis, parser, broken) == []
    message = analyses.whole_checked_by_streams(parser, broken)
    assert "Paris" not in (message["content"] or "")
    if (family, how) != ("minicpm3_kwargs", "no-close"):  # (a call a line: its line break closes it)
        assert all(call.get("incomplete") for call in message["tool_calls"][:-2]), message


@pytest.mark.parametrize("family", ["lfm2_python", "paren_python_calls", "tag_list_calls"])
def test_where_a_later_call_would_begin_a_valid_quoted_value_is_kept(family: str) -> None:
    """Only a value that breaks goes back to where a later call would begin inside it: quoted
    whole, `, get_weather` is the value's text, streamed or not."""
    analysis = CALL_LISTS[family]()
    value = "Oslo, get_weather(city=Bergen)"
    text = analyses.render_output(analysis, None, calls=[("get_weather", {"city": value}), probe.CALLS[2]])
    message = analyses.whole_checked_by_streams(analysis.parser(tools=WEATHER_TOOLS), text)
    assert analyses.calls(message) == [("get_weather", {"city": value}), probe.CALLS[2]]
    assert not any(call.get("incomplete") for call in message["tool_calls"])


@pytest.mark.parametrize("how", ["no-value", "bad-value", "no-close", "junk-name"])
def test_the_calls_after_a_broken_one_in_messages_are_kept(how: str) -> None:
    """A reply written as messages whose reasoning's end marker is the marker between any two
    messages (`::next::::turn:: bot`): after a call's message broke, the language is read again
    with reasoning over, and that marker still ends the broken message, so the two later calls'
    messages are calls, whole, however the output streams, and nothing is lost."""
    analysis = autoparser.load(str(FIXTURE.with_name("colon_messages.jinja")))
    text = analyses.render_output(analysis, None, calls=probe.CALLS)
    broken = dict(probe.breakings(analysis, text))[how]
    parser = analysis.parser(tools=WEATHER_TOOLS)
    assert probe.failures(analysis, parser, broken) == []
    message = analyses.whole_checked_by_streams(parser, broken)
    assert "Paris" not in (message["content"] or "")


TEXT_OR_CALLS = {  # the calls the output opens with at once are also read as one text: content or reasoning
    "compound_brackets": lambda: autoparser.load(str(FIXTURE.with_name("compound_brackets.jinja"))),
    "Cohere2MoE": lambda: _corpus_analysis("Cohere2MoE.jinja"),
    "cogito-3b": lambda: _corpus_analysis("hfjs-ollama-automap__cogito-3b.jinja"),
}


@pytest.mark.parametrize("how", ["no-value", "bad-value", "no-close", "open-quote"])
@pytest.mark.parametrize("family", sorted(TEXT_OR_CALLS))
def test_the_calls_after_a_broken_first_one_also_read_as_text_are_kept(family: str, how: str) -> None:
    """Calls the output opens with at once, which a reading also takes for text of one role
    (bare JSON calls as content; the calls' opener in reasoning the prompt opened, no reasoning
    written), the first broken in its arguments or right before the next call: where a later
    call begins within the hold-back bound after where it broke, recovery from the broken one,
    which reads that call, wins over the text reading, so the two later calls are calls, whole,
    however the output streams, and nothing is lost (the broken call's text is content). (One
    broken in its name stays text: a reading broken at a call's name or keys may have the
    'later call' inside its own arguments.)"""
    _later_calls_survive(TEXT_OR_CALLS[family](), how)


@pytest.mark.parametrize("family", sorted(TEXT_OR_CALLS))
def test_a_broken_first_call_also_read_as_text_stays_text_without_a_later_call_soon(family: str) -> None:
    """As above, but with no later call, or one only after more text than the hold-back bound
    after where the call broke: the text reading stands, as before (all the output is its text,
    no call), and while that text streams one character at a time no more is held than the
    bound beyond a marker (CONTRACT section 5)."""
    analysis = TEXT_OR_CALLS[family]()
    parser = analysis.parser(tools=WEATHER_TOOLS)
    alone = analyses.render_output(analysis, None, calls=probe.CALLS[:1])
    message = analyses.whole_checked_by_streams(parser, alone.replace('"Oslo"', ""))
    assert message["tool_calls"] == []
    text = analyses.render_output(analysis, None, calls=probe.CALLS)
    start, end = probe.value_span(text, "Oslo")
    filler = _filler(3 * policy.HOLD_BOUND)
    late = text[:start] + filler + text[end:]
    message = without_generated_ids(parser.parse(late))
    assert message["tool_calls"] == []
    for seed in range(3):
        assert without_generated_ids(streamed(parser, late, seed)) == message, seed
    _every_split(parser, late)
    markers = reader(analysis, tools=WEATHER_TOOLS).language.markers()
    bound = policy.HOLD_BOUND + max(len(m) for m in markers)
    held = _most_held_one_character_at_a_time(parser, late, start + 2 * policy.HOLD_BOUND, start + len(filler))
    assert held <= bound, held


def _later_calls_survive(analysis: autoparser.Analysis, how: str) -> tuple[Any, str]:
    """The probe's three calls, the first broken `how`: the two later ones are calls, whole and
    however the output streams (the parser and the broken output, for more checks)."""
    text = analyses.render_output(analysis, None, calls=probe.CALLS)
    broken = dict(probe.breakings(analysis, text))[how]
    parser = analysis.parser(tools=WEATHER_TOOLS)
    assert probe.failures(analysis, parser, broken) == []
    message = analyses.whole_checked_by_streams(parser, broken)
    assert "Paris" not in (message["content"] or "") + (message["reasoning_content"] or "")
    return parser, broken


READ_ALIKE = [  # a broken first call whose stream once differed from its whole parse
    ("vllm__tool_chat_template_phi4_mini.jinja", "open-quote"),  # bare JSON calls, content before a later call
    ("vllm__tool_chat_template_phi4_mini.jinja", "no-close"),
    ("vllm__tool_chat_template_phi4_mini.jinja", "bad-value"),
    ("vllm__tool_chat_template_phi4_mini.jinja", "no-value"),
    ("Kimi-K3.jinja", "no-close"),  # reasoning the prompt opened, a call's end marker left out
    ("Kimi-K3.jinja", "bad-value"),
    ("Kimi-K3.jinja", "no-value"),
]


@pytest.mark.parametrize(("template", "how"), READ_ALIKE, ids=[f"{t.split('.')[0]}-{h}" for t, h in READ_ALIKE])
def test_a_broken_first_call_also_read_as_text_reads_alike_however_it_streams(template: str, how: str) -> None:
    """Calls the output opens with at once that a reading also takes for text of one role, the
    first broken: the message does not depend on where the chunks end, so recovery's choice
    between the broken call and the text reading does not depend on which of the readings
    failed first. Where the call broke off inside its string at a later call's markers
    (`"Oslo}}; {"name": ...`, `_Thread.resync_at`), a stream knows of that call when it breaks
    off, and a text reading that reads that text as content, then reads a later call, loses as
    one that has not read that far yet does. The two later calls are calls, whole, one
    character at a time, in two chunks cut anywhere, and nothing is lost."""
    analysis = _corpus_analysis(template)
    parser, broken = _later_calls_survive(analysis, how)
    assert not losses_at_every_cut(broken, parser.parse, marker_patterns(analysis), analysis.tools.array)


def test_a_call_whose_end_tag_was_left_out_in_reasoning_the_prompt_opened_reads_alike_however_it_streams() -> None:
    """Reasoning the prompt opened, then two calls of `<tool_call>` JSON, the first one's
    `</tool_call>` left out: the message does not depend on where the chunks end (cut right after
    the second opener, the stream once read the first call as a call and the whole parse read it
    all as reasoning). Found by `tools/fuzz_outputs.py` on a corpus template."""
    analysis = _corpus_analysis("Bielik-11B-v3.0-Instruct.jinja")
    parser = analysis.parser(tools=WEATHER_TOOLS, thinking=True)
    text = ('\n<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris, France", "days": 3}}\n\n'
            '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Oslo", "days": 5}}\n</tool_call>')
    analyses.whole_checked_by_streams(parser, text)
    assert not losses_at_every_cut(text, parser.parse, marker_patterns(analysis), analysis.tools.array)


BEGUN_AGAIN = {  # a call's opener where its next argument or its end is expected: the call's end left out
    "nested_brackets": "[[city]]Oslo[[/city]][[call get_weather]]",  # the opener's marker read as a key's
    "sexpr_calls": '(city "Oslo")  (get_weather (city',  # an argument begins as a call does: `(NAME`
}


@pytest.mark.parametrize("fixture", sorted(BEGUN_AGAIN))
def test_a_call_begun_again_where_its_next_argument_may_begin_ends_the_open_call(fixture: str) -> None:
    """Three calls, the first one's end marker left out, the second call's opener written where
    the first one's next argument or end is expected: the open call ends there (its value whole,
    the call incomplete) and the later call is read from its opener (`ir.Language.resync`),
    whether the reading failed right after the opener's marker, which it read as a key's
    (`[[call` as `[[` and a key), or at a key that names a tool where an argument begins with the
    marker a call begins with (`(get_weather` as `(key`: such a key the schema does not name is
    no argument, `build_reading._Reading.calls_begun_as_arguments`), and not from where the
    value's other reading, its quote left open, broke off at that call. Whole, one character at
    a time, in two chunks cut anywhere, nothing lost."""
    analysis = autoparser.load(str(FIXTURE.with_name(f"{fixture}.jinja")))
    text = analyses.render_output(analysis, None, calls=probe.CALLS)
    broken = dict(probe.breakings(analysis, text))["no-close"]
    assert BEGUN_AGAIN[fixture] in broken
    parser = analysis.parser(tools=WEATHER_TOOLS)
    assert probe.failures(analysis, parser, broken) == []
    message = analyses.whole_checked_by_streams(parser, broken)
    assert analyses.calls(message) == probe.CALLS
    assert [bool(call.get("incomplete")) for call in message["tool_calls"]] == [True, False, False]
    assert not (message["content"] or "").strip()
    assert not losses_at_every_cut(broken, parser.parse, marker_patterns(analysis), analysis.tools.array)


def test_a_key_naming_a_tool_is_an_argument_where_arguments_and_calls_begin_apart() -> None:
    """Only where an argument begins with the call's own opener is a key that names a tool a
    call begun again: in `[[KEY]]` arguments of `[[call NAME]]` calls, `[[search]]` is a key."""
    analysis = autoparser.load(str(FIXTURE.with_name("nested_brackets.jinja")))
    args = {"city": "Oslo", "search": "Rome"}
    text = analyses.render_output(analysis, None, calls=[("get_weather", args)])
    message = analyses.whole_checked_by_streams(analysis.parser(tools=WEATHER_TOOLS), text)
    assert analyses.calls(message) == [("get_weather", args)]


@pytest.mark.parametrize("thought", [None, "Plan."])
def test_a_string_left_open_up_to_a_later_call_ends_at_that_call_though_a_later_quote_closes_it(
        thought: str | None) -> None:
    """A quoted value whose closing quote was left out, right before a later call's opener
    (`:city "Oslo)(call get_weather :city "Paris")`): the reading that reads on in the string
    closes it at the later call's own quote and reads its arguments whole, then fails where the
    call's end is expected (`Paris"`); recovery goes on from the reading that broke off the
    string where that call begins (`preference._read_past_break`), so the later calls are calls,
    whole, one character at a time, in two chunks cut anywhere and in random chunks, and nothing
    is lost."""
    analysis = autoparser.load(str(FIXTURE.with_name("edn_calls.jinja")))
    text = analyses.render_output(analysis, thought, calls=probe.CALLS)
    broken = dict(probe.breakings(analysis, text))["open-quote"]
    assert '"Oslo)(call get_weather :city "Paris")' in broken
    parser = analysis.parser(tools=WEATHER_TOOLS)
    assert probe.failures(analysis, parser, broken) == []
    message = analyses.whole_checked_by_streams(parser, broken)
    assert analyses.calls(message) == [("get_weather", {"city": "Oslo)"}), *probe.CALLS[1:]]
    assert [bool(call.get("incomplete")) for call in message["tool_calls"]] == [True, False, False]
    assert not (message["content"] or "").strip()
    assert not losses_at_every_cut(broken, parser.parse, marker_patterns(analysis), analysis.tools.array)
