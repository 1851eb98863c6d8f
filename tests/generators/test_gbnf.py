"""The output-language grammar: llama.cpp accepts it, it admits real outputs, its parts are exact."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import jsonschema
import pytest
from gbnf_fixtures import ANALYSES, BOOK_TRIP, DS_SPECIALS, OUTPUTS, SEARCH, TOOLS, WEATHER, plain_content
from gbnf_sampler import Gbnf
from hypothesis import given, settings
from hypothesis import strategies as st

import autoparser
from autoparser.analysis import Analysis
from autoparser.generators.gbnf import (
    build_grammar,
    generate_gbnf,
    json_object_grammar,
    json_schema_grammar,
    text_excluding,
)
from autoparser.generators.gbnf_builder import GrammarBuilder
from autoparser.llama.grammar_check import validate_gbnf, validate_trigger_patterns

CHOICES = ["auto", "required", "none", {"type": "function", "function": {"name": "book_trip"}}]
THINKING = [None, True, False]


def lazy_start(patterns: list[str], text: str) -> int | None:
    """Where llama.cpp's lazy grammar would start on `text` (its trigger-pattern rule)."""
    for pattern in patterns:
        regex = re.compile(pattern)
        match = regex.fullmatch(text) if pattern.startswith("^") and pattern.endswith("$") else regex.search(text)
        if match:
            groups = [match.start(i) for i in range(1, (match.lastindex or 0) + 1) if match.group(i)]
            return groups[0] if groups else match.start()
    return None


def choice_id(choice: object) -> str:
    return choice if isinstance(choice, str) else "named"


@pytest.mark.parametrize("thinking", THINKING, ids=lambda t: f"thinking-{t}")
@pytest.mark.parametrize("choice", CHOICES, ids=choice_id)
@pytest.mark.parametrize("name", sorted(ANALYSES))
def test_llama_cpp_accepts_every_grammar(name: str, choice: object, thinking: bool | None) -> None:
    analysis = ANALYSES[name]()
    for specials in (None, analysis.preserved_tokens):
        result = build_grammar(analysis, TOOLS, tool_choice=choice, thinking=thinking, special_tokens=specials)
        validate_gbnf(result.gbnf)
        validate_trigger_patterns(result.trigger_patterns)
        # a prompt that opened a call leaves nothing to wait for: never lazy
        assert result.lazy == (choice == "auto" and not analysis.tools.opened_by_prompt)
        assert "_" not in "".join(line.split("::=")[0] for line in result.gbnf.splitlines())
        Gbnf(result.gbnf)  # every rule defined, every rule derives some text


@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_real_output_is_in_the_required_language(name: str) -> None:
    analysis = ANALYSES[name]()
    text = OUTPUTS[name]
    result = build_grammar(analysis, [WEATHER, SEARCH], tool_choice="required", thinking=True,
                           special_tokens=analysis.preserved_tokens)
    assert Gbnf(result.gbnf).matches(text)


@pytest.mark.parametrize("name", sorted(n for n in OUTPUTS if not ANALYSES[n]().tools.opened_by_prompt))
def test_real_output_after_the_trigger_is_in_the_lazy_language(name: str) -> None:
    analysis = ANALYSES[name]()
    # free content before the calls (the reasoning outputs already start with free text)
    text = OUTPUTS[name] if analysis.reasoning.mode != "none" else "Let me check that for you.\n" + OUTPUTS[name]
    result = build_grammar(analysis, [WEATHER, SEARCH], tool_choice="auto", thinking=True)
    assert result.lazy
    start = lazy_start(result.trigger_patterns, text)
    assert start is not None, result.trigger_patterns
    assert Gbnf(result.gbnf).matches(text[start:])


