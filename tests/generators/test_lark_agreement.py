"""The Lark grammar and the parser describe the same output language.

For round-trip outputs of real templates (CONTRACT section 6: the prompt rendered with and
without an assistant message, the difference being what the model would have produced),
`parse_with_lark` must build the message that `analysis.parser(tools).parse(output)` builds:
same reasoning and content after stripping surrounding whitespace, same tool names, arguments
equal as JSON; call ids are not compared.

The analyses come from `autoparser.analyze` when the analyzer is installed, and from the
hand-built analyses in `lark_cases` otherwise (those are always checked too). Across whole
corpora the outputs are the project's round-trip cases (`autoparser.roundtrip`) and the cases
in `lark_cases`; agreement is required wherever the parser gets the round trip right: where
it does not, the analysis or the parser is at fault, not the grammar, and the round-trip
tests report it.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import Any

import corpora
import pytest
from lark.exceptions import UnexpectedInput
from lark_cases import (
    CASES,
    PROBES,
    TOOLS,
    analysis_of,
    assert_loads_in_lark,
    comparable,
    expected_message,
    real_analysis,
    round_trip_output,
)

from autoparser import analyze
from autoparser.analysis import Analysis
from autoparser.generators.lark import generate_lark, parse_with_lark
from autoparser.render import TemplateRenderError


def _available(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


ANALYZER = _available("autoparser.analyzers")
PARSER = _available("autoparser.language.reading")
ROUND_TRIP = _available("autoparser.roundtrip")
BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"  # as the round-trip tests use
needs_parser = pytest.mark.skipif(not PARSER, reason="the parser is not available yet")
SOURCES = ["analyzed", "hand_built"] if ANALYZER else ["hand_built"]


def thinking_modes(analysis: Analysis) -> list[bool | None]:
    return [None, True, False] if analysis.reasoning.toggle else [None]


def lark_message(analysis: Analysis, output: str, thinking: bool | None,
                 tools: list[dict[str, Any]] | None = TOOLS) -> Any:
    """The grammar's message, or a description of the parse error (so that it shows in a diff)."""
    try:
        return comparable(parse_with_lark(analysis, output, tools=tools, thinking=thinking))
    except UnexpectedInput as exc:
        return f"not in the grammar's language: {str(exc).splitlines()[0]}"


def parser_message(analysis: Analysis, output: str, thinking: bool | None) -> dict[str, Any]:
    return comparable(analysis.parser(tools=TOOLS, thinking=thinking).parse(output))


# -- the six named templates ----------------------------------------------------------------------


@needs_parser
@pytest.mark.parametrize("thinking", [None, True, False], ids=["default", "thinking", "no-thinking"])
@pytest.mark.parametrize("probe", sorted(PROBES))
@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_named_template_round_trips_agree(name: str, source: str, probe: str, thinking: bool | None) -> None:
    try:
        analysis = real_analysis(name, analyzed=source == "analyzed")
    except TemplateRenderError as exc:
        pytest.skip(f"the analyzer cannot analyze the template (the hand-built analysis is checked): {exc}")
    if thinking is not None and not analysis.reasoning.toggle:
        pytest.skip("the template has no thinking switch")
    output = round_trip_output(analysis, PROBES[probe], TOOLS, thinking)
    if output is None:
        pytest.skip("not applicable: the conversation with the message does not start with the prompt")
    assert lark_message(analysis, output, thinking) == parser_message(analysis, output, thinking)


