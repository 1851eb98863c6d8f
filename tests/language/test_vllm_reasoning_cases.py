"""vLLM's reasoning-parser expectations (`tests/reasoning/*.py`, read as data) against the analysis.

The reader is checked on a small module written here in the style of those tests; vLLM's own
modules are fetched from its pinned sdist into the cache at test time and never part of the
project. The pass count over them is a floor: an analysis change may raise it, never lower it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from corpora import (
    llamacpp_templates,
    make_sdist,
    shared_templates,
    vllm_reasoning_cases_tool,
    vllm_reasoning_tests,
)

tool = vllm_reasoning_cases_tool()

# Passing cases out of the 225 whose family has a template (all 182 non-debatable ones). Raise it when
# the analysis improves; the failures are listed when it drops.
PASS_FLOOR = 182

MODULE = '''
import pytest

OPEN = "<r>"
CLOSE = "</r>"

PLAIN = {"output": "Just an answer", "reasoning": None, "content": "Just an answer"}
SPLIT = {"output": f"{OPEN}why{CLOSE}so", "reasoning": "why", "content": "so"}
SPLIT_STREAM = {"output": f"{OPEN}why{CLOSE}so", "reasoning": None, "content": "whyso"}

CASES = [
    pytest.param(False, PLAIN, id="plain"),
    pytest.param(False, SPLIT, id="split"),
    pytest.param(True, SPLIT_STREAM, id="split_streaming"),
]


@pytest.mark.parametrize("streaming, param_dict", CASES)
def test_reasoning(streaming, param_dict, tokenizer):
    tokens = tokenizer.tokenize(param_dict["output"])
    reasoning, content = run_reasoning_extraction(parser, tokens, streaming=streaming)
    assert reasoning == param_dict["reasoning"]
    assert content == param_dict["content"]


@pytest.mark.parametrize("deltas, expected_reasoning, expected_content", [(["a", "</r>b"], "a", "b")])
def test_deltas(deltas, expected_reasoning, expected_content):
    reconstructor = run_reasoning_extraction_streaming(parser, deltas)
    assert reconstructor.reasoning == expected_reasoning
    assert (reconstructor.other_content or None) == expected_content


def test_thinking_off():
    parser = make_parser(chat_template_kwargs={"enable_thinking": False})
    reasoning, content = parser.extract_reasoning("plain", request)
    assert reasoning is None
    assert content == "plain"


@pytest.mark.parametrize("param_dict", [pytest.param(PLAIN, id="checked"), pytest.param(SPLIT, id="unchecked")])
def test_guarded(param_dict, request):
    reasoning, content = run_reasoning_extraction(parser, [param_dict["output"]])
    if request.node.callspec.id != "unchecked":
        assert reasoning == param_dict["reasoning"]
        assert content == param_dict["content"]


def test_end_state_only(tokenizer):
    assert parser.is_reasoning_end([1, 2])


def test_one_stream_step():
    delta = parser.extract_reasoning_streaming("", "a", "a", [], [1], [1])
    assert delta.reasoning == "a"
'''


def test_reader_resolves_literals_and_reports_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "test_demo_reasoning_parser.py"
    path.write_text(MODULE, encoding="utf-8")
    extraction = tool.module_cases(path, "demo")
    by_test = {case.test.split("::", 1)[1]: case for case in extraction.cases}
    assert list(by_test) == ["test_reasoning[plain]", "test_reasoning[split]", "test_reasoning[split_streaming]",
                             "test_deltas[0]", "test_thinking_off", "test_guarded[checked]"]
    split = by_test["test_reasoning[split]"]
    assert (split.model_output, split.expected, split.streaming) == ("<r>why</r>so", {"reasoning": "why",
                                                                                      "content": "so"}, False)
    # vLLM expects this output split another way when streamed: both rows are debatable
    assert split.debatable and by_test["test_reasoning[split_streaming]"].debatable
    assert not by_test["test_reasoning[plain]"].debatable
    deltas = by_test["test_deltas[0]"]
    assert (deltas.model_output, deltas.chunks, deltas.streaming) == ("a</r>b", ["a", "</r>b"], True)
    assert deltas.expected == {"reasoning": "a", "content": "b"}
    off = by_test["test_thinking_off"]
    assert off.template_kwargs == {"enable_thinking": False}
    assert off.expected == {"reasoning": None, "content": "plain"}
    assert by_test["test_guarded[checked]"].expected == {"reasoning": None, "content": "Just an answer"}
    assert extraction.skipped == {"asserts no reasoning or content (ids, end state, parser choice)": 1,
                                  "asserts nothing of this row's reasoning or content (a branch on its id)": 1,
                                  "streams through single steps built in code (extract_reasoning_streaming)": 1}


def _case(expected: dict[str, object], output: str = "", kwargs: dict[str, object] | None = None) -> object:
    return tool.Case(id="c", family="f", test="t", template="", model_output=output, expected=expected,
                     streaming=False, template_kwargs=kwargs)


class _Markers:
    def __init__(self, start: str, end: str) -> None:
        self.start, self.end = start, end


class _Analysis:
    """The parts of an analysis the comparison reads."""

    def __init__(self, start: str = "<think>", end: str = "</think>", source: str = "") -> None:
        self.reasoning = _Markers(start, end)
        self.tools = type("Tools", (), {"section_start": "<calls>", "call_start": ""})()
        self.source = source


def test_comparison_and_its_classes() -> None:
    analysis = _Analysis()
    want = {"reasoning": "why", "content": "so"}
    assert tool.compare(_case(want), {"reasoning_content": "why", "content": "so"}, analysis) == ("", True)
    assert tool.compare(_case(want), {"reasoning_content": "why\n", "content": " so"}, analysis) == ("", False)
    assert tool.compare(_case({"reasoning": None}), {"reasoning_content": ""}, analysis) == ("", True)
    assert tool.compare(_case(want), {"content": "whyso"}, analysis)[0] == "reasoning and content differ"
    kept = _case({"reasoning": None, "content": "<think>why</think>so"})
    assert tool.compare(kept, {"reasoning_content": "why", "content": "so"}, analysis)[0].startswith("debatable")
    call = _case({"reasoning": "why", "content": "<calls>f()"})
    message = {"reasoning_content": "why", "content": None, "tool_calls": [{"function": {"name": "f"}}]}
    assert tool.compare(call, message, analysis) == ("", False)  # the call is read, not left as text
    foreign = _case(want, "why[/r]so</r>")
    assert tool.compare(foreign, {"content": "why[/r]so</r>"}, analysis)[0] == (
        "template lacks it: vLLM's test writes markers the template never writes")
    written = _Analysis(source="<think>{{ r }}</think></r>")  # the template writes `</r>`: no excuse
    assert tool.compare(foreign, {"content": "why[/r]so</r>"}, written)[0] == "reasoning and content differ"
    wrapped = _case(want, "<think>why</think><answer>so</answer>")
    assert tool.compare(wrapped, {"reasoning_content": "why", "content": "<answer>so</answer>"}, analysis)[0] == (
        "debatable: vLLM drops wrapper markup the template never writes")
    option = _case(want, "x", {"force_answer": True})
    assert tool.compare(option, {"content": "x"}, analysis)[0].startswith("debatable: vLLM's parser reads a request")
    assert tool.compare(_case(want), {"content": "x"}, _Analysis("", ""))[0] == "analysis finds no reasoning"


def test_classes_where_a_peer_chose_otherwise_are_debatable_with_their_reason() -> None:
    analysis = _Analysis()
    # the calls' opener in reasoning no end marker has closed, no call after it: the peer ends the
    # reasoning there, here the broken call is the reasoning's text
    broken = _case({"reasoning": "why", "content": "<calls>not a call"}, "<think>why<calls>not a call")
    assert tool.compare(broken, {"reasoning_content": "why<calls>not a call"}, analysis)[0] == (
        tool.CALL_IN_OPEN_REASONING)
    only_reasoning = _case({"reasoning": "why"}, "<think>why<calls>f<x></calls>")
    assert tool.compare(only_reasoning, {"reasoning_content": "why<calls>f<x></calls>"}, analysis)[0] == (
        tool.CALL_IN_OPEN_REASONING)
    closed = _case({"reasoning": "why", "content": "so"}, "<think>why<calls>x</think>so")  # an end marker follows
    assert tool.compare(closed, {"reasoning_content": "why<calls>x</think>so"}, analysis)[0] == (
        "reasoning and content differ")
    # the test spells the template's reasoning markers as another release does
    suffixed = _Analysis("<think:v2>", "</think:v2>", source="<think:v2>{{ r }}</think:v2>")
    respelled = _case({"reasoning": "why", "content": "so"}, "why</think>so")
    cause = tool.compare(respelled, {"reasoning_content": "why</think>so"}, suffixed)[0]
    assert cause.startswith("debatable: template lacks it") and "`</think>` for `</think:v2>`" in cause
    other = _case({"reasoning": "why", "content": "so"}, "why</thought>so")  # no respelling: not excused
    assert tool.compare(other, {"reasoning_content": "why</thought>so"}, suffixed)[0] == (
        "template lacks it: vLLM's test writes markers the template never writes")
    # the reasoning moved into the content where no answer follows (a parser option)
    swapped = _case({"reasoning": "", "content": "why"}, "<think>why</think>")
    assert tool.compare(swapped, {"reasoning_content": "why"}, analysis)[0] == tool.REASONING_AS_CONTENT
    # text before the reasoning's opener, the answer to one peer and reasoning to the other
    channel = _Analysis("<|channel>thought", "<channel|>", source="<|channel>thought\n{{ r }}<channel|>")
    before = _case({"reasoning": "why", "content": "Before\n\nso"}, "Before\n<|channel>why<channel|>\nso")
    assert tool.compare(before, {"reasoning_content": "Before\n<|channel>why", "content": "so"}, channel)[0] == (
        tool.ANSWER_BEFORE_OPENER)
    at_start = _case({"reasoning": "why", "content": "so"}, "<|channel>why<channel|>so")
    assert tool.compare(at_start, {"reasoning_content": "x", "content": "so"}, channel)[0] == "reasoning differ"


def test_fetch_extracts_only_the_reasoning_tests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOPARSER_CACHE", str(tmp_path / "cache"))
    stem = tool.SDIST_STEM
    sdist = make_sdist(tmp_path / "vllm.tar.gz", {
        f"{stem}/tests/reasoning/test_demo_reasoning_parser.py": b"X = 1\n",
        f"{stem}/tests/reasoning/sub/test_nested.py": b"",
        f"{stem}/tests/tool_parsers/test_demo_tool_parser.py": b"",
    })
    directory = tool.fetch(sdist, subdir=tool.REASONING_TESTS)
    assert directory == tmp_path / "cache" / "corpus" / stem / "tests" / "reasoning"
    assert sorted(p.name for p in directory.iterdir()) == ["test_demo_reasoning_parser.py"]


def test_vllm_reasoning_expectations_do_not_regress() -> None:
    shared_templates()  # skip without either template corpus
    llamacpp_templates()
    cases, _skipped = tool.read_cases(vllm_reasoning_tests())
    outcomes = tool.run_all(cases)
    missing = {o.case.template for o in outcomes if o.status == "no_template" and o.case.template}
    assert not missing, f"templates missing from the corpora: {missing}"
    assert not [o for o in outcomes if o.cause.startswith("parser raised")], "no case should crash the parser"
    passed, comparable = tool.totals(outcomes)
    failing = "\n".join(f"{o.case.id}: {o.cause}" for o in outcomes if o.status == "fail")
    if passed < PASS_FLOOR:
        pytest.fail(f"{passed}/{comparable} vLLM reasoning expectations pass, below the floor of {PASS_FLOOR}:\n"
                    f"{failing}")
    firm = [f"{o.case.id}: {o.cause}" for o in outcomes if o.status == "fail" and not o.debatable]
    assert not firm, "every failure is one where vLLM chose otherwise, with its reason:\n" + "\n".join(firm)
