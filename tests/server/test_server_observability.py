"""The serving surface through the real server on the tiny DeepSeek models: `/metrics` scraped and
parsed by `prometheus_client`, the anomaly log, the names the server answers to (seed 004's sample
request as written), the request checks OpenAI makes, Responses usage, the reasoning switches
(honoured, or answered with a warning where the template cannot) and `stream_reasoning: false`."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from server_harness import ServerProcess, find_template, start_server, tiny_model

pytestmark = pytest.mark.slow

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Lima"]}},
                   "required": ["city"], "additionalProperties": False}}}
ASK = [{"role": "user", "content": "Weather in Paris?"}]
NAMES = ("tiny", "DeepSeek-R1")

SEED_004_SAMPLE = {
    "model": "DeepSeek-R1",
    "messages": [{"role": "user", "content": "You are a helpful assistant."}],
    "stream": False, "presence_penalty": 1.03, "frequency_penalty": 1.0, "repetition_penalty": 1.0,
    "temperature": 0.5, "top_p": 0.95, "top_k": 0, "seed": None, "stop": ["stop1", "stop2"],
    "stop_token_ids": [2, 13], "include_stop_str_in_output": False, "skip_special_tokens": True,
    "ignore_eos": False, "max_tokens": 20}
"""Seed 004's first request sample, field for field."""


@pytest.fixture(scope="module")
def model() -> Path:
    return tiny_model(find_template("deepseek-ai-DeepSeek-V3.1.jinja"))


