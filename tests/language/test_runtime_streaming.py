"""Streaming behaviour of the runtime: delta shapes, what is held back, when names and ids appear."""

from __future__ import annotations

import json
import re

import analyses
import pytest
from analyses import DS_CALL, DS_EOS, DS_SECTION, DS_SEP, WEATHER_TOOLS, without_generated_ids

from autoparser.language.reading import Parser

V31_CALL = (DS_SECTION[0] + DS_CALL[0] + "get_weather" + DS_SEP + '{"city": "Paris", "note": "' + "x" * 40
            + '"}' + DS_CALL[1] + DS_SECTION[1] + DS_EOS)


def feed_chars(stream, text: str) -> list[list[dict]]:
    return [stream.feed(char) for char in text] + [stream.finish()]


def test_delta_shapes_follow_the_openai_chunk_format() -> None:
    parser = Parser(analyses.deepseek_v31(), thinking=True)
    stream = parser.stream()
    text = "Plan.</think>Intro. " + V31_CALL
    deltas = [d for batch in feed_chars(stream, text) for d in batch]
    kinds = [next(iter(d)) for d in deltas]
    assert kinds[0] == "reasoning_content" and "content" in kinds and kinds[-1] == "tool_calls"
    header = next(d for d in deltas if "tool_calls" in d)["tool_calls"][0]
    assert header == {"index": 0, "id": header["id"], "type": "function",
                      "function": {"name": "get_weather", "arguments": ""}}
    fragments = [d["tool_calls"][0] for d in deltas if "tool_calls" in d][1:]
    assert all(set(f) == {"index", "function"} and set(f["function"]) == {"arguments"} for f in fragments)
    assert "".join(f["function"]["arguments"] for f in fragments) == stream.message()["tool_calls"][0][
        "function"]["arguments"]


def test_name_is_emitted_once_before_the_arguments_end() -> None:
    stream = Parser(analyses.deepseek_v31()).stream()
    batches = feed_chars(stream, V31_CALL)
    headers = [i for i, batch in enumerate(batches) for d in batch if "id" in d.get("tool_calls", [{}])[0]]
    assert len(headers) == 1
    argument_batches = [i for i, batch in enumerate(batches)
                        for d in batch if d.get("tool_calls") and "id" not in d["tool_calls"][0]]
    # arguments stream in many pieces, starting right after the name
    assert len(argument_batches) > 30
    assert argument_batches[0] <= headers[0] + 2


def test_markers_and_their_prefixes_are_never_emitted() -> None:
    stream = Parser(analyses.deepseek_v31()).stream()
    content = []
    for char in "Hello <｜tool" + "▁calls▁begin｜>":
        content += [d["content"] for d in stream.feed(char) if "content" in d]
    assert "".join(content) == "Hello"
    assert stream.feed(DS_CALL[0] + "get_weath") == []  # inside the tool section now


def test_text_that_only_looks_like_a_marker_is_released() -> None:
    stream = Parser(analyses.hermes()).stream()
    out = stream.feed("a <tool") + stream.feed("box> b")
    assert "".join(d["content"] for d in out) == "a <toolbox> b"


def test_trailing_whitespace_waits_for_more_text() -> None:
    stream = Parser(analyses.hermes()).stream()
    assert stream.feed("Hello  ") == [{"content": "Hello"}]
    assert stream.feed("\n") == []
    assert stream.feed("world") == [{"content": "  \nworld"}]
    assert stream.feed('\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>\n')[0]["tool_calls"]
    assert stream.finish() == []
    assert stream.message()["content"] == "Hello  \nworld"


def test_stream_message_carries_the_ids_its_deltas_carried() -> None:
    parser = Parser(analyses.hermes())
    text = '<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call><tool_call>\n{"name": "b", "arguments": {}}' \
           '\n</tool_call>'
    stream = parser.stream()
    deltas = [d for batch in feed_chars(stream, text) for d in batch]
    whole = parser.parse(text)
    assert without_generated_ids(stream.message()) == without_generated_ids(whole)
    streamed_ids = [d["tool_calls"][0]["id"] for d in deltas if "id" in d.get("tool_calls", [{}])[0]]
    assert [c["id"] for c in stream.message()["tool_calls"]] == streamed_ids
    assert all(re.fullmatch(r"call_[0-9a-f]{24}", i) for i in streamed_ids)


