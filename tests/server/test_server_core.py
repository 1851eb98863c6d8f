"""The server's sans-IO parts: stop strings, the per-request completion, request checks.

These run without llama.cpp or HTTP. The whole server is exercised through a real process in
`test_server_e2e.py`.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoparser.server.completion import Completion, ExtensionsRecorder, OutputOptions
from autoparser.server.errors import APIError, error_body
from autoparser.server.protocol import (
    location_to_param,
    parse_request,
    requested_thinking,
    template_messages,
    tool_choice_value,
)
from autoparser.server.startup import is_loopback
from autoparser.server.stops import StopMatcher

# -- stop strings ----------------------------------------------------------------------------------


def expected_stop_output(text: str, stops: list[str], kept: frozenset[str]) -> tuple[str, str | None]:
    """The reference: cut at the earliest stop in the whole text, the longest one on a tie."""
    hits = [(text.find(s), -len(s), s) for s in stops if s and s in text]
    if not hits:
        return text, None
    index, _, stop = min(hits)
    return text[: index + len(stop)] if stop in kept else text[:index], stop


def run_matcher(pieces: list[str], stops: list[str], kept: frozenset[str]) -> tuple[str, str | None, list[str]]:
    matcher = StopMatcher(stops, kept=kept)
    released: list[str] = []
    stop = None
    for piece in pieces:
        match = matcher.feed(piece)
        released.append(match.text)
        stop = stop or match.stop
    tail = matcher.flush()
    released.append(tail.text)
    return "".join(released), stop or tail.stop, released


def cut(text: str, cuts: list[int]) -> list[str]:
    points = sorted({min(c, len(text)) for c in cuts})
    pieces, last = [], 0
    for point in points:
        pieces.append(text[last:point])
        last = point
    pieces.append(text[last:])
    return pieces


@settings(max_examples=400, deadline=None)
@given(text=st.text(alphabet="abc<>/", max_size=40),
       stops=st.lists(st.text(alphabet="abc<>/", min_size=1, max_size=5), min_size=1, max_size=3),
       cuts=st.lists(st.integers(min_value=0, max_value=40), max_size=10),
       keep=st.booleans())
def test_stop_matching_does_not_depend_on_chunking(text: str, stops: list[str], cuts: list[int],
                                                   keep: bool) -> None:
    kept = frozenset(stops) if keep else frozenset()
    out, stop, _ = run_matcher(cut(text, cuts), stops, kept)
    assert (out, stop) == expected_stop_output(text, stops, kept)


def test_partial_stop_string_is_held_back_until_decided() -> None:
    matcher = StopMatcher(["STOP"])
    assert matcher.feed("hello ST").text == "hello "
    assert matcher.feed("O").text == ""
    assert matcher.feed("P!").text == ""
    assert matcher.done


def test_held_text_is_released_when_it_is_not_a_stop() -> None:
    matcher = StopMatcher(["STOP"])
    assert matcher.feed("ST").text == ""
    assert matcher.feed("ART").text == "START"
    assert matcher.flush().text == ""


def test_included_stop_string() -> None:
    out, stop, _ = run_matcher(["a b", "c d"], ["bc"], frozenset({"bc"}))
    assert (out, stop) == ("a bc", "bc")
    out, stop, _ = run_matcher(["a b", "c d"], ["bc"], frozenset())
    assert (out, stop) == ("a ", "bc")


# -- the per-request completion --------------------------------------------------------------------


class SplitAtMarker:
    """A minimal parser stream for these tests: text before `</r>` is reasoning, after is content."""

    def __init__(self) -> None:
        self.reasoning, self.content, self.buffer, self.in_reasoning = "", "", "", True

    def feed(self, text: str) -> list[dict[str, Any]]:
        self.buffer += text
        out: list[dict[str, Any]] = []
        if self.in_reasoning:
            if "</r>" in self.buffer:
                before, after = self.buffer.split("</r>", 1)
                self.in_reasoning, self.buffer = False, after
                if before:
                    self.reasoning += before
                    out.append({"reasoning_content": before})
            else:
                keep = next((n for n in range(3, 0, -1) if "</r>".startswith(self.buffer[-n:])), 0)
                emit = self.buffer[: len(self.buffer) - keep]
                self.buffer = self.buffer[len(self.buffer) - keep:]
                if emit:
                    self.reasoning += emit
                    out.append({"reasoning_content": emit})
                return out
        if self.buffer:
            self.content += self.buffer
            out.append({"content": self.buffer})
            self.buffer = ""
        return out

    def finish(self) -> list[dict[str, Any]]:
        if not self.buffer:
            return []
        text, self.buffer = self.buffer, ""
        if self.in_reasoning:
            self.reasoning += text
            return [{"reasoning_content": text}]
        self.content += text
        return [{"content": text}]

    def message(self) -> dict[str, Any]:
        return {"role": "assistant", "reasoning_content": self.reasoning or None,
                "content": self.content or None, "tool_calls": []}


def joined(deltas: list[dict[str, Any]]) -> dict[str, str]:
    out = {"reasoning_content": "", "content": ""}
    for delta in deltas:
        for key in out:
            out[key] += delta.get(key) or ""
    return out


def run_completion(tokens: list[str], **options: Any) -> tuple[Completion, list[dict[str, Any]]]:
    completion = Completion(SplitAtMarker(), OutputOptions(reasoning_start="<r>", reasoning_end="</r>", **options))
    deltas: list[dict[str, Any]] = []
    for token in tokens:
        deltas += completion.feed(token)
        if completion.stopped:
            break
    deltas += completion.finish()
    return completion, deltas


def test_completion_stops_on_stop_string_and_keeps_text() -> None:
    completion, deltas = run_completion(["think", "</r>", "Hello ", "wor", "ld", " more"], stops=["world"])
    assert joined(deltas) == {"reasoning_content": "think", "content": "Hello "}
    assert completion.finish_reason("length") == "stop"
    assert completion.text == "think</r>Hello "


def test_completion_drops_unused_special_tokens() -> None:
    _, deltas = run_completion(["a", "<pad>", "</r>", "b"], dropped_tokens=frozenset({"<pad>"}))
    assert joined(deltas) == {"reasoning_content": "a", "content": "b"}


# -- the model worker hands on token texts, the front end parses them -----------------------------


class ScriptedGeneration:
    """An engine's generation that yields the given texts, one token each, up to its budget."""

    def __init__(self, texts: list[str], stats: SimpleNamespace):
        self.texts, self.stats, self.finished = texts, stats, False

    def next_token(self) -> SimpleNamespace:
        text = self.texts.pop(0)
        self.stats.completion_tokens += 1
        if not self.texts:
            self.finish("length")
        return SimpleNamespace(token_id=len(self.texts), text=text, logprobs=None)

    def finish(self, reason: str) -> None:
        self.finished, self.stats.finish_reason = True, reason

    def close(self) -> None:
        pass


