"""What the model generated under a recursive tool schema reaches the client (tiny model): a call
whose schema nests without end is cut off by `max_tokens` inside hundreds of nested objects; the
reply is a 200 that carries every generated token, never a 500."""

from __future__ import annotations

import json
from typing import Any

import pytest
from server_harness import find_template, start_server, tiny_model

pytestmark = pytest.mark.slow

# every level must hold the next one: generation can only nest deeper until max_tokens stops it
ENDLESS = {"type": "object", "properties": {"x": {"$ref": "#/$defs/list"}}, "required": ["x"],
           "additionalProperties": False,
           "$defs": {"list": {"type": "array", "items": {"$ref": "#/$defs/list"}, "minItems": 1}}}
TOOLS = [{"type": "function", "function": {"name": "nest", "parameters": ENDLESS}}]
REQUEST = {"model": "tiny", "messages": [{"role": "user", "content": "Nest."}], "tools": TOOLS,
           "tool_choice": "required", "max_tokens": 6000, "ignore_eos": True}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    pytest.importorskip("llama_cpp")
    model = tiny_model(find_template("deepseek-ai-DeepSeek-V3.1.jinja"))
    served = start_server(model, "--n-ctx", "8192", "--parallel", "1",
                          log_dir=tmp_path_factory.mktemp("deep-output"))
    yield served
    served.stop()


def _generated(message: dict[str, Any]) -> str:
    calls = message.get("tool_calls") or []
    return (message.get("content") or "") + "".join(c["function"]["arguments"] for c in calls)


def test_a_call_cut_off_deep_inside_a_recursive_schema_is_returned(server) -> None:  # noqa: ANN001
    with server.http(timeout=300) as http:
        reply = http.post("/v1/chat/completions", json=REQUEST)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == REQUEST["max_tokens"]
    generated = _generated(choice["message"])
    assert generated.count("[") > 1000, generated[:300]  # over a thousand levels came back
    [call] = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "nest"
    assert not body.get("warnings"), body.get("warnings")  # read as a call cut off, not as a failure


def test_the_same_call_streamed_is_returned(server) -> None:  # noqa: ANN001
    with server.http(timeout=300) as http, http.stream("POST", "/v1/chat/completions",
                                                       json={**REQUEST, "stream": True}) as reply:
        assert reply.status_code == 200
        lines = [line[6:] for line in reply.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    chunks = [json.loads(line) for line in lines[:-1]]
    deltas = [c["choices"][0]["delta"] for c in chunks if c.get("choices")]
    arguments = "".join(call["function"].get("arguments") or "" for d in deltas for call in d.get("tool_calls") or [])
    content = "".join(d.get("content") or "" for d in deltas)
    assert (arguments + content).count("[") > 1000
    assert [c["choices"][0]["finish_reason"] for c in chunks if c.get("choices")][-1] == "length"
