"""The API layers around the generation, without llama.cpp: output cleaning, log-probabilities,
request translation (Responses, AG-UI), the tools preamble, and the event shapes checked against
the `openai` and `ag-ui-protocol` packages' own types."""

from __future__ import annotations

import json
from typing import Any

import pytest

from autoparser import analyze
from autoparser.llama.logprobs import TokenLogprob
from autoparser.server.completion import Completion, OutputOptions
from autoparser.server.errors import APIError
from autoparser.server.protocol import parse_request, requested_thinking, thinking_budget
from autoparser.server.segments import Segmenter, segments_of

BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
SECTION, CALL, SEP, CALL_END, SECTION_END = ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>",
                                             "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>")
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}
HIDING_TEMPLATES = ["deepseek-ai-DeepSeek-V3.1.jinja", "xinference__deepseek-v3-0324-92ebdf26.jinja",
                    "hfjs-e2e__deepseek-ai-DeepSeek-R1.jinja"]


def analysis_named(name: str) -> Any:
    from server_harness import find_template

    return analyze(find_template(name).read_text(encoding="utf-8"), bos_token=BOS, eos_token=EOS)


@pytest.fixture(scope="module")
def v31() -> Any:
    return analysis_named("deepseek-ai-DeepSeek-V3.1.jinja")


def v31_completion(v31: Any, **options: Any) -> Completion:
    stream = v31.parser(tools=[WEATHER], thinking=False).stream()
    return Completion(stream, OutputOptions(**options))


def run(completion: Completion, pieces: list[str], logprobs: bool = False) -> tuple[list[dict[str, Any]], dict]:
    deltas: list[dict[str, Any]] = []
    for index, piece in enumerate(pieces):
        entry = TokenLogprob(index, piece.encode(), -0.5) if logprobs else None
        deltas += completion.feed(piece, entry)
    deltas += completion.finish()
    return deltas, completion.message()


def content_of(deltas: list[dict[str, Any]]) -> str:
    return "".join(d.get("content") or "" for d in deltas)


# -- output cleaning -------------------------------------------------------------------------------


@pytest.mark.parametrize("cut", [SECTION, SECTION + CALL, SECTION + CALL + "get_wea", SECTION + CALL + "get_weather"])
def test_a_call_cut_off_leaves_no_markup_in_content(v31: Any, cut: str) -> None:
    completion = v31_completion(v31, cutoff_markers=(SECTION, CALL))
    deltas, message = run(completion, ["Hi", " there", *cut])
    assert content_of(deltas) == "Hi there" == message["content"]
    assert completion.text == "Hi there" + cut  # full_text keeps what the model wrote


def test_content_and_calls_are_untouched_when_nothing_is_cut_off(v31: Any) -> None:
    text = f"Sure.{SECTION}{CALL}get_weather{SEP}{{\"city\": \"Paris\"}}{CALL_END}{SECTION_END}"
    deltas, message = run(v31_completion(v31, cutoff_markers=(SECTION, CALL)), [text])
    assert message["content"] == "Sure." and message["tool_calls"][0]["function"]["name"] == "get_weather"


def test_skip_special_tokens_removes_markers_left_in_reasoning(v31: Any) -> None:
    marker = "<｜place▁holder▁no▁1｜>"
    stream = v31.parser(tools=[WEATHER], thinking=True).stream()
    completion = Completion(stream, OutputOptions(hidden_markers=frozenset({marker})))
    deltas, message = run(completion, ["Let me", marker, " think", "</think>", "Sunny."])
    streamed = "".join(d.get("reasoning_content") or "" for d in deltas)
    assert streamed == message["reasoning_content"] == "Let me think" and message["content"] == "Sunny."
    assert marker in completion.text


@pytest.mark.parametrize("answer", [["Sun", "ny", "."], []])
def test_held_reasoning_goes_out_as_one_delta_when_the_answer_begins(v31: Any, answer: list[str]) -> None:
    stream = v31.parser(tools=[WEATHER], thinking=True).stream()
    completion = Completion(stream, OutputOptions(hold_reasoning=True))
    deltas, message = run(completion, ["Let", " me", " think", "</think>", *answer])
    assert deltas[0] == {"reasoning_content": "Let me think"} == {"reasoning_content": message["reasoning_content"]}
    assert deltas[1:] == [{"content": piece} for piece in answer]