@pytest.mark.parametrize("name", ["deepseek-v3.1", "deepseek-r1", "qwen3", "glm-4.5"])
def test_lazy_trigger_never_fires_inside_reasoning(name: str) -> None:
    analysis = ANALYSES[name]()
    r = analysis.reasoning
    trigger = analysis.triggers[0]
    opening = "" if r.forced_open else r.start
    result = build_grammar(analysis, [WEATHER], tool_choice="auto", thinking=True)
    assert result.trigger_words == []  # a bare word would fire anywhere
    thinking_aloud = f"{opening}I could write {trigger} here, or call a tool"
    assert lazy_start(result.trigger_patterns, thinking_aloud) is None
    closed = thinking_aloud + r.end + "\n\nSure. " + trigger
    assert lazy_start(result.trigger_patterns, closed) == len(closed) - len(trigger)


def worded_channel() -> Analysis:
    template = Path(__file__).resolve().parents[2] / "fixtures" / "templates" / "worded_channel.jinja"
    return autoparser.analyze(template.read_text(encoding="utf-8"), bos_token="<s>", eos_token="</s>")


@pytest.mark.parametrize("text", ["<|aside>mull\nplan<aside|>Done.", "<|aside>plan<aside|>Done.",
                                  "<|aside>\nmulled it<aside|>Done.", "Done."])
def test_the_grammar_opens_reasoning_with_the_tag_alone_as_the_parser_does(text: str) -> None:
    """The start marker's tag opens reasoning by itself too (`<|aside>` for `<|aside>mull`): the
    grammar admits what the parser reads as reasoning, and the lazy trigger does not fire in it."""
    analysis = worded_channel()
    grammar = Gbnf(build_grammar(analysis, [WEATHER], tool_choice="none", thinking=True).gbnf)
    assert grammar.matches(text)
    message = analysis.parser(thinking=True).parse(text)
    assert message["content"] == "Done." and (message["reasoning_content"] is None) == (text == "Done.")
    lazy = build_grammar(analysis, [WEATHER], tool_choice="auto", thinking=True)
    trigger = analysis.triggers[0]
    assert lazy_start(lazy.trigger_patterns, f"<|aside>I could write {trigger} here") is None
    closed = f"<|aside>hm<aside|>Sure. {trigger}"
    assert lazy_start(lazy.trigger_patterns, closed) == len(closed) - len(trigger)


def test_lazy_trigger_without_reasoning_fires_anywhere() -> None:
    analysis = ANALYSES["hermes"]()
    result = build_grammar(analysis, [WEATHER], tool_choice="auto")
    assert result.trigger_words == ["<tool_call>"]
    assert lazy_start(result.trigger_patterns, "ok <tool_call>") == 3


def test_thinking_off_has_no_reasoning_section() -> None:
    analysis = ANALYSES["deepseek-v3.1"]()
    off = build_grammar(analysis, [WEATHER], tool_choice="required", thinking=False)
    on = build_grammar(analysis, [WEATHER], tool_choice="required", thinking=True)
    assert "think" not in off.gbnf
    assert "</think>" in on.gbnf
    assert Gbnf(off.gbnf).matches(OUTPUTS["deepseek-v3.1"].split("</think>")[1])
    assert not Gbnf(on.gbnf).matches(OUTPUTS["deepseek-v3.1"].split("</think>")[1])


def test_forced_open_reasoning_starts_inside_reasoning() -> None:
    analysis = ANALYSES["deepseek-v3.1"]()
    grammar = Gbnf(build_grammar(analysis, [WEATHER], tool_choice="none", thinking=True).gbnf)
    assert grammar.matches("thinking...</think>The answer.")
    assert not grammar.matches("The answer.")


def test_optional_reasoning_may_be_skipped() -> None:
    """Where the model writes the start marker itself, reasoning is optional (policy rule
    `role-from-prompt`); where the template never writes it (R1), the output starts inside it."""
    r1 = Gbnf(build_grammar(ANALYSES["deepseek-r1"](), [WEATHER], tool_choice="none").gbnf)
    assert r1.matches("hm\n</think>\n\nHello") and not r1.matches("Hello")
    grammar = Gbnf(build_grammar(ANALYSES["qwen3"](), [WEATHER], tool_choice="none").gbnf)
    assert grammar.matches("<think>\nhm\n</think>\n\nHello")
    assert grammar.matches("Hello")
    assert not grammar.matches("<think>\nnever closed")


