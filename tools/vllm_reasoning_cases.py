"""vLLM's reasoning-parser expectations, read from its `tests/reasoning/` modules, run against autoparser.

vLLM tests each hand-written reasoning parser with model outputs and the reasoning and content it
must split them into, streamed or not: literal dicts in `pytest.mark.parametrize` rows (`output`,
`reasoning`, `content`), literal rows of deltas and expectations, and the asserts of single tests;
a case expects what the test's asserts check in the branches its row reaches.
This script reads those modules as data with the literal reader of `vllm_parser_cases.py` (the
same pinned sdist, fetched into the same cache; nothing of vLLM is imported or run). An output
built in code (token ids, a loop over deltas, one step of a stream) is counted as not extracted.

Each case runs against the analysis of its family's real template (`TEMPLATES` below) in the
prompt state its expectation assumes (CONTRACT, streaming deltas): the template's generation
prompt rendered with the test's `chat_template_kwargs`; where a case expects reasoning from an
output that does not open it, the prompt rendered with thinking on (the template's own switch), or
that prompt followed by the reasoning opener where the template leaves the opening to the model;
where a case expects an answer alone, the prompt with thinking off. A streamed case is streamed
(a character at a time, in vLLM's deltas where the test has them, in random cuts) and every
streaming must equal the whole parse.

Comparison: reasoning and content equal once surrounding whitespace is stripped and `None` is
read as empty (vLLM's tests compare exactly; the report counts the exact matches too). Where the
parser reads a call that vLLM's reasoning parser leaves as content text, the content is compared
up to the call. A failure is debatable where the test's name says it probes malformed or unusual
output, where vLLM expects different results streamed and whole for one output (the project gives
one answer), or where vLLM keeps a reasoning marker in the content.

    python tools/vllm_reasoning_cases.py --report            # pass counts per family, causes
    python tools/vllm_reasoning_cases.py --failures FAMILY   # failing cases with what was parsed
    python tools/vllm_reasoning_cases.py --json              # the extracted cases
"""

from __future__ import annotations

import ast
import collections
import itertools
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tools/ is scripts, not a package
import vllm_parser_cases as shared  # noqa: E402
from vllm_parser_cases import (  # noqa: E402
    DEBATABLE_NAME,
    REASONING_TESTS,
    TEMPLATE_LACKS_IT,
    CaseTool,
    Extraction,
    Module,
    Param,
    _callee,
    _without_ids,
    bind_assignments,
    chunkings,
    evaluate,
    parametrize_sets,
    respelled_tags,
    run_tool,
    streamed,
    test_functions,
    totals,
)

# re-exported for the tests and tests/corpora.py, which reach them through this module
from vllm_parser_cases import SDIST_STEM as SDIST_STEM  # noqa: E402
from vllm_parser_cases import FetchError as FetchError  # noqa: E402
from vllm_parser_cases import fetch as fetch  # noqa: E402
from vllm_parser_cases import tests_dir as tests_dir  # noqa: E402

