"""`POST /v1/responses`: OpenAI's Responses API over the same generation as chat completions.

The request (input string or items, instructions, function tools, `text.format`, reasoning
effort) is translated into a chat completions request, so it gets the same template, tools
preamble, grammar and parser. The answer goes back as output items: `reasoning` (the text as
`reasoning_text` content and as its one `summary_text` part), `message` (`output_text`) and one `function_call` per call with its
`call_id`. Streaming sends the Responses event types, named and shaped as in the `openai`
package's `openai.types.responses`. Nothing is stored: `previous_response_id` and
`store: true` with a conversation to resume are refused with a 400 saying so.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autoparser.server.errors import APIError, bad_request
from autoparser.server.logprobs import chat_entry
from autoparser.server.protocol import ChatCompletionRequest, parse_json_body, parse_request, validation_error
from autoparser.server.runner import StreamResponse, prepare_and_start
from autoparser.server.segments import Segment, Segmenter, Step, segments_of
from autoparser.server.service import ChatService, PreparedChat
from autoparser.server.worker import ChatWorker, GenerationResult

# Request fields passed to the chat request unchanged (this server's and vLLM's extras).
PASSED_THROUGH = ("top_k", "min_p", "seed", "stop", "presence_penalty", "frequency_penalty",
                  "repetition_penalty", "chat_template_kwargs", "thinking", "thinking_budget",
                  "tool_call_policy", "return_prompt", "skip_special_tokens", "ignore_eos", "tool_preamble",
                  "enable_reasoning", "stream_reasoning")


class ResponsesRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: dict[str, Any] | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = None
    top_p: float | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    include: list[str] | None = None
    reasoning: dict[str, Any] | None = None
    stream: bool = False
    store: bool | None = None
    previous_response_id: str | None = None
    conversation: str | dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None


def parse_responses_request(body: bytes) -> tuple[ResponsesRequest, ChatCompletionRequest]:
    try:
        request = ResponsesRequest.model_validate(parse_json_body(body))
    except ValidationError as exc:
        raise validation_error(exc) from None
    if request.previous_response_id or request.conversation:
        raise bad_request("This server stores no responses: send the whole conversation in 'input' "
                          "instead of previous_response_id or conversation.", param="previous_response_id")
    try:
        chat = chat_request(request)
    except (TypeError, AttributeError) as exc:  # a shape the checks below do not name yet: still the client's
        raise bad_request(f"The request does not have the Responses API's shape ({type(exc).__name__}: {exc}).") \
            from None
    return request, parse_request(chat)


def chat_request(request: ResponsesRequest) -> dict[str, Any]:
    """The chat completions request that asks for the same answer."""
    chat: dict[str, Any] = {"model": request.model, "messages": input_messages(request.instructions, request.input)}
    for name in ("temperature", "top_p"):
        if getattr(request, name) is not None:
            chat[name] = getattr(request, name)
    if request.max_output_tokens is not None:
        chat["max_tokens"] = request.max_output_tokens
    if request.parallel_tool_calls is not None:
        chat["parallel_tool_calls"] = request.parallel_tool_calls
    if request.tools:
        chat["tools"] = [_function_tool(tool, i) for i, tool in enumerate(request.tools)]
    if request.tool_choice is not None:
        chat["tool_choice"] = _tool_choice(request.tool_choice)
    response_format = _response_format(request.text)
    if response_format is not None:
        chat["response_format"] = response_format
    effort = (request.reasoning or {}).get("effort")
    if effort is not None:
        chat["reasoning_effort"] = effort
    if request.top_logprobs is not None or "message.output_text.logprobs" in (request.include or []):
        chat["logprobs"] = True
        chat["top_logprobs"] = request.top_logprobs or 0
    extra = request.model_extra or {}
    chat.update({name: extra[name] for name in PASSED_THROUGH if name in extra})
    return chat


def input_messages(instructions: str | None, items: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Input items as chat messages: function calls join the assistant turn they follow."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": instructions}] if instructions else []
    if isinstance(items, str):
        return [*messages, {"role": "user", "content": items}]
    reasoning: str | None = None
    for index, item in enumerate(items):
        kind = item.get("type") or ("message" if "role" in item else None)
        param = f"input[{index}]"
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise bad_request(f"{param}.role: unsupported role {role!r}.", param=f"{param}.role")
            message: dict[str, Any] = {"role": role, "content": _text(item.get("content"), f"{param}.content")}
            if role == "assistant" and reasoning is not None:
                message["reasoning_content"], reasoning = reasoning, None
            messages.append(message)
        elif kind == "function_call":
            call = {"id": _required(item, "call_id", param), "type": "function",
                    "function": {"name": _required(item, "name", param), "arguments": item.get("arguments") or "{}"}}
            last = messages[-1] if messages else None
            if last is None or last["role"] != "assistant":
                last = {"role": "assistant", "content": None}
                if reasoning is not None:
                    last["reasoning_content"], reasoning = reasoning, None
                messages.append(last)
            last.setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": _required(item, "call_id", param),
                             "content": _text(item.get("output"), f"{param}.output") or ""})
        elif kind == "reasoning":
            reasoning = _reasoning_text(item, param)
        else:
            raise bad_request(f"{param}: input items of type {kind!r} are not supported; this server takes "
                              "messages, function_call, function_call_output and reasoning items.",
                              param=f"{param}.type")
    return messages


def _reasoning_text(item: dict[str, Any], param: str) -> str | None:
    """A reasoning item's text: its `content` parts, else its `summary` parts, joined."""
    field = "content" if item.get("content") else "summary"
    parts = item.get(field) or []
    if not isinstance(parts, list):
        raise bad_request(f"{param}.{field} must be a list of parts like {{'type': 'reasoning_text', 'text': ...}}.",
                          param=f"{param}.{field}")
    texts = []
    for index, part in enumerate(parts):
        text = part.get("text", "") if isinstance(part, dict) else None
        if not isinstance(text, str):
            raise bad_request(f"{param}.{field}[{index}] must be an object with a string 'text'.",
                              param=f"{param}.{field}[{index}]")
        texts.append(text)
    return "\n".join(texts) or None