def test_call_ids_never_repeat_across_calls_parses_and_parsers() -> None:
    text = "".join(f'<tool_call>\n{{"name": "f{i}", "arguments": {{}}}}\n</tool_call>' for i in range(5))
    seen: list[str] = []
    for _ in range(3):
        parser = Parser(analyses.hermes())
        for _ in range(3):
            seen += [c["id"] for c in parser.parse(text)["tool_calls"]]
            stream = parser.stream()
            feed_chars(stream, text)
            seen += [c["id"] for c in stream.message()["tool_calls"]]
    assert len(seen) == 3 * 3 * 2 * 5 and len(set(seen)) == len(seen)


def test_an_id_the_format_writes_is_passed_through() -> None:
    kimi = analyses.kimi_k2()
    text = analyses.render_output(kimi, None, "", [("get_weather", {"city": "Paris"})])
    message = analyses.parse(kimi, text, tools=WEATHER_TOOLS)
    assert message["tool_calls"][0]["id"] == "functions.get_weather:0"


def test_tagged_string_values_stream_character_by_character() -> None:
    parser = Parser(analyses.qwen3_coder(), tools=WEATHER_TOOLS)
    stream = parser.stream()
    stream.feed("<tool_call>\n<function=get_weather>\n<parameter=city>\nLos An")
    pieces = stream.feed("ge")
    assert pieces == [{"tool_calls": [{"index": 0, "function": {"arguments": "ge"}}]}]
    stream.feed("les\n</parameter>\n</function>\n</tool_call>")
    stream.finish()
    assert json.loads(stream.message()["tool_calls"][0]["function"]["arguments"]) == {"city": "Los Angeles"}


def test_non_string_tagged_values_wait_for_their_end() -> None:
    stream = Parser(analyses.qwen3_coder(), tools=WEATHER_TOOLS).stream()
    stream.feed("<tool_call>\n<function=get_weather>\n<parameter=days>\n1")
    assert stream.feed("2") == []
    out = stream.feed("\n</parameter>\n")
    # the key goes out with its value, so a value never written is never invented
    assert "".join(d["tool_calls"][0]["function"]["arguments"] for d in out) == '{"days": 12'



def test_reasoning_with_tool_markup_is_held_until_decided() -> None:
    """Inside reasoning, tool markup waits: `</think>` later keeps it reasoning; none re-parses it."""
    parser = Parser(analyses.deepseek_v31(), thinking=True)
    stream = parser.stream()
    assert stream.feed("Think " + DS_SECTION[0] + "inner") == [{"reasoning_content": "Think"}]
    assert stream.feed("</think>") == [{"reasoning_content": " " + DS_SECTION[0] + "inner"}]


def test_feed_after_finish_is_an_error() -> None:
    stream = Parser(analyses.hermes()).stream()
    stream.finish()
    try:
        stream.feed("x")
    except RuntimeError:
        return
    raise AssertionError("feed() after finish() must raise")


def test_empty_output() -> None:
    assert Parser(analyses.deepseek_r1()).parse("") == {"role": "assistant", "reasoning_content": None,
                                                      "content": None, "tool_calls": []}


def test_a_chunk_with_a_raw_control_character_inside_a_string_is_fast() -> None:
    """The in-string fast path tests whole chunks; one that fails late must not backtrack
    exponentially (it once took seconds for a 40-character chunk)."""
    import time

    stream = Parser(analyses.hermes()).stream()
    stream.feed('<tool_call>\n{"name": "get_weather", "arguments": {"city": "')
    started = time.perf_counter()
    stream.feed("naïve ☃ " * 8 + "\nline")
    stream.finish()
    assert time.perf_counter() - started < 0.5
    assert json.loads(stream.message()["tool_calls"][0]["function"]["arguments"])["city"].endswith("\nline")