# test module -> (family, template): the template of the model the test names where the corpora
# hold it, else the family's closest published one; "" where none writes the parser's markers.
TEMPLATES: dict[str, tuple[str, str]] = {
    "test_base_thinking_reasoning_parser.py": ("base_thinking", ""),  # invented markers, no model
    "test_deepseekr1_reasoning_parser.py": ("deepseek_r1", "llamacpp:deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"),
    "test_deepseekv3_reasoning_parser.py": ("deepseek_v3", "llamacpp:deepseek-ai-DeepSeek-V3.1.jinja"),
    "test_ernie45_reasoning_parser.py": ("ernie45", ""),
    "test_gemma4_reasoning_parser.py": ("gemma4", "llamacpp:google-gemma-4-31B-it.jinja"),
    "test_glm4_moe_reasoning_parser.py": ("glm45", "llamacpp:GLM-4.7-Flash.jinja"),
    "test_gptoss_reasoning_parser.py": ("gptoss", "llamacpp:openai-gpt-oss-120b.jinja"),
    "test_granite_reasoning_parser.py": ("granite", "shared:hfjs-ollama-automap__granite3.2-8b.jinja"),
    "test_granite_thinking_reasoning_parser.py": ("granite_thinking", ""),
    "test_holo2_reasoning_parser.py": ("holo2", ""),
    "test_hunyuan_reasoning_parser.py": ("hunyuan_a13b", "shared:vllm__tool_chat_template_hunyuan_a13b.jinja"),
    "test_hy_v3_reasoning_parser.py": ("hy_v3", "llamacpp:tencent-Hy3.jinja"),
    "test_k2_horizon_reasoning_parser.py": ("k2_horizon", ""),
    "test_kimi_k2_reasoning_parser.py": ("kimi_k2", "shared:xinference__Kimi-K2.5.jinja"),
    "test_kimi_k3_reasoning_parser.py": ("kimi_k3", "llamacpp:Kimi-K3.jinja"),
    "test_minimax_m2_append_reasoning_parser.py": ("minimax_m2_append_think", "llamacpp:MiniMax-M2.jinja"),
    "test_minimax_m2_reasoning_parser.py": ("minimax_m2", "llamacpp:MiniMax-M2.jinja"),
    "test_minimax_m3_reasoning_parser.py": ("minimax_m3", "llamacpp:MiniMax-M3.jinja"),
    "test_nemotron_v3_reasoning_parser.py": ("nemotron_v3", "llamacpp:NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja"),
    "test_olmo3_reasoning_parser.py": ("olmo3", ""),
    "test_qwen3_reasoning_parser.py": ("qwen3", "llamacpp:Qwen3.5-4B.jinja"),
    "test_step3_reasoning_parser.py": ("step3", ""),
    "test_step3p5_reasoning_parser.py": ("step3p5", "llamacpp:StepFun3.5-Flash.jinja"),
}
# Cases whose test name holds the key use another template: GLM-5.3's opens reasoning itself.
TEMPLATE_BY_TEST = {"glm53": "shared:sglang__glm53-flash-chat_template.jinja"}

USER_TURN = [{"role": "user", "content": "Hello"}]
TAG = re.compile(r"<[^<>\s]{1,40}>")  # a marker-like token in an output


@dataclass
class Case:
    id: str
    family: str
    test: str  # "module.py::test[param-id]"
    template: str
    model_output: str
    expected: dict[str, Any]  # "reasoning" and/or "content": str or None
    streaming: bool
    chunks: list[str] | None = None
    template_kwargs: dict[str, Any] | None = None  # the test's chat_template_kwargs
    notes: list[str] = field(default_factory=list)
    debatable: bool = False


# -- reading the modules ----------------------------------------------------------------------------

OUTPUT_ARGS = ("output", "model_output", "text", "model_text")
CHUNK_ARGS = ("deltas", "chunks", "model_deltas", "delta_texts")


def _is_extraction(name: str) -> bool:
    """A call that feeds a whole output (or its deltas) to a reasoning parser: `extract_reasoning`
    and the suites' `run_*` helpers; one step of a stream (`extract_reasoning_streaming`) is not."""
    helper = name.lstrip("_")
    return name in ("extract_reasoning", "extract_reasoning_content") or (
        helper.startswith("run_") and any(w in helper for w in ("reasoning", "stream", "parse")))


def _literal_text(node: ast.expr, env: dict[str, Any]) -> tuple[str, list[str] | None] | None:
    try:
        value = evaluate(node, env)
    except Exception:  # noqa: BLE001  (anything not literal is no output)
        return None
    if isinstance(value, str):
        return value, None
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return "".join(value), value
    return None


def _streaming_of(call: ast.Call, env: dict[str, Any]) -> bool:
    for keyword in call.keywords:
        if keyword.arg == "streaming":
            try:
                return bool(evaluate(keyword.value, env))
            except Exception:  # noqa: BLE001
                return False
    return any(w in _callee(call) for w in ("stream", "delta"))