def _required(item: dict[str, Any], name: str, param: str) -> Any:
    if not item.get(name):
        raise bad_request(f"{param}.{name} is required.", param=f"{param}.{name}")
    return item[name]


def _text(content: Any, param: str) -> str | None:
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request(f"{param} must be a string or a list of content parts.", param=param)
    texts = []
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text") and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "refusal":
            if not isinstance(part.get("refusal") or "", str):
                raise bad_request(f"{param}[{index}].refusal must be a string.", param=f"{param}[{index}].refusal")
            texts.append(part.get("refusal") or "")
        else:
            raise APIError(400, f"Unsupported content part type {kind!r}; only text parts are accepted.",
                           param=f"{param}[{index}]", code="unsupported_content")
    return "\n".join(texts)


def _function_tool(tool: dict[str, Any], index: int) -> dict[str, Any]:
    if tool.get("type") != "function":
        raise bad_request(f"tools[{index}]: only function tools are supported, not {tool.get('type')!r}.",
                          param=f"tools[{index}].type")
    function = {key: tool[key] for key in ("name", "description", "parameters", "strict") if tool.get(key) is not None}
    return {"type": "function", "function": function}


def _tool_choice(choice: str | dict[str, Any]) -> Any:
    if isinstance(choice, str):
        return choice
    if choice.get("type") == "function" and choice.get("name"):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise bad_request("tool_choice must be 'auto', 'none', 'required' or {'type': 'function', 'name': ...}.",
                      param="tool_choice")


def _response_format(text: dict[str, Any] | None) -> dict[str, Any] | None:
    fmt = (text or {}).get("format")
    if fmt is not None and not isinstance(fmt, dict):
        raise bad_request("text.format must be an object such as {'type': 'json_schema', 'name': ..., "
                          "'schema': {...}}.", param="text.format")
    if not fmt or fmt.get("type") == "text":
        return None
    if fmt.get("type") == "json_object":
        return {"type": "json_object"}
    if fmt.get("type") == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": fmt.get("name"), "schema": fmt.get("schema"),
                                                       "strict": fmt.get("strict")}}
    raise bad_request(f"text.format type {fmt.get('type')!r} is not supported.", param="text.format")


# -- the answer ------------------------------------------------------------------------------------


