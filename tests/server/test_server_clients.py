"""The real server on the tiny DeepSeek V3.1 model, driven by the clients people use with it.

openai (chat, responses, completions, logprobs), openai-agents (the default Responses model and
the Chat Completions model), pydantic-ai (chat and responses models, and its AG-UI adapter in
front of them), langchain-openai (chat and `use_responses_api=True`), and this server's own
AG-UI endpoint read with the `ag-ui-protocol` types. Tests whose client is not installed skip
(`pip install -e '.[clients]'`). Every test runs twice: against the server on its own engine and
against `serve --upstream` in front of a llama-server on the same model (`tests/llama_server.py`).

A random-weight model never stops by itself, so every loop is bounded twice: in turns (the
tool forced for two turns, then `tool_choice: none` with a JSON answer whose grammar ends it)
and in time (client timeouts, `asyncio.wait_for`). Every tool call id any request returns goes
through `ids.fresh`, which fails on a repeat: ids must be unique across requests.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Iterator
from typing import Any, Literal

import httpx
import pytest
from llama_server import serving
from server_harness import MODEL_NAME, ServerProcess, find_template, tiny_model

pytestmark = pytest.mark.slow

TIMEOUT_S = 120.0
TURN_TOKENS = 96
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Lima"]}},
                   "required": ["city"], "additionalProperties": False}}}
City = Literal["Paris", "Lima"]
"""Tool arguments are enums: a random model's free string could use up the turn's tokens."""
ANSWER_SCHEMA = {"type": "object", "properties": {"done": {"type": "boolean"}}, "required": ["done"],
                 "additionalProperties": False}
THINKING = {"thinking": True, "thinking_budget": 8}


class SeenIds:
    """Every tool-call id returned in this module; a repeat fails the test that got it."""

    def __init__(self) -> None:
        self.ids: set[str] = set()

    def fresh(self, ids: list[str]) -> None:
        assert len(set(ids)) == len(ids), f"repeated tool-call ids in one answer: {ids}"
        repeated = self.ids & set(ids)
        assert not repeated, f"tool-call ids returned before: {sorted(repeated)}"
        self.ids |= set(ids)


@pytest.fixture(scope="module", params=["engine", "upstream"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The server on its own engine, and `serve --upstream` in front of a llama-server on the
    same model (skipped where llama-server cannot be built)."""
    model = tiny_model(find_template("deepseek-ai-DeepSeek-V3.1.jinja"))
    with serving(request.param, model, log_dir=tmp_path_factory.mktemp(f"clients-{request.param}"),
                 n_ctx=4096) as process:
        yield process


@pytest.fixture(scope="module")
def ids() -> SeenIds:
    return SeenIds()