def fed_outputs(fn: ast.FunctionDef, env: dict[str, Any]) -> list[tuple[str, list[str] | None, bool]]:
    """(text, deltas or None, streamed) of each literal output the function feeds a parser; where
    it feeds one built in code, the literal it tokenizes (`tokenizer.tokenize(CASE["output"])`)."""
    fed: dict[str, tuple[list[str] | None, bool]] = {}
    tokenized: dict[str, None] = {}
    streamed = None
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call):
            continue
        name = _callee(node)
        if _is_extraction(name):
            streamed = _streaming_of(node, env) if streamed is None else streamed
            for arg in [*node.args, *(k.value for k in node.keywords if k.arg in ("model_output", "model_deltas"))]:
                found = _literal_text(arg, env)
                if found is not None:
                    fed.setdefault(found[0], (found[1], _streaming_of(node, env)))
        elif "tokenize" in name or "encode" in name:
            for arg in node.args:
                found = _literal_text(arg, env)
                if found is not None:
                    tokenized.setdefault(found[0])
    if fed:
        return [(text, chunks, stream) for text, (chunks, stream) in fed.items()]
    return [(text, None, bool(streamed)) for text in tokenized] if streamed is not None else []


def _template_kwargs(fn: ast.FunctionDef, env: dict[str, Any]) -> dict[str, Any] | None:
    """The literal `chat_template_kwargs=` the test passes its parser or request, if any."""
    for node in ast.walk(fn):
        if isinstance(node, ast.keyword) and node.arg == "chat_template_kwargs":
            try:
                value = evaluate(node.value, env)
            except Exception:  # noqa: BLE001
                continue
            if isinstance(value, dict):
                return value
    return None


def _role_of_result(text: str) -> str | None:
    """Which result an asserted expression holds: "reasoning", "content" or None."""
    text = text.strip("()")
    last = re.split(r"[.\s]", text.split(" or ")[0])[-1]
    if last in ("reasoning", "reasoning_content"):
        return "reasoning"
    if last in ("content", "other_content"):
        return "content"
    return None


ROW_ID = "__row_id__"  # the parametrize id of the row, as `request.node.callspec.id` reads it


def _applies(test: ast.expr, env: dict[str, Any]) -> bool | None:
    """Whether a branch on the row's id (`if request.node.callspec.id != "some_row":`) is taken
    for this row; None where the test is not such a comparison."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and ast.unparse(test.left).endswith("callspec.id")):
        return None
    try:
        other = evaluate(test.comparators[0], env)
    except Exception:  # noqa: BLE001
        return None
    row, op = env.get(ROW_ID), test.ops[0]
    if isinstance(op, ast.Eq | ast.NotEq):
        return (row == other) == isinstance(op, ast.Eq)
    if isinstance(op, ast.In | ast.NotIn) and isinstance(other, list | tuple | set):
        return (row in other) == isinstance(op, ast.In)
    return None


def _reached(statements: list[ast.stmt], env: dict[str, Any]) -> Iterator[ast.AST]:
    """The nodes of `statements`, without the branches a row-id test skips for this row."""
    for statement in statements:
        if isinstance(statement, ast.If) and (taken := _applies(statement.test, env)) is not None:
            yield from _reached(statement.body if taken else statement.orelse, env)
        else:
            yield from ast.walk(statement)


def asserted(fn: ast.FunctionDef, env: dict[str, Any]) -> dict[str, Any]:
    """`{"reasoning": ..., "content": ...}` as the function's asserts state them (`x == literal`,
    `x is None`, either side), in the branches the row reaches."""
    out: dict[str, Any] = {}
    for node in _reached(fn.body, env):
        if not (isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare) and len(node.test.ops) == 1
                and isinstance(node.test.ops[0], ast.Eq | ast.Is)):
            continue
        left, right = node.test.left, node.test.comparators[0]
        for result, literal in ((left, right), (right, left)):
            role = _role_of_result(ast.unparse(result))
            if role is None or role in out:
                continue
            try:
                value = evaluate(literal, env)
            except Exception:  # noqa: BLE001
                continue
            if value is None or isinstance(value, str):
                out[role] = value
                break
    return out


def _row_binding(names: list[str], row: Any) -> tuple[dict[str, Any], str | None, str]:
    if isinstance(row, Param):
        return dict(zip(names, row.values, strict=False)), row.id, row.marks
    values = list(row) if isinstance(row, tuple | list) and len(names) > 1 else [row]
    return dict(zip(names, values, strict=False)), None, ""


def _rows(fn: ast.FunctionDef, env: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    """Each combination of the function's literal parametrize rows: (bound arguments, label)."""
    sets = []
    for names, rows, ids in parametrize_sets(fn, env):
        bound_rows = []
        for k, row in enumerate(rows):
            bound, pid, marks = _row_binding(names, row)
            label = pid or (ids[k] if k < len(ids) else None) or str(k)
            bound_rows.append((dict(bound, __marks__=marks), str(label)))
        sets.append(bound_rows)
    out = []
    for combination in itertools.product(*sets):
        bound: dict[str, Any] = {}
        for row_bound, _label in combination:
            bound.update(row_bound)
        out.append((bound, "-".join(label for _b, label in combination)))
    return out or [({}, "")]