class ScriptedEngine:
    def __init__(self, texts: list[str]):
        self.texts = texts

    def new_generation(self, prompt: list[int], max_tokens: int, sampling: Any, stats: Any, **_: Any) -> Any:
        return ScriptedGeneration(list(self.texts[:max_tokens]), stats)


def new_stats() -> SimpleNamespace:
    return SimpleNamespace(prefill_ms=1.0, completion_tokens=0, decode_ms=[], finish_reason=None,
                           stop_token_id=None, cached_tokens=0)


@pytest.mark.parametrize("stream", [True, False])
def test_the_model_worker_sends_token_texts_and_the_front_end_parses_them(stream: bool) -> None:
    import pickle

    from autoparser.server.feed import CompletionFeed
    from autoparser.server.worker import GenerationEnd, GenerationJob, JobRun, JobSpec, TokenJob

    tokens = ["think", "</r>", "Hello ", "wor", "ld", " more"]
    completion = Completion(SplitAtMarker(), OutputOptions(reasoning_start="<r>", reasoning_end="</r>",
                                                           stops=["world"]))
    received: list[tuple[str, Any]] = []
    job = GenerationJob(prompt_tokens=[1, 2], max_tokens=16, sampling=None, grammar=None, stop_token_ids=(),
                        ignore_eos=False, completion=completion, post=received.append,
                        stream_deltas=stream)
    sent: list[tuple[str, Any]] = []
    run = JobRun(TokenJob(pickle.loads(pickle.dumps(JobSpec.of(job))), make_stats=new_stats, post=sent.append),
                 ScriptedEngine(tokens))
    run.begin()
    while not run.done:
        run.advance(run.generation.next_token())
    # The worker ends the generation at the stop string and sends only texts, then how it ended
    assert [kind for kind, _ in sent] == ["tokens"] * 5 + ["done"]
    assert [text for _, (texts, _) in sent[:-1] for text in texts] == tokens[:5]
    end = sent[-1][1]
    assert isinstance(end, GenerationEnd) and end.completion_tokens == 5 and end.prompt_tokens == 2
    pickle.dumps(sent)
    feed = CompletionFeed.of(job)
    for kind, payload in sent:
        if kind == "tokens":
            feed.texts(*payload)
            feed.flush()
        else:
            received.append(("done", feed.result(payload)))
    expected, expected_deltas = run_completion(tokens, stops=["world"])
    deltas = [delta for kind, payload in received if kind == "deltas" for delta in payload]
    result = received[-1][1]
    assert deltas == (expected_deltas[:-len(result.final_deltas) or None] if stream else [])
    assert result.final_deltas == expected_deltas[len(expected_deltas) - len(result.final_deltas):]
    assert result.message == expected.message() and result.finish_reason == "stop"
    assert completion.text == "think</r>Hello "


