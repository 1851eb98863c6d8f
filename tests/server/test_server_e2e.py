"""The server end to end: a real `serve` process per DeepSeek template, the official OpenAI client.

Each family is the tiny random-weight deepseek2 model carrying that family's chat template:

* DeepSeek V3.1 (llama.cpp's copy of the official template: a `thinking` switch, forced-open
  reasoning when on);
* DeepSeek V3-0324: the GGUF carries the official template, which renders no tool definitions,
  and the server is started with `--chat-template-file` and vLLM's tool-capable fenced template;
* DeepSeek R1 (llama.cpp's tool-capable R1 template: reasoning always forced open).

The model's text is noise; what is checked is everything around it: the request fields, the
prompt, the grammar keeping tool calls well-formed, the parser, streaming, and the response.
Every family runs twice: on the server's own engine, and with `serve --upstream` in front of a
llama-server on the same model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import jsonschema
import openai
import pytest
from server_harness import ServerProcess, find_template, start_server, tiny_model

from autoparser import analyze
from autoparser.render import render_template
from autoparser.server.preamble import template_hides_tools, tools_preamble, with_preamble

BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"


@dataclass(frozen=True)
class Family:
    id: str
    model_template: str
    serve_template: str | None = None


FAMILIES = [
    Family("v3.1", "deepseek-ai-DeepSeek-V3.1.jinja"),
    Family("v3-0324", "xinference__deepseek-v3-0324-92ebdf26.jinja", "vllm__tool_chat_template_deepseekv3.jinja"),
    Family("r1", "llama-cpp-deepseek-r1.jinja"),
]

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "enum": ["Paris", "Tokyo", "Lima"]},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "days"], "additionalProperties": False}}}
CLOCK = {"type": "function", "function": {
    "name": "get_time", "description": "Local time",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}},
                   "required": ["zone"], "additionalProperties": False}}}
TOOLS = [WEATHER, CLOCK]
SCHEMAS = {tool["function"]["name"]: tool["function"]["parameters"] for tool in TOOLS}
ASK = [{"role": "user", "content": "What is the weather in Paris for the next 3 days?"}]

# Seed 004's second request sample: a tool call and its result, then the model answers.
SEED_004_TOOL = {"type": "function", "function": {
    "name": "get_delivery_date", "strict": True,
    "description": "Get the delivery date for a customer's order. Call this whenever you need to know the "
                   "delivery date, for example when a customer asks 'Where is my package'",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string",
                                                                 "description": "The customer's order ID."}},
                   "required": ["order_id"], "additionalProperties": False}}}
SEED_004_MESSAGES = [
    {"role": "system", "content": "You are a helpful customer support assistant. Use the supplied tools to "
                                  "assist the user."},
    {"role": "user", "content": "Hi, can you tell me the delivery date for my order? my order id is 12345."},
    {"role": "assistant", "tool_calls": [{"function": {"arguments": "{\"order_id\": \"12345\"}",
                                                       "name": "get_delivery_date"},
                                          "id": "tool_call_8p2Nk", "type": "function"}]},
    {"role": "tool", "content": "the delivery date is 2024.09.10.", "tool_call_id": "tool_call_8p2Nk"},
]


@dataclass
class Served:
    family: Family
    server: ServerProcess
    template: str

    @property
    def client(self) -> openai.OpenAI:
        return self.server.client()


BACKENDS = ["engine", "upstream"]
"""The own engine, and `serve --upstream` in front of a llama-server on the same model
(`tests/llama_server.py`; skipped where llama-server cannot be built)."""


@pytest.fixture(scope="module", params=[(f, b) for f in FAMILIES for b in BACKENDS],
                ids=[f"{f.id}-{b}" for f in FAMILIES for b in BACKENDS])
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    family, backend = request.param
    model = tiny_model(find_template(family.model_template))
    template = find_template(family.serve_template or family.model_template)
    args = ["--chat-template-file", str(template)] if family.serve_template else []
    log_dir = tmp_path_factory.mktemp(f"{family.id}-{backend}")
    if backend == "upstream":
        from llama_server import front_end_on_llama_server

        with front_end_on_llama_server(model, *args, log_dir=log_dir, n_ctx=2048) as server:
            yield Served(family, server, template.read_text(encoding="utf-8"))
        return
    server = start_server(model, *args, "--n-ctx", "2048", log_dir=log_dir)
    yield Served(family, server, template.read_text(encoding="utf-8"))
    server.stop()


def extra(obj: Any, name: str) -> Any:
    """A field outside OpenAI's schema on a response object."""
    return (obj.model_extra or {}).get(name)


