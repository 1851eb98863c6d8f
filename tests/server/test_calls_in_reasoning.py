"""Calls begun inside reasoning, through a real server: the tiny model with DeepSeek-V3.1's
template, thinking on, built to favour the calls' opener `<｜tool▁calls▁begin｜>` (it writes it a
few tokens into its reasoning, and never closes reasoning itself).

The parser reads that token inside reasoning as calls that end it; the server stops reasoning
before it and generates the calls from there under the answer's grammar, so they are well formed
whatever the tool choice, and the opener never lands in `reasoning_content`. Both backends: the
own engine, and `serve --upstream` in front of a llama-server.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from llama_server import serving
from server_harness import ServerProcess, find_template, tiny_model

OPENER = "<｜tool▁calls▁begin｜>"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Lima"]}},
                   "required": ["city"], "additionalProperties": False}}}
ASKED = [{"role": "user", "content": "What is the weather in Paris?"}]
MAX_TOKENS = 320


@pytest.fixture(scope="module", params=["engine", "upstream"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    model = tiny_model(find_template("deepseek-ai-DeepSeek-V3.1.jinja"), favoured={OPENER: 7.0})
    log_dir = tmp_path_factory.mktemp(f"calls-in-reasoning-{request.param}")
    with serving(request.param, model, log_dir=log_dir, n_ctx=2048) as process:
        yield process


def ask(server: ServerProcess, seed: int, tool_choice: Any, stream: bool) -> tuple[str, str, list[tuple[str, str]]]:
    """(finish_reason, reasoning, [(name, arguments)]) of one reply, streamed or not."""
    client = server.client()
    request: dict[str, Any] = dict(model="tiny", messages=ASKED, tools=[WEATHER], tool_choice=tool_choice,
                                   parallel_tool_calls=False, max_tokens=MAX_TOKENS, seed=seed, extra_body={"thinking": True})
    if not stream:
        choice = client.chat.completions.create(**request).choices[0]
        calls = [(c.function.name, c.function.arguments) for c in choice.message.tool_calls or []]
        return choice.finish_reason, getattr(choice.message, "reasoning_content", None) or "", calls
    finish, reasoning, parts = "", "", {}
    for chunk in client.chat.completions.create(stream=True, **request):
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        finish = choice.finish_reason or finish
        reasoning += getattr(choice.delta, "reasoning_content", None) or ""
        for call in choice.delta.tool_calls or []:
            name, arguments = parts.get(call.index, ("", ""))
            parts[call.index] = (call.function.name or name, arguments + (call.function.arguments or ""))
    return finish, reasoning, [parts[i] for i in sorted(parts)]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("tool_choice", ["auto", "required"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_call_begun_in_reasoning_is_made_under_the_grammar(server: ServerProcess, seed: int, tool_choice: str,
                                                             stream: bool) -> None:
    finish, reasoning, calls = ask(server, seed, tool_choice, stream)
    assert finish == "tool_calls" and calls, (finish, reasoning)
    for name, arguments in calls:
        assert name == "get_weather"
        jsonschema.validate(json.loads(arguments), WEATHER["function"]["parameters"])
    assert OPENER not in reasoning and "<｜" not in reasoning