def test_skip_special_tokens_removes_markers_left_in_content(v31: Any) -> None:
    stream = v31.parser(tools=[WEATHER], thinking=False, tool_call_policy="strict").stream()
    text = f"Answer first. {SECTION}{CALL}get_weather{SEP}{{}}{CALL_END}{SECTION_END}"
    kept, _ = run(Completion(stream, OutputOptions()), [text])
    assert SECTION in content_of(kept)
    stream = v31.parser(tools=[WEATHER], thinking=False, tool_call_policy="strict").stream()
    hidden = frozenset({SECTION, CALL, SEP, CALL_END, SECTION_END})
    deltas, message = run(Completion(stream, OutputOptions(hidden_markers=hidden)), [text])
    assert not any(marker in content_of(deltas) for marker in hidden)
    assert content_of(deltas) == message["content"] == "Answer first. get_weather{}"


def test_logprobs_and_full_text_ride_on_the_deltas(v31: Any) -> None:
    completion = v31_completion(v31, logprobs=True, full_text=True)
    deltas, _ = run(completion, ["Hel", "lo", " you"], logprobs=True)
    carried = [entry for delta in deltas for entry in delta.get("_logprobs") or []]
    assert [e.token_id for e in carried + completion.take_pending_logprobs()] == [0, 1, 2]
    assert len(completion.logprobs) == 3
    assert all(delta["_full_text"] == completion.text[: len(delta["_full_text"])] for delta in deltas)
    assert deltas[-1]["_full_text"] == "Hello you"


def test_token_texts_fed_together_give_the_same_output_in_fewer_deltas(v31: Any) -> None:
    pieces = ["Sure", ".", SECTION, CALL, "get_", "weather", SEP, '{"ci', 'ty": "Par', 'is"}', CALL_END,
              SECTION_END, EOS]
    one_by_one, expected = run(v31_completion(v31, dropped_tokens=frozenset({EOS})), pieces)
    completion = v31_completion(v31, dropped_tokens=frozenset({EOS}))
    assert completion.joins_texts
    together = completion.feed_texts(pieces[:5]) + completion.feed_texts(pieces[5:]) + completion.finish()
    def without_ids(message: dict[str, Any]) -> dict[str, Any]:
        return {**message, "tool_calls": [call["function"] for call in message["tool_calls"]]}

    assert without_ids(completion.message()) == without_ids(expected)
    assert content_of(together) == content_of(one_by_one) == "Sure."
    assert len(together) < len(one_by_one)


def test_token_texts_are_fed_one_by_one_where_a_stop_string_may_end_the_generation(v31: Any) -> None:
    completion = v31_completion(v31, stops=["ab"])
    assert not completion.joins_texts
    deltas = completion.feed_texts(["x", "a", "b", "y"]) + completion.finish()
    assert content_of(deltas) == "x" and completion.stopped and completion.stop_string == "ab"


def test_token_logprobs_are_a_log_softmax() -> None:
    import numpy as np

    from autoparser.llama.logprobs import token_logprobs

    logits = np.array([1.0, 3.0, 2.0, 0.5], dtype=np.float32)
    info = token_logprobs(logits, 2, 2, lambda t: f"t{t}".encode())
    expected = logits - np.log(np.exp(logits).sum())
    assert info.logprob == pytest.approx(expected[2])
    assert [t for t, _, _ in info.top] == [1, 2]
    assert info.top[0][2] == pytest.approx(expected[1]) and info.piece == b"t2"


# -- request fields --------------------------------------------------------------------------------


def chat_body(**fields: Any) -> bytes:
    return json.dumps({"messages": [{"role": "user", "content": "hi"}], **fields}).encode()


@pytest.mark.parametrize(("effort", "thinking", "budget"), [
    ("none", False, None), ("minimal", False, None), ("low", True, 256), ("medium", True, 1024), ("high", True, None)])
