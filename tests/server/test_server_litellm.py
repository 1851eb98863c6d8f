"""The real server driven by litellm, which needs `openai<3` and so has its own environment.

Both ways to serve are driven: the own engine, and the front end in front of a real llama-server
(`serve --upstream`, skipped with the reason where llama-server cannot be built).

    python3 -m venv .venv-litellm && .venv-litellm/bin/pip install -q litellm mcp pytest httpx gguf jinja2 lark
    AUTOPARSER_SERVER_PYTHON=.venv/bin/python .venv-litellm/bin/python -m pytest -q tests/server/test_server_litellm.py

The server runs in the project's own environment (`AUTOPARSER_SERVER_PYTHON`); only the client
is litellm's. Without litellm installed these tests skip.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from llama_server import serving
from server_harness import MODEL_NAME, ServerProcess, find_template, tiny_model

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network: the bundled copy
litellm = pytest.importorskip("litellm", reason="litellm is not installed (it needs its own environment)")

pytestmark = pytest.mark.slow

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Lima"]}},
                   "required": ["city"], "additionalProperties": False}}}
THINKING = {"thinking": True, "thinking_budget": 8}


@pytest.fixture(scope="module", params=["engine", "upstream"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    model = tiny_model(find_template("deepseek-ai-DeepSeek-V3.1.jinja"))
    with serving(request.param, model, log_dir=tmp_path_factory.mktemp(f"litellm-{request.param}"),
                 n_ctx=2048) as process:
        yield process


def target(server: ServerProcess) -> dict[str, Any]:
    return {"model": "openai/" + MODEL_NAME, "api_base": server.base_url + "/v1", "api_key": "unused",
            "timeout": 60, "num_retries": 0}


def test_litellm_completion_tool_loop(server: ServerProcess) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Paris, then in Lima?"}]
    seen: set[str] = set()
    for turn in range(3):
        response = litellm.completion(messages=messages, tools=[WEATHER], max_tokens=96,
                                      tool_choice="required" if turn < 2 else "none", parallel_tool_calls=False,
                                      extra_body=THINKING, **target(server))
        message = response.choices[0].message
        if turn == 2:
            assert not message.tool_calls and message.content
            break
        (call,) = message.tool_calls
        assert call.id not in seen
        seen.add(call.id)
        messages.append({"role": "assistant", "content": message.content or "", "tool_calls": [
            {"id": call.id, "type": "function", "function": {"name": call.function.name,
                                                             "arguments": call.function.arguments}}]})
        messages.append({"role": "tool", "tool_call_id": call.id,
                         "content": f"Sunny in {json.loads(call.function.arguments)['city']}."})


def test_litellm_responses(server: ServerProcess) -> None:
    response = litellm.responses(input="Weather in Lima?", tools=[{"type": "function", **WEATHER["function"]}],
                                 tool_choice="required", max_output_tokens=96, extra_body=THINKING, **target(server))
    calls = [item for item in response.output if item.type == "function_call"]
    assert len(calls) >= 1 and calls[0].name == "get_weather" and calls[0].call_id


def test_litellm_recognises_the_context_overflow(server: ServerProcess) -> None:
    with pytest.raises(litellm.ContextWindowExceededError):
        litellm.completion(messages=[{"role": "user", "content": "lorem ipsum " * 3000}], max_tokens=4,
                           **target(server))