def test_none_forbids_call_markers_in_content() -> None:
    grammar = Gbnf(build_grammar(ANALYSES["hermes"](), [WEATHER], tool_choice="none").gbnf)
    assert grammar.matches("Use a <tool> tag, or <tool_cal")
    assert not grammar.matches('<tool_call>\n{"name": "get_weather", "arguments": {}}\n</tool_call>')


def test_required_without_parallel_allows_exactly_one_call() -> None:
    analysis = ANALYSES["qwen3"]()
    one = Gbnf(build_grammar(analysis, [WEATHER], tool_choice="required", parallel_tool_calls=False).gbnf)
    many = Gbnf(build_grammar(analysis, [WEATHER], tool_choice="required").gbnf)
    two_calls = OUTPUTS["qwen3"]
    first_call = two_calls.split("\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Rome\"")[0]
    assert many.matches(two_calls) and not one.matches(two_calls)
    assert one.matches(first_call)


def test_named_tool_choice_allows_only_that_tool() -> None:
    analysis = ANALYSES["hermes"]()
    gbnf = generate_gbnf(analysis, TOOLS, tool_choice={"type": "function", "function": {"name": "search"}})
    assert "get-weather" not in gbnf and "search-call" in gbnf
    with pytest.raises(ValueError, match="not among the tools"):
        generate_gbnf(analysis, TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}})


def test_auto_without_tools_is_plain_content() -> None:
    result = build_grammar(ANALYSES["hermes"](), None, tool_choice="auto")
    assert not result.lazy
    assert Gbnf(result.gbnf).matches("Just words.")


def test_template_without_tool_format_warns_and_falls_back() -> None:
    result = build_grammar(plain_content(), [WEATHER], tool_choice="required")
    assert any("no tool-call format" in w for w in result.warnings)
    assert Gbnf(result.gbnf).matches("anything at all")


def test_special_tokens_are_token_references() -> None:
    analysis = ANALYSES["deepseek-v3.1"]()
    by_text = generate_gbnf(analysis, [WEATHER], tool_choice="required", thinking=True, special_tokens=DS_SPECIALS)
    assert "<｜tool▁calls▁begin｜>" in by_text and '"<｜tool▁calls▁begin｜>"' not in by_text
    assert "</think>" in by_text and '"</think>"' not in by_text
    ids = {t: 100 + i for i, t in enumerate(DS_SPECIALS)}
    by_id = generate_gbnf(analysis, [WEATHER], tool_choice="required", thinking=True, special_tokens=ids)
    assert f"<[{ids['<｜tool▁sep｜>']}]>" in by_id and "<｜tool▁sep｜>" not in by_id
    quoted = generate_gbnf(analysis, [WEATHER], tool_choice="required", thinking=True)
    assert '"<｜tool▁calls▁begin｜>"' in quoted


def test_special_token_without_angle_brackets_needs_an_id() -> None:
    analysis = ANALYSES["mistral-small-3.2"]()
    result = build_grammar(analysis, [WEATHER], tool_choice="required", special_tokens=["[TOOL_CALLS]"])
    assert '"[TOOL_CALLS]"' in result.gbnf
    assert any("[TOOL_CALLS]" in w and "mapping" in w for w in result.warnings)
    by_id = build_grammar(analysis, [WEATHER], tool_choice="required", special_tokens={"[TOOL_CALLS]": 9})
    assert "<[9]>" in by_id.gbnf and not by_id.warnings


def test_marker_with_special_token_inside_is_split() -> None:
    analysis = ANALYSES["deepseek-r1"]()
    gbnf = generate_gbnf(analysis, [WEATHER], tool_choice="required", special_tokens=DS_SPECIALS)
    assert '"function" <｜tool▁sep｜> "get_weather" "\\n" "```json\\n"' in gbnf


def test_lazy_first_marker_accepts_spelled_out_token() -> None:
    analysis = ANALYSES["deepseek-v3.1"]()
    result = build_grammar(analysis, [WEATHER], tool_choice="auto", special_tokens=DS_SPECIALS)
    assert '( <｜tool▁calls▁begin｜> | "<｜tool▁calls▁begin｜>" )' in result.gbnf