def test_whole_string_text_is_told_apart_and_only_short_chunks_are_remembered() -> None:
    """The hot path's test of a chunk: whole string text (no quote, control character or
    escape left open) goes straight out; a chunk that is, is remembered while it is short, and
    the memory stays bounded."""
    from autoparser.language import jsonscan

    for text in ("abcd", 'a\\"b', "\\\\", "\\n\\t\\/", "\\u00e9", "\x7f", "é😀"):
        assert jsonscan.is_string_text(text), text
    for text in ("", 'a"', "a\\", "\\x", "\\u00", "a\nb", "\x01", '\\\\"'):
        assert not jsonscan.is_string_text(text), text
        assert text not in jsonscan.string_texts
    long = "x" * 100
    assert jsonscan.is_string_text(long) and long not in jsonscan.string_texts
    # a backslash that ends a chunk and begins an escape: the text before it goes out, the rest waits
    for text, before in (("ab\\", "ab"), ("\\", ""), ('a\\"\\\\\\', 'a\\"\\\\'), ("\\n\\", "\\n")):
        assert jsonscan.text_before_cut(text) == before, text
        assert jsonscan.cut_texts[text] == before
    for text in ("ab", "a\\\\", 'a"\\', "\\x\\", "\\u00\\"):
        assert jsonscan.text_before_cut(text) is None, text
        assert text not in jsonscan.cut_texts
    for number in range(jsonscan._REMEMBERED_COUNT + 10):
        jsonscan.is_string_text(f"t{number}")
        jsonscan.text_before_cut(f"t{number}\\")
    assert len(jsonscan.string_texts) <= jsonscan._REMEMBERED_COUNT
    assert len(jsonscan.cut_texts) <= jsonscan._REMEMBERED_COUNT


def test_escapes_cut_anywhere_in_a_streamed_string_arrive_whole() -> None:
    """Inside a JSON string the stream passes chunks straight out; an escape a chunk cuts in
    two, a quote, a control or unprintable character, a bad escape and the string's end must
    give what the whole parse gives, and no delta may end inside an escape."""
    parser = Parser(analyses.deepseek_v31())
    value = 'a\\"b\\\\c\\nd\\u00e9e\\/f\\\\\\"g\x7fh\x01i😀j\\xk\\\\'
    text = (DS_SECTION[0] + DS_CALL[0] + "get_weather" + DS_SEP + '{"city": "' + value * 3 + '"}'
            + DS_CALL[1] + DS_SECTION[1] + DS_EOS)
    whole = without_generated_ids(parser.parse(text))
    for size in range(1, 8):
        stream = parser.stream()
        pieces = []
        for at in range(0, len(text), size):
            for delta in stream.feed(text[at:at + size]):
                pieces += [c["function"].get("arguments", "") for c in delta.get("tool_calls", [])]
            sent = "".join(pieces)
            assert (len(sent) - len(sent.rstrip("\\"))) % 2 == 0, sent  # no escape cut in two goes out
        stream.finish()
        assert without_generated_ids(stream.message()) == whole, size
        assert "".join(pieces) == whole["tool_calls"][0]["function"]["arguments"]



PROSE = "the quick fox <jumps> over {braces} and [brackets],\n  a < b > c; "


def _deltas_by_chunk(reader, text: str, size: int) -> list[str]:
    stream = reader.stream(call_id=lambda: "call_fixed")
    deltas = [json.dumps(stream.feed(text[at:at + size])) for at in range(0, len(text), size)]
    return [*deltas, json.dumps(stream.finish()), json.dumps(stream.message())]


@pytest.mark.parametrize(("analysis", "thinking", "end"), [
    (analyses.deepseek_v31(), True, "</think>"), (analyses.qwen3_thinking(), True, "</think>"),
    (analyses.deepseek_r1(), None, "</think>"), (analyses.hermes(), None, "")])
