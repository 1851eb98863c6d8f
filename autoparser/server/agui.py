"""`POST /v1/ag-ui`: an AG-UI agent endpoint: `RunAgentInput` in, AG-UI events out over SSE.

The run's messages, tools and context become a chat completions request (the same template,
tools preamble, grammar and parser as `/v1/chat/completions`); `forwardedProps` may carry chat
fields such as `max_tokens`, `tool_choice` or `thinking`. The parser's deltas become AG-UI
events, built and encoded with the `ag-ui-protocol` package: RUN_STARTED, then
REASONING_START / REASONING_MESSAGE_* / REASONING_END for reasoning, TEXT_MESSAGE_* for the
answer, TOOL_CALL_START / ARGS / END per call, and RUN_FINISHED, or RUN_ERROR on failure.
A request that cannot be run (bad input, unknown model) gets an HTTP error before any event.
"""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import FastAPI, Request
from pydantic import ValidationError

from autoparser.server.errors import APIError, bad_request
from autoparser.server.protocol import ChatCompletionRequest, parse_json_body, parse_request, validation_error
from autoparser.server.runner import StreamResponse, prepare_and_start
from autoparser.server.segments import Segment, Segmenter, Step
from autoparser.server.service import ChatService
from autoparser.server.worker import ChatWorker

# `forwardedProps` keys that reach the chat request.
FORWARDED = ("model", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "min_p", "seed",
             "stop", "tool_choice", "parallel_tool_calls", "thinking", "thinking_budget", "reasoning_effort",
             "chat_template_kwargs", "response_format", "tool_call_policy", "tool_preamble")


def _agui() -> Any:
    try:
        from ag_ui import core
    except ImportError:
        raise APIError(501, "The AG-UI endpoint needs the ag-ui-protocol package: "
                            "pip install 'autoparser[server]'.", code="not_installed") from None
    return core


def parse_run_input(body: bytes) -> tuple[Any, ChatCompletionRequest]:
    core = _agui()
    try:
        run_input = core.RunAgentInput.model_validate(parse_json_body(body))
    except ValidationError as exc:
        raise validation_error(exc) from None
    return run_input, parse_request(chat_request(run_input))


def chat_request(run_input: Any) -> dict[str, Any]:
    chat: dict[str, Any] = {"messages": chat_messages(run_input)}
    if run_input.tools:
        chat["tools"] = [{"type": "function", "function": {
            "name": tool.name, "description": tool.description,
            "parameters": tool.parameters or {"type": "object", "properties": {}}}} for tool in run_input.tools]
    props = run_input.forwarded_props if isinstance(run_input.forwarded_props, dict) else {}
    chat.update({key: props[key] for key in FORWARDED if key in props})
    return chat


def chat_messages(run_input: Any) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if run_input.context:
        lines = [f"- {item.description}: {item.value}" for item in run_input.context]
        messages.append({"role": "system", "content": "Context:\n" + "\n".join(lines)})
    reasoning: str | None = None
    for index, message in enumerate(run_input.messages):
        role = message.role
        if role == "reasoning":
            reasoning = message.content
            continue
        if role == "activity":
            continue
        out: dict[str, Any] = {"role": role, "content": _text(message.content, f"messages[{index}].content")}
        if role == "assistant":
            if message.tool_calls:
                out["tool_calls"] = [{"id": call.id, "type": "function",
                                      "function": {"name": call.function.name, "arguments": call.function.arguments}}
                                     for call in message.tool_calls]
            if reasoning is not None:
                out["reasoning_content"], reasoning = reasoning, None
        elif role == "tool":
            out["tool_call_id"] = message.tool_call_id
        messages.append(out)
    return messages


def _text(content: Any, param: str) -> str | None:
    if content is None or isinstance(content, str):
        return content
    texts = []
    for part in content:
        if getattr(part, "type", None) != "text":
            raise APIError(400, "Only text content parts are supported.", param=param, code="unsupported_content")
        texts.append(part.text)
    return "\n".join(texts)


