"""Hostile model outputs read in linear time, the stream giving the whole parse's message however
the output is cut into chunks: an unfinished bare JSON call header repeated, and recovery cases
where two readings fail at one place."""

from __future__ import annotations

import gc
import json
import random
import time
from collections.abc import Callable

import analyses
import corpora
import pytest
from analyses import WEATHER_TOOLS, streamed_in_two, without_generated_ids
from corpora import llamacpp_templates
from unplaced import losses_at_every_cut, marker_patterns

import autoparser
from autoparser.language import interpret, passes, stepping
from autoparser.language.build_generation import MAX_KEY
from autoparser.language.markers import MarkerSet
from autoparser.language.policy import UNDECIDED_LIMIT, WHOLE_PIECE
from autoparser.language.reading import Parser
from autoparser.language.readings import _Thread
from autoparser.language.terminals import _Text
from autoparser.roundtrip import probe_messages, run_case

HEADER = '{"name": "get_weather", "parameters": '


def streamed(parser: Parser, text: str, size: int) -> tuple[dict, int]:
    """The message of `text` fed `size` characters at a time, and the most readings alive at once."""
    stream = parser.stream()
    most = 0
    for start in range(0, len(text), size):
        stream.feed(text[start:start + size])
        most = max(most, len(stream.threads))
    stream.finish()
    return stream.message(), most


def test_a_repeated_unfinished_call_header_keeps_the_readings_few() -> None:
    """`{"name": "f", "parameters": ` again and again (Llama 3.1's bare JSON calls): each brace may
    open a call, but one that begins inside another reading's JSON arguments is part of them
    (policy rule `calls-not-inside-arguments`), so the readings stay few and the time linear."""
    parser = Parser(analyses.llama31())
    text = (HEADER * (20_000 // len(HEADER) + 1))[:20_000]
    started = time.process_time()
    whole = parser.parse(text)
    for size in (1, 16, 100):
        message, most = streamed(parser, text[:4000] if size == 1 else text, size)
        assert most <= 4, f"{most} readings alive at once, {size}-character chunks"
        if size > 1:
            assert without_generated_ids(message) == without_generated_ids(whole)
    assert time.process_time() - started < 10  # it took 9.8 s for one whole parse when quadratic
    assert whole["content"] == text.rstrip()  # a call whose arguments never began well is text
    assert whole["tool_calls"] == []


def test_a_call_inside_another_calls_json_arguments_is_part_of_them() -> None:
    parser = Parser(analyses.llama31())
    inner = '{"name": "get_weather", "parameters": {}}'
    for text, incomplete in ((HEADER + inner + "}", False), (HEADER + inner, True)):
        whole = parser.parse(text)
        assert [(c["function"]["name"], c["function"]["arguments"]) for c in whole["tool_calls"]] == [
            ("get_weather", inner)]
        assert bool(whole["tool_calls"][0].get("incomplete")) is incomplete
        assert not whole["content"]
        for size in (1, 5, 16):
            assert without_generated_ids(streamed(parser, text, size)[0]) == without_generated_ids(whole)


def test_a_call_after_one_that_failed_inside_its_arguments_is_still_read() -> None:
    """Only a living reading's arguments hold a call: where the outer call's JSON breaks before
    the inner one begins, the inner one is a call."""
    parser = Parser(analyses.llama31())
    text = HEADER + 'oops {"name": "get_weather", "parameters": {"location": "Oslo"}}'
    whole = parser.parse(text)
    assert [c["function"]["arguments"] for c in whole["tool_calls"]] == ['{"location": "Oslo"}']
    assert without_generated_ids(streamed(parser, text, 3)[0]) == without_generated_ids(whole)


def test_of_two_readings_that_fail_alike_the_first_in_order_is_recovered_wherever_the_chunks_end() -> None:
    """GLM-4.5: `<think><tool_call><|user|>`. One reading fails at `<|user|>` on its first
    character (a call's name cannot begin with `<`), another on its second (it is not
    `</think>`): of two readings that fail alike, recovery goes on from the first in the
    readings' order, whether the other failed in an earlier chunk or in the same one."""
    parser = Parser(analyses.glm45())
    text = "<think><tool_call><|user|>"
    whole = parser.parse(text)
    assert whole["reasoning_content"] == "<tool_call>"
    for cut in range(1, len(text)):
        assert without_generated_ids(streamed_in_two(parser, text, cut)) == without_generated_ids(whole), cut


def _kimi_k3() -> Parser:
    path = next(p for p in llamacpp_templates() if p.name == "Kimi-K3.jinja")
    return autoparser.load(str(path)).parser(tools=analyses.WEATHER_TOOLS, thinking=True)


def _deepseek(analysis) -> Callable[[], Parser]:
    return lambda: Parser(analysis(), tools=analyses.WEATHER_TOOLS, thinking=True)


@pytest.mark.parametrize(("parser", "opener", "end"), [
    (_kimi_k3, '<|open|>think<|sep|><|open|>tools<|sep|><|open|>call tool="', "<|end_of_msg|>"),
    (_deepseek(analyses.deepseek_v31), "<think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>", "<｜end▁of▁sentence｜>"),
    (_deepseek(analyses.deepseek_r1), "<think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>", "<｜end▁of▁sentence｜>"),
], ids=["Kimi-K3", "DeepSeek-V3.1", "DeepSeek-R1"])
def test_a_call_opened_then_the_end_of_turn_is_recovered_from_the_first_reading_wherever_the_chunks_end(
        parser: Callable[[], Parser], opener: str, end: str) -> None:
    """Reasoning opened, a call opened, the end of turn, again. The reading of reasoning fails at
    the end of turn (it is not the reasoning's end marker) only once that marker is whole; the
    reading of a call fails on its first character (no tool name begins with it): where the
    chunks cut the marker, the call's reading failed first, and recovery went on from it, unlike
    the whole parse."""
    reader = parser()
    reasoning = opener.split(">", 1)[1] if opener.startswith("<think>") else opener.split("<|sep|>", 1)[1]
    for text in (opener + end, (opener + end) * 3):
        whole = without_generated_ids(reader.parse(text))
        assert whole["reasoning_content"] == reasoning
        assert not whole["tool_calls"]
        for cut in range(1, len(text)):
            assert without_generated_ids(streamed_in_two(reader, text, cut)) == whole, cut
        for size in (1, 7, 16):
            assert without_generated_ids(streamed(reader, text, size)[0]) == whole, size


def test_a_reading_that_closed_its_call_is_recovered_over_one_further_into_a_marker() -> None:
    """Kimi-K3: a call's header, `<|sep|><|open|>`, then whitespace. One reading closed the call
    and fails in `<|sep|><|close|>call<|sep|>`, another failed further into `<|sep|><|open|>argument
    key="` with the call still open: the call that closed is kept, whichever failed first (a stream
    in 16-character chunks lost the call when how far into its marker each read came first)."""
    analysis = autoparser.load(str(next(p for p in llamacpp_templates() if p.name == "Kimi-K3.jinja")))
    parser = analysis.parser(tools=WEATHER_TOOLS, thinking=True)
    text = ('I should call a tool.<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|>'
            '<|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|><|open|>' + " \n" * 60)
    whole = without_generated_ids(parser.parse(text))
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in whole["tool_calls"]] == [
        ("get_weather", "{}")]
    for size in (1, 3, 16, 64):
        assert without_generated_ids(streamed(parser, text, size)[0]) == whole, size


def test_text_after_a_section_opener_waits_until_the_section_holds_a_call() -> None:
    """R1: `</think><｜tool▁calls▁begin｜><think></think>` read as a section holding text only: the
    section's opener is text, and the text after it is not let go before it, wherever the chunks
    end (readings that share the text after the opener wait for the section too)."""
    analysis = analyses.deepseek_r1()
    text = "</think>" + analysis.tools.section_start + "<think></think>"
    parser = Parser(analysis)
    whole = parser.parse(text)
    assert whole["content"] == text[len("</think>"):]
    for cut in range(1, len(text)):
        assert without_generated_ids(streamed_in_two(parser, text, cut)) == without_generated_ids(whole), cut


def test_whitespace_after_a_call_not_yet_confirmed_streams_in_linear_time() -> None:
    """DeepSeek V3.1 thinking: `</think>...<｜tool▁sep｜>{` then whitespace. The call is held whole
    until its first key; the events its readings hold meanwhile are not compared again with every
    chunk (200 KB took 23 s)."""
    analysis = analyses.deepseek_v31()
    head = analyses.render_output(analysis, None, "", [("get_weather", {"city": "Paris"})], stop=False)
    text = "</think>" + head[:head.index("{") + 1] + " \n" * 100_000
    parser = Parser(analysis, thinking=True)
    started = time.process_time()
    message, _ = streamed(parser, text, 16)
    assert time.process_time() - started < 5
    assert without_generated_ids(message) == without_generated_ids(parser.parse(text))


def test_a_call_inside_arguments_is_not_recovered_from_either() -> None:
    """A reading whose call began inside another's JSON arguments is dropped also where it fails
    in the pass it began in (it is not the one recovery goes on from), as it is where it is still
    alive at the end of a shorter chunk."""
    parser = Parser(analyses.llama31(), tools=analyses.WEATHER_TOOLS)
    text = HEADER + '{"name": "get_weather", "parameters": {}}</tool_call><|eot_id|></tool_call>"x": 1[]text'
    whole = without_generated_ids(parser.parse(text))
    for size in (1, 7, 16, 512):
        assert without_generated_ids(streamed(parser, text, size)[0]) == whole, size


def test_a_call_before_one_whose_arguments_hold_a_call_is_kept_whole_as_streamed() -> None:
    """Llama 3.1: a whole call, then one whose JSON arguments hold a call and break off. Read whole,
    the readings that begin a call inside those arguments meet the one that reads the first call
    and the rest as text at a fork in one pass: they are dropped at the end of the pass
    (`calls-not-inside-arguments`), and the one they met is not lost with them."""
    parser = Parser(analyses.llama31(), tools=analyses.WEATHER_TOOLS)
    first = '{"name":"get_weather","parameters":{}}'
    rest = '{"name":"get_weather","arguments":{"name":"get_weather","parameters":{}}{"'
    text = first + rest
    whole = without_generated_ids(parser.parse(text))
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in whole["tool_calls"]] == [
        ("get_weather", "{}")]
    assert whole["content"] == rest
    for size in (1, 16, 512):
        assert without_generated_ids(streamed(parser, text, size)[0]) == whole, size