class Weather:
    """The tool: records every call, so a test can compare runs with the calls the model made."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, city: str) -> str:
        self.calls.append(city)
        return f"Sunny in {city}."


def run_async(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, TIMEOUT_S))


# -- openai ----------------------------------------------------------------------------------------


def test_two_identical_requests_never_share_a_tool_call_id(server: ServerProcess, ids: SeenIds) -> None:
    client = server.client()
    for _ in range(2):
        response = client.chat.completions.create(
            model=MODEL_NAME, messages=[{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER],
            tool_choice="required", max_tokens=TURN_TOKENS, seed=1, extra_body={"thinking": False})
        ids.fresh([call.id for call in response.choices[0].message.tool_calls])
        responses = client.responses.create(
            model=MODEL_NAME, input="Weather in Paris?", tools=[_responses_tool()], tool_choice="required",
            max_output_tokens=TURN_TOKENS, extra_body={"seed": 1, "thinking": False})
        ids.fresh([item.call_id for item in responses.output if item.type == "function_call"])


def _responses_tool() -> dict[str, Any]:
    return {"type": "function", **WEATHER["function"]}


def test_openai_responses_create_and_stream(server: ServerProcess, ids: SeenIds) -> None:
    client = server.client()
    fields = {"model": MODEL_NAME, "input": "Weather in Lima?", "instructions": "Use the tools.",
              "tools": [_responses_tool()], "tool_choice": "required", "max_output_tokens": TURN_TOKENS,
              "parallel_tool_calls": False, "reasoning": {"effort": "low"}, "extra_body": {"thinking_budget": 8}}
    whole = client.responses.create(**fields)
    assert whole.status == "completed"
    assert [item.type for item in whole.output] == ["reasoning", "function_call"]
    call = whole.output[1]
    assert call.name == "get_weather" and json.loads(call.arguments)["city"] in ("Paris", "Lima")
    assert whole.usage.input_tokens > 0 and whole.usage.output_tokens > 0
    ids.fresh([call.call_id])
    events = list(client.responses.create(stream=True, **fields))
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    for kind in ("response.output_item.added", "response.reasoning_text.delta",
                 "response.reasoning_summary_text.delta", "response.function_call_arguments.delta",
                 "response.function_call_arguments.done"):
        assert kind in kinds
    final = events[-1].response
    assert final.output[0].summary[0].text == final.output[0].content[0].text
    assert whole.usage.input_tokens_details.cached_tokens >= 0
    streamed_args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert final.output[-1].arguments == streamed_args
    ids.fresh([item.call_id for item in final.output if item.type == "function_call"])
    structured = client.responses.create(
        model=MODEL_NAME, input="Done?", max_output_tokens=TURN_TOKENS, extra_body={"thinking": False},
        text={"format": {"type": "json_schema", "name": "answer", "schema": ANSWER_SCHEMA, "strict": True}})
    assert structured.status == "completed" and "done" in json.loads(structured.output_text)


def test_openai_completions_and_logprobs(server: ServerProcess) -> None:
    client = server.client()
    completion = client.completions.create(model=MODEL_NAME, prompt="Once upon a time", max_tokens=8, logprobs=2,
                                           echo=True, seed=3)
    choice = completion.choices[0]
    assert choice.text.startswith("Once upon a time") and choice.finish_reason == "length"
    # alternatives are keyed by text, and two tokens may decode to the same text
    assert len(choice.logprobs.tokens) in _entries(server, 8)
    assert all(1 <= len(top) <= 2 for top in choice.logprobs.top_logprobs)
    assert completion.usage.completion_tokens == 8
    streamed = list(client.completions.create(model=MODEL_NAME, prompt="Once upon a time", max_tokens=8, seed=3,
                                              stream=True))
    assert "".join(c.choices[0].text for c in streamed) == choice.text[len("Once upon a time"):]
    chat = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Hi"}],
                                          max_tokens=6, logprobs=True, top_logprobs=3, seed=3,
                                          extra_body={"thinking": False})
    entries = chat.choices[0].logprobs.content
    assert len(entries) in _entries(server, 6)
    assert all(len(e.top_logprobs) == 3 and e.logprob <= 0 for e in entries)
    assert all(e.top_logprobs[0].logprob >= e.logprob for e in entries)
    stream = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Hi"}],
                                            max_tokens=6, logprobs=True, top_logprobs=3, seed=3, stream=True,
                                            extra_body={"thinking": False})
    streamed_entries = [e for chunk in stream if chunk.choices and chunk.choices[0].logprobs
                        for e in chunk.choices[0].logprobs.content]
    # the same tokens; the values agree up to the float noise of a reused prompt cache
    assert [e.token for e in streamed_entries] == [e.token for e in entries]
    assert [e.logprob for e in streamed_entries] == pytest.approx([e.logprob for e in entries], abs=1e-3)


def _entries(server: ServerProcess, tokens: int) -> range:
    """How many log-probability entries `tokens` tokens get: one each, except through llama-server,
    whose stream leaves out a token that ends inside a UTF-8 character (its bytes go with the
    next token's entry)."""
    return range(tokens, tokens + 1) if server.upstream is None else range(1, tokens + 1)


# -- openai-agents ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("api", "streamed"), [("responses", False), ("responses", True),
                                               ("chat_completions", False)])
