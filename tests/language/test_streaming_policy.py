"""The streaming policy (`autoparser/language/policy.py`, CONTRACT section 5), on every corpus and
fixture template.

Three stretches of prose stream in 4-character chunks through each template's parser: an answer,
a reasoning block after its start marker, and reasoning whose start marker the model left out,
ended by the end marker; each as plain words and as words among brackets, braces and quotes.
While they stream, no more than `HOLD_BOUND` characters may be held: holding the whole text until
the end would also keep stream == whole, so this is checked apart.
"""

from __future__ import annotations

import re
from pathlib import Path

import analyses
import corpora
import pytest
from analyses import streamed_in_random_chunks, whole_checked_by_streams, without_generated_ids

import autoparser
from autoparser.language import policy
from autoparser.render import TemplateRenderError

REPO = Path(__file__).resolve().parents[2]
holdback = corpora.tool_module("holdback_report")


def _templates() -> list:
    return [pytest.param(path, id=path.stem) for path in holdback.templates()]


def test_the_policy_is_one_ordered_list_the_readme_quotes() -> None:
    printed = policy.describe()
    print(printed)
    readme = re.sub(r"\s+", " ", (REPO / "README.md").read_text(encoding="utf-8"))
    for line in printed.splitlines():
        assert re.sub(r"\s+", " ", line) in readme, f"README does not quote: {line[:60]}..."
    assert len({rule.name for rule in policy.RULES}) == len(policy.RULES)


@pytest.mark.parametrize("template", _templates())
def test_prose_streams_with_at_most_the_bound_held(template: Path) -> None:
    try:
        analysis = autoparser.load(str(template))
    except TemplateRenderError as exc:  # listed in the README's "Templates that cannot be rendered"
        pytest.skip(f"the template does not render: {exc}")
    tools = holdback.TOOLS if analysis.tools.supported else None
    for tools_given in {tools is not None, False}:
        parser = analysis.parser(tools=tools if tools_given else None)
        for case in holdback.cases(analysis):
            held, roles = holdback.most_held(parser, case)
            assert held <= policy.HOLD_BOUND, f"{case.name}: {held} characters held ({roles})"


def _most_held_while_streaming(parser: autoparser.Parser, before: str, prose: str, after: str,
                               size: int) -> tuple[int, dict]:
    """The most prose held at once while it streamed in chunks of `size`, and the message."""
    stream = parser.stream()
    stream.feed(before)
    fed = emitted = most = 0
    for at in range(0, len(prose), size):
        for delta in stream.feed(prose[at:at + size]):
            emitted += len(delta.get("reasoning_content") or "") + len(delta.get("content") or "")
        fed += len(prose[at:at + size])
        most = max(most, fed - emitted)
    stream.feed(after)
    stream.finish()
    return most, stream.message()


@pytest.mark.parametrize("tools", [None, holdback.TOOLS], ids=["no-tools", "tools"])
def test_a_bracket_in_reasoning_that_begins_no_call_holds_back_nothing_after_it(tools: list | None) -> None:
    """Where a bare call may begin at a bracket and reasoning may end where calls begin, the
    reading that ended reasoning there fails at once (`[a]` is no call); the reading of the same
    reasoning that reads on past it is the one any later failure comes from, so the reasoning
    after the bracket streams as it comes: no more than the bound held, stream == whole, none lost."""
    analysis = autoparser.load(str(holdback.FIXTURES / "nested_brackets.jinja"))
    parser = analysis.parser(tools=tools, thinking=True)
    start, end = analysis.reasoning.start, analysis.reasoning.end
    prose = "I think [a] then more words follow here. " * 10
    for after in (end + "The answer.", ""):
        text = start + prose + after
        whole = without_generated_ids(parser.parse(text))
        assert whole["reasoning_content"] == prose.strip()
        assert whole["content"] == ("The answer." if after else None)
        for size in (1, 4, 7):
            held, message = _most_held_while_streaming(parser, start, prose, after, size)
            assert held <= policy.HOLD_BOUND, f"{size}-character chunks: {held} characters held"
            assert without_generated_ids(message) == whole
        for seed in range(4):
            assert without_generated_ids(streamed_in_random_chunks(parser, text, seed)) == whole


def _first_role(analysis: autoparser.Analysis, text: str, **kwargs: object) -> str:
    stream = analysis.parser(**kwargs).stream()
    for at in range(0, len(text), 4):
        for delta in stream.feed(text[at:at + 4]):
            for role in ("reasoning_content", "content"):
                if delta.get(role):
                    return role
    return "none"


def _template(name: str) -> autoparser.Analysis:
    for path in corpora.all_templates():
        if path.stem == name:
            return autoparser.load(str(path))
    pytest.skip(f"{name} is not in the corpora")


PROSE = "Paris is usually mild in spring. " * 4


def test_where_the_template_never_writes_the_start_marker_the_output_starts_in_reasoning() -> None:
    """Seed 000's table for R1: text before the first `</think>` is reasoning, marked or not."""
    r1 = _template("hfjs-e2e__deepseek-ai-DeepSeek-R1")
    assert r1.reasoning.start_inferred
    assert _first_role(r1, PROSE) == "reasoning_content"
    assert _first_role(r1, "<think>\n" + PROSE) == "reasoning_content"
    message = r1.parser().parse(PROSE + "</think>\n\nIt is mild.")
    assert (message["reasoning_content"], message["content"]) == (PROSE.strip(), "It is mild.")