def _threads_alive_at_pass_ends(parser: Parser, text: str, monkeypatch: pytest.MonkeyPatch) -> tuple[dict, int]:
    """The whole parse of `text`, and the most readings alive at the end of one of its passes
    (before the pass lets go of what it held)."""
    most = [0]
    outside_arguments = passes._Passes._outside_arguments

    def counted(self, waiting, failed):  # type: ignore[no-untyped-def]
        most[0] = max(most[0], sum(1 for o in gc.get_objects() if o.__class__ is _Thread))
        return outside_arguments(self, waiting, failed)

    monkeypatch.setattr(passes._Passes, "_outside_arguments", counted)
    message = without_generated_ids(parser.parse(text))
    monkeypatch.setattr(passes._Passes, "_outside_arguments", outside_arguments)
    return message, most[0]


@pytest.mark.parametrize(("analysis", "unit"), [
    (analyses.llama31, '{"a": '),
    (analyses.llama31, '[{"a": '),
    (analyses.llama31, HEADER),
    (analyses.llama32_pythonic, "["),
])
def test_a_whole_pass_lets_go_of_failed_readings_as_they_fail_and_chooses_as_if_it_held_them(
        analysis, unit: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass over a piece of a whole output folds the readings that fail in it into the choice of
    the one to recover from as they fail (past `HELD_FAILED` of them), letting go of those that
    no outcome of the drops at the pass's end would choose: the message is the one a pass that
    holds them all to its end gives, and the readings alive stay few (Llama 3.1, `{"a": `
    nesting: about 600 held at a pass's end, 12 folded)."""
    parser = Parser(analysis(), tools=analyses.WEATHER_TOOLS)
    default = passes.HELD_FAILED
    for text in (HEADER + unit * (3000 // len(unit)), HEADER + unit * 300 + "1" + "}" * 300 + "}"):
        monkeypatch.setattr(passes, "HELD_FAILED", 1 << 30)
        held, most_held = _threads_alive_at_pass_ends(parser, text, monkeypatch)
        for limit in (0, 5, default):
            monkeypatch.setattr(passes, "HELD_FAILED", limit)
            folded, most = _threads_alive_at_pass_ends(parser, text, monkeypatch)
            assert folded == held, limit
            assert most <= min(most_held, 100), (limit, most, most_held)


@pytest.mark.parametrize("unit", ['{"name": "get_weather", "parameters": {}}};',
                                  '{"parameters": {}, "name": "get_weather"}{'])
def test_a_whole_pass_whose_fold_would_multiply_its_choices_holds_the_rest_and_chooses_as_if_it_held_them(
        unit: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each reading folded in whose calls began at places the pass's end may or may not drop can
    double the fold's choices (Llama 3.1, whole bare calls each followed by a stray brace: thousands
    for eight calls); where one more would leave more than `FOLD_CHOICES`, the pass holds the
    rest whole: the choices stay that few, and the message is the one a pass that holds every
    failed reading to its end gives. (The whole output is read in pieces as long as where calls
    are not bare JSON: a bare-call format's shorter pieces fold too few to fill the fold.)"""
    monkeypatch.setattr(interpret, "BARE_CALLS_PIECE", WHOLE_PIECE)
    parser = Parser(analyses.llama31(), tools=analyses.WEATHER_TOOLS)
    held_failed, fold_choices = passes.HELD_FAILED, passes.FOLD_CHOICES
    text = unit * 12
    monkeypatch.setattr(passes, "HELD_FAILED", 1 << 30)
    held = without_generated_ids(parser.parse(text))
    most, refused = [0], [0]
    add = passes._Fold.add

    def counted(self, *args):  # type: ignore[no-untyped-def]
        taken = add(self, *args)
        most[0], refused[0] = max(most[0], len(self.choices)), refused[0] + (not taken)
        return taken

    monkeypatch.setattr(passes._Fold, "add", counted)
    for limit, choices in ((0, 4), (0, fold_choices), (5, 16), (held_failed, fold_choices)):
        monkeypatch.setattr(passes, "HELD_FAILED", limit)
        monkeypatch.setattr(passes, "FOLD_CHOICES", choices)
        most[0] = refused[0] = 0
        assert without_generated_ids(parser.parse(text)) == held, (limit, choices)
        assert 0 < most[0] <= choices and refused[0], (limit, choices, most[0])


def _depth(stack: object) -> int:
    depth = 0
    while stack is not None:
        depth, stack = depth + 1, stack[1]  # type: ignore[index]
    return depth


def _deepest_stack(parser: Parser, text: str, size: int) -> tuple[dict, int]:
    """The message of `text` fed `size` characters at a time, and the deepest stack a reading had."""
    stream = parser.stream()
    deepest = 0
    for start in range(0, len(text), size):
        stream.feed(text[start:start + size])
        deepest = max([deepest, *(_depth(t.stack) for t in stream.threads)])
    stream.finish()
    return stream.message(), deepest


@pytest.mark.parametrize("unit", [
    "[TOOL_CALLS]</s>",  # a call opened, then the end of turn: it fails on its name
    '[TOOL_CALLS]get_weather[ARGS]{"',  # a call cut off before its first key
    '[TOOL_CALLS]get_weather[ARGS]{"location": "',  # ... and inside its first value
])
def test_a_call_that_fails_again_and_again_is_recovered_in_linear_time(unit: str) -> None:
    """Mistral Small 3.2: each failed call is recovered from inside the calls' section, and the
    reading that resumes there keeps what follows the call. The rest of the optional part it
    resumed in, spent, was kept too, one more with every failure: the stack grew with the output
    and the time with its square (50 KB took 10 to 90 times what 5 KB took)."""
    parser = Parser(analyses.mistral_compact())
    text = unit * (40_000 // len(unit))
    started = time.process_time()
    whole = parser.parse(text)
    messages = [_deepest_stack(parser, text, size) for size in (16, 509)]
    assert time.process_time() - started < 5
    assert max(deepest for _, deepest in messages) <= 16
    if unit.endswith("</s>"):  # no call: all of it is text, but the end-of-turn markers (no text)
        assert not whole["tool_calls"] and whole["content"] == text.replace("</s>", "")
    for message, _ in messages:
        assert without_generated_ids(message) == without_generated_ids(whole)
    short = text[:len(unit) * 6]
    for cut in range(1, len(unit) * 3):
        assert without_generated_ids(streamed_in_two(parser, short, cut)) == without_generated_ids(parser.parse(short))


def _cached(parser: Parser) -> tuple[int, ...]:
    reader = parser._reader
    return (len(reader._keep), len(reader._rests), len(reader._markers), len(reader._ids), len(getattr(reader, "_lead_sets", ())),
            len(reader.firsts._keep))


@pytest.mark.parametrize(("analysis", "unit"), [
    (analyses.mistral_compact, "[TOOL_CALLS]</s>"),
    (analyses.mistral_compact, "[TOOL_CALLS]"),
    (analyses.mistral_compact, '[TOOL_CALLS]get_weather[ARGS]{"'),
    (analyses.kimi_k2, "<|tool_calls_section_begin|><|tool_call_begin|><|im_end|>"),
    (analyses.qwen3_coder, "<tool_call>\n<function=get_weather>\n<parameter=city>\n<|im_end|>"),
])
def test_failed_calls_leave_the_readers_caches_as_they_were(analysis, unit: str) -> None:
    """The reader is shared by every stream of a language: what recovery builds after a failed
    call is kept by the markers it stops at, not by the frames a reading made (new with every
    failure), so a hostile output does not grow the reader for as long as it lives."""
    parser = Parser(analysis(), tools=analyses.WEATHER_TOOLS)
    parser.parse(unit * 20)
    streamed(parser, unit * 20, 16)
    before = _cached(parser)
    parser.parse(unit * 400)
    streamed(parser, unit * 400, 16)
    assert _cached(parser) == before


@pytest.mark.parametrize(("template", "text"), [
    ("deepseek-ai-DeepSeek-V3.2.jinja", "<｜DSML｜function_calls><｜end▁of▁sentence｜>"),
    ("MiniMax-M2.jinja", '<think><minimax:tool_call>\n<invoke name="[e~['),
])
def test_a_calls_opener_then_the_end_of_turn_streams_as_read_whole_wherever_the_chunks_end(
        template: str, text: str) -> None:
    """Outputs found by random search where the reading that failed first in a stream (on the end
    of turn's first character) was not the one a whole parse keeps (the first in order)."""
    path = next(p for p in llamacpp_templates() if p.name == template)
    parser = autoparser.load(str(path)).parser(tools=WEATHER_TOOLS, thinking=True)
    whole = without_generated_ids(parser.parse(text))
    for cut in range(1, len(text)):
        assert without_generated_ids(streamed_in_two(parser, text, cut)) == whole, cut


def _agrees_whole_and_streamed(parser: Parser, text: str) -> dict:
    """The whole parse of `text`, checked equal to the stream fed one character at a time and to
    the stream split in two at every place (ids the parser drew aside)."""
    whole = without_generated_ids(parser.parse(text))
    stream = parser.stream()
    for char in text:
        stream.feed(char)
    stream.finish()
    assert without_generated_ids(stream.message()) == whole, (text, stream.message(), whole)
    for cut in range(len(text) + 1):
        assert without_generated_ids(streamed_in_two(parser, text, cut)) == whole, (text, cut)
    return whole


@pytest.mark.parametrize("tools", [None, WEATHER_TOOLS], ids=["no-tools", "tools"])
@pytest.mark.parametrize("tail", [">>>", ">>><|eot_id|>", ">>> <|eot_id|>", ">>>!<|eot_id|>", ">>>all"])
def test_an_option_the_next_character_rules_out_is_not_read_where_a_chunk_ends(tail: str, tools) -> None:
    """Functionary v3.2: a whole call, then `>>>` and no recipient after it. Where a chunk ended
    at `>>>`, the stream took every option there (a call, or `all` for the answer) before the next
    character was known; `all` then failed at `<` as the call did, and recovery went on from it (it
    had closed the call before), where a whole parse, seeing `<`, never took `all`. An option taken
    at the end of a chunk is checked against its first character once it comes, as a fork that
    sees it is: stream and whole give one message, and nothing written is lost (`unplaced`)."""
    path = next(p for p in llamacpp_templates() if p.name == "meetkai-functionary-medium-v3.2.jinja")
    analysis = autoparser.load(str(path))
    output = run_case(analysis, "one_call", probe_messages()["one_call"]).output
    assert output.startswith("get_weather\n{")  # the template's own call, as the round trip writes it
    parser = analysis.parser(tools=tools)
    text = output + tail
    whole = _agrees_whole_and_streamed(parser, text)
    assert [c["function"]["name"] for c in whole["tool_calls"]] == ["get_weather"]

    def parse(written: str) -> dict:
        return _agrees_whole_and_streamed(parser, written)

    losses = losses_at_every_cut(text, parse, marker_patterns(analysis))
    assert not losses, losses[0]


@pytest.mark.parametrize("extra", [0, 1, 2, 40])
def test_a_key_longer_than_any_the_parser_reads_fails_where_it_passes_the_limit_however_it_streams(
        extra: int) -> None:
    """Llama 3.2's pythonic calls: `[search(xxx…)]` with a key longer than the longest the parser
    reads. Streamed a character at a time, a key exactly as long as the limit at the end of a chunk
    was taken whole (the next character was not yet known) and the reading failed one character
    later, where the whole parse failed it at the key's start and recovered from a reading that
    had returned the call with no arguments. The key fails at the character past the limit
    however the text comes: one message, the text all content."""
    parser = Parser(analyses.llama32_pythonic(), tools=WEATHER_TOOLS)
    text = "[search(" + "x" * (MAX_KEY + extra) + ")]<|eot_id|>"
    whole = without_generated_ids(parser.parse(text))
    assert whole["tool_calls"] == [] and whole["content"] == text.removesuffix("<|eot_id|>")
    for size in (1, 2, 4, 64):
        assert without_generated_ids(streamed(parser, text, size)[0]) == whole, size


@pytest.mark.parametrize("family", ["mistral_array", "hermes", "deepseek_r1"])
def test_a_member_longer_than_the_undecided_limit_streams_as_read_whole(family: str) -> None:
    """A string argument longer than the most text readings may hold undecided, then a second
    call. The one reading alive holds the member whole until it ends (it may yet break off), so
    the held text is past the limit when the readings fork after it; they gave way at the end of
    whatever chunk that was, where a whole parse read on to the end of its piece and kept the
    reading of the second call. Past the limit, they give way only at the ends of a whole
    parse's pieces: the stream keeps both calls as the whole parse does."""
    analysis = getattr(analyses, family)()
    value = 'abc \\" ' * (UNDECIDED_LIMIT // 7 + 100)
    text = analyses.render_output(analysis, calls=[("get_weather", {"city": "Paris"}), ("search", {"query": "q"})])
    text = text.replace('"Paris"', '"' + value + 'Paris"')
    parser = Parser(analysis, tools=WEATHER_TOOLS)
    whole = without_generated_ids(parser.parse(text))
    assert [c["function"]["name"] for c in whole["tool_calls"]] == ["get_weather", "search"]
    for size in (4, 7, 1000):
        assert without_generated_ids(streamed(parser, text, size)[0]) == whole, size


@pytest.mark.parametrize("text", [
    '<|tool_call>call:get_weather{city:<|"|>Oslo<|"|>days:3}<tool_call|>',
    '<|tool_call>call:get_weather{city:<|"|>Oslo<|"|>d',
    '<|tool_call>call:get_weather{days:3<|"|>city:<|"|>Oslo<|"|>}<tool_call|>',
    '<|tool_call>call:get_weather{city:<|"|>Oslo<|"|> days:3}<tool_call|>',
    '<|tool_call>call:get_weather{city:<|"|>Oslo<|"|>,days:3}<tool_call|>',
])
def test_a_member_ends_where_the_character_after_it_decides_wherever_the_chunks_end(text: str) -> None:
    """Gemma 4: a member, then no separator before the next. Read whole, the member's end sees
    `d`, which nothing after a member begins with, and the reading fails there, inside the
    arguments (the call is incomplete, its city kept); where a chunk ended right after the
    member, the member was ended before `d` was known and the reading failed past the call's
    end (the call whole). A reading at a member's end waits for the character after it: one
    message however the output is cut, and nothing written is lost (`unplaced`)."""
    path = next(p for p in llamacpp_templates() if p.name == "google-gemma-4-31B-it-interleaved.jinja")
    analysis = autoparser.load(str(path))
    parser = analysis.parser(tools=WEATHER_TOOLS)
    whole = _agrees_whole_and_streamed(parser, text)
    assert [c["function"]["name"] for c in whole["tool_calls"]] == ["get_weather"]
    if '"|>d' in text:
        assert whole["tool_calls"][0]["function"]["arguments"] == '{"city": "Oslo"}'
        assert whole["tool_calls"][0].get("incomplete")
    for size in (2, 3, 5):
        assert without_generated_ids(streamed(parser, text, size)[0]) == whole, size

    def parse(written: str) -> dict:
        return _agrees_whole_and_streamed(parser, written)

    losses = losses_at_every_cut(text, parse, marker_patterns(analysis))
    assert not losses, losses[0]


@pytest.mark.parametrize("value", ["3", "12345678901234567890", "True", "None", "x"])
@pytest.mark.parametrize("after", [")", ")\n```\n<|tool_call_end|>", ")\n)\n```\n<|tool_call_end|>"])
def test_a_call_whose_bare_value_its_end_marker_never_confirmed_is_its_text_whole(value: str, after: str) -> None:
    """MiniCPM3's `name(key=value)`: a call whose last value is a bare word is a call only once a
    marker that is no punctuation follows it (in `days=f(3))` the first `)` is the value's). Where
    the call's `)` came twice, the language was read whole up to the second (its section's end
    marker optional) and the trailer failed there: the call was withdrawn, but the text from the
    section's opener to the failure was dropped with the trailer's own text (so too where text
    follows the end of turn: `get_weather(days=3)) <|im_end|> more` was `Hi. more`). A withdrawn
    call of the section a reading read whole is text, the section's opener too: nothing lost, one
    message however the output is cut."""
    analysis = analyses.minicpm3_kwargs()
    parser = Parser(analysis, tools=WEATHER_TOOLS)
    text = f"Hi.<|tool_call_start|>\n```python\nget_weather(days={value}){after}"
    whole = _agrees_whole_and_streamed(parser, text)
    assert whole["tool_calls"] == [] and whole["content"] == text

    def parse(written: str) -> dict:
        return _agrees_whole_and_streamed(parser, written)

    losses = losses_at_every_cut(text, parse, marker_patterns(analysis))
    assert not losses, losses[0]


@pytest.mark.parametrize("value", ["3", "12345678901234567890", "True", "None", "x"])
@pytest.mark.parametrize("after", [" <|im_end|> more", "<|im_end|>\nmore", " <|im_end|>"])
def test_an_end_of_turn_after_a_bare_value_confirms_its_call(value: str, after: str) -> None:
    """MiniCPM3's `name(key=value)` whose last value is a bare word, then the end of turn: the end
    of turn is a marker that is no punctuation, so it confirms the call as a marker after the word
    does (`_Trailer`). With text after the end of turn the call was withdrawn and the whole
    section, `<|im_end|>` included, was content; at the end of the output it was a call. Now it is
    a call either way, and the end-of-turn marker is no text (as after a quoted value)."""
    analysis = analyses.minicpm3_kwargs()
    parser = Parser(analysis, tools=WEATHER_TOOLS)
    text = f"Hi.<|tool_call_start|>\n```python\nget_weather(days={value}){after}"
    whole = _agrees_whole_and_streamed(parser, text)
    [call] = whole["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert "<|im_end|>" not in whole["content"]
    assert whole["content"].replace(" ", "").replace("\n", "") == "Hi." + after.replace("<|im_end|>", "").strip()

    def parse(written: str) -> dict:
        return _agrees_whole_and_streamed(parser, written)

    losses = losses_at_every_cut(text, parse, marker_patterns(analysis))
    assert not losses, losses[0]


@pytest.mark.parametrize("key", ["city", "query"])
def test_a_value_cut_inside_the_end_of_turn_marker_keeps_its_text(key: str) -> None:
    """MiniCPM5's `<param name="key">value</param>`: a value the output ended inside, then the
    beginning of the end-of-turn marker (`Paris<|im_`). The value ends before the marker cut off,
    its call is cut off (incomplete, the value kept), and what was written of the marker is
    content, whether the schema names the key (its value streams as it is read) or not (an extra
    member, held until it ends: it was dropped, the failed reading's cut-off mark already past
    it); one message however the output is cut."""
    path = next(p for p in llamacpp_templates() if p.name == "openbmb-MiniCPM5-1B.jinja")
    analysis = autoparser.load(str(path))
    parser = analysis.parser(tools=WEATHER_TOOLS, thinking=True)
    head = f'<think>\nHm.</think>\nHi.<function name="get_weather"><param name="{key}">Paris'
    for end in range(len("<|im_end|>")):
        text = head + "<|im_end|>"[:end]
        whole = _agrees_whole_and_streamed(parser, text)
        [call] = whole["tool_calls"]
        assert call["function"]["arguments"] == f'{{"{key}": "Paris"}}' and call.get("incomplete"), text
        assert whole["content"] == "Hi." + "<|im_end|>"[:end], text


def test_a_value_before_the_end_of_turn_marker_is_kept_whether_the_schema_names_its_key() -> None:
    """MiniCPM5: `<param name="key">Paris<|im_end|>`, the turn ended where the value's end tag
    should be. A named key's value streams and is kept, the call incomplete; a key the schema
    does not name holds its value until it ends, and its member was content instead. Both keep
    the value now, with one message however the output is cut."""
    path = next(p for p in llamacpp_templates() if p.name == "openbmb-MiniCPM5-1B.jinja")
    parser = autoparser.load(str(path)).parser(tools=WEATHER_TOOLS, thinking=True)
    messages = {}
    for key in ("city", "query"):
        text = f'<think>\nHm.</think>\nHi.<function name="get_weather"><param name="{key}">Paris<|im_end|>'
        whole = _agrees_whole_and_streamed(parser, text)
        [call] = whole["tool_calls"]
        assert call["function"]["arguments"] == f'{{"{key}": "Paris"}}' and call.get("incomplete"), whole
        messages[key] = whole["content"]
    assert messages["city"] == messages["query"]


@pytest.mark.parametrize("name", ["google-gemma-4-31B-it.jinja", "google-gemma-4-31B-it-interleaved.jinja"])
@pytest.mark.parametrize("tail", [
    '<|tool_call>call:search{code:<|"|>def f():\n    return {a: [1]}\n}<tool_call|><turn|>',
    '<|tool_call>call:search{code:<|"|>x}<tool_call|>',
    "Hi",
])
def test_reasoning_opened_twice_then_a_broken_call_is_recovered_from_the_markup_reading(name: str, tail: str) -> None:
    """Gemma 4: `<|channel>thought` written twice (the second is markup, `start-again`, or the
    reasoning's text), the reasoning closed, then a call that breaks. Both readings fail at one
    place; recovery went on from whichever failed first, which depended on where the chunks
    ended (reasoning `<|channel>thought` whole, none streamed). As between two readings that
    meet, the one that read more markers as markup wins: no reasoning, however the output is cut."""
    path = next(p for p in llamacpp_templates() if p.name == name)
    parser = autoparser.load(str(path)).parser(tools=analyses.WEATHER_TOOLS, thinking=True)
    whole = _agrees_whole_and_streamed(parser, "<|channel>thought<|channel>thought<channel|>" + tail)
    assert whole["reasoning_content"] is None
    for size in (2, 3, 4, 5):
        text = "<|channel>thought<|channel>thought<channel|>" + tail
        assert without_generated_ids(streamed(parser, text, size)[0]) == whole, size


KIMI_CALL = ('<|tool_call_begin|>functions.run_code:0<|tool_call_argument_begin|>'
             '{"code": "def f():\\n    return {\'a\': [1]}\\n"}<|tool_call_end|>')


@pytest.mark.parametrize("before", ["", "<|tool_calls_section_end|>", "<|tool_calls_section_begin|>"],
                         ids=["bare", "section-end-first", "in-section"])
@pytest.mark.parametrize("tail", ["", "<|im_end|>", "<|im_end|><|im_end|>\n", " <|im_end|>", "<|im_end|> more",
                                  "x<|im_end|>", "<|im_"])
def test_a_section_opened_after_a_call_then_the_end_of_turn_is_no_text_wherever_the_chunks_end(
        before: str, tail: str) -> None:
    """Kimi-K2: a whole call, a second section's opener and the end of turn. Of two readings that
    failed at the end-of-turn marker, one read the opener as text inside the call's section, the
    other as a section that holds no call. A stream split inside the marker kept the second
    (failed a pass earlier, it was ranked by a call whose events had gone out since), the whole
    parse the first, and went on a character past the failure, where an end-of-turn marker
    began: the marker was content, whole but not streamed. The marker is no text wherever the
    chunks end: the output ending with it or not gives one message (its end of turn is removed
    or not), nothing lost at any cut (each cut checked whole; the whole output streamed in every way)."""
    analysis = analyses.kimi_k2()
    parser = Parser(analysis)
    opener = "<|tool_calls_section_begin|>"
    text = before + KIMI_CALL + opener + tail
    whole = _agrees_whole_and_streamed(parser, text)
    [call] = whole["tool_calls"]
    assert call["function"]["name"] == "run_code" and not call.get("incomplete")
    unended = without_generated_ids(parser.parse(before + KIMI_CALL + opener))
    assert unended["content"] == before.replace(opener, "") + opener
    after = tail.replace("<|im_end|>", "").rstrip()
    assert whole == dict(unended, content=unended["content"] + after)

    losses = losses_at_every_cut(text, parser.parse, marker_patterns(analysis))
    assert not losses, losses[0]


@pytest.mark.parametrize(("family", "text", "content"), [
    ("mistral_compact", '[TOOL_CALLS]get_weather[ARGS]{"n": 12345678901234</s>567890}[TOOL_CALLS]get_weather[ARGS]{}</s>',
     "567890}"),
    ("mistral_compact", '[TOOL_CALLS]get_weather[ARGS]{"n": 1, "items": [1.0, "two"</s>, 3]}', ", 3]}"),
])
def test_an_end_of_turn_where_recovery_goes_on_is_no_text_wherever_the_chunks_end(
        family: str, text: str, content: str) -> None:
    """A call's JSON arguments broken off by the end-of-turn marker, text after it. Recovery goes
    on where the reading failed, at the marker: it is no text (as after the language's end), and
    where the chunks end inside it, recovery waits until it is whole, as a whole parse sees it."""
    parser = Parser(analyses.FAMILIES[family]())
    whole = _agrees_whole_and_streamed(parser, text)
    assert whole["content"] == content
    assert whole["tool_calls"][0].get("incomplete")


@pytest.mark.parametrize(("family", "text", "content", "incomplete"), [
    ("qwen3", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\nHi.<|im_end|>', "Hi.", False),
    ("qwen3", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_calx>Hi.<|im_end|>',
     "</tool_calx>Hi.", False),
    ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n<|im_end|></tool_call>',
     "</tool_call>", False),
    ("qwen3_coder", "Sure.<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<|im_end|>",
     "Sure.", False),
    ("keyed_tags", 'Ok.<tool_calls>\n<invoke name="get_weather">\n<city>Paris</city>\n<days>3</days>\n<|end|>', "Ok.", True),
    ("keyed_tags", 'Ok.<tool_calls>\n<invoke name="get_weather">\n<city>Paris</city>\n<days>3Hi.<|end|>', "Ok.", True),
    ("bare_json_array", 'Sure.[{"name": "get_weather", "arguments": {}}, {"name": "search" "arguments": {}}]<|im_end|>',
     'Sure., {"name": "search" "arguments": {}}]', False),
    ("mistral_array", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris" "days": 3}}]</s>',
     '"days": 3}}]', True),
    ("glm45", "<think></think><tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
     "<arg_key>days</arg_key>\n<arg_value>3<think>\n</tool_call><|user|>", None, False),
])
def test_the_end_of_turn_after_a_broken_call_is_no_text_wherever_the_chunks_end(
        family: str, text: str, content: str | None, incomplete: bool) -> None:
    """A call broken (its end marker missing or misspelt, a separator left out, a reasoning
    marker in a value), then text and the end-of-turn marker. The text after the call read again
    as content ran up to the call's end marker, past the end of turn, which was content; a reading
    that read the marker's first character as a marker of its own (`<` opening a keyed argument)
    failed inside it and recovery went on from there, the rest of the marker content. The marker
    ends the output, no text whether or not a reading failed before it: whole, one character at a
    time and split at every place alike, nothing lost at any cut."""
    analysis = analyses.FAMILIES[family]()
    parser = Parser(analysis, tools=WEATHER_TOOLS)
    whole = _agrees_whole_and_streamed(parser, text)
    assert whole["content"] == content, whole
    assert [bool(call.get("incomplete")) for call in whole["tool_calls"]] == [incomplete], whole
    assert not any(end in (whole["reasoning_content"] or "") for end in analysis.stop), whole
    losses = losses_at_every_cut(text, parser.parse, marker_patterns(analysis), array=family.endswith("array"))
    assert not losses, losses[0]


@pytest.mark.parametrize("name", ["google-gemma-4-31B-it.jinja", "google-gemma-4-31B-it-interleaved.jinja"])
@pytest.mark.parametrize(("tail", "value"), [
    ("Hi.<turn|>", {"city": "ParisHi."}),
    ('<|"|>,days:3Hi.<turn|>', {"city": "Paris", "days": "3Hi."}),
    ('<|"|>,days:3}Hi.<turn|>', {"city": "Paris", "days": "3}Hi."}),
    ('<|"|>,days:3}<|tool_response>Hi.<turn|>', {"city": "Paris", "days": "3}<|tool_response>Hi."}),
])
def test_a_gemma4_call_cut_off_by_the_end_of_turn_keeps_the_marker_out_of_the_content(
        name: str, tail: str, value: dict) -> None:
    """Gemma 4: a call whose last value runs on to the end of turn (its closing quote, brace or end
    marker missing) is cut off there, keeping the value; what it could not hold was content, the
    `<turn|>` marker with it. The marker is no text: whole, one character at a time and split at
    every place alike."""
    path = next(p for p in llamacpp_templates() if p.name == name)
    parser = autoparser.load(str(path)).parser(tools=analyses.WEATHER_TOOLS, thinking=True)
    whole = _agrees_whole_and_streamed(parser, '<|tool_call>call:get_weather{city:<|"|>Paris' + tail)
    assert whole["content"] is None, whole
    [call] = whole["tool_calls"]
    assert call["incomplete"] and json.loads(call["function"]["arguments"]) == value


def _safe_end_place_by_place(markers: MarkerSet, text: str, pos: int) -> int:
    """`MarkerSet.safe_end` as its definition says: the first place, of those a marker may still
    begin at (the last `longest - 1` characters), from which the text may grow into one."""
    for at in range(max(pos, len(text) - markers.longest + 1), len(text)):
        if markers.is_prefix(text, at):
            return at
    return len(text)


def test_the_end_held_for_markers_with_whitespace_inside_is_where_one_place_at_a_time_finds_it() -> None:
    """Markers that may hold whitespace inside (`[ {"name"`) are held with one search from where
    one may begin, not a place at a time: a run of their first character (`[[[[` after a bare
    JSON array of calls) held each place of the last hundred or so at each step."""
    markers = MarkerSet({'[{"name"': "call", "<tool_call>\n{": "call", "</x>": "end"})
    assert markers.prefix_pattern is not None
    rng = random.Random(25)
    for _ in range(3000):
        text = "".join(rng.choice(['[', '{', '"', "name", " ", "\n", "<tool_call>", "<", "a", "</x"])
                       for _ in range(rng.randint(0, 40)))
        pos = rng.randint(0, len(text))
        assert markers.safe_end(text, pos) == _safe_end_place_by_place(markers, text, pos), (text, pos)


def test_a_bracket_run_after_a_bare_array_of_calls_streams_as_read_whole() -> None:
    """The bare JSON array (xLAM): a call, then `[` again and again; each may open the calls
    again, so the answer's text stops at each. Found slow by the fuzzer (2,133 characters, 2.5 s
    whole on a busy machine); the stream gives the whole parse's message."""
    analysis = analyses.bare_json_array()
    parser = analysis.parser(tools=WEATHER_TOOLS)
    output = analyses.render_output(analysis, None, "Sure.", [("get_weather", {"location": "Paris"})], stop=False)
    text = output + "[" * 3000
    whole = without_generated_ids(parser.parse(text))
    assert [c["function"]["name"] for c in whole["tool_calls"]] == ["get_weather"]
    assert whole["content"] == "Sure." + "[" * 3000
    for size in (1, 16):
        assert without_generated_ids(streamed(parser, text, size)[0]) == whole, size


def test_a_bracket_run_after_a_bare_array_of_calls_searches_each_piece_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """At each bracket of the run the answer's text ends in one reading and reads on in another:
    the one that reads on searches for its stops again. What earlier searches found is kept
    (`_Text.found`, `clear`), so the text is searched about once a piece of the whole parse, not
    once a bracket to the piece's end (5,000 brackets: 5,000 searches of up to 512 characters)."""
    analysis = analyses.bare_json_array()
    parser = analysis.parser(tools=WEATHER_TOOLS)
    output = analyses.render_output(analysis, None, "Sure.", [("get_weather", {"location": "Paris"})], stop=False)
    searches = []
    find_from = MarkerSet.find_from
    monkeypatch.setattr(MarkerSet, "find_from", lambda *args: searches.append(args[2]) or find_from(*args))
    text = output + "[" * 5000
    assert without_generated_ids(parser.parse(text))["content"] == "Sure." + "[" * 5000
    assert len(searches) < 100, len(searches)


_PIECES = ["[", "[", "[", "{", '"name"', '"arguments"', '"parameters"', ": ", ", ", " ", "\n", "x", "]", "}",
           '"get_weather"', '{"location": "Paris"}', "<|im_end|>", "<|im_", "<tool_call>", "</tool_call>"]


@pytest.mark.parametrize("family", ["bare_json_array", "llama31", "mistral_array", "hermes"])
def test_a_texts_remembered_searches_find_what_searching_anew_finds(family: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A text keeps what its searches for its stops found (`_Text._find`, `_safe_end`), by absolute
    position, across a growing, trimmed and restored buffer: every message, whole and streamed,
    is the one searching anew at each step gives."""
    analysis = getattr(analyses, family)()
    parser = analysis.parser(tools=WEATHER_TOOLS)
    call = analyses.render_output(analysis, None, "", [("get_weather", {"location": "Paris"})], stop=False)
    rng = random.Random(25)
    texts = ["".join(rng.choice(_PIECES + [call]) for _ in range(rng.randint(1, 60))) for _ in range(40)]
    texts += [call + "".join(rng.choice(_PIECES) for _ in range(2500)) for _ in range(2)]

    def messages() -> list[object]:
        found: list[object] = []
        for number, text in enumerate(texts):
            found.append(without_generated_ids(parser.parse(text)))
            for size in (1, 7, 16) if len(text) < 1000 else (16,):
                if size == 1 and number % 4:
                    continue
                stream = parser.stream()  # what each chunk lets out, too: the hold-back is the same
                found.append([_without_ids(stream.feed(text[at:at + size])) for at in range(0, len(text), size)])
                stream.finish()
                found.append(without_generated_ids(stream.message()))
        return found

    remembered = messages()
    monkeypatch.setattr(_Text, "_find", lambda self, buf, pos, offset, final: self.markers.find(buf, pos, final=final))
    monkeypatch.setattr(_Text, "_safe_end", lambda self, buf, pos, offset: self.markers.safe_end(buf, pos))
    assert messages() == remembered


def _without_ids(value: object) -> object:
    if isinstance(value, dict):
        return {key: _without_ids(item) for key, item in value.items() if key != "id"}
    return [_without_ids(item) for item in value] if isinstance(value, list) else value


DSML_END = "<｜end▁of▁sentence｜>"


@pytest.mark.parametrize("family", ["deepseek_v32", "deepseek_v4"])
@pytest.mark.parametrize("after", ['">', '">\n</｜DSML｜invoke>', '">\n</｜DSML｜invoke>\n</｜DSML｜{section}>'])
def test_an_end_of_turn_that_a_call_never_begun_well_read_as_its_own_is_no_text(family: str, after: str) -> None:
    """DeepSeek V3.2 / V4 DSML: a call's header, `">` written twice, then the end of turn. The
    reading of that call read on to the end of the output (the end of turn as its arguments'
    text) and its call is text: what recovery gives back as content holds no end-of-turn
    marker, as the language's own content does not (found by the fuzzer, seed 21)."""
    analysis = analyses.FAMILIES[family]()
    parser = analysis.parser(tools=WEATHER_TOOLS, thinking=False)
    section = analysis.tools.section_start.strip()
    head = f'{section}\n<｜DSML｜invoke name="get_weather">'
    text = head + after.format(section=section[len("<｜DSML｜"):]) + DSML_END
    whole = _agrees_whole_and_streamed(parser, text)
    assert whole["content"] == text[:-len(DSML_END)]
    assert whole["tool_calls"] == []
    assert not losses_at_every_cut(text, parser.parse, marker_patterns(analysis))


def test_the_rest_given_back_where_no_reading_is_left_holds_no_end_of_turn_marker() -> None:
    """Where no reading is left and none failed to recover from, the rest of the output is
    content (`_Recovery._content_rest`). The fuzzer met it only at the end of an output, with a
    marker cut off as that rest (DeepSeek V4, `</｜DSML｜p`): that text is kept, streamed or whole.
    The end-of-turn markers are no text there either, as in the language's own content, and
    one that may still come is held until it is whole or is not one (the stream is put in that
    state here: no output found reaches it before its end)."""
    analysis = analyses.deepseek_v4()
    parser = analysis.parser(tools=WEATHER_TOOLS, thinking=True)
    text = ('</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n'
            '<｜DSML｜parameter name="days" string="false">3</｜DSML｜p')
    whole = _agrees_whole_and_streamed(parser, text)
    assert whole["content"] == "</｜DSML｜p"
    assert [(c["function"]["arguments"], c.get("incomplete")) for c in whole["tool_calls"]] == [('{"days": 3}', True)]
    hermes = analyses.hermes().parser()
    for pieces, shown in (
            (["a<|im_e", "nd|>b", "<|im_"], ["a", "b", "", "<|im_"]),  # held while it may be one
            (["a<|im_end|>b<|im_", "x"], ["ab", "<|im_x", ""]),
            (["a<|im_e<|im_end|>nd|>b"], ["a<|im_end|>b", ""])):  # the text around one is text
        stream = hermes.stream()
        stream.fallback = True
        assert ["".join(d.get("content", "") for d in stream.feed(piece)) for piece in pieces] + \
            ["".join(d.get("content", "") for d in stream.finish())] == shown, pieces


@pytest.mark.parametrize("tail", ["</inv>", "</inv>oke>\n</tool_calls><|end|>", "</invoke", "<city>Paris</city>\n</inv>"])
def test_a_call_a_failed_reading_kept_as_text_is_not_let_out_by_a_reading_that_closed_it(tail: str) -> None:
    """Tagged `<invoke name="f">` calls, then a broken end marker. One reading opened an argument
    at `<` and failed at once (its call not begun well: recovery from it makes the call text);
    another closed the call's empty arguments and waits for `</invoke>`. Read whole, both fail
    in one pass and recovery goes on from the first; where a chunk ended inside `</inv`, the
    second was the only one left and its call, shared with the first's events, went out before
    it failed (found by the fuzzer, seed 21). Events shared with a failed reading are let out
    only up to its call's start where that call is not yet known to be one."""
    analysis = analyses.keyed_tags()
    parser = analysis.parser(tools=WEATHER_TOOLS, thinking=True)
    text = 'x<tool_calls>\n<invoke name="get_weather">\n' + tail
    whole = _agrees_whole_and_streamed(parser, text)
    for size in (2, 4, 7):
        assert without_generated_ids(streamed(parser, text, size)[0]) == whole, size


def _cogito_parser() -> Parser:
    """The parser of cogito's template from the shared corpus (calls as a bare JSON array, each
    with an id after its arguments)."""
    import corpora

    path = next((p for p in corpora.shared_templates() if p.name == "hfjs-ollama-automap__cogito-3b.jinja"), None)
    if path is None:
        pytest.skip("cogito's template is not in the shared corpus")
    return autoparser.load(str(path)).parser(tools=WEATHER_TOOLS)


def test_repeated_bare_array_calls_read_whole_keep_the_readings_few(monkeypatch: pytest.MonkeyPatch) -> None:
    """Calls written as a bare JSON array, one after another: in a piece of the whole parse, a
    reading reads the rest as text after each call, where another reads on a call. Those are let
    go as soon as another reading reads the call whole (`_calls_over_text`, compared past the
    events all readings share, as a stream compares them past those that went out), so the
    readings stay few and the steps grow with the text, not with its square (they grew by four
    readings a piece: 64 readings and 19 times the steps for four times the text)."""
    parser = _cogito_parser()
    call = '[{"name": "get_weather", "arguments": {"location": "Paris, France", "days": 3}, "id": "call1abcd"}]\n'
    counts = {"steps": 0, "most": 0}
    run, run_all = stepping._Stepping._run, passes._Passes._run_all

    def counted_run(self, t, final):  # type: ignore[no-untyped-def]
        counts["steps"] += 1
        return run(self, t, final)

    def counted_run_all(self, final):  # type: ignore[no-untyped-def]
        alive = run_all(self, final)
        counts["most"] = max(counts["most"], len(alive))
        return alive

    monkeypatch.setattr(stepping._Stepping, "_run", counted_run)
    monkeypatch.setattr(passes._Passes, "_run_all", counted_run_all)
    steps = []
    for n in (20, 80):
        counts["steps"] = 0
        whole = without_generated_ids(parser.parse(call * n))
        assert [c["function"]["name"] for c in whole["tool_calls"]] == ["get_weather"] * n
        steps.append(counts["steps"])
    assert counts["most"] <= 20, counts["most"]
    assert steps[1] < 5 * steps[0], steps
    text = call * 8
    assert without_generated_ids(streamed(parser, text, 16)[0]) == without_generated_ids(parser.parse(text))


@pytest.mark.parametrize("units", [1, 300])
@pytest.mark.parametrize("cut_after", ['"days": 3},', '"id": "', '"id":'])
def test_a_bare_array_call_cut_in_its_id_member_then_whitespace_streams_as_read_whole(cut_after: str, units: int) -> None:
    """cogito-3b writes a bare array of calls, each with its id after its arguments; an output cut
    off after the arguments, in the id member, then whitespace. The call keeps its complete values,
    marked incomplete, and what was written of the member is content (policy rule `cut-off-calls`).
    A whole pass read the call and its failure in one piece while the reading of all of it as text
    went on, and let that one win once the whitespace passed the hold-back bound; a stream whose
    chunk ended after the call drops such a text reading (`_calls_over_text`). Whole, one character
    at a time, in chunks and split in two at every place alike."""
    path = next(p for p in corpora.shared_templates() if p.name == "hfjs-ollama-automap__cogito-3b.jinja")
    analysis = autoparser.load(str(path))
    output = run_case(analysis, "one_call", probe_messages()["one_call"]).output
    cut = output.index(cut_after) + len(cut_after)
    text = output[:cut] + " \n" * units
    parser = analysis.parser()
    whole = _agrees_whole_and_streamed(parser, text)
    [call] = whole["tool_calls"]
    assert call["function"]["name"] == "get_weather" and call.get("incomplete"), whole
    assert json.loads(call["function"]["arguments"]) == {"location": "Paris, France", "days": 3}
    assert whole["content"] == output[output.index("}, ") + 1:cut], whole
    for size in (16, 100, len(text)):
        assert without_generated_ids(streamed(parser, text, size)[0]) == whole, size


_VALUE_OPEN = HEADER + '{"location": "'  # a call cut where its first value's string opens


@pytest.mark.parametrize("text", [
    _VALUE_OPEN + HEADER + '{"',  # split in two at 54-58 (inside the later opener) once read it all as content
    # 1 call whole, 2 in 1- or 16-character chunks, once: which of two readings of a call broken
    # after recovery (one that read its section's opener, one that went on inside the section)
    # recovery kept depended on which failed first
    (_VALUE_OPEN * 5)[:4 * len(_VALUE_OPEN) + len('{"name"')],
], ids=["split-in-two", "small-chunks"])
def test_a_bare_call_broken_in_its_value_before_a_later_call_streams_as_read_whole(text: str) -> None:
    parser = Parser(analyses.llama31(), tools=WEATHER_TOOLS)
    whole = _agrees_whole_and_streamed(parser, text)
    for size in (16, 128):
        message, _ = streamed(parser, text, size)
        assert without_generated_ids(message) == whole, size


@pytest.mark.parametrize("length", [700, 4200])
def test_bare_calls_each_broken_in_their_value_by_the_next_read_alike_however_they_stream(length: int) -> None:
    """A bare JSON call's header up to its first value's opening quote, again and again (the
    benchmark's "repeated call to value"): each call breaks in its value where the next begins
    (`"{"` closes the string), a later call within the hold-back bound. Every call is recovered,
    incomplete, whole and in chunks of any size alike; past the text a stream sets aside
    (`interpret.LanguageStream._trim`) too, where the reading of the calls as text began right
    where the broken call's section did (once 78 calls whole and 80 in 640-character chunks at
    4,200 characters)."""
    parser = Parser(analyses.llama31(), tools=WEATHER_TOOLS)
    text = (_VALUE_OPEN * (length // len(_VALUE_OPEN) + 1))[:length]
    whole = without_generated_ids(parser.parse(text))
    assert len(whole["tool_calls"]) == length // len(_VALUE_OPEN)
    assert all(call.get("incomplete") for call in whole["tool_calls"])
    for size in (1, 16, 61, 640):
        message, _ = streamed(parser, text, size)
        assert without_generated_ids(message) == whole, size
    assert without_generated_ids(analyses.streamed_in_random_chunks(parser, text, 0, 40)) == whole