def test_openai_agents_three_turn_tool_loop_with_thinking(server: ServerProcess, ids: SeenIds, api: str,
                                                          streamed: bool) -> None:
    agents = pytest.importorskip("agents", reason="openai-agents is not installed (the clients extra)")
    from openai import AsyncOpenAI
    from openai.types.shared import Reasoning
    from pydantic import BaseModel

    agents.set_tracing_disabled(True)
    weather = Weather()
    client = AsyncOpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0, timeout=60)
    model = (agents.OpenAIResponsesModel(MODEL_NAME, client) if api == "responses"
             else agents.OpenAIChatCompletionsModel(MODEL_NAME, client))

    class Answer(BaseModel):
        done: bool

    @agents.function_tool
    def get_weather(city: City) -> str:
        """Current weather in a city."""
        if len(weather.calls) >= 1:  # the second call is the last: the next turn answers
            agent.model_settings = dataclasses.replace(agent.model_settings, tool_choice="none")
        return weather(city)

    agent = agents.Agent(
        name="weather", instructions="Answer with the weather.", model=model, tools=[get_weather],
        output_type=Answer, reset_tool_choice=False,
        model_settings=agents.ModelSettings(tool_choice="required", max_tokens=TURN_TOKENS, parallel_tool_calls=False,
                                            reasoning=Reasoning(effort="low"), extra_body={"thinking_budget": 8}))
    question = "Weather in Paris, then in Lima?"

    async def run_streamed() -> Any:
        result = agents.Runner.run_streamed(agent, question, max_turns=4)
        kinds = {event.type async for event in result.stream_events()}
        assert "raw_response_event" in kinds and "run_item_stream_event" in kinds
        return result

    result = run_async(run_streamed() if streamed else agents.Runner.run(agent, question, max_turns=4))
    assert isinstance(result.final_output, Answer)
    call_ids = [item.raw_item.call_id if hasattr(item.raw_item, "call_id") else item.raw_item["call_id"]
                for item in result.new_items if item.type == "tool_call_item"]
    assert len(result.raw_responses) == 3 and len(call_ids) == len(weather.calls) == 2
    ids.fresh(call_ids)
    reasoning = [item for item in result.new_items if item.type == "reasoning_item"]
    assert reasoning, "thinking was on: each turn starts with reasoning"


# -- pydantic-ai -----------------------------------------------------------------------------------


def pydantic_agent(server: ServerProcess, api: str, weather: Weather) -> Any:
    pydantic_ai = pytest.importorskip("pydantic_ai", reason="pydantic-ai is not installed (the clients extra)")
    from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=server.base_url + "/v1", api_key="unused")
    model = (OpenAIResponsesModel(MODEL_NAME, provider=provider) if api == "responses"
             else OpenAIChatModel(MODEL_NAME, provider=provider))

    def settings(_ctx: Any) -> dict[str, Any]:
        # two forced calls, then a plain answer (cut by max_tokens: a random model never stops)
        return {"max_tokens": TURN_TOKENS, "parallel_tool_calls": False, "timeout": 60,
                "tool_choice": "required" if len(weather.calls) < 2 else "none", "extra_body": THINKING}

    agent = pydantic_ai.Agent(model, instructions="Answer with the weather.", model_settings=settings)

    @agent.tool_plain
    def get_weather(city: City) -> str:
        """Current weather in a city."""
        return weather(city)

    return agent


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_pydantic_ai_tool_loop(server: ServerProcess, ids: SeenIds, api: str) -> None:
    weather = Weather()
    agent = pydantic_agent(server, api, weather)
    from pydantic_ai.messages import ThinkingPart, ToolCallPart
    from pydantic_ai.usage import UsageLimits

    result = run_async(agent.run("Weather in Paris, then in Lima?", usage_limits=UsageLimits(request_limit=4)))
    parts = [part for message in result.all_messages() for part in message.parts]
    calls = [part for part in parts if isinstance(part, ToolCallPart)]
    assert len(calls) == len(weather.calls) == 2 and isinstance(result.output, str) and result.output
    ids.fresh([part.tool_call_id for part in calls])
    thoughts = [part.content for part in parts if isinstance(part, ThinkingPart)]
    assert any(thoughts), f"thinking was on: the reasoning shows as the agent's thinking ({thoughts})"