def chat(served: Served, **kwargs: Any):  # type: ignore[no-untyped-def]
    kwargs.setdefault("messages", ASK)
    kwargs.setdefault("max_tokens", 16)
    return served.client.chat.completions.create(model="tiny", **kwargs)


def collect_stream(served: Served, **kwargs: Any) -> tuple[dict[str, Any], list[Any]]:
    """Stream a request and put the deltas together into one message (CONTRACT section 5)."""
    chunks = list(chat(served, stream=True, stream_options={"include_usage": True}, **kwargs))
    message: dict[str, Any] = {"content": "", "reasoning_content": "", "tool_calls": {}}
    for chunk in chunks:
        for choice in chunk.choices:
            delta = choice.delta
            message["content"] += delta.content or ""
            message["reasoning_content"] += extra(delta, "reasoning_content") or ""
            for call in delta.tool_calls or []:
                slot = message["tool_calls"].setdefault(call.index, {"id": None, "name": "", "arguments": ""})
                slot["id"] = slot["id"] or call.id
                slot["name"] += (call.function.name or "") if call.function else ""
                slot["arguments"] += (call.function.arguments or "") if call.function else ""
    return message, chunks


def as_comparable(message: Any) -> dict[str, Any]:
    """A non-streamed message in the shape `collect_stream` builds."""
    calls = {i: {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
             for i, c in enumerate(message.tool_calls or [])}
    return {"content": message.content or "", "reasoning_content": extra(message, "reasoning_content") or "",
            "tool_calls": calls}


# -- plain chat ------------------------------------------------------------------------------------


def test_non_streaming_chat(served: Served) -> None:
    response = chat(served, seed=1)
    choice = response.choices[0]
    assert response.object == "chat.completion"
    assert choice.message.role == "assistant"
    assert choice.finish_reason in ("stop", "length")
    assert 1 <= response.usage.completion_tokens <= 16
    assert response.usage.total_tokens == response.usage.prompt_tokens + response.usage.completion_tokens
    assert extra(response, "prefill_time") > 0
    decode_times = extra(response, "decode_time_arr")
    assert isinstance(decode_times, list) and all(ms >= 0 for ms in decode_times)
    assert len(decode_times) <= response.usage.completion_tokens


def test_streaming_chat(served: Served) -> None:
    message, chunks = collect_stream(served, seed=2)
    assert chunks[0].choices[0].delta.role == "assistant"
    finishing = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finishing) == 1 and finishing[0].choices[0].finish_reason in ("stop", "length")
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens >= 1
    assert message["content"] or message["reasoning_content"]


@pytest.mark.parametrize("thinking", [None, True])
def test_streamed_deltas_equal_the_message(served: Served, thinking: bool | None) -> None:
    fields = {"seed": 11, "temperature": 0.8, "max_tokens": 24,
              "extra_body": {} if thinking is None else {"thinking": thinking}}
    streamed, chunks = collect_stream(served, **fields)
    whole = chat(served, **fields)
    assert streamed == as_comparable(whole.choices[0].message)
    finishing = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishing == [whole.choices[0].finish_reason]


def test_full_text_and_extensions(served: Served) -> None:
    _, chunks = collect_stream(served, seed=3, extra_body={"full_text": True})
    last = [c for c in chunks if c.choices and c.choices[0].finish_reason][0]
    assert isinstance(extra(last, "full_text"), str) and extra(last, "full_text")
    response = chat(served, seed=3, extra_body={"extensions": True, "thinking_budget": 3}, tools=TOOLS,
                    tool_choice="required", parallel_tool_calls=False, max_tokens=96)
    extensions = extra(response, "extensions")
    calls = response.choices[0].message.tool_calls
    events = [event["type"] for event in extensions["tool_call_chunks"]]
    assert events[0] == "start" and events[-1] == "end" and events.count("start") == len(calls)
    args = "".join(e["delta"] for e in extensions["tool_call_chunks"] if e["type"] == "args")
    assert args == "".join(call.function.arguments for call in calls)