class EventBuilder:
    """AG-UI events for one run, from the segmenter's steps."""

    def __init__(self, run_input: Any):
        self.core = _agui()
        self.thread_id = run_input.thread_id
        self.run_id = run_input.run_id
        self.message_id = "msg_" + uuid.uuid4().hex
        self._texts = 0

    def started(self) -> list[Any]:
        return [self.core.RunStartedEvent(thread_id=self.thread_id, run_id=self.run_id)]

    def step(self, step: Step) -> list[Any]:
        core, segment = self.core, step.segment
        if segment.kind == "text":
            return self._text_step(step.action, segment, step.text)
        if segment.kind == "reasoning":
            if step.action == "open":
                return [core.ReasoningStartEvent(message_id=segment.id),
                        core.ReasoningMessageStartEvent(message_id=segment.id, role="reasoning")]
            if step.action == "append":
                return [core.ReasoningMessageContentEvent(message_id=segment.id, delta=step.text)]
            return [core.ReasoningMessageEndEvent(message_id=segment.id), core.ReasoningEndEvent(message_id=segment.id)]
        if step.action == "open":
            return [core.ToolCallStartEvent(tool_call_id=segment.call_id, tool_call_name=segment.name,
                                            parent_message_id=self.message_id)]
        if step.action == "append":
            return [core.ToolCallArgsEvent(tool_call_id=segment.call_id, delta=step.text)]
        return [core.ToolCallEndEvent(tool_call_id=segment.call_id)]

    def _text_step(self, action: str, segment: Segment, text: str) -> list[Any]:
        core = self.core
        if action == "open":
            # the first text is the run's assistant message, which its tool calls also point to
            self._texts += 1
            if self._texts == 1:
                segment.id = self.message_id
            return [core.TextMessageStartEvent(message_id=segment.id, role="assistant")]
        if action == "append":
            return [core.TextMessageContentEvent(message_id=segment.id, delta=text)]
        return [core.TextMessageEndEvent(message_id=segment.id)]

    def finished(self) -> list[Any]:
        return [self.core.RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id)]

    def error(self, message: str) -> list[Any]:
        return [self.core.RunErrorEvent(message=message, code="generation_error")]


def add_routes(app: FastAPI, service: ChatService, worker: ChatWorker) -> None:
    from autoparser.server.app import tracker

    @app.post("/v1/ag-ui")
    async def ag_ui(request: Request) -> Any:
        run_input, chat = parse_run_input(await request.body())
        service.check_model(chat.model)
        if chat.n != 1:
            raise bad_request("An AG-UI run streams one assistant message: n must be 1.", param="n")
        run = await prepare_and_start(worker, lambda: service.prepare(chat), True, tracker(request, "ag-ui"))
        builder = EventBuilder(run_input)
        from ag_ui.encoder import EventEncoder

        encoder = EventEncoder(accept=request.headers.get("accept"))

        def encode(events: list[Any]) -> bytes:
            return "".join(encoder.encode(event) for event in events).encode()

        async def events() -> Any:
            segmenter = Segmenter()
            yield encode(builder.started())
            async for batch in run.batches():
                out: list[Any] = []
                for kind, payload in batch:
                    if kind == "error":
                        out += [*[e for s in segmenter.close() for e in builder.step(s)], *builder.error(payload)]
                        continue
                    deltas = payload if kind == "deltas" else payload.final_deltas
                    steps = [step for delta in deltas for step in segmenter.feed(delta)]
                    if kind == "done":
                        steps += segmenter.close()
                    out += [event for step in steps for event in builder.step(step)]
                    if kind == "done":
                        out += builder.finished()
                yield encode(out)

        return StreamResponse(events(), ping=15, sep="\n", media_type=encoder.get_content_type(),
                                   client_close_handler_callable=run.on_close)