@pytest.mark.parametrize("tokens", [["why", "</r>", "answer"], ["why", "</", "r>"], ["why"], ["wh", "y</r", ">"]])
def test_reasoning_back_in_content_streams_like_the_message(tokens: list[str]) -> None:
    completion, deltas = run_completion(tokens, separate_reasoning=False)
    streamed = joined(deltas)
    message = completion.message()
    assert streamed["reasoning_content"] == "" and message["reasoning_content"] is None
    assert streamed["content"] == (message["content"] or "")
    assert streamed["content"].startswith("<r>why")
    assert streamed["content"].endswith("</r>answer" if "answer" in tokens else ("</r>" if "</r>" in "".join(tokens) else "why"))


def test_extensions_record_reasoning_and_tool_call_events() -> None:
    recorder = ExtensionsRecorder()
    recorder.record([{"reasoning_content": "hm"},
                     {"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                                      "function": {"name": "f", "arguments": ""}}]},
                     {"tool_calls": [{"index": 0, "function": {"arguments": "{\"x\": 1}"}}]},
                     {"tool_calls": [{"index": 1, "id": "call_b", "function": {"name": "g", "arguments": "{}"}}]}])
    assert recorder.result() == {
        "reasoning_chunks": ["hm"],
        "tool_call_chunks": [
            {"type": "start", "tool_call_id": "call_a", "tool_name": "f"},
            {"type": "args", "tool_call_id": "call_a", "delta": "{\"x\": 1}"},
            {"type": "end", "tool_call_id": "call_a"},
            {"type": "start", "tool_call_id": "call_b", "tool_name": "g"},
            {"type": "args", "tool_call_id": "call_b", "delta": "{}"},
            {"type": "end", "tool_call_id": "call_b"},
        ]}


# -- request checks --------------------------------------------------------------------------------


def request(**fields: Any) -> bytes:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}
    return json.dumps(body).encode()


def error_of(body: bytes) -> APIError:
    with pytest.raises(APIError) as info:
        parsed = parse_request(body)
        template_messages(parsed.messages)
        tool_choice_value(parsed)
    return info.value