# -- tools -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("thinking", [None, True])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_tool_choice_required_gives_valid_calls(served: Served, seed: int, thinking: bool | None) -> None:
    response = chat(served, seed=seed, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
                    max_tokens=96, extra_body={"thinking_budget": 4, "thinking": thinking})
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert choice.message.tool_calls
    for call in choice.message.tool_calls:
        assert call.type == "function" and call.id
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


@pytest.mark.parametrize("seed", [1, 2])
def test_tool_choice_auto_answers_or_calls_validly(served: Served, seed: int) -> None:
    response = chat(served, seed=seed, tools=TOOLS, max_tokens=48, extra_body={"thinking_budget": 4})
    choice = response.choices[0]
    assert choice.finish_reason in ("stop", "length", "tool_calls")
    for call in choice.message.tool_calls or []:
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


def test_parallel_calls_when_allowed(served: Served) -> None:
    response = chat(served, seed=8, tools=TOOLS, tool_choice="required", max_tokens=200,
                    extra_body={"thinking_budget": 2})
    calls = response.choices[0].message.tool_calls
    assert calls and len({call.id for call in calls}) == len(calls)
    complete = [call for call in calls if not extra(call, "incomplete")]  # the last may be cut by max_tokens
    assert complete
    for call in complete:
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


def test_named_tool_choice_calls_that_tool(served: Served) -> None:
    named = {"type": "function", "function": {"name": "get_time"}}
    response = chat(served, seed=5, tools=TOOLS, tool_choice=named, max_tokens=96,
                    extra_body={"thinking_budget": 2})
    calls = response.choices[0].message.tool_calls
    assert calls and {call.function.name for call in calls} == {"get_time"}
    for call in calls:
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS["get_time"])


def test_streamed_tool_calls_equal_the_message(served: Served) -> None:
    fields = {"seed": 7, "tools": TOOLS, "tool_choice": "required", "max_tokens": 96,
              "parallel_tool_calls": False, "extra_body": {"thinking_budget": 4}}
    streamed, chunks = collect_stream(served, **fields)
    whole = chat(served, **fields)
    expected = as_comparable(whole.choices[0].message)
    assert [(c["name"], c["arguments"]) for c in streamed["tool_calls"].values()] == \
           [(c["name"], c["arguments"]) for c in expected["tool_calls"].values()]
    assert (streamed["content"], streamed["reasoning_content"]) == (expected["content"], expected["reasoning_content"])
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]


