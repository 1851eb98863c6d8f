"""Model output nested thousands of levels deep never raises (no `RecursionError` in any parse
path: whole, streamed, the Lark reader, the standalone module) and loses nothing: every bracket
the model wrote comes back, in a call's arguments or as content, and the stream gives the whole
parse's message. Complete nesting is read as a call; nesting cut off by the end of the output is
a call marked incomplete, its arguments closed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import analyses
import pytest
from analyses import without_generated_ids

from autoparser.generators.lark import parse_with_lark
from autoparser.generators.module import generate_module
from autoparser.language.reading import Parser

FAMILIES = ["deepseek_r1", "deepseek_r1_0528", "deepseek_v31", "deepseek_v3_0324", "hermes", "qwen3", "llama31",
            "mistral_array", "mistral_compact", "bare_json_array", "kimi_k2", "gpt_oss", "deepseek_v32",
            "qwen3_coder", "glm45", "keyed_tags", "lfm2_python", "llama32_pythonic", "minicpm3_kwargs"]
SHAPES = {"arrays": ("[", "]"), "objects": ('{"a": ', "}"), "objects in arrays": ('[{"a": ', "}]")}


def nested_output(family: str, shape: str, depth: int, complete: bool) -> str:
    """A call whose `options` argument is nested `depth` levels deep, cut off inside the deepest
    level unless `complete`."""
    analysis = getattr(analyses, family)()
    opener, closer = SHAPES[shape]
    text = analyses.render_output(analysis, None, "", [("get_weather", {"options": [7777]})], stop=False)
    at = text.index("[7777]")
    if complete:
        return text[:at] + opener * depth + "1" + closer * depth + text[at + len("[7777]"):]
    return text[:at] + opener * depth


def streamed(parser: Parser, text: str, size: int) -> dict:
    stream = parser.stream()
    for start in range(0, len(text), size):
        stream.feed(text[start:start + size])
    stream.finish()
    return stream.message()


def produced(message: dict) -> str:
    return "".join([message["reasoning_content"] or "", message["content"] or ""]
                   + [call["function"]["arguments"] for call in message["tool_calls"]])


def check(family: str, text: str, complete: bool) -> None:
    parser = Parser(getattr(analyses, family)())
    whole = parser.parse(text)
    assert without_generated_ids(streamed(parser, text, 7)) == without_generated_ids(whole)
    # what the model nested (never a call's own structure); a value too deep to convert stays its
    # text in a JSON string; a cut call may leave out the member it was writing (`{"a": ` at the end)
    kept = produced(whole).replace('\\"', '"')
    for written in ("[[", '{"a"'):
        assert kept.count(written) >= text.count(written) - (not complete), (family, written)
    if whole["tool_calls"]:
        [call] = whole["tool_calls"]
        assert call["function"]["name"] == "get_weather"
        assert bool(call.get("incomplete")) is not complete


@pytest.mark.parametrize("complete", [True, False], ids=["complete", "cut"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("family", FAMILIES)
def test_a_thousand_levels(family: str, shape: str, complete: bool) -> None:
    check(family, nested_output(family, shape, 1000, complete), complete)


@pytest.mark.parametrize("complete", [True, False], ids=["complete", "cut"])
@pytest.mark.parametrize("family", ["deepseek_r1", "deepseek_v31", "hermes", "llama31", "qwen3_coder",
                                    "lfm2_python", "llama32_pythonic"])
def test_ten_thousand_levels(family: str, complete: bool) -> None:
    check(family, nested_output(family, "objects in arrays", 10_000, complete), complete)


@pytest.mark.parametrize("complete", [True, False], ids=["complete", "cut"])
@pytest.mark.parametrize("family", ["hermes", "deepseek_r1", "glm45"])
def test_the_lark_reader_reads_deep_nesting_or_says_it_is_not_in_the_language(family: str, complete: bool) -> None:
    from lark.exceptions import UnexpectedInput

    text = nested_output(family, "arrays", 2000, complete)
    try:
        message = parse_with_lark(getattr(analyses, family)(), text)
    except UnexpectedInput:
        assert not complete  # a cut call is outside the language; the reader says so and nothing else
        return
    assert complete
    [call] = message["tool_calls"]
    assert call["function"]["arguments"].count("[") == 2000


DRIVER = r"""
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("generated_parser", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
text = sys.stdin.read()
whole = module.parse(text)
stream = module.stream()
for start in range(0, len(text), 16):
    stream.feed(text[start:start + 16])
stream.finish()
print(json.dumps([len(whole["tool_calls"]), whole["content"] == stream.message()["content"],
                  whole["tool_calls"][0]["function"]["arguments"] == stream.message()["tool_calls"][0]["function"]["arguments"]]))
"""


@pytest.mark.parametrize("complete", [True, False], ids=["complete", "cut"])
def test_the_standalone_module_reads_deep_nesting(complete: bool, tmp_path: Path) -> None:
    module_path = tmp_path / "deep_parser.py"
    module_path.write_text(generate_module(analyses.deepseek_r1()), encoding="utf-8")
    text = nested_output("deepseek_r1", "objects in arrays", 5000, complete)
    completed = subprocess.run([sys.executable, "-I", "-S", "-c", DRIVER, str(module_path)], input=text,
                               capture_output=True, text=True, encoding="utf-8", timeout=300, cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert json.loads(completed.stdout) == [1, True, True]