def _row_case_fields(bound: dict[str, Any]) -> tuple[str | None, list[str] | None, dict[str, Any]]:
    """Output, deltas and expectation a row binds: a dict with `output`, or output/deltas and
    `expected_*` arguments."""
    for value in bound.values():
        if isinstance(value, dict) and isinstance(value.get("output"), str):
            expected = {k: value[k] for k in ("reasoning", "content") if k in value}
            return value["output"], None, expected
    text = next((bound[a] for a in OUTPUT_ARGS if isinstance(bound.get(a), str)), None)
    chunks = next((bound[a] for a in CHUNK_ARGS if isinstance(bound.get(a), list)), None)
    if text is None and chunks and all(isinstance(c, str) for c in chunks):
        text = "".join(chunks)
    expected = {}
    for name, value in bound.items():
        if name.startswith("expected_") and (value is None or isinstance(value, str)):
            role = _role_of_result(name.removeprefix("expected_"))
            if role:
                expected[role] = value
    return text, chunks, expected


def function_cases(family: str, path: Path, test: str, fn: ast.FunctionDef, env: dict[str, Any],
                   out: Extraction[Case]) -> None:
    for bound, label in _rows(fn, env):
        row_env = dict(env, **bound, **{ROW_ID: label})
        bind_assignments(fn.body, row_env)
        text, chunks, expected = _row_case_fields(bound)
        fed = fed_outputs(fn, row_env)
        streaming = bound.get("streaming")
        asserts = asserted(fn, row_env)  # what vLLM checks of the row (its dict may say more)
        if not asserts:
            out.skipped["asserts nothing of this row's reasoning or content (a branch on its id)" if expected
                        else "asserts no reasoning or content (ids, end state, parser choice)"] += 1
            continue
        if text is None:
            if len(fed) != 1:
                out.skipped[skip_reason(fn) if not fed else "several outputs in one test"] += 1
                continue
            text, chunks, fed_streaming = fed[0]
            streaming = fed_streaming if streaming is None else streaming
        elif streaming is None:
            streaming = bool(fed and fed[0][2]) or any("stream" in _callee(n) for n in ast.walk(fn)
                                                        if isinstance(n, ast.Call) and _is_extraction(_callee(n)))
        expected = asserts
        kwargs = bound.get("chat_template_kwargs")
        kwargs = kwargs if isinstance(kwargs, dict) else _template_kwargs(fn, row_env)
        effort = next((v["reasoning_effort"] for v in bound.values() if isinstance(v, dict) and "reasoning_effort" in v
                       and isinstance(v.get("output"), str)), None)
        if isinstance(effort, str):  # a request field the template reads
            kwargs = {**(kwargs or {}), "reasoning_effort": effort}
        name = f"{test}[{label}]" if label else test
        notes = [f"vLLM marks: {bound['__marks__']}"] if bound.get("__marks__") else []
        out.cases.append(Case(id=f"vllm-{family}-{name}", family=family, test=f"{path.name}::{name}", template="",
                              model_output=text, expected=expected, streaming=bool(streaming), chunks=chunks,
                              template_kwargs=kwargs, notes=notes,
                              debatable=bool(DEBATABLE_NAME.search(name)) or "xfail" in bound.get("__marks__", "")))