class ResponseBuilder:
    """The response object, and the streamed events that build it, for one request."""

    def __init__(self, request: ResponsesRequest, chat: ChatCompletionRequest, model: str,
                 count_tokens: Any = lambda text: [], warnings: list[str] | None = None):
        self.count_tokens = count_tokens
        # the request's warnings, as a chat reply carries them; the list may grow while it runs
        self.warnings = warnings if warnings is not None else []
        self.request = request
        self.chat = chat
        self.id = "resp_" + uuid.uuid4().hex
        self.created_at = time.time()
        self.model = model
        self.sequence = 0
        self.top = chat.top_logprobs_wanted()

    def body(self, segments: list[Segment], result: GenerationResult | None) -> dict[str, Any]:
        request = self.request
        status = "in_progress" if result is None else (
            "incomplete" if result.finish_reason == "length" else "completed")
        body: dict[str, Any] = {
            "id": self.id, "object": "response", "created_at": self.created_at, "model": self.model,
            "status": status, "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": request.instructions, "metadata": request.metadata or {},
            "output": [self.item(segment, status != "in_progress") for segment in segments],
            "parallel_tool_calls": self.chat.parallel_tool_calls,
            "temperature": request.temperature, "top_p": request.top_p,
            "tool_choice": request.tool_choice if request.tool_choice is not None else "auto",
            "tools": request.tools or [], "max_output_tokens": request.max_output_tokens,
            "previous_response_id": None, "reasoning": request.reasoning, "store": False,
            "text": request.text or {"format": {"type": "text"}}, "truncation": "disabled",
            "top_logprobs": request.top_logprobs, "usage": None if result is None else self.usage(result, segments),
        }
        if status != "in_progress":
            body["completed_at"] = time.time()
        if self.warnings:
            body["warnings"] = list(self.warnings)
        return body

    def usage(self, result: GenerationResult, segments: list[Segment]) -> dict[str, Any]:
        reasoning = "".join(s.text for s in segments if s.kind == "reasoning")
        reasoning_tokens = len(self.count_tokens(reasoning)) if reasoning else 0
        return {"input_tokens": result.prompt_tokens,
                "input_tokens_details": {"cached_tokens": result.cached_tokens, "cache_write_tokens": 0},
                "output_tokens": result.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
                "total_tokens": result.prompt_tokens + result.completion_tokens}

    def item(self, segment: Segment, done: bool) -> dict[str, Any]:
        status = "completed" if done else "in_progress"
        if segment.kind == "reasoning":
            # The text is both the content (the reasoning itself) and its one summary part: clients
            # built for OpenAI's models (pydantic-ai, LangChain) show only summaries.
            content = [{"type": "reasoning_text", "text": segment.text}] if done else []
            summary = [{"type": "summary_text", "text": segment.text}] if done else []
            return {"type": "reasoning", "id": segment.id, "summary": summary, "content": content, "status": status}
        if segment.kind == "text":
            content = [self.text_part(segment)] if done else []
            return {"type": "message", "id": segment.id, "role": "assistant", "status": status, "content": content}
        return {"type": "function_call", "id": segment.id, "call_id": segment.call_id, "name": segment.name,
                "arguments": segment.text if done else "", "status": status}

    def text_part(self, segment: Segment | None) -> dict[str, Any]:
        text = "" if segment is None else segment.text
        entries = [] if segment is None else segment.logprobs
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": self.logprobs(entries)}

    def logprobs(self, entries: list[Any]) -> list[dict[str, Any]]:
        return [chat_entry(entry, self.top) for entry in entries] if self.top is not None else []

    # -- streaming -----------------------------------------------------------------------------

    def event(self, kind: str, **fields: Any) -> tuple[str, dict[str, Any]]:
        self.sequence += 1
        return kind, {"type": kind, "sequence_number": self.sequence - 1, **fields}

    def opening(self) -> list[tuple[str, dict[str, Any]]]:
        response = self.body([], None)
        return [self.event("response.created", response=response),
                self.event("response.in_progress", response=response)]

    def step_events(self, step: Step, segments: list[Segment]) -> list[tuple[str, dict[str, Any]]]:
        segment = step.segment
        index = segments.index(segment)
        where = {"item_id": segment.id, "output_index": index}
        if step.action == "open":
            out = [self.event("response.output_item.added", output_index=index, item=self.item(segment, False))]
            if segment.kind == "reasoning":
                out.append(self.event("response.content_part.added", **where, content_index=0,
                                      part={"type": "reasoning_text", "text": ""}))
                out.append(self.event("response.reasoning_summary_part.added", **where, summary_index=0,
                                      part={"type": "summary_text", "text": ""}))
            elif segment.kind == "text":
                out.append(self.event("response.content_part.added", **where, content_index=0,
                                      part=self.text_part(None)))
            return out
        if step.action == "append":
            if segment.kind == "reasoning":
                return [self.event("response.reasoning_text.delta", **where, content_index=0, delta=step.text),
                        self.event("response.reasoning_summary_text.delta", **where, summary_index=0,
                                   delta=step.text)]
            if segment.kind == "text":
                return [self.event("response.output_text.delta", **where, content_index=0, delta=step.text,
                                   logprobs=self.logprobs(step.logprobs))]
            return [self.event("response.function_call_arguments.delta", **where, delta=step.text)]
        item = self.item(segment, True)
        if segment.kind == "reasoning":
            out = [self.event("response.reasoning_text.done", **where, content_index=0, text=segment.text),
                   self.event("response.content_part.done", **where, content_index=0, part=item["content"][0]),
                   self.event("response.reasoning_summary_text.done", **where, summary_index=0, text=segment.text),
                   self.event("response.reasoning_summary_part.done", **where, summary_index=0,
                              part=item["summary"][0])]
        elif segment.kind == "text":
            out = [self.event("response.output_text.done", **where, content_index=0, text=segment.text,
                              logprobs=self.logprobs(segment.logprobs)),
                   self.event("response.content_part.done", **where, content_index=0, part=item["content"][0])]
        else:
            out = [self.event("response.function_call_arguments.done", **where, name=segment.name,
                              arguments=segment.text)]
        return [*out, self.event("response.output_item.done", output_index=index, item=item)]

    def closing(self, segments: list[Segment], result: GenerationResult) -> list[tuple[str, dict[str, Any]]]:
        body = self.body(segments, result)
        kind = "response.incomplete" if body["status"] == "incomplete" else "response.completed"
        return [self.event(kind, response=body)]

    def failure(self, segments: list[Segment], message: str) -> list[tuple[str, dict[str, Any]]]:
        body = {**self.body(segments, None), "status": "failed",
                "error": {"code": "server_error", "message": message}}
        return [self.event("response.failed", response=body)]


