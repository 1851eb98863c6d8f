"""Protocol anomalies read from the parser's own result: each rule on a reply that breaks it, and
none on replies that follow the protocol. The replies are parsed by the real parsers of the
DeepSeek V3.1 and R1 templates through the server's `Completion`."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from test_server_api import (
    CALL,
    CALL_END,
    SECTION,
    SECTION_END,
    SEP,
    WEATHER,
    analysis_named,
)

from autoparser.server.anomalies import AnomalyFinder
from autoparser.server.completion import Completion, OutputOptions
from autoparser.server.protocol import parse_request
from autoparser.server.service import ServerSettings
from autoparser.server.worker import GenerationResult

ASK = [{"role": "user", "content": "Weather in Paris?"}]


def call(name: str = "get_weather", arguments: str = '{"city": "Paris"}') -> str:
    return f"{CALL}{name}{SEP}{arguments}{CALL_END}"


@pytest.fixture(scope="module")
def v31() -> Any:
    return analysis_named("deepseek-ai-DeepSeek-V3.1.jinja")


@pytest.fixture(scope="module")
def r1() -> Any:
    return analysis_named("llama-cpp-deepseek-r1.jinja")


def rules(analysis: Any, text: str, *, policy: str = "lenient", thinking: bool | None = False,
          finish: str = "stop", start: str = "closed") -> list[str]:
    """The rules that fire on `text` as a whole reply (the parser fed it in small pieces)."""
    request = parse_request({"messages": ASK, "tools": [WEATHER], "tool_call_policy": policy})
    stream = analysis.parser(tools=[WEATHER], thinking=thinking, tool_call_policy=policy).stream()
    options = OutputOptions(reasoning_end=analysis.reasoning.end, cutoff_markers=(SECTION, CALL))
    completion = Completion(stream, options)
    for at in range(0, len(text), 7):
        completion.feed(text[at:at + 7])
    completion.finish()
    prepared = SimpleNamespace(request=request, completion=completion, start_state=start,
                               tool_call_policy=policy)
    result = GenerationResult(finish_reason=completion.finish_reason(finish), prompt_tokens=1,
                              completion_tokens=1, prefill_ms=0.0, decode_ms=[],
                              message=completion.message(), final_deltas=[])
    return [anomaly.rule for anomaly in AnomalyFinder(analysis).find(prepared, result)]


def test_replies_that_follow_the_protocol_have_no_anomaly(v31: Any, r1: Any) -> None:
    assert rules(v31, "Sunny.") == []
    assert rules(v31, f"Let me look.{SECTION}{call()}{SECTION_END}") == []
    assert rules(v31, f"{SECTION}{call()}{SECTION_END}", policy="strict") == []
    assert rules(r1, "ABCD</think>EFG", thinking=None, start="open") == []
    assert rules(r1, "ABCD", thinking=None, start="open", finish="length") == [], "cut by the limit"


def test_reasoning_the_model_never_closed(r1: Any, v31: Any) -> None:
    assert rules(r1, "ABCD", thinking=None, start="open") == ["unclosed_reasoning"]
    assert rules(v31, "thinking on and on", thinking=True, start="open") == ["unclosed_reasoning"]


def test_a_call_to_a_tool_the_request_does_not_have(v31: Any) -> None:
    assert rules(v31, f"{SECTION}{call('delete_files')}{SECTION_END}") == ["unknown_tool"]


def test_invalid_and_cut_off_calls(v31: Any) -> None:
    bad_arguments = call(arguments='{"city": 5')
    assert rules(v31, f"{SECTION}{bad_arguments}{SECTION_END}") == ["invalid_call"]
    assert rules(v31, f"{SECTION}{CALL}get_wea", finish="length") == ["cut_off_call"]
    assert rules(v31, f'{SECTION}{CALL}get_weather{SEP}{{"city": "Pa', finish="length") == ["cut_off_call"]


def test_text_around_calls_under_the_strict_policy(v31: Any) -> None:
    after = f"{SECTION}{call()}{SECTION_END} and more"
    assert rules(v31, after, policy="strict") == ["text_after_calls"]
    between = f"{SECTION}{call()} XYZ {call()}{SECTION_END}"
    assert rules(v31, between, policy="strict") == ["text_after_calls"]
    before = f"First, text. {SECTION}{call()}{SECTION_END}"
    assert rules(v31, before, policy="strict") == ["calls_after_text"]
    assert rules(v31, before) == [], "the lenient policy reads the call"


def test_settings_default_names_the_model_once() -> None:
    assert ServerSettings().model_aliases == ()