def skip_reason(fn: ast.FunctionDef) -> str:
    calls = {_callee(n) for n in ast.walk(fn) if isinstance(n, ast.Call)}
    if calls & {"extract_reasoning_streaming", "extract_reasoning_content_streaming", "parse_delta"}:
        return "streams through single steps built in code (extract_reasoning_streaming)"
    return "no literal output fed to the parser"


def module_cases(path: Path, family: str) -> Extraction[Case]:
    """The cases one vLLM reasoning test module states, and what it states that is not read."""
    module, out = Module(path), Extraction[Case]()
    for cls, fn in test_functions(module.tree):
        env = dict(module.env)
        if cls is not None:
            bind_assignments(cls.body, env)
        function_cases(family, path, f"{cls.name}::{fn.name}" if cls else fn.name, fn, env, out)
    mark_split_expectations(out.cases)
    return out


def mark_split_expectations(cases: list[Case]) -> None:
    """Debatable: an output vLLM expects to split one way whole and another way streamed (the
    project gives every output one answer, streamed or not)."""
    answers: dict[str, set[str]] = collections.defaultdict(set)
    for case in cases:
        answers[case.model_output].add(json.dumps(_normalized(case.expected), sort_keys=True))
    for case in cases:
        if len(answers[case.model_output]) > 1 and not case.template_kwargs:
            case.debatable = True
            case.notes.append("vLLM expects another split for this output elsewhere (streamed or not)")


def read_cases(directory: Path) -> tuple[list[Case], dict[str, collections.Counter[str]]]:
    """Every case of the modules in `TEMPLATES` (ids made unique), and what was not extracted."""
    return shared.read_cases(directory, TEMPLATES, module_cases, TEMPLATE_BY_TEST)


# -- running ----------------------------------------------------------------------------------------

@dataclass
class Outcome:
    case: Case
    status: str  # "pass", "fail", "no_template"
    cause: str = ""
    got: dict[str, Any] = field(default_factory=dict)
    exact: bool = False  # equal without normalisation, as vLLM compares
    prompt_state: str = ""

    @property
    def debatable(self) -> bool:
        return self.case.debatable or self.cause.startswith("debatable")


def _normalized(result: dict[str, Any]) -> dict[str, str]:
    return {k: (result.get(k) or "").strip() for k in ("reasoning", "content") if k in result}


def _got(message: dict[str, Any]) -> dict[str, Any]:
    return {"reasoning": message.get("reasoning_content"), "content": message.get("content")}


def _content_before_calls(want: str, analysis: Any) -> str:
    """The expected content up to the first call marker: what remains content once calls are read."""
    t = analysis.tools
    cuts = [want.find(m.strip()) for m in (t.section_start, t.call_start) if m.strip() and m.strip() in want]
    return want[:min(cuts)] if cuts else want


def _only_foreign_wrapper(got: str, want: str, analysis: Any) -> bool:
    """Whether `got` is `want` with markup around it that the template never writes."""
    if want not in got:
        return False
    residue = got.replace(want, "", 1)
    tags = TAG.findall(residue)
    return bool(tags) and not TAG.sub("", residue).strip() and not any(t in analysis.source for t in tags)


