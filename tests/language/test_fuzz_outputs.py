"""`tools/fuzz_outputs.py`: a short fixed-seed run finds nothing, its checks do see a stream
that differs from the whole parse and text that is lost, and a seed and a count repeat a run."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import analyses
import pytest
from corpora import tool_module

fuzz = tool_module("fuzz_outputs")


def test_a_short_run_over_a_few_families_finds_nothing(tmp_path: Path) -> None:
    out = tmp_path / "findings.json"
    status = fuzz.main(["--seed", "7", "--seconds", "4", "--families", "hermes,qwen3_coder,llama32_pythonic,glm45",
                        "--out", str(out)])
    assert json.loads(out.read_text(encoding="utf-8")) == []
    assert status == 0


class _DroppingStream:
    """A stream that drops the last chunk it is fed."""

    def __init__(self, stream) -> None:
        self.stream, self.last = stream, ""

    def feed(self, text: str) -> list:
        deltas = self.stream.feed(self.last)
        self.last = text
        return deltas

    def finish(self) -> list:
        return self.stream.finish()

    def message(self) -> dict:
        return self.stream.message()


class _DroppingParser:
    """Parses whole as the real parser does, loses the end when streamed and whole past a cut."""

    def __init__(self, parser) -> None:
        self.parser = parser

    def parse(self, text: str) -> dict:
        return self.parser.parse(text[:len(text) // 2])

    def stream(self) -> _DroppingStream:
        return _DroppingStream(self.parser.stream())


def _hermes_check(parser) -> tuple[fuzz.Check, list[tuple[str, str]]]:
    """The fuzzer's checks on Hermes' analysis run on `parser`, and the findings they report."""
    analysis = analyses.hermes()
    found: list[tuple[str, str]] = []
    check = fuzz.Check(fuzz.Target("hermes", analysis), parser, fuzz.marker_patterns(analysis),
                       lambda kind, detail: found.append((kind, detail)), 1.0, 0.05)
    return check, found


def test_the_checks_report_a_stream_that_differs_and_lost_text() -> None:
    analysis = analyses.hermes()
    check, found = _hermes_check(_DroppingParser(analysis.parser(tools=fuzz.TOOLS)))
    check.run("The weather in Paris is mild today, and tomorrow too.", random.Random(0))
    assert [kind for kind, _ in found] == ["stream-differs"]
    check.stream_agrees = lambda *args: True
    check.run("The weather in Paris is mild today, and tomorrow too.", random.Random(0))
    assert found[-1][0] == "lost"


class _TurnEndParser:
    """Parses as the real parser does, its content ending with the end-of-turn marker."""

    def __init__(self, parser) -> None:
        self.parser = parser

    def parse(self, text: str) -> dict:
        message = self.parser.parse(text)
        return dict(message, content=(message["content"] or "") + "<|im_end|>")


def test_the_checks_report_an_end_of_turn_marker_in_the_content() -> None:
    analysis = analyses.hermes()
    check, found = _hermes_check(_TurnEndParser(analysis.parser(tools=fuzz.TOOLS)))
    check.stream_agrees = lambda *args: True
    check.run("Hi.<|im_end|>", random.Random(0))
    assert [kind for kind, _ in found] == ["end-of-turn-text"]
    assert fuzz.end_of_turn_in_text(analysis, "<|im_e<|im_end|>nd|>", {"content": "<|im_end|>"}) is None


@pytest.mark.parametrize(("family", "output", "content"), [
    ("llama31", "<|eo<|eom_id|>t_id|>", "<|eot_id|>"),  # another end-of-turn marker left out makes it up
    ("kimi_k15", "<|im_e◁/think▷nd|>", "<|im_end|>"),  # the reasoning's end marker, markup, left out
])
def test_an_end_of_turn_marker_that_the_markers_left_out_make_up_is_no_finding(
        family: str, output: str, content: str) -> None:
    """The text around a marker the language reads as markup is text, joined: where it spells an
    end-of-turn marker, the output wrote it so (found by the fuzzer at seeds 1 and 7)."""
    analysis = analyses.FAMILIES[family]()
    message = analysis.parser(thinking=True).parse(output)
    assert message["content"] == content
    assert fuzz.end_of_turn_in_text(analysis, output, message) is None
    # the marker written whole, returned as text, is one
    assert fuzz.end_of_turn_in_text(analysis, content, {"content": content}) == content


def _llamacpp_template(name: str):
    from corpora import llamacpp_templates

    import autoparser
    return autoparser.load(str(next(p for p in llamacpp_templates() if p.name == name)))


@pytest.mark.parametrize("output", [
    '<|message_sep|>\n\nfunction call<|role_sep|>\n{"name": "get_weather", "',
    'Answer: 42.<|message_sep|>\n\nfunction call<|role_sep|>{"k": 1}<|message_sep|>',
])
def test_an_end_of_turn_marker_that_opens_a_failed_section_is_its_opener_text(output: str) -> None:
    """GigaChat3: the end of turn `<|message_sep|>` also begins the calls' opener
    (`<|message_sep|>\n\nfunction call<|role_sep|>`). The reader reads the opener as one marker
    and keeps a failed section's opener as text, as every format keeps one: no end of turn as
    text (found by the fuzzer on llama.cpp's templates, seed 11). The marker alone as text is."""
    analysis = _llamacpp_template("GigaChat3-10B-A1.8B.jinja")
    parser = analysis.parser(tools=fuzz.TOOLS, thinking=True)
    message = analyses.whole_checked_by_streams(parser, output)
    assert message["tool_calls"] == []
    assert "<|message_sep|>\n\nfunction call<|role_sep|>" in message["content"]
    assert fuzz.end_of_turn_in_text(analysis, output, message) is None
    assert fuzz.end_of_turn_in_text(analysis, "Hi<|message_sep|>", {"content": "Hi<|message_sep|>"}) == "<|message_sep|>"


def test_a_call_message_header_naming_the_call_again_is_no_lost_text() -> None:
    """muse-glimmer: a call's message names its tool in the header and in the body
    (`to=get_weather<|message|><atem:function_calls>\n<atem:invoke name="get_weather">`); the
    call returns the name once, and both are its syntax. A header naming no call returned is
    the content's (a tool not offered), and is lost where the content lacks it."""
    from unplaced import lost_letters

    analysis = _llamacpp_template("muse-glimmer.jinja")
    call = ('<atem:function_calls>\n<atem:invoke name="{}">\n<atem:parameter name="query">x</atem:parameter>\n'
            '</atem:invoke>\n</atem:function_calls>')
    text = " to=get_weather<|message|>" + call.format("get_weather")
    message = analysis.parser(tools=fuzz.TOOLS, thinking=True).parse(text)
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_weather"]
    assert not lost_letters(analysis, text, message)
    assert lost_letters(analysis, " to=weather_now<|message|>" + call.format("get_weather"), message)


def test_a_key_closed_with_no_value_after_it_is_no_lost_text() -> None:
    """GLM-4.5: `<arg_key>n</arg_key>` then no `<arg_value>` (a broken one): the language reads the
    key alone as a member with no value (`key_alone`), markup the call consumes, not text lost."""
    analysis = analyses.glm45()
    found: list[tuple[str, str]] = []
    check = fuzz.Check(fuzz.Target("glm45", analysis), analysis.parser(tools=fuzz.TOOLS, thinking=True),
                       fuzz.marker_patterns(analysis), lambda kind, detail: found.append((kind, detail)), 60.0, 1.0)
    check.run('<tool_call>run_code\n<arg_key>n</arg_key>\n<arg_vmalue>-12500.0</arg_value>\n</tool_call><|user|>',
              random.Random(0))
    assert found == []


def test_a_message_opener_between_messages_is_no_lost_text() -> None:
    """gpt-oss: `<|start|>assistant` written with no `<|end|>` before it re-opens a message, markup
    the reader reads between messages (`analysis.messages.opener`), as the separator is; the text
    after it with no header is content. Found by the output fuzzer (a `swap` mutation, seed 20)."""
    analysis = _llamacpp_template("openai-gpt-oss-120b.jinja")
    found: list[tuple[str, str]] = []
    check = fuzz.Check(fuzz.Target("gpt-oss", analysis), analysis.parser(tools=fuzz.TOOLS, thinking=True),
                       fuzz.marker_patterns(analysis), lambda kind, detail: found.append((kind, detail)), 60.0, 1.0)
    check.run('<|end|><|channel|>analysis<|message|><|start|>assistantAnswer: 42 — done.<|end|>', random.Random(0))
    assert found == []


def test_a_seed_and_a_count_repeat_the_same_outputs_and_findings_whatever_the_hash_seed(tmp_path: Path) -> None:
    """Two runs with one `--seed` and `--count` check the same outputs (the digest the summary
    prints) and find the same, each under another Python hash seed: the markers a mutation picks
    among are ordered by length, then by text, not by a set's order."""
    runs = []
    for hash_seed in ("1", "2"):
        out = tmp_path / f"findings-{hash_seed}.json"
        done = subprocess.run(
            [sys.executable, str(fuzz.__file__), "--seed", "3", "--count", "48", "--families", "all",
             "--slow-base", "1000", "--out", str(out)],
            env={**os.environ, "PYTHONHASHSEED": hash_seed}, capture_output=True, text=True, timeout=600)
        summary = done.stdout.strip().splitlines()[-1]
        runs.append((re.search(r"digest (\w+)", summary).group(1), out.read_text(encoding="utf-8")))
    assert runs[0] == runs[1]
