"""The grammar and the parser agree: whatever the grammar lets a model write, the parser reads back.

Random outputs are sampled from each request grammar (`gbnf_sampler`) and parsed with
`analysis.parser(...)`. Calls must come back with known names and schema-valid arguments;
reasoning and content must land where the grammar put them.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import jsonschema
import pytest
from gbnf_fixtures import ANALYSES, TOOLS
from gbnf_sampler import Gbnf

import autoparser
from autoparser.generators.gbnf import build_grammar
from autoparser.language.request import OPEN, start_state
from autoparser.llama.grammar_check import validate_gbnf

SAMPLES = 40
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
THINKING = [True, False]


def parse(analysis, text: str, thinking: bool, choice: str = "auto") -> dict:  # type: ignore[no-untyped-def]
    try:
        parser = analysis.parser(tools=TOOLS, thinking=thinking, tool_choice=choice)
    except ImportError as exc:  # the runtime is optional for this module
        pytest.skip(f"parser runtime unavailable: {exc}")
    return parser.parse(text)


def assert_valid_calls(message: dict, text: str) -> None:
    assert message["tool_calls"], f"no call parsed from {text!r}: {message}"
    for call in message["tool_calls"]:
        name = call["function"]["name"]
        assert name in SCHEMAS, (name, text)
        arguments = json.loads(call["function"]["arguments"])
        jsonschema.validate(arguments, SCHEMAS[name])


@pytest.mark.parametrize("thinking", THINKING, ids=lambda t: f"thinking-{t}")
@pytest.mark.parametrize("name", sorted(ANALYSES))
def test_required_samples_parse_to_valid_calls(name: str, thinking: bool) -> None:
    analysis = ANALYSES[name]()
    grammar = Gbnf(build_grammar(analysis, TOOLS, tool_choice="required", thinking=thinking).gbnf)
    rng = random.Random(f"{name}-{thinking}")
    for _ in range(SAMPLES):
        text = grammar.sample(rng)
        message = parse(analysis, text, thinking, "required")
        assert_valid_calls(message, text)
        assert not (message["content"] or "").strip(), (text, message)


@pytest.mark.parametrize("name", sorted(n for n in ANALYSES if not ANALYSES[n]().tools.opened_by_prompt))
def test_lazy_samples_parse_to_valid_calls(name: str) -> None:
    analysis = ANALYSES[name]()
    result = build_grammar(analysis, TOOLS, tool_choice="auto", thinking=False)
    assert result.lazy
    grammar = Gbnf(result.gbnf)
    rng = random.Random(name)
    # the text before the calls is the answer, or reasoning where the output starts inside it
    role = "reasoning_content" if start_state(analysis, False, None)[0] == OPEN else "content"
    for _ in range(SAMPLES):
        text = "Let me look.\n" + grammar.sample(rng)
        message = parse(analysis, text, False)
        assert_valid_calls(message, text)
        assert (message[role] or "").strip() == "Let me look."


@pytest.mark.parametrize("thinking", THINKING, ids=lambda t: f"thinking-{t}")
@pytest.mark.parametrize("name", sorted(ANALYSES))
def test_full_auto_samples_parse(name: str, thinking: bool) -> None:
    """The non-lazy "auto" language: content, then maybe calls; nothing is lost."""
    analysis = ANALYSES[name]()
    grammar = Gbnf(build_grammar(analysis, TOOLS, tool_choice="auto", thinking=thinking, lazy=False).gbnf)
    rng = random.Random(f"auto-{name}-{thinking}")
    for _ in range(SAMPLES):
        text = grammar.sample(rng)
        message = parse(analysis, text, thinking)
        for call in message["tool_calls"]:
            jsonschema.validate(json.loads(call["function"]["arguments"]), SCHEMAS[call["function"]["name"]])


@pytest.mark.parametrize("thinking", THINKING, ids=lambda t: f"thinking-{t}")
@pytest.mark.parametrize("name", sorted(ANALYSES))
def test_none_samples_have_no_calls(name: str, thinking: bool) -> None:
    analysis = ANALYSES[name]()
    grammar = Gbnf(build_grammar(analysis, TOOLS, tool_choice="none", thinking=thinking).gbnf)
    rng = random.Random(f"none-{name}-{thinking}")
    for _ in range(SAMPLES):
        text = grammar.sample(rng)
        message = parse(analysis, text, thinking, "none")
        assert message["tool_calls"] == [], (text, message)
        assert squeeze(message["reasoning_content"]) + squeeze(message["content"]) == squeeze(
            without_markers(analysis, text)), (text, message)


def squeeze(text: str | None) -> str:
    return "".join((text or "").split())


def without_markers(analysis, text: str) -> str:  # type: ignore[no-untyped-def]
    """The text with each structural marker of reasoning and content removed once."""
    for marker in (analysis.reasoning.start, analysis.reasoning.end, analysis.content.start, analysis.content.end):
        if marker.strip():
            text = text.replace(marker.strip(), "", 1)
    return text


NESTED_TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "required": ["city", "options", "places"], "properties": {
        "city": {"type": "string"}, "places": {"type": "array", "items": {"type": "string"}},
        "options": {"type": "object", "properties": {"units": {"type": "string"}, "hourly": {"type": "boolean"},
                                                     "depth": {"type": "object",
                                                               "properties": {"level": {"type": "integer"}}}}}}}}}]


def test_an_indented_block_layout_writes_nothing_the_parser_reads_differently() -> None:
    """Arguments one a line (`  key: value`): a string the grammar lets a model write holds no
    line break (which could begin the next key's line) and neither begins nor ends with
    whitespace (an empty value would read the next line as its text); objects and arrays come
    back as the values they are."""
    template = (Path(__file__).resolve().parents[2] / "fixtures" / "templates" / "indented_block.jinja").read_text()
    analysis = autoparser.analyze(template, bos_token="<s>", eos_token="</s>")
    result = build_grammar(analysis, NESTED_TOOLS, tool_choice="required")
    validate_gbnf(result.gbnf)
    grammar, rng = Gbnf(result.gbnf), random.Random("indented")
    parser = analysis.parser(tools=NESTED_TOOLS, tool_choice="required")
    schema = NESTED_TOOLS[0]["function"]["parameters"]
    for _ in range(SAMPLES * 3):
        text = grammar.sample(rng)
        message = parser.parse(text)
        assert message["tool_calls"] and not (message["content"] or "").strip(), (text, message)
        lines = [line.partition("  city: ")[2] for line in text.split("\n") if line.startswith("  city: ")]
        for call, line in zip(message["tool_calls"], lines, strict=True):
            arguments = json.loads(call["function"]["arguments"])
            jsonschema.validate(arguments, schema)
            assert arguments["city"] == line, text  # the string is its line, as written
