"""A parser stream can cross a process boundary (a server that parses where it generates hands
it over pickled): a stream pickled mid-output must carry on exactly as the original would, for
every kind of stream (message formats included)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from corpora import llamacpp_templates

import autoparser
from autoparser.roundtrip import TOOLS, run_template

FIXTURES = sorted((Path(__file__).resolve().parents[2] / "fixtures" / "templates").glob("*.jinja"))
REAL = ["openai-gpt-oss-120b.jinja", "Qwen3-Coder.jinja", "deepseek-ai-DeepSeek-V3.1.jinja", "Kimi-K3.jinja"]


def _template(name: str) -> Path:
    for path in [*FIXTURES, *llamacpp_templates()]:
        if path.name == name:
            return path
    pytest.skip(f"{name} is not in the corpus")


@pytest.mark.parametrize("name", [p.name for p in FIXTURES] + REAL)
def test_a_stream_pickled_mid_output_carries_on_as_the_original(name: str) -> None:
    analysis = autoparser.load(str(_template(name)))
    cases = [case for case in run_template(analysis) if case.output]
    if not cases:
        pytest.skip("the template renders no output to replay")
    for case in cases:
        parser = analysis.parser(tools=TOOLS, thinking=case.thinking)
        half = len(case.output) // 2
        original = parser.stream()
        original.feed(case.output[:half])
        copy = pickle.loads(pickle.dumps(original))
        rest_original = original.feed(case.output[half:]) + original.finish()
        rest_copy = copy.feed(case.output[half:]) + copy.finish()
        assert _without_ids(rest_copy) == _without_ids(rest_original), case.case
        assert _without_ids(copy.message()) == _without_ids(original.message()), case.case


def _without_ids(value: object) -> object:
    """Ids drawn after the copy differ by design (each is unique); everything else must not."""
    if isinstance(value, dict):
        return {k: ("<id>" if k == "id" else _without_ids(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_ids(v) for v in value]
    return value
