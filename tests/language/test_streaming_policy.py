"""The streaming policy (`autoparser/language/policy.py`, CONTRACT section 5), on every corpus template.

Three stretches of prose stream in 4-character chunks through each template's parser: an answer,
a reasoning block after its start marker, and reasoning whose start marker the model left out,
ended by the end marker. While they stream, no more than `HOLD_BOUND` characters may be held:
holding the whole text until the end would also keep stream == whole, so this is checked apart.
"""

from __future__ import annotations

import re
from pathlib import Path

import corpora
import pytest

import autoparser
from autoparser.language import policy
from autoparser.render import TemplateRenderError

REPO = Path(__file__).resolve().parents[2]
holdback = corpora.tool_module("holdback_report")


def _templates() -> list:
    return [pytest.param(path, id=path.stem) for path in corpora.all_templates()] or [
        pytest.param(None, marks=pytest.mark.skip(reason="no corpus available"))]


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