def test_reasoning_effort_switches_thinking_and_sets_a_budget(effort: str, thinking: bool, budget: int | None) -> None:
    request = parse_request(chat_body(reasoning_effort=effort))
    assert requested_thinking(request, "thinking", True) is thinking
    assert thinking_budget(request) == budget


def test_reasoning_object_sets_the_budget() -> None:
    assert thinking_budget(parse_request(chat_body(reasoning={"effort": "low"}))) == 256
    assert thinking_budget(parse_request(chat_body(reasoning={"max_tokens": 9, "effort": "low"}))) == 9


def test_explicit_thinking_fields_win_over_reasoning_effort() -> None:
    request = parse_request(chat_body(reasoning_effort="low", thinking_budget=7, thinking=False))
    assert requested_thinking(request, "thinking", True) is False and thinking_budget(request) == 7


def test_top_logprobs_needs_logprobs() -> None:
    assert parse_request(chat_body(logprobs=True, top_logprobs=3)).top_logprobs_wanted() == 3
    assert parse_request(chat_body(logprobs=True)).top_logprobs_wanted() == 0
    assert parse_request(chat_body()).top_logprobs_wanted() is None
    with pytest.raises(APIError):
        parse_request(chat_body(top_logprobs=3)).top_logprobs_wanted()


# -- tools preamble --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", HIDING_TEMPLATES)
def test_templates_that_hide_tools_get_a_preamble_whose_example_the_parser_and_grammar_accept(name: str) -> None:
    from autoparser.generators.lark import parse_with_lark
    from autoparser.server.preamble import call_layout, template_hides_tools, tools_preamble, with_preamble

    analysis = analysis_named(name)
    assert template_hides_tools(analysis)
    layout = call_layout(analysis, WEATHER)
    assert layout is not None and "get_weather" in layout
    text = tools_preamble(analysis, [WEATHER])
    assert "get_weather" in text and "Current weather in a city" in text and layout in text
    assert json.dumps(WEATHER["function"]["parameters"]) in text
    prompt = analysis.render(with_preamble([{"role": "user", "content": "Weather?"}], text), tools=[WEATHER])
    assert layout in prompt and "Current weather in a city" in prompt
    # the example the model is shown is exactly what the parser and the grammar take as a call
    message = analysis.parser(tools=[WEATHER], thinking=False).parse(layout)
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_weather"]
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"city": "..."}
    assert parse_with_lark(analysis, layout, tools=[WEATHER], thinking=False)["tool_calls"]


def test_templates_that_show_tools_get_no_preamble() -> None:
    from autoparser.server.preamble import template_hides_tools

    assert not template_hides_tools(analysis_named("llama-cpp-deepseek-r1.jinja"))


def test_preamble_joins_the_leading_system_message() -> None:
    from autoparser.server.preamble import with_preamble

    joined = with_preamble([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "x"}], "TOOLS")
    assert joined[0] == {"role": "system", "content": "Be brief.\n\nTOOLS"} and len(joined) == 2
    assert with_preamble([{"role": "user", "content": "x"}], "TOOLS")[0] == {"role": "system", "content": "TOOLS"}


# -- segments --------------------------------------------------------------------------------------


def test_segmenter_opens_and_closes_items_in_order() -> None:
    segmenter = Segmenter()
    deltas = [{"reasoning_content": "r1"}, {"reasoning_content": "r2"}, {"content": "c"},
              {"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                               "function": {"name": "f", "arguments": ""}}]},
              {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]},
              {"tool_calls": [{"index": 1, "id": "call_b", "function": {"name": "g", "arguments": "{\"x\":1}"}}]}]
    steps = [step for delta in deltas for step in segmenter.feed(delta)] + segmenter.close()
    shape = [(s.action, s.segment.kind) for s in steps]
    assert shape == [("open", "reasoning"), ("append", "reasoning"), ("append", "reasoning"), ("close", "reasoning"),
                     ("open", "text"), ("append", "text"), ("close", "text"),
                     ("open", "call"), ("append", "call"), ("close", "call"), ("open", "call"), ("append", "call"),
                     ("close", "call")]
    texts = [(s.kind, s.text, s.name, s.call_id) for s in segmenter.segments]
    assert texts == [("reasoning", "r1r2", "", ""), ("text", "c", "", ""), ("call", "{}", "f", "call_a"),
                     ("call", "{\"x\":1}", "g", "call_b")]
    whole = segments_of({"reasoning_content": "r1r2", "content": "c", "tool_calls": [
        {"id": "call_a", "function": {"name": "f", "arguments": "{}"}},
        {"id": "call_b", "function": {"name": "g", "arguments": "{\"x\":1}"}}]})
    assert [(s.kind, s.text, s.name, s.call_id) for s in whole] == texts