def test_pydantic_ai_ag_ui_adapter(server: ServerProcess, ids: SeenIds) -> None:
    weather = Weather()
    agent = pydantic_agent(server, "chat", weather)
    core = pytest.importorskip("ag_ui.core", reason="ag-ui-protocol is not installed")
    from pydantic_ai.ui.ag_ui import AGUIAdapter

    run_input = core.RunAgentInput(thread_id="t1", run_id="r1", state={}, tools=[], context=[], forwarded_props={},
                                   messages=[core.UserMessage(id="u1", content="Weather in Paris, then in Lima?")])

    async def run() -> list[Any]:
        adapter = AGUIAdapter(agent=agent, run_input=run_input)
        return [event async for event in adapter.run_stream()]

    events = run_async(run())
    kinds = [event.type.value if hasattr(event.type, "value") else event.type for event in events]
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED", kinds
    starts = [event.tool_call_id for event in events if kinds[events.index(event)] == "TOOL_CALL_START"]
    assert len(starts) == len(weather.calls) == 2
    ids.fresh(starts)


# -- langchain-openai ------------------------------------------------------------------------------


@pytest.mark.parametrize("responses_api", [False, True])
def test_langchain_bind_tools_and_tool_message_loop(server: ServerProcess, ids: SeenIds, responses_api: bool) -> None:
    langchain_openai = pytest.importorskip("langchain_openai", reason="langchain-openai is not installed")
    from langchain_core.messages import HumanMessage, ToolMessage

    weather = Weather()
    llm = langchain_openai.ChatOpenAI(model=MODEL_NAME, base_url=server.base_url + "/v1", api_key="unused",
                                      max_tokens=TURN_TOKENS, timeout=60, max_retries=0,
                                      use_responses_api=responses_api, extra_body=THINKING)
    messages: list[Any] = [HumanMessage("Weather in Paris, then in Lima?")]
    for turn in range(3):
        bound = llm.bind_tools([WEATHER], tool_choice="required" if turn < 2 else "none",
                               parallel_tool_calls=False)
        reply = bound.invoke(messages)
        messages.append(reply)
        if turn == 2:
            assert not reply.tool_calls and reply.text
            break
        assert len(reply.tool_calls) == 1
        ids.fresh([call["id"] for call in reply.tool_calls])
        if responses_api and turn == 0:  # the reasoning reaches LangChain through its summary
            shown = [block.get("reasoning") for block in reply.content_blocks if block["type"] == "reasoning"]
            assert any(shown), f"thinking was on: the reasoning shows in the reply ({reply.content_blocks})"
        for call in reply.tool_calls:
            messages.append(ToolMessage(weather(**call["args"]), tool_call_id=call["id"]))
    assert len(weather.calls) == 2


# -- this server's AG-UI endpoint ------------------------------------------------------------------


def test_ag_ui_endpoint_streams_protocol_events(server: ServerProcess, ids: SeenIds) -> None:
    core = pytest.importorskip("ag_ui.core", reason="ag-ui-protocol is not installed")
    from pydantic import TypeAdapter

    adapter = TypeAdapter(core.Event)
    run_input = {"threadId": "t1", "runId": "r1", "state": {}, "context": [],
                 "tools": [{"name": "get_weather", "description": "Current weather in a city",
                            "parameters": WEATHER["function"]["parameters"]}],
                 "forwardedProps": {"max_tokens": TURN_TOKENS, "tool_choice": "required", **THINKING},
                 "messages": [{"id": "u1", "role": "user", "content": "Weather in Paris?"}]}
    with httpx.stream("POST", server.base_url + "/v1/ag-ui", json=run_input, timeout=TIMEOUT_S) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        lines = [line[len("data: "):] for line in response.iter_lines() if line.startswith("data: ")]
    events = [adapter.validate_json(line) for line in lines]
    kinds = [event.type.value for event in events]
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED"
    assert "REASONING_MESSAGE_CONTENT" in kinds and "TOOL_CALL_ARGS" in kinds
    assert kinds.index("REASONING_START") < kinds.index("TOOL_CALL_START") < kinds.index("TOOL_CALL_END")
    starts = [event for event in events if event.type.value == "TOOL_CALL_START"]
    # `required` lets the model make more than one call: read the first call's own arguments
    args = "".join(event.delta for event in events
                   if event.type.value == "TOOL_CALL_ARGS" and event.tool_call_id == starts[0].tool_call_id)
    assert starts[0].tool_call_name == "get_weather" and json.loads(args)["city"] in ("Paris", "Lima")
    ids.fresh([event.tool_call_id for event in starts])