def compare(case: Case, message: dict[str, Any], analysis: Any) -> tuple[str, bool]:
    """("" or the cause of the difference, whether the match is exact)."""
    got = _got(message)
    expected = dict(case.expected)
    if message.get("tool_calls") and isinstance(expected.get("content"), str):
        expected["content"] = _content_before_calls(expected["content"], analysis)
    exact = all((got[k] or None) == (case.expected[k] or None) for k in case.expected)
    want, have = _normalized(expected), _normalized({k: got[k] for k in expected})
    if want == have:
        return "", exact
    markers = [m for m in (analysis.reasoning.start.strip(), analysis.reasoning.end.strip()) if m]
    if any(m in want.get("content", "") for m in markers):
        return "debatable: vLLM keeps a reasoning marker in the content", False
    if not markers:
        return "analysis finds no reasoning", False
    if _broken_call_in_open_reasoning(case, message, analysis):
        return CALL_IN_OPEN_REASONING, False
    foreign = set(TAG.findall(case.model_output)) - set(markers)
    if not all(m in case.model_output for m in markers) and foreign:
        if any(t not in analysis.source for t in foreign):
            return _unwritten_cause(case, analysis), False
    if _only_foreign_wrapper(have.get("content", ""), want.get("content", ""), analysis) and \
            have.get("reasoning") == want.get("reasoning"):
        return "debatable: vLLM drops wrapper markup the template never writes", False
    unread = [k for k in case.template_kwargs or {} if k not in analysis.source]
    if unread:
        return f"debatable: vLLM's parser reads a request option the template does not ({', '.join(unread)})", False
    if not want.get("reasoning") and want.get("content") and not have.get("content") \
            and have.get("reasoning") == want["content"]:
        return REASONING_AS_CONTENT, False
    if _answer_before_opener(case, analysis):
        return ANSWER_BEFORE_OPENER, False
    wrong = [k for k in want if want[k] != have.get(k)]
    return " and ".join(wrong) + " differ", False


# The classes of difference that are the project's choice where a peer chose otherwise, each with why.
CALL_IN_OPEN_REASONING = (
    "debatable: vLLM ends reasoning no end marker has closed at the calls' opener whatever follows; "
    "here a call that breaks there is the reasoning's text, as llama.cpp expects of a call the thinking "
    "mentions (README, Streaming policy, rule nothing-lost)")
REASONING_AS_CONTENT = (
    "debatable: vLLM moves the reasoning into the content where the output holds no answer (its parser's "
    "force_nonempty_content option, which no template states)")
ANSWER_BEFORE_OPENER = (
    "debatable: the peers disagree on text before the reasoning's opener (the answer to vLLM's test, "
    "reasoning to SGLang's detect_and_parse, where the opener anywhere opens reasoning from the output's "
    "start); here the prompt's state decides that text's role at once (rule role-from-prompt)")


def _unwritten_cause(case: Case, analysis: Any) -> str:
    """Template lacks it; debatable where the test spells the template's reasoning markers as
    another release of the template writes them (`</think>` where it writes `</think:opensource>`)."""
    pairs = respelled_tags(case.model_output, (analysis.reasoning.start, analysis.reasoning.end))
    if not pairs:
        return TEMPLATE_LACKS_IT
    shown = ", ".join(f"`{tag}` for `{marker}`" for tag, marker in pairs[:2])
    return f"debatable: {TEMPLATE_LACKS_IT} ({shown}: as another release of the template and its tokenizer spell them)"


def _call_openers(analysis: Any) -> list[str]:
    t = analysis.tools
    return [m.strip() for m in (t.section_start, t.call_start) if m.strip()]