# -- Responses API ---------------------------------------------------------------------------------

ANSWER_DELTAS = [
    {"reasoning_content": "Let me see."},
    {"content": "Checking."},
    {"tool_calls": [{"index": 0, "id": "call_x1", "type": "function", "function": {"name": "get_weather",
                                                                                   "arguments": ""}}]},
    {"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\": "}}]},
    {"tool_calls": [{"index": 0, "function": {"arguments": "\"Paris\"}"}}]},
]


def fake_result(finish_reason: str = "tool_calls") -> Any:
    from autoparser.server.worker import GenerationResult

    return GenerationResult(finish_reason=finish_reason, prompt_tokens=10, completion_tokens=5, prefill_ms=1.0,
                            decode_ms=[], message={}, final_deltas=[])


def test_responses_input_items_become_chat_messages() -> None:
    from autoparser.server.responses import input_messages

    items = [
        {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "hmm"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me check."}]},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
        {"type": "function_call", "call_id": "call_2", "name": "get_weather", "arguments": "{\"city\":\"Lima\"}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "rain"}]},
    ]
    messages = input_messages("Be brief.", items)
    assert messages[0] == {"role": "system", "content": "Be brief."}
    assert messages[1] == {"role": "user", "content": "Weather?"}
    assistant = messages[2]
    assert assistant["content"] == "Let me check." and assistant["reasoning_content"] == "hmm"
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_1", "call_2"]
    assert messages[3:] == [{"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                            {"role": "tool", "tool_call_id": "call_2", "content": "rain"}]
    assert input_messages(None, "hello") == [{"role": "user", "content": "hello"}]


def test_responses_request_translates_tools_format_and_effort() -> None:
    from autoparser.server.responses import parse_responses_request

    body = {"model": "m", "input": "hi", "tools": [{"type": "function", "name": "get_weather", "parameters": {}}],
            "tool_choice": {"type": "function", "name": "get_weather"}, "max_output_tokens": 9,
            "reasoning": {"effort": "low"}, "text": {"format": {"type": "json_schema", "name": "x",
                                                                 "schema": {"type": "object"}}}}
    _, chat = parse_responses_request(json.dumps(body).encode())
    assert chat.tools[0].function.name == "get_weather" and chat.max_tokens == 9
    assert chat.tool_choice.function.name == "get_weather" and chat.reasoning_effort == "low"
    assert chat.response_format.json_schema.json_schema == {"type": "object"}
    with pytest.raises(APIError) as refused:
        parse_responses_request(json.dumps({"input": "hi", "previous_response_id": "resp_1"}).encode())
    assert refused.value.status == 400 and "previous_response_id" in refused.value.message


def test_responses_events_and_body_match_the_openai_types() -> None:
    from openai.types.responses import Response, ResponseStreamEvent
    from pydantic import TypeAdapter

    from autoparser.server.protocol import ChatCompletionRequest
    from autoparser.server.responses import ResponseBuilder, ResponsesRequest

    request = ResponsesRequest(input="hi")
    builder = ResponseBuilder(request, ChatCompletionRequest(messages=[{"role": "user", "content": "hi"}]), "m")
    segmenter = Segmenter()
    events = builder.opening()
    for delta in ANSWER_DELTAS:
        events += [e for step in segmenter.feed(delta) for e in builder.step_events(step, segmenter.segments)]
    events += [e for step in segmenter.close() for e in builder.step_events(step, segmenter.segments)]
    events += builder.closing(segmenter.segments, fake_result())
    adapter = TypeAdapter(ResponseStreamEvent)
    parsed = [adapter.validate_python(data) for _, data in events]
    assert [e.sequence_number for e in parsed] == list(range(len(parsed)))
    assert all(kind == data["type"] for kind, data in events)
    kinds = [e.type for e in parsed]
    for kind in ("response.created", "response.output_item.added", "response.reasoning_text.delta",
                 "response.reasoning_summary_part.added", "response.reasoning_summary_text.delta",
                 "response.reasoning_summary_text.done", "response.reasoning_summary_part.done",
                 "response.output_text.delta", "response.function_call_arguments.delta",
                 "response.function_call_arguments.done", "response.output_item.done"):
        assert kind in kinds
    final = parsed[-1]
    assert final.type == "response.completed"
    assert [item.type for item in final.response.output] == ["reasoning", "message", "function_call"]
    reasoning = final.response.output[0]
    assert reasoning.summary[0].type == "summary_text" and reasoning.summary[0].text == reasoning.content[0].text
    call = final.response.output[2]
    assert (call.call_id, call.name, call.arguments) == ("call_x1", "get_weather", "{\"city\": \"Paris\"}")
    assert final.response.output_text == "Checking."
    Response.model_validate(builder.body(segments_of({"content": "x"}), fake_result("length")))
    assert builder.body([], fake_result("length"))["incomplete_details"] == {"reason": "max_output_tokens"}


# -- AG-UI -----------------------------------------------------------------------------------------


def test_agui_input_and_events_use_the_protocol_types() -> None:
    core = pytest.importorskip("ag_ui.core", reason="ag-ui-protocol is not installed")
    from pydantic import TypeAdapter

    from autoparser.server.agui import EventBuilder, chat_messages, chat_request

    run_input = core.RunAgentInput.model_validate({
        "threadId": "t1", "runId": "r1", "state": {}, "context": [{"description": "user city", "value": "Paris"}],
        "tools": [{"name": "get_weather", "description": "Weather", "parameters": {"type": "object"}}],
        "forwardedProps": {"max_tokens": 8, "tool_choice": "required", "ignored": 1},
        "messages": [{"id": "1", "role": "user", "content": "Weather?"},
                     {"id": "2", "role": "assistant", "toolCalls": [{"id": "call_1", "type": "function",
                                                                      "function": {"name": "get_weather",
                                                                                   "arguments": "{}"}}]},
                     {"id": "3", "role": "tool", "toolCallId": "call_1", "content": "sunny"}]})
    messages = chat_messages(run_input)
    assert messages[0]["role"] == "system" and "user city: Paris" in messages[0]["content"]
    assert messages[2]["tool_calls"][0]["id"] == "call_1" and messages[3]["tool_call_id"] == "call_1"
    chat = chat_request(run_input)
    assert chat["max_tokens"] == 8 and chat["tool_choice"] == "required" and "ignored" not in chat
    builder = EventBuilder(run_input)
    segmenter = Segmenter()
    events = builder.started()
    for delta in ANSWER_DELTAS:
        events += [e for step in segmenter.feed(delta) for e in builder.step(step)]
    events += [e for step in segmenter.close() for e in builder.step(step)] + builder.finished()
    adapter = TypeAdapter(core.Event)
    wire = [adapter.validate_json(event.model_dump_json(by_alias=True)) for event in events]
    kinds = [event.type.value for event in wire]
    assert kinds == ["RUN_STARTED", "REASONING_START", "REASONING_MESSAGE_START", "REASONING_MESSAGE_CONTENT",
                     "REASONING_MESSAGE_END", "REASONING_END", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT",
                     "TEXT_MESSAGE_END", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_ARGS", "TOOL_CALL_END",
                     "RUN_FINISHED"]
    start = wire[kinds.index("TOOL_CALL_START")]
    assert start.tool_call_id == "call_x1" and start.parent_message_id == wire[6].message_id