def test_response_format_json_schema(served: Served) -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"},
                                               "n": {"type": "integer", "minimum": 0, "maximum": 9}},
              "required": ["ok", "n"], "additionalProperties": False}
    response = chat(served, seed=4, max_tokens=64, extra_body={"thinking_budget": 2},
                    response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": schema}})
    jsonschema.validate(json.loads(response.choices[0].message.content), schema)


@pytest.mark.parametrize("include", [False, True])
def test_stop_strings_cut_the_output(served: Served, include: bool) -> None:
    free = chat(served, seed=21, max_tokens=32, extra_body={"thinking": False, "full_text": True})
    text = extra(free, "full_text")
    stop = text[len(text) // 2:len(text) // 2 + 3]
    if not stop.strip():
        pytest.skip("the sample has no usable stop string")
    cut = chat(served, seed=21, max_tokens=32, stop=[stop],
               extra_body={"thinking": False, "full_text": True, "include_stop_str_in_output": include})
    expected = text[:text.index(stop) + (len(stop) if include else 0)]
    assert extra(cut, "full_text") == expected
    assert cut.choices[0].finish_reason == "stop"
    streamed, _ = collect_stream(served, seed=21, max_tokens=32, stop=[stop],
                                 extra_body={"thinking": False, "include_stop_str_in_output": include})
    assert streamed == as_comparable(cut.choices[0].message)


def test_response_format_json_object(served: Served) -> None:
    response = chat(served, seed=6, max_tokens=48, extra_body={"thinking_budget": 2},
                    response_format={"type": "json_object"})
    choice = response.choices[0]
    if choice.finish_reason == "stop":  # a random model may still be inside the object at max_tokens
        assert isinstance(json.loads(choice.message.content), dict)
    else:
        assert choice.message.content.lstrip().startswith("{")


# -- prompts ---------------------------------------------------------------------------------------


def test_thinking_switch_changes_the_prompt_as_the_template_says(served: Served) -> None:
    from autoparser import analyze

    analysis = analyze(served.template, bos_token=BOS, eos_token=EOS)
    for thinking in (True, False):
        response = chat(served, max_tokens=1, extra_body={"thinking": thinking, "return_prompt": True})
        expected = render_template(served.template, ASK, add_generation_prompt=True, bos_token=BOS,
                                   eos_token=EOS, **analysis.thinking_kwargs(thinking))
        assert extra(response, "prompt") == expected
        if analysis.reasoning.toggle:  # through the template's own variable as well
            again = chat(served, max_tokens=1, extra_body={
                "chat_template_kwargs": {analysis.reasoning.toggle: thinking}, "return_prompt": True})
            assert extra(again, "prompt") == expected
    if served.family.id == "v3.1":
        on = render_template(served.template, ASK, add_generation_prompt=True, bos_token=BOS, thinking=True)
        assert on.endswith("<think>") and not on.endswith("</think>")


def test_multi_turn_with_a_tool_result(served: Served) -> None:
    response = chat(served, messages=SEED_004_MESSAGES, tools=[SEED_004_TOOL], tool_choice="auto",
                    temperature=0.9, top_p=1, max_tokens=24,
                    extra_body={"repetition_penalty": 1.1, "return_prompt": True})
    prompt = extra(response, "prompt")
    # The tool-calling turn in the sample has no content key; the server passes it as "".
    messages = [{**message, "content": message.get("content", "")} for message in SEED_004_MESSAGES]
    analysis = analyze(served.template, bos_token=BOS, eos_token=EOS)
    if template_hides_tools(analysis):  # the server tells the model about the tools itself
        messages = with_preamble(messages, tools_preamble(analysis, [SEED_004_TOOL]))
        assert SEED_004_TOOL["function"]["description"] in prompt
    expected = render_template(served.template, messages, tools=[SEED_004_TOOL],
                               add_generation_prompt=True, bos_token=BOS, eos_token=EOS)
    assert prompt == expected
    assert "the delivery date is 2024.09.10." in prompt and "get_delivery_date" in prompt
    assert response.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert response.usage.completion_tokens >= 1


def test_max_tokens_is_clipped_to_the_context(served: Served) -> None:
    if served.family.id != "v3.1":
        pytest.skip("checked once; the budget does not depend on the template")
    client = served.client

    def prompt_tokens(repeats: int) -> int:
        return client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "lorem ipsum " * repeats}],
            max_tokens=1).usage.prompt_tokens

    base, per_repeat = prompt_tokens(0), (prompt_tokens(200) - prompt_tokens(100)) / 100
    repeats = int((2048 - 40 - base) / per_repeat)  # leaves a few dozen tokens of context
    messages = [{"role": "user", "content": "lorem ipsum " * repeats}]
    response = client.chat.completions.create(model="tiny", messages=messages, max_tokens=2048, seed=1,
                                              extra_body={"ignore_eos": True})
    assert response.choices[0].finish_reason == "length"
    assert 0 < response.usage.completion_tokens < 200
    assert response.usage.total_tokens == 2048
    with pytest.raises(openai.BadRequestError) as beyond:  # more than a whole slot: refused, as OpenAI does
        client.chat.completions.create(model="tiny", messages=messages, max_tokens=100_000)
    assert beyond.value.body["param"] == "max_tokens"


def test_models_and_health(served: Served) -> None:
    models = served.client.models.list()
    assert models.data[0].id == "tiny" and {model.object for model in models.data} == {"model"}
    assert served.client.models.retrieve(models.data[0].id).id == models.data[0].id
    assert served.server.health()["status"] == "ok"


def test_thinking_opened_through_a_template_alias_is_parsed_as_reasoning(served: Served) -> None:
    if served.family.id != "v3.1":
        pytest.skip("only V3.1's template reads `enable_thinking` as an alias of its switch")
    response = chat(served, seed=9, max_tokens=12,
                    extra_body={"chat_template_kwargs": {"enable_thinking": True}, "return_prompt": True})
    assert extra(response, "prompt").endswith("<think>")
    message = response.choices[0].message
    assert extra(message, "reasoning_content") and not message.content


# -- request ids, model names, errors, extras ------------------------------------------------------


def only_v31(served: Served) -> None:
    if served.family.id != "v3.1":
        pytest.skip("checked once; it does not depend on the template")