def _broken_call_in_open_reasoning(case: Case, message: dict[str, Any], analysis: Any) -> bool:
    """Whether the parser read, as the text of reasoning no end marker has closed, call markup from
    the calls' opener on that reads as no call, where the peer ends the reasoning at that opener
    (the rest, where it states it, being the content)."""
    got = _got(message)
    reasoning, end = (got["reasoning"] or "").strip(), analysis.reasoning.end.strip()
    want = (case.expected.get("reasoning") or "").strip()
    rest = reasoning[len(want):].lstrip()
    if message.get("tool_calls") or not reasoning.startswith(want) or end in rest:
        return False
    if not any(rest.startswith(m) for m in _call_openers(analysis)):
        return False
    return "content" not in case.expected or (
        (case.expected["content"] or "").strip() == (rest + (got["content"] or "")).strip())


def _answer_before_opener(case: Case, analysis: Any) -> bool:
    """Whether the output writes text before the reasoning's opener (its start marker, or that
    marker's first tag: `<|channel>` of `<|channel>thought`) that the test expects as the answer."""
    start = analysis.reasoning.start.strip()
    tag = TAG.match(start)
    opener = tag.group() if tag else start
    before = case.model_output.split(opener, 1)[0].strip() if opener and opener in case.model_output else ""
    return bool(before) and (case.expected.get("content") or "").strip().startswith(before)


# -- the prompt a case assumes ----------------------------------------------------------------------

def _render(analysis: Any, kwargs: dict[str, Any]) -> str | None:
    try:
        return analysis.render(USER_TURN, **kwargs)
    except Exception:  # noqa: BLE001  (a template that needs more than a user turn: no prompt)
        return None


def _opens_reasoning(analysis: Any, prompt: str | None) -> bool:
    from autoparser.language.request import OPEN, start_state

    return prompt is not None and start_state(analysis, None, prompt)[0] == OPEN