def test_malformed_json_is_a_400() -> None:
    err = error_of(b'{"messages": [')
    assert err.status == 400 and "not valid JSON" in err.message


@pytest.mark.parametrize("fields, param", [
    ({"temperature": -1}, "temperature"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ({"n": 9}, "n"),
    ({"n": 0}, "n"),
    ({"top_p": 0}, "top_p"),
    ({"stop": ["", "x"]}, "stop"),
    ({"tool_choice": "sometimes"}, "tool_choice"),
])
def test_invalid_fields_name_the_param(fields: dict[str, Any], param: str) -> None:
    err = error_of(request(**fields))
    assert err.status == 400
    assert err.param == param


def test_image_parts_are_refused_as_no_vision() -> None:
    content = [{"type": "text", "text": "My name is Olivier and I"},
               {"type": "image_url", "image_url": "/xxxx/test.png"}]
    err = error_of(request(messages=[{"role": "user", "content": content}]))
    assert err.status == 400 and "vision" in err.message and err.param == "messages[0].content[1]"


def test_text_parts_are_joined() -> None:
    parsed = parse_request(request(messages=[{"role": "user", "content": [
        {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]))
    assert template_messages(parsed.messages)[0]["content"] == "a\nb"


def test_tool_only_assistant_turn_gets_empty_content() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    parsed = parse_request(request(messages=[{"role": "user", "content": "x"},
                                             {"role": "assistant", "tool_calls": [call]},
                                             {"role": "tool", "content": "r", "tool_call_id": "c1"}]))
    messages = template_messages(parsed.messages)
    assert messages[1]["content"] == "" and messages[1]["tool_calls"] == [call]


TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


def test_unknown_named_tool_is_a_400() -> None:
    err = error_of(request(tools=[TOOL], tool_choice={"type": "function", "function": {"name": "nope"}}))
    assert err.status == 400 and err.param == "tool_choice" and "nope" in err.message


def test_tool_choice_defaults() -> None:
    assert tool_choice_value(parse_request(request())) == "none"
    assert tool_choice_value(parse_request(request(tools=[TOOL]))) == "auto"
    named = {"type": "function", "function": {"name": "get_weather"}}
    assert tool_choice_value(parse_request(request(tools=[TOOL], tool_choice=named))) == named
    assert error_of(request(tool_choice="required")).param == "tool_choice"


@pytest.mark.parametrize("fields, expected", [
    ({}, None),
    ({"thinking": True}, True),
    ({"thinking": {"type": "disabled"}}, False),
    ({"chat_template_kwargs": {"thinking": True}}, True),
    ({"thinking": True, "chat_template_kwargs": {"thinking": False}}, False),
    ({"chat_template_kwargs": {"enable_thinking": True}}, True),
    ({"chat_template_kwargs": {"enable_thinking": "yes"}}, None),
    ({"enable_reasoning": False}, False),
    ({"reasoning": True}, True),
    ({"reasoning": {"enabled": False}}, False),
    ({"reasoning": {"effort": "none"}}, False),
    ({"reasoning": {"effort": "high"}, "thinking": False}, False),
])
def test_thinking_switch(fields: dict[str, Any], expected: bool | None) -> None:
    assert requested_thinking(parse_request(request(**fields)), "thinking", True) is expected


def test_error_objects_have_the_openai_shape() -> None:
    body = error_body(401, "no", code="invalid_api_key")
    assert body == {"error": {"message": "no", "type": "authentication_error", "param": None,
                              "code": "invalid_api_key"}}
    assert location_to_param(("messages", 0, "content", "list[dict[str,any]]", 1)) == "messages[0].content[1]"


@pytest.mark.parametrize("host, loopback", [("127.0.0.1", True), ("::1", True), ("localhost", True),
                                            ("0.0.0.0", False), ("192.168.1.2", False), ("example.com", False)])
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


# -- the SSE stream --------------------------------------------------------------------------------


def sse_events(events: list[tuple[str, Any]], **fields: Any) -> list[Any]:
    """Run `stream_chunks` over worker events; the decoded `data:` payloads."""
    import asyncio

    from autoparser.server.app import ResponseMeta, stream_chunks
    from autoparser.server.runner import Run
    from autoparser.server.service import PreparedChat
    from autoparser.server.worker import AsyncChannel, GenerationJob

    async def run() -> list[bytes]:
        channel = AsyncChannel(asyncio.get_running_loop())
        completion = Completion(SplitAtMarker(), OutputOptions())
        prepared = PreparedChat(request=parse_request(request(stream=True, **fields)), prompt="P",
                                prompt_tokens=[1, 2], max_tokens=4, sampling=None, grammar=None, reasoning=None,
                                stop_token_ids=(), completion=completion)
        job = GenerationJob(prompt_tokens=[1, 2], max_tokens=4, sampling=None, grammar=None, stop_token_ids=(),
                            ignore_eos=False, completion=completion, post=channel.post)
        for event in events:
            channel.post(event)
        out = [chunk async for chunk in stream_chunks(Run(prepared, job, channel), ResponseMeta("m"))]
        assert job.cancelled.is_set()  # the slot is released whatever happened
        return out

    raw = b"".join(asyncio.run(run()))
    assert raw.endswith(b"\n\n")
    events = raw[:-2].split(b"\n\n")
    assert all(event.startswith(b"data: ") for event in events)
    return [event[6:].decode() if event == b"data: [DONE]" else json.loads(event[6:]) for event in events]


def test_a_failure_mid_stream_ends_with_an_error_chunk_then_done() -> None:
    events = sse_events([("deltas", [{"reasoning_content": "a"}]), ("error", "generation failed: boom")])
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert events[1]["choices"][0]["delta"] == {"reasoning_content": "a"}
    error_chunk = events[2]
    assert error_chunk["choices"][0]["finish_reason"] == "error" and error_chunk["choices"][0]["delta"] == {}
    assert error_chunk["error"]["message"] == "generation failed: boom" and error_chunk["error"]["type"]
    assert events[3:] == ["[DONE]"]


def test_stream_ends_with_finish_usage_and_done() -> None:
    from autoparser.server.worker import GenerationResult

    result = GenerationResult(finish_reason="length", prompt_tokens=2, completion_tokens=3, prefill_ms=1.5,
                              decode_ms=[1.0, 2.0], message={}, final_deltas=[{"content": "z"}])
    events = sse_events([("deltas", [{"content": "x"}]), ("done", result)],
                        stream_options={"include_usage": True}, full_text=True, return_prompt=True)
    assert events[0]["prompt"] == "P"
    assert [e["choices"][0]["delta"] for e in events[1:3]] == [{"content": "x"}, {"content": "z"}]
    assert events[3]["choices"][0]["finish_reason"] == "length"
    assert events[3]["prefill_time"] == 1.5 and events[3]["decode_time_arr"] == [1.0, 2.0]
    assert "full_text" in events[3]
    assert events[4]["choices"] == [] and events[4]["usage"] == {
        "prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5, "prompt_tokens_details": {"cached_tokens": 0}}
    assert events[5] == "[DONE]"


def test_a_channel_behind_its_bound_sets_the_pressure_until_taken() -> None:
    import asyncio
    import threading

    from autoparser.server.worker import AsyncChannel

    async def run() -> None:
        pressure = threading.Event()
        channel = AsyncChannel(asyncio.get_running_loop(), bound=3, pressure=pressure)
        channel.post(("deltas", [{"content": "a"}]))
        channel.post(("deltas", [{"content": "b"}]))
        assert not pressure.is_set()
        channel.post(("deltas", [{"content": "c"}]))
        assert pressure.is_set()
        assert len(await channel.take()) == 3 and not pressure.is_set()

    asyncio.run(run())