def test_where_the_model_writes_the_start_marker_an_unmarked_output_is_the_answer() -> None:
    qwen = _template("Qwen-Qwen3-0.6B")
    assert not qwen.reasoning.start_inferred
    assert _first_role(qwen, PROSE) == "content"
    assert _first_role(qwen, "<think>\n" + PROSE) == "reasoning_content"
    prompt = qwen.render([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                         **qwen.thinking_kwargs(False))
    assert _first_role(qwen, PROSE, prompt=prompt) == "content"


QUOTED_TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {"a": {"type": "string"}}}}}]
AFTER_CALL = "The weather in Paris is usually mild in spring, with showers now and then. Okay!!"


@pytest.mark.parametrize("template", ["tag_list_calls", "LFM2.5-8B-A1B"])
@pytest.mark.parametrize("value, argument", [("'x'", "x"), ('"x"', "x"), ("'it's'", "it's"), ("1", "1")])
def test_prose_after_a_python_call_with_a_quoted_value_streams(template: str, value: str, argument: str) -> None:
    """A quoted value's closing quote may also be a quote inside it (`_PyValue`): that reading
    fails where its text meets the call section's end marker, so the prose after the call is
    not held to the end of the output (it was, all of it, for `f(a='x')`)."""
    fixture = holdback.FIXTURES / f"{template}.jinja"
    analysis = autoparser.load(str(fixture)) if fixture.exists() else _template(template)
    parser = analysis.parser(tools=QUOTED_TOOLS)
    start, end = ("<%calls%>[", "]<%/calls%>") if template == "tag_list_calls" else \
        ("<|tool_call_start|>[", "]<|tool_call_end|>")
    call = f"{start}f(a={value}){end}"
    text = call + AFTER_CALL
    whole = without_generated_ids(parser.parse(text))
    assert whole["content"] == AFTER_CALL
    assert [c["function"]["arguments"] for c in whole["tool_calls"]] == [f'{{"a": "{argument}"}}']
    for size in (1, 4):
        held, message = _most_held_while_streaming(parser, call, AFTER_CALL, "", size)
        assert held <= policy.HOLD_BOUND, f"{size}-character chunks: {held} characters held"
        assert without_generated_ids(message) == whole
    for seed in range(3):
        assert without_generated_ids(streamed_in_random_chunks(parser, text, seed)) == whole
    for at in range(1, len(text)):
        stream = parser.stream()
        stream.feed(text[:at])
        stream.feed(text[at:])
        stream.finish()
        assert without_generated_ids(stream.message()) == whole, f"split at {at}"


FUNCTIONARY = "meetkai-functionary-medium-v3.2"  # the prompt ends with `>>>`: a call's name or `all`


@pytest.mark.parametrize(("before", "after"), [
    ("all\n", ""),
    ('get_weather\n{"location": "Paris"}>>>all\n', ""),
])
def test_content_after_a_head_the_prompt_opened_streams(before: str, after: str) -> None:
    """Where the prompt opened a call's header, content after the recipient word (`all`) or
    after a call was held to the end of the output: the reading of the same text as content with
    no head lived on beside it. Content with no head does not begin with a head's word now."""
    parser = _template(FUNCTIONARY).parser(tools=holdback.TOOLS)
    whole = without_generated_ids(parser.parse(before + AFTER_CALL + after))
    assert whole["content"] == AFTER_CALL
    for size in (1, 4):
        held, message = _most_held_while_streaming(parser, before, AFTER_CALL, after, size)
        assert held <= policy.HOLD_BOUND, f"{size}-character chunks: {held} characters held"
        assert without_generated_ids(message) == whole


@pytest.mark.parametrize(("text", "content", "calls"), [
    ("allow me to look.", "allow me to look.", 0),
    ("all\nHere it is.", "Here it is.", 0),
    ("get_weather is a tool.", "get_weather is a tool.", 0),
    ('get_weather\n{"location": "Paris"}>>>all\nDone.', "Done.", 1),
])
def test_a_head_word_is_markup_only_where_it_is_a_whole_word(text: str, content: str, calls: int) -> None:
    """`allow` does not begin with the recipient `all` (its `a`, `l`, `l` were lost), and a
    tool's name followed by prose is content; stream == whole for every split."""
    parser = _template(FUNCTIONARY).parser(tools=holdback.TOOLS)
    whole = whole_checked_by_streams(parser, text)
    assert whole["content"] == content and len(whole["tool_calls"]) == calls


def test_prose_after_a_call_the_prompt_opened_streams() -> None:
    """GLM-4's tool-only template: the prompt ends with `<tool_call>`, the output with the call's
    name; the prose after the call was held to the end of the output."""
    parser = analyses.glm4_tool_only().parser(tools=holdback.TOOLS)
    call = "get_weather\n<arg_key>location</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>\n"
    whole = whole_checked_by_streams(parser, call + "Done.")
    assert whole["content"] == "Done." and len(whole["tool_calls"]) == 1
    for size in (1, 4):
        held, message = _most_held_while_streaming(parser, call, AFTER_CALL, "", size)
        assert held <= policy.HOLD_BOUND, f"{size}-character chunks: {held} characters held"