# outputs no template renders but both must read alike: (case, thinking, output)
EDGE_OUTPUTS: list[tuple[str, bool | None, str]] = [
    ("deepseek_v3_1", True, "abc"),
    ("deepseek_v3_1", True, "abc</think>def<｜end▁of▁sentence｜>"),
    ("deepseek_v3_1", True, "<think>abc</think>def"),
    ("deepseek_v3_1", True, "a</think>b</think>c"),
    ("deepseek_v3_1", False, "abc</think>def"),
    ("deepseek_v3_1", False, "<think>abc</think>def"),
    ("deepseek_v3_1", None, "<think>abc"),
    ("deepseek_v3_1", True, 'r <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{"query": "q"}'
                            "<｜tool▁call▁end｜><｜tool▁calls▁end｜> after"),
    ("deepseek_v3_1", False, 'pre<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{"query": "q"}'
                             "<｜tool▁call▁end｜><｜tool▁calls▁end｜> after"),
    ("hermes", None, 'a <tool_call>\n{"name": "search", "arguments": {"query": "q"}}\n</tool_call>\nb'),
    ("hermes", None, '<tool_call>{"arguments": {"query": "q"}, "name": "search"}</tool_call>'),
    ("hermes", None, '<tool_call>{"name": "search", "parameters": {"query": "q"}}</tool_call><|im_end|>'),
    ("qwen3_coder", None, "<tool_call>\n<function=get_weather>\n<parameter=location>\n\nParis\n\n</parameter>\n"
                          "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"),
    ("qwen3_coder", None, "<tool_call><function=get_weather><parameter=location>Paris</parameter></function>"
                          "</tool_call>"),
    ("glm_4_5", None, "\n<think>a <tool_call>b</think>c"),
    ("glm_4_5", None, "<think>r</think><tool_call>get_weather\n<arg_key>location</arg_key>\n<arg_value>Paris"
                      "</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>"),
    ("mistral_nemo", None, '[TOOL_CALLS] [ {"name": "search", "arguments": {"query": "q"}} , '
                           '{"name": "get_weather", "arguments": {"location": "x"}} ]'),
    ("deepseek_r1", None, "<think>\nr\n</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
                          'search\n```json\n{"query": "q"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function'
                          "<｜tool▁sep｜>search\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
]


@needs_parser
@pytest.mark.parametrize(("name", "thinking", "output"), EDGE_OUTPUTS)
def test_edge_outputs_agree(name: str, thinking: bool | None, output: str) -> None:
    analysis = analysis_of(name)
    assert lark_message(analysis, output, thinking) == parser_message(analysis, output, thinking)


# -- whole corpora ----------------------------------------------------------------------------------


def corpus_disagreements(path: Path) -> list[str]:
    """Round trips of `path` that the parser gets right but the grammar reads differently.

    The outputs are the project's own round-trip cases (`autoparser.roundtrip`), plus the cases
    of `lark_cases` in every thinking mode. On the way, the template's printed grammars must load
    in Lark.
    """
    if not ANALYZER:
        pytest.skip("autoparser.analyze is not available yet")
    try:
        analysis = analyze(path.read_text(encoding="utf-8"), bos_token=BOS, eos_token=EOS)
    except TemplateRenderError as exc:
        pytest.skip(f"the template cannot be analyzed: {exc}")
    for thinking in thinking_modes(analysis):
        assert_loads_in_lark(generate_lark(analysis, tools=TOOLS, thinking=thinking))
    return project_case_disagreements(analysis) + own_case_disagreements(analysis)


def project_case_disagreements(analysis: Analysis) -> list[str]:
    """`autoparser.roundtrip`'s cases that pass: the grammar must read them as the parser does."""
    if not ROUND_TRIP:
        return []
    from autoparser import roundtrip

    problems = []
    for case, message in roundtrip.probe_messages().items():
        result = roundtrip.run_case(analysis, case, message)
        if result.status != "pass":
            continue  # not applicable, or the parser's own round-trip failure
        if any(call.get("incomplete") for call in result.got.get("tool_calls") or []):
            continue  # the output was cut inside a call (at an end-of-turn marker): no complete sentence
        thinking = True if message.get("reasoning_content") else None  # as `run_case` parses
        grammar = lark_message(analysis, result.output, thinking, tools=roundtrip.TOOLS)
        if grammar != comparable(result.got):
            problems.append(f"{case}: grammar {grammar} != parser {comparable(result.got)}")
    return problems


def own_case_disagreements(analysis: Analysis) -> list[str]:
    problems = []
    for thinking in thinking_modes(analysis):
        for probe, message in PROBES.items():
            try:
                output = round_trip_output(analysis, message, TOOLS, thinking)
            except TemplateRenderError:
                continue
            if output is None:
                continue
            parsed = parser_message(analysis, output, thinking)
            if parsed != expected_message(message, output):
                continue  # the parser's own round-trip failure: not a grammar question
            grammar = lark_message(analysis, output, thinking)
            if grammar != parsed:
                problems.append(f"{probe} (thinking={thinking}): grammar {grammar} != parser {parsed}")
    return problems


@needs_parser
@pytest.mark.parametrize("path", corpora.llamacpp_template_params())
def test_llamacpp_corpus_round_trips_agree(path: Path) -> None:
    problems = corpus_disagreements(path)
    if problems and path.stem in KNOWN_LLAMACPP_DISAGREEMENTS:
        pytest.xfail(KNOWN_LLAMACPP_DISAGREEMENTS[path.stem])
    assert problems == []


@needs_parser
@pytest.mark.parametrize("path", corpora.shared_template_params())
def test_shared_corpus_round_trips_agree(path: Path) -> None:
    problems = corpus_disagreements(path)
    if problems and path.stem in KNOWN_SHARED_DISAGREEMENTS:
        pytest.xfail(KNOWN_SHARED_DISAGREEMENTS[path.stem])
    assert problems == []


# Analyses of the llama.cpp corpus that the grammar reads differently from the parser: none.
KNOWN_LLAMACPP_DISAGREEMENTS: dict[str, str] = {}


# Analyses of the shared corpus that the grammar reads differently from the parser: none.
KNOWN_SHARED_DISAGREEMENTS: dict[str, str] = {}


FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "templates"


@needs_parser
@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.jinja")), ids=lambda p: p.stem)
def test_fixture_family_round_trips_agree(path: Path) -> None:
    problems = corpus_disagreements(path)
    if problems and path.stem in KNOWN_FIXTURE_DISAGREEMENTS:
        pytest.xfail(KNOWN_FIXTURE_DISAGREEMENTS[path.stem])
    assert problems == []


# Analyses of the fixture family that the grammar reads differently from the parser: none.
KNOWN_FIXTURE_DISAGREEMENTS: dict[str, str] = {}


@functools.cache
def fixture_analysis(stem: str) -> Analysis:
    return analyze((FIXTURES / f"{stem}.jinja").read_text(encoding="utf-8"), bos_token=BOS, eos_token=EOS)


# outputs of a fixture's format that no round trip renders but both must read alike: (fixture, output).
# A raw value ends at a soft stop (`,`) where the rest reads on from there, and holds it where not;
# its own end marker (`§`) it never holds.
FIXTURE_EDGE_OUTPUTS: list[tuple[str, str]] = [
    ("section_quotes", "%%call%%get_weather{location:§Paris§,days:3,hours:4}%%/call%%"),
    ("section_quotes", "%%call%%get_weather{location:§Paris§,days:-1,options:abc}%%/call%%"),
    ("section_quotes", "%%call%%get_weather{location:§Paris§,days:3,hours:4,unit:x}%%/call%%"),
    ("section_quotes", "%%call%%get_weather{location:§Paris§,days:1,2,3,options:x}%%/call%%"),
    ("section_quotes", "%%call%%get_weather{location:§Paris§,days:1,2:3,options:x}%%/call%%"),
    ("section_quotes", "%%call%%get_weather{days:3,location:§Paris, France§,options:{a:1}}%%/call%%"),
    ("section_quotes", "%%call%%get_weather{location:§a,b:c§,days:2}%%/call%%"),
    ("section_quotes", "%%call%%get_weather{location:§Paris§,days:2,options:{a:§x§}}%%/call%%"),
]


@needs_parser
@pytest.mark.skipif(not ANALYZER, reason="autoparser.analyze is not available yet")
@pytest.mark.parametrize(("stem", "output"), FIXTURE_EDGE_OUTPUTS)
def test_fixture_edge_outputs_agree(stem: str, output: str) -> None:
    analysis = fixture_analysis(stem)
    assert lark_message(analysis, output, None) == parser_message(analysis, output, None)


UNNAMED = {"location": "Paris", "unit": "celsius", "hours": 6, "days": 3}  # `unit`, `hours`: no schema names them


@needs_parser
@pytest.mark.parametrize("stem", ["indented_block", "xml_parameters", "key_value_tags", "typed_params", "xml_children"])
def test_an_argument_the_schema_does_not_name_reads_alike(stem: str) -> None:
    """A tagged argument whose key the tool's schema does not name: the grammar reads the call
    with it, as the parser does (the named keys read as named members only)."""
    analysis = analyze((FIXTURES / f"{stem}.jinja").read_text(encoding="utf-8"), bos_token=BOS, eos_token=EOS)
    weather = [tool for tool in TOOLS if tool["function"]["name"] == "get_weather"]
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": UNNAMED}}]}
    history = [{"role": "user", "content": "Weather?"}]
    prompt = analysis.render(history, tools=weather, add_generation_prompt=True)
    output = analysis.render(history + [message], tools=weather, add_generation_prompt=False)[len(prompt):]
    expected = comparable(analysis.parser(tools=weather).parse(output))
    assert lark_message(analysis, output, None, tools=weather) == expected
    assert expected["tool_calls"] == [("get_weather", UNNAMED)]