def test_unknown_model_is_404_and_every_response_has_a_request_id(served: Served) -> None:
    only_v31(served)
    with pytest.raises(openai.NotFoundError) as missing:
        served.client.chat.completions.create(model="gpt-4o", messages=ASK, max_tokens=2)
    assert missing.value.code == "model_not_found"
    with served.server.http() as http:
        given = http.post("/v1/chat/completions", headers={"x-request-id": "req-42"},
                          json={"model": "tiny", "messages": ASK, "max_tokens": 2})
        made = http.post("/v1/completions", json={"model": "tiny", "prompt": "Hi", "max_tokens": 2})
        refused = http.post("/v1/responses", json={"model": "other", "input": "Hi"})
    assert given.headers["x-request-id"] == "req-42"
    assert made.status_code == 200 and len(made.headers["x-request-id"]) >= 16
    assert refused.status_code == 404 and refused.headers["x-request-id"]


def test_context_overflow_speaks_openais_words(served: Served) -> None:
    only_v31(served)
    with pytest.raises(openai.BadRequestError) as overflow:
        chat(served, messages=[{"role": "user", "content": "lorem ipsum " * 3000}])
    error = overflow.value.body
    assert error["code"] == "context_length_exceeded"
    assert error["message"].startswith("This model's maximum context length is 2048 tokens. However, your "
                                       "messages resulted in ")


def test_full_text_is_on_every_chunk(served: Served) -> None:
    only_v31(served)
    _, chunks = collect_stream(served, seed=3, extra_body={"full_text": True, "thinking": False})
    texts = [extra(chunk, "full_text") for chunk in chunks if chunk.choices]
    assert all(text is not None for text in texts)
    assert all(later.startswith(earlier) for earlier, later in zip(texts, texts[1:], strict=False))
    assert texts[-1] and texts[0] == ""


def test_reasoning_effort_switches_thinking(served: Served) -> None:
    only_v31(served)
    off = chat(served, seed=2, reasoning_effort="none", extra_body={"return_prompt": True})
    on = chat(served, seed=2, reasoning_effort="low", max_tokens=8, extra_body={"return_prompt": True})
    assert extra(off, "prompt").endswith("</think>") and extra(on, "prompt").endswith("<think>")
    assert extra(on.choices[0].message, "reasoning_content")


def test_tools_preamble_is_in_the_prompt_of_templates_that_hide_tools(served: Served) -> None:
    analysis = analyze(served.template, bos_token=BOS, eos_token=EOS)
    response = chat(served, tools=TOOLS, max_tokens=2, extra_body={"return_prompt": True})
    prompt = extra(response, "prompt")
    if template_hides_tools(analysis):
        assert tools_preamble(analysis, TOOLS) in prompt
    else:
        assert "You can call the following tools" not in prompt
    assert "Current weather in a city" in prompt
    without = chat(served, tools=TOOLS, max_tokens=2, extra_body={"return_prompt": True, "tool_preamble": False})
    assert "You can call the following tools" not in extra(without, "prompt")


def test_server_with_tool_preamble_off(tmp_path) -> None:  # type: ignore[no-untyped-def]
    model = tiny_model(find_template("deepseek-ai-DeepSeek-V3.1.jinja"))
    server = start_server(model, "--n-ctx", "1024", "--tool-preamble", "off", log_dir=tmp_path)
    try:
        response = server.client().chat.completions.create(
            model="tiny", messages=ASK, tools=TOOLS, max_tokens=2, extra_body={"return_prompt": True})
        assert "Current weather in a city" not in extra(response, "prompt")
        assert "tools preamble: off" in server.log()
    finally:
        server.stop()


def test_completions_take_token_ids_and_refuse_bad_ones(served: Served) -> None:
    only_v31(served)
    client = served.client
    text = client.completions.create(model="tiny", prompt="Hello world", max_tokens=5, seed=4)
    with served.server.http() as http:
        tokens = http.post("/v1/completions", json={"model": "tiny", "prompt": [0, 100, 200], "max_tokens": 3})
        bad = http.post("/v1/completions", json={"model": "tiny", "prompt": [10**9], "max_tokens": 3})
        batch = http.post("/v1/completions", json={"model": "tiny", "prompt": ["a", "b"], "max_tokens": 3})
    assert text.choices[0].finish_reason == "length" and text.usage.completion_tokens == 5
    assert tokens.status_code == 200 and tokens.json()["usage"]["prompt_tokens"] == 3
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "prompt"
    assert batch.status_code == 400 and "one prompt" in batch.json()["error"]["message"]
