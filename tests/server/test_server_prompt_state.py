"""Through a real server (tiny model, DeepSeek-V3.1's own template, thinking on): the parser and
the grammar start where the rendered prompt leaves the model. After a tool result the template
opens no reasoning, so the next answer is `content`; a first turn opens it, so the output is
reasoning there. The random model's text is bounded by `max_tokens` (and never ended early)."""

from __future__ import annotations

from typing import Any

import pytest
from llama_server import serving
from server_harness import ServerProcess, find_template, tiny_model

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
ASKED = [{"role": "user", "content": "What is the weather in Paris?"}]
AFTER_TOOL = ASKED + [
    {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {
        "name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 24 degrees"},
]
THINKING_ON = {"chat_template_kwargs": {"thinking": True}, "ignore_eos": True}


@pytest.fixture(scope="module", params=["engine", "upstream"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """The own engine, and `serve --upstream` in front of a llama-server on the same model."""
    model = tiny_model(find_template("deepseek-ai-DeepSeek-V3.1.jinja"))
    log_dir = tmp_path_factory.mktemp(f"prompt-state-{request.param}")
    with serving(request.param, model, log_dir=log_dir, n_ctx=4096) as process:
        yield process


def ask(server: ServerProcess, messages: list[dict[str, Any]], seed: int, stream: bool = False) -> dict[str, Any]:
    """The assistant message (streamed deltas put together when `stream`)."""
    client = server.client()
    request: dict[str, Any] = dict(model="tiny", messages=messages, tools=TOOLS, tool_choice="auto",
                                   max_tokens=12, seed=seed, extra_body=THINKING_ON)
    if not stream:
        message = client.chat.completions.create(**request).choices[0].message
        return {"content": message.content, "reasoning": getattr(message, "reasoning_content", None),
                "calls": message.tool_calls}
    content, reasoning, calls = "", "", []
    for chunk in client.chat.completions.create(stream=True, **request):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        reasoning += getattr(delta, "reasoning_content", None) or ""
        calls += delta.tool_calls or []
    return {"content": content or None, "reasoning": reasoning or None, "calls": calls or None}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_turn_after_a_tool_result_is_content_not_reasoning(server: ServerProcess, seed: int,
                                                               stream: bool) -> None:
    message = ask(server, AFTER_TOOL, seed, stream)
    assert message["reasoning"] is None
    assert message["content"] or message["calls"]


@pytest.mark.parametrize("seed", [1, 2])
def test_a_first_turn_with_thinking_on_starts_in_reasoning(server: ServerProcess, seed: int) -> None:
    message = ask(server, ASKED, seed)
    assert message["reasoning"]
    assert message["content"] is None and message["calls"] is None


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_required_call_follows_reasoning_that_never_ends(server: ServerProcess, seed: int, stream: bool) -> None:
    """`tool_choice: "required"` with thinking on and no reasoning budget: the random model never
    closes its reasoning, yet a call comes before `max_tokens`, as the server keeps part of them
    for it (one whose random string runs past them is cut off, and says so); no marker is left in
    the reasoning."""
    client = server.client()
    request: dict[str, Any] = dict(model="tiny", messages=ASKED, tools=TOOLS, tool_choice="required",
                                   max_tokens=160, seed=seed, extra_body={"thinking": True})
    if stream:
        chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **request))
        finish = next(c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason)
        reasoning = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks if c.choices)
        calls = [call for c in chunks if c.choices for call in c.choices[0].delta.tool_calls or []]
        usage = chunks[-1].usage
    else:
        response = client.chat.completions.create(**request)
        finish, message, usage = response.choices[0].finish_reason, response.choices[0].message, response.usage
        reasoning, calls = getattr(message, "reasoning_content", None) or "", message.tool_calls or []
    assert calls and finish in ("tool_calls", "length")
    if finish == "length" and not stream:
        assert (calls[-1].model_extra or {}).get("incomplete")
    assert reasoning and "<｜" not in reasoning and "</think>" not in reasoning
    assert usage.completion_tokens <= 160


def test_grammar_and_parser_are_cached_by_start_state_not_by_prompt() -> None:
    """Every turn's prompt differs; the grammar and the parser depend on it only through where
    it leaves the model, so each is built once per state."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    import autoparser
    from autoparser.llama.engine import Engine
    from autoparser.server.protocol import parse_request
    from autoparser.server.service import ChatService, ServerSettings

    with Engine(str(tiny_model(find_template("deepseek-ai-DeepSeek-V3.1.jinja"))), n_ctx=2048) as engine:
        analysis = autoparser.analyze(engine.chat_template or "", bos_token=engine.bos_token,
                                      eos_token=engine.eos_token)
        service = ChatService(analysis, engine, ServerSettings(model_name="tiny"))

        def prepare(messages: list[dict[str, Any]]) -> Any:
            return service.prepare(parse_request({"messages": messages, "tools": TOOLS, **THINKING_ON}))

        after_tool = [prepare(AFTER_TOOL[:-1] + [{**AFTER_TOOL[-1], "content": f"{n} degrees"}]) for n in range(3)]
        assert len({chat.prompt for chat in after_tool}) == 3
        assert len(service._grammars._items) == 1 and len(service._parsers._items) == 1
        assert all(chat.grammar.gbnf == after_tool[0].grammar.gbnf for chat in after_tool)
        prepare(ASKED)  # opens reasoning: another state
        assert len(service._parsers._items) == 2

        # bounded in bytes: with no room left, a larger tool set evicts the oldest parsers
        service._parsers.max_bytes = service._parsers.weight
        big = [{"type": "function", "function": {**TOOLS[0]["function"], "description": "d" * 300}}]
        service.prepare(parse_request({"messages": ASKED, "tools": big, **THINKING_ON}))
        assert len(service._parsers) < 3 and service._parsers.weight <= service._parsers.max_bytes