def add_routes(app: FastAPI, service: ChatService, worker: ChatWorker) -> None:
    from autoparser.server.app import add_debug_fields, sse, tracker

    @app.post("/v1/responses")
    async def responses(request: Request) -> Any:
        body, chat = parse_responses_request(await request.body())
        model_name = service.check_model(chat.model)
        run = await prepare_and_start(worker, lambda: service.prepare(chat), body.stream,
                                      tracker(request, "responses"))
        prepared: PreparedChat = run.prepared
        builder = ResponseBuilder(body, chat, model_name, service.engine.tokenize, prepared.warnings)
        if not body.stream:
            result = await run.result(request)
            segments = segments_of(result.message)
            if builder.top is not None:
                _attach_logprobs(segments, prepared.completion.logprobs)
            answer = builder.body(segments, result)
            add_debug_fields(answer, prepared)
            return JSONResponse(answer)

        async def events() -> Any:
            segmenter = Segmenter()
            yield b"".join(sse(data, kind) for kind, data in builder.opening())
            async for batch in run.batches():
                out: list[tuple[str, dict[str, Any]]] = []
                for kind, payload in batch:
                    if kind == "error":
                        out += builder.failure(segmenter.segments, payload)
                        continue
                    deltas = payload if kind == "deltas" else payload.final_deltas
                    steps = [step for delta in deltas for step in segmenter.feed(delta)]
                    if kind == "done":
                        steps += segmenter.close()
                    out += [event for step in steps for event in builder.step_events(step, segmenter.segments)]
                    if kind == "done":
                        out += builder.closing(segmenter.segments, payload)
                yield b"".join(sse(data, kind) for kind, data in out)
            yield b"data: [DONE]\n\n"

        return StreamResponse(events(), ping=15, sep="\n", client_close_handler_callable=run.on_close)


def _attach_logprobs(segments: list[Segment], entries: list[Any]) -> None:
    """Non-streamed answers: all token log-probabilities go with the message text."""
    for segment in segments:
        if segment.kind == "text":
            segment.logprobs = list(entries)
            return