def _thinking_kwargs(analysis: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The test's template variables, with the template's own thinking switch set the same way
    where the test switches thinking by another variable's name."""
    switched = [v for k, v in kwargs.items() if "think" in k and isinstance(v, bool)]
    return {**analysis.reasoning.toggle_kwargs(switched[0]), **kwargs} if switched else dict(kwargs)


def closes_unopened(text: str, analysis: Any) -> bool:
    """Whether the output closes reasoning it did not open (the prompt opened it)."""
    start, end = analysis.reasoning.start.strip(), analysis.reasoning.end.strip()
    closed = text.find(end) if end else -1
    return closed >= 0 and (not start or start not in text[:closed])


def prompt_for(case: Case, analysis: Any) -> tuple[str | None, str]:
    """(the rendered prompt the case's output continues, which state it was chosen for)."""
    reasoning = analysis.reasoning
    if case.template_kwargs:
        return _render(analysis, _thinking_kwargs(analysis, case.template_kwargs)), "the test's template variables"
    if reasoning.mode == "none" or "reasoning" not in case.expected:
        return _render(analysis, {}), "generation prompt"
    start = reasoning.start.strip()
    thinks = (bool((case.expected["reasoning"] or "").strip()) or closes_unopened(case.model_output, analysis)
              or bool(start and start in case.model_output))
    if not thinks:
        return _render(analysis, reasoning.toggle_kwargs(False)), "thinking off" if reasoning.toggle else "generation prompt"
    prompt, state = _render(analysis, reasoning.toggle_kwargs(True)), "thinking on"
    if start and start not in case.model_output and prompt is not None and not _opens_reasoning(analysis, prompt):
        return prompt + reasoning.start, "thinking on, reasoning opened after the generation prompt"
    return prompt, state


def run_case(case: Case, analysis: Any) -> Outcome:
    if analysis is None:
        return Outcome(case, "no_template", "no template in the corpus")
    prompt, state = prompt_for(case, analysis)
    parser = analysis.parser(prompt=prompt)
    try:
        whole = parser.parse(case.model_output)
        streams = [streamed(parser, chunks) for chunks in chunkings(case)]
    except Exception as exc:  # noqa: BLE001  (a crash is a failure of this case, with its cause)
        return Outcome(case, "fail", f"parser raised {type(exc).__name__}: {exc}", prompt_state=state)
    if any(_without_ids(s) != _without_ids(whole) for s in streams):
        return Outcome(case, "fail", "streamed differs from whole", streams[0], prompt_state=state)
    message = streams[0] if case.streaming else whole
    cause, exact = compare(case, message, analysis)
    return Outcome(case, "fail" if cause else "pass", cause, message, exact, state)


def run_all(cases: list[Case]) -> list[Outcome]:
    return shared.run_all(cases, run_case)


def report(outcomes: list[Outcome], skipped: dict[str, collections.Counter[str]]) -> str:
    by_family: dict[str, list[Outcome]] = collections.defaultdict(list)
    for outcome in outcomes:
        by_family[outcome.case.family].append(outcome)
    for family in skipped:
        by_family.setdefault(family, [])
    width = max(len(f) for f in by_family)
    lines = [f"{'family':<{width}}  pass/total  exact  fail  debatable  no-template  not-read  template"]
    for family, rows in by_family.items():
        count = collections.Counter(o.status for o in rows)
        debatable = sum(o.status == "fail" and o.debatable for o in rows)
        comparable = count["pass"] + count["fail"]
        template = ", ".join(sorted({o.case.template for o in rows if o.case.template})) or "-"
        lines.append(f"{family:<{width}}  {count['pass']:>4}/{comparable:<5}  {sum(o.exact for o in rows):>5}  "
                     f"{count['fail']:>4}  {debatable:>9}  {count['no_template']:>11}  "
                     f"{sum(skipped.get(family, {}).values()):>8}  {template}")
    passed, comparable = totals(outcomes)
    failed = [o for o in outcomes if o.status == "fail"]
    firm = [o for o in failed if not o.debatable]
    not_read = sum(sum(c.values()) for c in skipped.values())
    lines.append(f"total: {passed}/{comparable} cases with a template pass ({passed / max(comparable, 1):.1%}), "
                 f"{sum(o.exact for o in outcomes)} of them exactly as vLLM compares; "
                 f"{passed}/{passed + len(firm)} of the non-debatable ones; "
                 f"{len(outcomes)} cases, {len(outcomes) - comparable} without a template, "
                 f"{not_read} test items not extracted")
    causes = collections.Counter(("debatable: " if o.case.debatable and not o.cause.startswith("debatable")
                                  else "") + o.cause for o in failed)
    lines += [f"  {count:>4}  {cause}" for cause, count in causes.most_common()]
    reasons = collections.Counter()
    for counter in skipped.values():
        reasons.update(counter)
    lines += [f"  not extracted: {count:>4}  {reason}" for reason, count in reasons.most_common()]
    return "\n".join(lines)


def describe_failure(outcome: Outcome) -> str:
    case = outcome.case
    return (f"{case.id} [{'debatable ' if outcome.debatable else ''}{outcome.status}] {outcome.cause}"
            f"\n  test:     {case.test} ({'; '.join(case.notes) or '-'})"
            f"\n  template: {case.template or '-'}  prompt: {outcome.prompt_state}"
            f"{'  kwargs: ' + json.dumps(case.template_kwargs) if case.template_kwargs else ''}"
            f"\n  output:   {case.model_output!r} ({'streamed' if case.streaming else 'whole'})"
            f"\n  expect:   {json.dumps(case.expected, ensure_ascii=False)}"
            f"\n  got:      {json.dumps(_got(outcome.got) if outcome.got else {}, ensure_ascii=False)}"
            f"{'  calls: ' + str(len(outcome.got.get('tool_calls') or [])) if outcome.got.get('tool_calls') else ''}")


def main(argv: list[str] | None = None) -> int:
    return run_tool(CaseTool("vllm_reasoning_cases", __doc__.splitlines()[0], REASONING_TESTS, read_cases, run_all,
                             report, describe_failure), argv)


if __name__ == "__main__":
    sys.exit(main())
