"""Calls a template never renders, whose syntax its instructions show by example.

The fixture `instructed_calls.jinja` drops every call from the history, and writes, only when
tools are given, one example call with placeholders for its values:
`<|call|> {"tool": <tool name>, "params": <arguments as a JSON object>} <|/call|>`. The analysis
reads that example as a JSON call format; the runtime then reads calls written that way, whole
and streamed, and the grammars agree with the parser on sentences they generate. Real templates
of the same kind (an example in `<tool_call>` tags) give the format a rendered Hermes call gives.
Examples that are not clearly calls keep tool calling off.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import corpora
import pytest
from analyses import without_generated_ids
from gbnf_fixtures import SEARCH, WEATHER
from gbnf_sampler import Gbnf
from lark_cases import comparable

import autoparser
from autoparser.analyzers.instructed_calls import instructed_tools
from autoparser.analyzers.probes import Prober
from autoparser.analyzers.tools import TOOL_SHAPES
from autoparser.generators.gbnf import build_grammar
from autoparser.generators.lark import parse_with_lark
from autoparser.generators.module import generate_module
from autoparser.roundtrip import TOOLS as ROUND_TRIP_TOOLS
from autoparser.roundtrip import probe_messages, run_case
from autoparser.summary import summary_rows

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "templates"
BOS, EOS = "<s>", "</s>"
TOOLS = [WEATHER, SEARCH]


def fixture_analysis() -> autoparser.Analysis:
    source = (FIXTURES / "instructed_calls.jinja").read_text(encoding="utf-8")
    return autoparser.analyze(source, bos_token=BOS, eos_token=EOS)


def _calls(message: dict) -> list[tuple[str, dict]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]]


# -- the analysis ------------------------------------------------------------------------------------

def test_the_example_in_the_instructions_gives_the_call_format() -> None:
    analysis = fixture_analysis()
    tools = analysis.tools
    assert tools.supported and tools.from_instructions and tools.parallel
    assert (tools.format, tools.name_field, tools.args_field) == ("json", "tool", "params")
    assert (tools.call_start, tools.call_end, tools.section_start, tools.section_end) == (
        "<|call|> ", " <|/call|>", "", "")
    assert analysis.triggers == ["<|call|>"]
    assert "<|call|>" in analysis.preserved_tokens and "<|/call|>" in analysis.preserved_tokens
    [warning] = analysis.warnings
    assert "learned from the example call its instructions show" in warning and "<|call|>" in warning
    assert ("tool calls", "json, parallel (from the instructions' example)") in summary_rows(analysis)


def test_the_flag_reads_back_and_is_written_only_when_set() -> None:
    analysis = fixture_analysis()
    data = analysis.to_dict()
    assert data["tools"]["from_instructions"] is True
    again = autoparser.Analysis.from_dict(json.loads(analysis.to_json()), source=analysis.source)
    assert again == analysis and again.tools.from_instructions
    rendered = autoparser.analyze((FIXTURES / "hermes_json.jinja").read_text(encoding="utf-8"))
    assert "from_instructions" not in rendered.to_dict()["tools"] and not rendered.tools.from_instructions


def test_round_trip_cases_with_calls_are_not_applicable() -> None:
    analysis = fixture_analysis()
    results = {case: run_case(analysis, case, message) for case, message in probe_messages().items()}
    assert results["content"].status == "pass"
    for case, message in probe_messages().items():
        if message.get("tool_calls"):
            assert results[case].status == "not_applicable", case


# -- reading calls written as the example shows --------------------------------------------------------

OUTPUTS = {
    "one call": ('<|call|> {"tool": "get_weather", "params": {"location": "Paris", "days": 3}} <|/call|>',
                 None, [("get_weather", {"location": "Paris", "days": 3})]),
    "text, then two calls": ('Let me check.\n<|call|> {"tool": "get_weather", "params": {"location": "Oslo"}} '
                             '<|/call|>\n<|call|>{"tool": "search", "params": {"query": "<|/call|> \\"x\\""}}'
                             '<|/call|>',
                             "Let me check.", [("get_weather", {"location": "Oslo"}),
                                               ("search", {"query": '<|/call|> "x"'})]),
    "keys in the other order": ('<|call|>\n{"params": {"query": "a"}, "tool": "search"}\n<|/call|>',
                                None, [("search", {"query": "a"})]),
    "prose only": ("No tool is needed: the answer is 4.", "No tool is needed: the answer is 4.", []),
    "an object without the name": ('<|call|> {"params": {"query": "a"}} <|/call|>',
                                   '<|call|> {"params": {"query": "a"}} <|/call|>', []),
}


@pytest.mark.parametrize("name", OUTPUTS)
def test_calls_written_as_the_example_shows_are_read(name: str) -> None:
    output, content, calls = OUTPUTS[name]
    message = fixture_analysis().parser(tools=TOOLS).parse(output)
    assert (message["content"], _calls(message)) == (content, calls)


def _special_tokens_alone(text: str, rng: random.Random) -> list[str]:
    chunks: list[str] = []
    for piece in re.split(r"(<\|/?call\|>|<\|end\|>)", text):
        if re.fullmatch(r"<\|/?call\|>|<\|end\|>", piece):
            chunks.append(piece)
            continue
        at = 0
        while at < len(piece):
            size = rng.randint(1, 6)
            chunks.append(piece[at:at + size])
            at += size
    return chunks


def _random_chunks(text: str, rng: random.Random) -> list[str]:
    cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(1, 12))))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


@pytest.mark.parametrize("name", OUTPUTS)
def test_streamed_reads_equal_the_whole_read(name: str) -> None:
    output = OUTPUTS[name][0]
    parser = fixture_analysis().parser(tools=TOOLS)
    whole = without_generated_ids(parser.parse(output))
    rng = random.Random(name)
    chunkings = [list(output)] + [_random_chunks(output, rng) for _ in range(8)] + [
        _special_tokens_alone(output, rng) for _ in range(4)]
    for chunks in chunkings:
        stream = parser.stream()
        for chunk in chunks:
            stream.feed(chunk)
        stream.finish()
        assert without_generated_ids(stream.message()) == whole, chunks


@pytest.mark.parametrize("choice", ["required", "auto"])
def test_grammar_sentences_read_alike_with_the_parser_and_lark(choice: str) -> None:
    analysis = fixture_analysis()
    grammar = Gbnf(build_grammar(analysis, TOOLS, tool_choice=choice, lazy=False).gbnf)
    rng = random.Random(f"instructed-{choice}")
    saw_call = False
    for _ in range(12):
        text = grammar.sample(rng)
        parsed = comparable(analysis.parser(tools=TOOLS, tool_choice=choice).parse(text))
        assert parsed == comparable(parse_with_lark(analysis, text, tools=TOOLS, tool_choice=choice)), text
        saw_call = saw_call or bool(parsed["tool_calls"])
    assert saw_call


def test_the_grammar_writes_the_example_keys_between_the_markers() -> None:
    grammar = fixture_analysis().gbnf(tools=TOOLS, tool_choice="required")
    assert 'call-wrapped ::= "<|call|> " call gap "<|/call|>"' in grammar
    assert '"\\"tool\\"" ws ":" ws "\\"get_weather\\""' in grammar and '"\\"params\\""' in grammar


DRIVER = r"""
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("generated_parser", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
out = []
for text, tools in json.load(sys.stdin):
    stream = module.stream(tools)
    for char in text:
        stream.feed(char)
    stream.finish()
    out.append([module.parse(text, tools), stream.message()])
json.dump(out, sys.stdout)
"""


def test_the_standalone_module_reads_the_calls_as_the_parser_does(tmp_path: Path) -> None:
    analysis = fixture_analysis()
    path = tmp_path / "instructed_parser.py"
    path.write_text(generate_module(analysis), encoding="utf-8")
    cases = [(output, TOOLS) for output, _content, _calls in OUTPUTS.values()]
    done = subprocess.run([sys.executable, "-I", "-S", "-c", DRIVER, str(path)], input=json.dumps(cases),
                          capture_output=True, text=True, encoding="utf-8", timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for (output, tools), (whole, streamed) in zip(cases, json.loads(done.stdout), strict=True):
        expected = comparable(analysis.parser(tools=tools).parse(output))
        assert comparable(whole) == expected == comparable(streamed), output


# -- real templates that show the call syntax only in their instructions ------------------------------

def _shared(name: str) -> Path:
    directory = corpora.shared_corpus_dir()
    if directory is None or not (directory / "templates" / name).is_file():
        pytest.skip(f"{name} is not in the shared corpus")
    return directory / "templates" / name


@pytest.mark.parametrize("name", ["hfjs-e2e__HuggingFaceTB-SmolLM3-3B.jinja", "axolotl__falcon_h1.jinja"])
def test_a_tool_call_example_gives_the_hermes_format(name: str) -> None:
    analysis = autoparser.analyze(_shared(name).read_text(encoding="utf-8"), eos_token="<|im_end|>")
    tools = analysis.tools
    assert tools.from_instructions and tools.parallel
    assert (tools.format, tools.name_field, tools.args_field, tools.call_start, tools.call_end) == (
        "json", "name", "arguments", "<tool_call>\n", "\n</tool_call>")
    assert analysis.triggers == ["<tool_call>"]
    output = ('I will look.\n<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris"}}\n'
              "</tool_call>")
    message = analysis.parser(tools=ROUND_TRIP_TOOLS, thinking=False).parse(output)
    assert (message["content"], _calls(message)) == ("I will look.", [("get_weather", {"location": "Paris"})])


# templates that render their calls and show an example too, where the two formats differ (and why)
EXAMPLE_DIFFERS_FROM_RENDER = {
    "xinference__qwen1.5-chat": "the rendered call quotes its arguments' JSON and closes with '\"}', unlike the example",
}


def _example_and_render(path: Path) -> tuple[tuple, tuple] | None:
    source = path.read_text(encoding="utf-8")
    try:
        analysis = autoparser.analyze(source, bos_token=BOS, eos_token=EOS)
    except Exception:  # noqa: BLE001 - the analyzer's refusals are its own tests' business
        return None
    rendered = analysis.tools
    if not rendered.supported or rendered.from_instructions:
        return None
    prober = Prober(source, BOS, EOS, inputs=dict(analysis.template_inputs))
    prober.choose_shape()
    found = instructed_tools(prober, TOOL_SHAPES, analysis.thinking_kwargs(None))
    if found is None:
        return None
    example = found[0]

    def key(tools: autoparser.ToolsAnalysis) -> tuple:
        return (tools.format, tools.section_start.strip() + tools.call_start.strip(),
                tools.call_end.strip() + tools.section_end.strip(), tools.name_field, tools.args_field)

    return key(example), key(rendered)


def test_where_a_template_renders_its_calls_too_the_example_gives_the_same_format() -> None:
    """The reading checked against the render: where a template shows an example and renders
    calls, both give the same format (markers compared without the whitespace around them)."""
    templates = corpora.all_templates()
    if not templates:
        pytest.skip("no corpus available")
    compared, differing = 0, {}
    for path in templates:
        pair = _example_and_render(path)
        if pair is None:
            continue
        compared += 1
        if pair[0] != pair[1]:
            differing[path.stem] = pair
    assert set(differing) == set(EXAMPLE_DIFFERS_FROM_RENDER) & {p.stem for p in templates}, differing
    assert compared >= 20


# -- what is not a call example ---------------------------------------------------------------------

def _template(instructions: str, always: str = "") -> str:
    return ("{{ bos_token }}<|system|>Be helpful." + always + "{% if tools %} Tools: {{ tools | tojson }}. "
            + instructions + "{% endif %}<|end|>\n{% for m in messages %}<|{{ m.role }}|>{{ m.content or '' }}"
            "<|end|>\n{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}")


NOT_EXAMPLES = {
    "prose only": "To call a tool, write <|call|> followed by a JSON list of the tools used.",
    "no markers": 'Write a call as {"name": <function-name>, "arguments": <args-json-object>}.',
    "an opener but no closer": 'Write <|call|>{"name": <function-name>, "arguments": <args-json-object>} to call.',
    "a closer that does not close the opener": '<|call|>{"name": <function-name>, "arguments": <args>}<|end_x|>',
    "no name": '<|call|>{"tool": <function>, "arguments": <args-json-object>}<|/call|>',
    "no arguments": '<|call|>{"name": <function-name>, "payload": <object>}<|/call|>',
    "a third member": '<|call|>{"name": <function-name>, "arguments": <args>, "id": <id>}<|/call|>',
    "a definition between markers": '<|call|>{"name": "{{ tools[0].function.name }}", '
                                    '"parameters": {{ tools[0].function.parameters | tojson }}}<|/call|>',
    "two examples that disagree": '<|call|>{"name": <function-name>, "arguments": <args>}<|/call|> or '
                                  '<|call|>{"tool": <tool name>, "params": <args>}<|/call|>',
}


@pytest.mark.parametrize("name", NOT_EXAMPLES)
def test_what_is_not_clearly_a_call_example_keeps_tool_calling_off(name: str) -> None:
    analysis = autoparser.analyze(_template(NOT_EXAMPLES[name]), bos_token=BOS, eos_token=EOS)
    assert not analysis.tools.supported
    assert any("does not render tool calls" in w for w in analysis.warnings)


def test_an_example_written_without_tools_too_is_not_read() -> None:
    """Only the text the tools add counts: instructions written for every conversation are not
    evidence that the example is how this template's model calls tools."""
    example = ' Call tools as <|call|>{"name": <function-name>, "arguments": <args-json-object>}<|/call|>.'
    analysis = autoparser.analyze(_template("", always=example), bos_token=BOS, eos_token=EOS)
    assert not analysis.tools.supported


def test_a_call_example_with_json_values_is_read() -> None:
    instructions = ('For example: <|call|>{"name": "lookup", "arguments": {"term": "x"}}<|/call|>')
    tools = autoparser.analyze(_template(instructions), bos_token=BOS, eos_token=EOS).tools
    assert tools.from_instructions and (tools.name_field, tools.args_field) == ("name", "arguments")
    assert (tools.call_start, tools.call_end) == ("<|call|>", "<|/call|>")