def test_free_text_that_every_reading_reads_alike_takes_no_pass_over_the_readings(
        monkeypatch, analysis, thinking, end) -> None:
    """Prose read as reasoning, where readings differ only in what may follow it, is read once
    for all of them between markers: most chunks take no pass over the readings, and the deltas
    are those of a pass for every chunk."""
    from autoparser.language.interpret import LanguageStream

    reader = Parser(analysis, tools=WEATHER_TOOLS, thinking=thinking)._reader
    text = PROSE * 40 + end + PROSE * 10 + "<tool"
    with_path = {size: _deltas_by_chunk(reader, text, size) for size in (1, 4, 9)}
    passes = []
    advance = LanguageStream._advance
    monkeypatch.setattr(LanguageStream, "_advance", lambda self, final: passes.append(final) or advance(self, final))
    _deltas_by_chunk(reader, PROSE * 40, 4)
    assert len(passes) < len(PROSE) * 40 / 4 / 3, "most chunks of prose take no pass"
    monkeypatch.setattr(LanguageStream, "_plain_end", lambda self: None)
    for size, deltas in with_path.items():
        assert _deltas_by_chunk(reader, text, size) == deltas


def test_free_text_whose_marker_is_weak_is_read_once_where_a_chunk_cannot_begin_it(monkeypatch) -> None:
    """A bare JSON call's `{` opens a call only before `"`: what follows it decides, so a chunk
    holding it takes a pass, and one without it (nor a marker's first character) is read once, as
    plain text. Prose with braces that open no call, and a call after it, stream as a pass for every
    chunk has them stream."""
    from autoparser.language.interpret import LanguageStream

    reader = Parser(analyses.llama31(), tools=WEATHER_TOOLS)._reader
    call = '{"name": "get_weather", "parameters": {"city": "Paris"}}'
    text = PROSE * 30 + 'a {"not": "a call"} {\n "x" } then {' + PROSE * 10 + call
    with_path = {size: _deltas_by_chunk(reader, text, size) for size in (1, 2, 4, 9)}
    passes = []
    advance = LanguageStream._advance
    monkeypatch.setattr(LanguageStream, "_advance", lambda self, final: passes.append(final) or advance(self, final))
    _deltas_by_chunk(reader, PROSE * 40, 4)
    assert len(passes) < len(PROSE) * 40 / 4 / 3, "most chunks of prose take no pass"
    monkeypatch.setattr(LanguageStream, "_plain_end", lambda self: None)
    for size, deltas in with_path.items():
        assert _deltas_by_chunk(reader, text, size) == deltas
    assert '"get_weather"' in with_path[4][-1]


def test_free_text_where_a_bare_call_may_begin_at_a_bracket_is_read_once_between_brackets(monkeypatch) -> None:
    """Reasoning that a bare bracketed call may end: a chunk holding a bracket takes a pass (the
    text may end there), one without is read once for all readings, as plain text."""
    from test_analyze_fixtures import analyze_fixture

    from autoparser.language.interpret import LanguageStream

    analysis = analyze_fixture("nested_brackets.jinja")
    reader = Parser(analysis, tools=WEATHER_TOOLS, thinking=True)._reader
    unbracketed = PROSE.replace("[", "(").replace("]", ")")
    text = (analysis.reasoning.start + unbracketed * 40 + PROSE * 5 + analysis.reasoning.end + PROSE * 5
            + analysis.stop[0])
    with_path = {size: _deltas_by_chunk(reader, text, size) for size in (1, 4, 9)}
    barred = []
    read_plain = LanguageStream._read_plain
    monkeypatch.setattr(LanguageStream, "_read_plain",
                        lambda self, chunk: barred.append(self.plain[2] is not None) or read_plain(self, chunk))
    assert _deltas_by_chunk(reader, text, 4) == with_path[4]
    assert sum(barred) > len(PROSE) * 40 / 4 / 2, "most chunks without a bracket are read once"
    monkeypatch.setattr(LanguageStream, "_plain_end", lambda self: None)
    for size, deltas in with_path.items():
        assert _deltas_by_chunk(reader, text, size) == deltas