def test_tagged_arguments_typed_by_schema() -> None:
    grammar = Gbnf(generate_gbnf(ANALYSES["qwen3-coder"](), [WEATHER], tool_choice="required"))
    call = "<tool_call>\n<function=get_weather>\n<parameter=location>\n{}\n</parameter>\n{}</function>\n</tool_call>"
    days = "<parameter=days>\n{}\n</parameter>\n"
    assert grammar.matches(call.format("Paris, 5e arr.", days.format(7)))
    assert not grammar.matches(call.format("Paris", days.format(15)))  # maximum 14
    assert not grammar.matches(call.format("Paris", days.format('"7"')))
    assert not grammar.matches(call.format("a\n</parameter>\nb", ""))  # raw text cannot hold the end marker
    unit = "<parameter=unit>\n{}\n</parameter>\n"
    assert grammar.matches(call.format("Oslo", unit.format("celsius")))
    assert not grammar.matches(call.format("Oslo", unit.format("kelvin")))


def test_schema_warnings_reach_the_result() -> None:
    weird = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "string", "pattern": "(?<=a)b"}}, "not": {}}}}
    result = build_grammar(ANALYSES["hermes"](), [weird], tool_choice="required")
    assert any("tool f" in w and "pattern" in w for w in result.warnings)
    assert any("tool f" in w and "'not'" in w for w in result.warnings)


# -- free text that excludes markers -----------------------------------------------------------


def _exclusion_grammar(forbidden: list[str], terminator: str | None) -> Gbnf:
    b = GrammarBuilder()
    rule = text_excluding(b, "text", forbidden, terminator)
    b.set("root", rule + (f" {json.dumps(terminator)}" if terminator else ""))
    return Gbnf(b.text())


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab</>", max_size=14), st.sampled_from(["</a>", "aab", "abab", "</a"]))
def test_text_excluding_splits_where_the_parser_splits(text: str, marker: str) -> None:
    grammar = _exclusion_grammar([marker], marker)
    full = text + marker
    assert grammar.matches(full) == (full.find(marker) == len(text))


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="xy<|", max_size=12))
def test_text_excluding_several_markers_to_the_end(text: str) -> None:
    markers = ["<|x", "yy", "x|"]
    grammar = _exclusion_grammar(markers, None)
    assert grammar.matches(text) == (not any(m in text for m in markers))


def test_exclusion_grammar_is_valid_gbnf() -> None:
    b = GrammarBuilder()
    b.set("root", text_excluding(b, "t", ["</think>", "<｜tool▁calls▁begin｜>", 'a"b\\'], "</think>"))
    validate_gbnf(b.text())


# -- response formats --------------------------------------------------------------------------


def test_json_object_grammar() -> None:
    result = json_object_grammar()
    validate_gbnf(result.gbnf)
    grammar = Gbnf(result.gbnf)
    rng = random.Random(3)
    for _ in range(50):
        assert isinstance(json.loads(grammar.sample(rng)), dict)
    assert not grammar.matches("[1]")


def test_json_schema_grammar() -> None:
    schema = BOOK_TRIP["function"]["parameters"]
    result = json_schema_grammar(schema)
    validate_gbnf(result.gbnf)
    grammar = Gbnf(result.gbnf)
    rng = random.Random(4)
    for _ in range(50):
        jsonschema.validate(json.loads(grammar.sample(rng)), schema)


# -- snapshots ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["deepseek-v3.1", "deepseek-r1", "qwen3-coder", "mistral-nemo"])
def test_grammar_snapshot(name: str, snapshot) -> None:  # type: ignore[no-untyped-def]
    analysis = ANALYSES[name]()
    result = build_grammar(analysis, [WEATHER, SEARCH], tool_choice="auto", thinking=True,
                           special_tokens=analysis.preserved_tokens)
    assert {"gbnf": result.gbnf, "lazy": result.lazy, "trigger_patterns": result.trigger_patterns,
            "trigger_words": result.trigger_words, "warnings": result.warnings} == snapshot