@pytest.fixture(scope="module")
def server(model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    names = [arg for name in NAMES for arg in ("--served-model-name", name)]
    process = start_server(model, "--n-ctx", "2048", *names, log_dir=tmp_path_factory.mktemp("observability"))
    yield process
    process.stop()


def post(server: ServerProcess, path: str, body: dict[str, Any], request_id: str | None = None) -> Any:
    headers = {"x-request-id": request_id} if request_id else {}
    with server.http() as http:
        return http.post(path, json={"model": "tiny", **body}, headers=headers)


def scrape(server: ServerProcess) -> dict[str, Any]:
    """`/metrics` parsed by the Prometheus client: {sample name: {labels: value}}."""
    with server.http() as http:
        response = http.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    samples: dict[str, Any] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def logged(server: ServerProcess, fragment: str, timeout: float = 5.0) -> str:
    """The server log's line holding `fragment` (the log is written as the request ends)."""
    deadline = time.monotonic() + timeout
    while True:
        lines = [line for line in server.log().splitlines() if fragment in line]
        if lines or time.monotonic() > deadline:
            assert lines, f"no log line with {fragment!r}:\n{server.log()[-3000:]}"
            return lines[0]
        time.sleep(0.1)


# -- /metrics and the anomaly log ------------------------------------------------------------------


def test_metrics_count_requests_tokens_and_times(server: ServerProcess) -> None:
    before = scrape(server)
    for stream in (False, True):
        response = post(server, "/v1/chat/completions", {"messages": ASK, "max_tokens": 6, "seed": 1,
                                                         "stream": stream, "ignore_eos": True})
        assert response.status_code == 200
    after = scrape(server)

    def grew(name: str, labels: tuple = ()) -> float:
        return after[name][labels] - before.get(name, {}).get(labels, 0.0)

    assert grew("autoparser_requests_total", (("endpoint", "chat"), ("outcome", "length"))) == 2
    assert grew("autoparser_generation_tokens_total") == 12
    assert grew("autoparser_prompt_tokens_total") > 0
    assert grew("autoparser_queue_time_seconds_count") == 2
    assert grew("autoparser_time_to_first_token_seconds_count") == 2
    assert grew("autoparser_time_per_output_token_seconds_count") == 10
    assert after["autoparser_requests_running"][()] == 0
    rules = {dict(labels)["rule"] for labels in after["autoparser_protocol_anomalies_total"]}
    assert rules == {"unclosed_reasoning", "invalid_call", "cut_off_call", "unknown_tool", "text_after_calls",
                     "calls_after_text"}


def test_a_cut_off_call_is_logged_with_its_request_id_and_counted(server: ServerProcess) -> None:
    before = scrape(server)["autoparser_protocol_anomalies_total"][(("rule", "cut_off_call"),)]
    response = post(server, "/v1/chat/completions", {
        "messages": ASK, "tools": [WEATHER], "tool_choice": "required", "max_tokens": 3}, "req-cut-1")
    assert response.status_code == 200 and response.json()["choices"][0]["finish_reason"] == "length"
    line = logged(server, "request_id=req-cut-1")
    assert "protocol anomaly" in line and "rule=cut_off_call" in line
    after = scrape(server)["autoparser_protocol_anomalies_total"][(("rule", "cut_off_call"),)]
    assert after == before + 1


def test_reasoning_ended_before_its_end_marker_is_logged(server: ServerProcess) -> None:
    # Every token id stops the generation: the reply ends at once, inside the reasoning it opened.
    response = post(server, "/v1/chat/completions", {
        "messages": ASK, "thinking": True, "max_tokens": 8, "stop_token_ids": list(range(130_000))},
        "req-unclosed-1")
    assert response.status_code == 200 and response.json()["choices"][0]["finish_reason"] == "stop"
    assert "rule=unclosed_reasoning" in logged(server, "request_id=req-unclosed-1")


def test_a_reply_without_anomalies_logs_none(server: ServerProcess) -> None:
    response = post(server, "/v1/chat/completions", {"messages": ASK, "max_tokens": 4}, "req-plain-1")
    assert response.status_code == 200
    post(server, "/v1/chat/completions", {"messages": ASK, "max_tokens": 1}, "req-after-1")
    time.sleep(0.5)
    assert "request_id=req-plain-1" not in server.log()


# -- model names -----------------------------------------------------------------------------------


def test_models_lists_every_name_the_server_answers_to(server: ServerProcess, model: Path) -> None:
    with server.http() as http:
        ids = [card["id"] for card in http.get("/v1/models").json()["data"]]
        assert ids == [*NAMES, "autoparser tiny deepseek2", model.stem]
        for name in ids:
            assert http.get(f"/v1/models/{name}").json()["id"] == name
        assert http.get("/v1/models/gpt-4o").status_code == 404


def test_seed_004_sample_works_as_written(server: ServerProcess) -> None:
    with server.http() as http:
        response = http.post("/v1/chat/completions", json=SEED_004_SAMPLE)
        unknown = http.post("/v1/chat/completions", json={**SEED_004_SAMPLE, "model": "DeepSeek-V9"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == "DeepSeek-R1" and body["usage"]["completion_tokens"] <= 20
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"


def test_the_gguf_name_and_the_file_name_are_answered_to(server: ServerProcess, model: Path) -> None:
    for name in ("autoparser tiny deepseek2", model.stem):
        response = post(server, "/v1/chat/completions", {"model": name, "messages": ASK, "max_tokens": 1})
        assert response.status_code == 200 and response.json()["model"] == name


# -- the checks OpenAI makes, and Responses usage ----------------------------------------------------


def test_stream_options_without_stream_is_refused(server: ServerProcess) -> None:
    for path, body in (("/v1/chat/completions", {"messages": ASK}), ("/v1/completions", {"prompt": "Hi"})):
        response = post(server, path, {**body, "max_tokens": 2, "stream_options": {"include_usage": True}})
        assert response.status_code == 400, response.text
        assert response.json()["error"]["param"] == "stream_options"
    streamed = post(server, "/v1/chat/completions", {"messages": ASK, "max_tokens": 2, "stream": True,
                                                    "stream_options": {"include_usage": True}})
    assert streamed.status_code == 200 and '"usage"' in streamed.text


def test_max_tokens_beyond_the_slot_is_refused(server: ServerProcess) -> None:
    slot = server.http().get("/v1/models").json()["data"][0]["max_model_len"]
    for field in ("max_tokens", "max_completion_tokens"):
        refused = post(server, "/v1/chat/completions", {"messages": ASK, field: slot + 1})
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "max_tokens"
        assert f"at most {slot} completion tokens" in refused.json()["error"]["message"]
    assert post(server, "/v1/responses", {"input": "Hi", "max_output_tokens": slot + 1}).status_code == 400
    clipped = post(server, "/v1/chat/completions", {"messages": ASK, "max_tokens": slot, "stop_token_ids":
                                                    list(range(130_000))})
    assert clipped.status_code == 200, "a budget the prompt only shortens is clipped, not refused"


def test_responses_report_the_cached_prompt_tokens(server: ServerProcess) -> None:
    body = {"input": "Tell me about the weather in Lima in spring, please.", "max_output_tokens": 2,
            "thinking": False}
    post(server, "/v1/responses", body)
    again = post(server, "/v1/responses", body).json()["usage"]
    assert 0 < again["input_tokens_details"]["cached_tokens"] <= again["input_tokens"]


# -- reasoning switches and stream_reasoning --------------------------------------------------------


def sse_deltas(response: Any) -> list[dict[str, Any]]:
    lines = [line[len("data: "):] for line in response.text.splitlines() if line.startswith("data: ")]
    return [json.loads(line)["choices"][0]["delta"] for line in lines[:-1] if json.loads(line)["choices"]]


def test_stream_reasoning_false_sends_the_reasoning_as_one_delta(server: ServerProcess) -> None:
    body = {"messages": ASK, "thinking": True, "thinking_budget": 6, "max_tokens": 16, "ignore_eos": True,
            "stream": True, "seed": 3}
    streamed = sse_deltas(post(server, "/v1/chat/completions", body))
    held = sse_deltas(post(server, "/v1/chat/completions", {**body, "stream_reasoning": False}))
    reasoning = [delta["reasoning_content"] for delta in held if delta.get("reasoning_content")]
    assert len(reasoning) == 1 and len([d for d in streamed if d.get("reasoning_content")]) > 1
    assert reasoning[0] == "".join(d.get("reasoning_content") or "" for d in streamed), "the same reasoning"
    answer = [delta for delta in held if delta.get("content")]
    assert len(answer) > 1 and held.index(answer[0]) > held.index(next(d for d in held if d.get("reasoning_content")))


@pytest.fixture(scope="module")
def r1_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    model = tiny_model(find_template("llama-cpp-deepseek-r1.jinja"))
    process = start_server(model, "--n-ctx", "1024", log_dir=tmp_path_factory.mktemp("r1"))
    yield process
    process.stop()


@pytest.fixture(scope="module")
def plain_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    model = tiny_model(find_template("xinference__deepseek-v3-0324-92ebdf26.jinja"))
    process = start_server(model, "--n-ctx", "1024", log_dir=tmp_path_factory.mktemp("v3"))
    yield process
    process.stop()


@pytest.mark.parametrize("switch", [{"thinking": False}, {"enable_reasoning": False}, {"reasoning": False},
                                    {"reasoning_effort": "none"}, {"chat_template_kwargs": {"enable_thinking": False}}])
def test_thinking_off_on_a_template_that_always_reasons_is_answered(r1_server: ServerProcess,
                                                                     switch: dict[str, Any]) -> None:
    request_id = f"req-off-{sorted(switch)[0]}"
    response = post(r1_server, "/v1/chat/completions", {"messages": ASK, "max_tokens": 2, **switch}, request_id)
    assert response.status_code == 200
    warnings = response.json()["warnings"]
    assert len(warnings) == 1 and "always reasons" in warnings[0]
    assert "thinking off was requested" in logged(r1_server, f"request_id={request_id} warning")


def test_thinking_asked_of_a_template_that_does_so_is_not_warned_about(r1_server: ServerProcess,
                                                                       server: ServerProcess) -> None:
    for target, switch in ((r1_server, {"reasoning": True}), (server, {"thinking": False}),
                           (server, {"reasoning": {"effort": "low"}})):
        response = post(target, "/v1/chat/completions", {"messages": ASK, "max_tokens": 2, **switch})
        assert "warnings" not in response.json(), switch


def test_thinking_on_a_template_without_reasoning_is_answered(plain_server: ServerProcess) -> None:
    body = {"messages": ASK, "max_tokens": 2, "thinking": True, "stream": True}
    response = post(plain_server, "/v1/chat/completions", body, "req-on-plain")
    first = json.loads(response.text.splitlines()[0][len("data: "):])
    assert "has no reasoning" in first["warnings"][0], "a stream says it in its first chunk"
    assert "has no reasoning" in logged(plain_server, "request_id=req-on-plain warning")


def test_responses_carry_the_warnings_whole_and_streamed(r1_server: ServerProcess) -> None:
    """`/v1/responses` says what chat replies say about thinking the template cannot do: on the
    response object, whole and in every streamed event that carries it (read by the openai client)."""
    client = r1_server.client()
    request: dict[str, Any] = dict(model="tiny", input="Hi", max_output_tokens=16, extra_body={"thinking": False})
    whole = client.responses.create(**request)
    assert "always reasons" in (whole.model_extra or {})["warnings"][0]
    events = list(client.responses.create(stream=True, **request))
    carried = [event for event in events if getattr(event, "response", None) is not None]
    assert {event.type for event in carried} >= {"response.created", "response.in_progress"}
    assert carried[-1].type in ("response.completed", "response.incomplete")
    for event in carried:
        assert "always reasons" in (event.response.model_extra or {})["warnings"][0], event.type
    quiet = client.responses.create(model="tiny", input="Hi", max_output_tokens=16)
    assert "warnings" not in (quiet.model_extra or {})


# -- backpressure ------------------------------------------------------------------------------------


def test_a_reader_that_falls_behind_pauses_its_generation(server: ServerProcess) -> None:
    """A client that stops reading a long stream holds its generation: the token after the pause
    took the length of the pause. Every chunk carries the whole text so far and 20 alternatives per
    token, so the stream (about 8 MB) is far larger than what the sockets buffer. Then the stream
    ends whole."""
    import socket
    from urllib.parse import urlsplit

    stall_s = 8.0
    body = json.dumps({"model": "tiny", "messages": ASK, "max_tokens": 1800, "ignore_eos": True, "stream": True,
                       "full_text": True, "logprobs": True, "top_logprobs": 20, "seed": 5}).encode()
    address = urlsplit(server.base_url)
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((address.hostname, address.port))
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        received = [sock.recv(4096)]
        time.sleep(stall_s)
        sock.settimeout(60)
        while chunk := sock.recv(1 << 16):
            received.append(chunk)
    events = [json.loads(line[len("data: "):]) for line in b"".join(received).decode().splitlines()
              if line.startswith("data: {")]
    last = next(event for event in reversed(events) if event.get("decode_time_arr"))
    assert len(last["decode_time_arr"]) == 1800
    assert max(last["decode_time_arr"]) > 1000, "the generation went on while nobody read"
    content = "".join(event["choices"][0]["delta"].get("content") or "" for event in events if event["choices"])
    assert content and last["full_text"].endswith(content[-20:])


# -- n > 1 -------------------------------------------------------------------------------------------


def test_several_choices_each_with_its_own_parser(server: ServerProcess) -> None:
    client = server.client()
    one = client.chat.completions.create(model="tiny", messages=ASK, max_tokens=96, seed=7, tools=[WEATHER],
                                         tool_choice="required")
    answer = client.chat.completions.create(model="tiny", messages=ASK, n=3, max_tokens=96, seed=7, tools=[WEATHER],
                                            tool_choice="required", parallel_tool_calls=False)
    assert [choice.index for choice in answer.choices] == [0, 1, 2]
    for choice in answer.choices:  # the grammar of each choice kept its call well-formed
        call = choice.message.tool_calls[0]
        assert call.function.name == "get_weather" and json.loads(call.function.arguments)["city"] in ("Paris", "Lima")
    assert len({choice.message.tool_calls[0].id for choice in answer.choices}) == 3
    assert answer.usage.prompt_tokens == one.usage.prompt_tokens, "the prompt counts once"
    assert answer.usage.completion_tokens >= 3 * 4


def test_several_choices_streamed(server: ServerProcess) -> None:
    stream = server.client().chat.completions.create(
        model="tiny", messages=ASK, n=2, max_tokens=10, seed=3, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    texts: dict[int, str] = {0: "", 1: ""}
    finished: dict[int, str] = {}
    usage = None
    for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            if choice.finish_reason:
                finished[choice.index] = choice.finish_reason
    assert finished == {0: "length", 1: "length"} and all(texts.values())
    assert texts[0] != texts[1], "choice i samples with seed + i"
    assert usage is not None and usage.completion_tokens == 20
    refused = post(server, "/v1/completions", {"prompt": "Hi", "n": 2, "max_tokens": 2})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "n"
