"""`POST /v1/completions`: OpenAI's legacy text completions, on the raw prompt.

The prompt (a string or a list of token ids) is continued as it is: no chat template, no
parser. The text goes through the same `Completion` core as chat (stop strings, special
tokens), with a stream that passes all text through as content.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import Field, ValidationError, field_validator

from autoparser.server.completion import Completion
from autoparser.server.errors import bad_request, event_error
from autoparser.server.logprobs import completion_logprobs
from autoparser.server.protocol import (
    GenerationFields,
    parse_json_body,
    requested_max_tokens,
    validation_error,
)
from autoparser.server.runner import StreamResponse, prepare_and_start
from autoparser.server.service import ChatService, PreparedChat
from autoparser.server.validation import PromptTooLong, check_fits
from autoparser.server.worker import ChatWorker

DEFAULT_MAX_TOKENS = 16
"""OpenAI's default for this endpoint."""


class CompletionRequest(GenerationFields):
    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int | None = Field(default=DEFAULT_MAX_TOKENS, ge=1)
    echo: bool = False
    logprobs: int | None = Field(default=None, ge=0, le=20)
    suffix: str | None = None

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, value: Any) -> Any:
        if isinstance(value, list) and value and isinstance(value[0], (str, list)):
            if len(value) != 1:
                raise ValueError("only one prompt per request is supported")
            value = value[0]
        if not value:
            raise ValueError("the prompt must not be empty")
        return value

    def top_logprobs_wanted(self) -> int | None:
        return self.logprobs


class PlainText:
    """The parser stand-in for raw completions: every character is content."""

    def __init__(self) -> None:
        self._parts: list[str] = []

    def feed(self, text: str) -> list[dict[str, Any]]:
        self._parts.append(text)
        return [{"content": text}] if text else []

    def finish(self) -> list[dict[str, Any]]:
        return []

    def message(self) -> dict[str, Any]:
        return {"content": "".join(self._parts) or None, "reasoning_content": None, "tool_calls": []}


def parse_completion_request(body: bytes) -> CompletionRequest:
    try:
        request = CompletionRequest.model_validate(parse_json_body(body))
    except ValidationError as exc:
        raise validation_error(exc) from None
    request.check()
    return request


def prepare_text(service: ChatService, request: CompletionRequest) -> PreparedChat:
    if request.suffix:
        raise bad_request("suffix is not supported.", param="suffix")
    engine = service.engine
    if isinstance(request.prompt, str):
        try:
            check_fits(engine, request.prompt, int(engine.n_ctx))
        except PromptTooLong as exc:
            service.clip_max_tokens(exc.at_least, None, param="prompt", at_least=True)
        bos = engine.bos_token
        tokens = engine.tokenize(request.prompt, parse_special=True,
                                 add_bos=bool(bos) and not request.prompt.startswith(bos))
        text = request.prompt
    else:
        tokens = [int(t) for t in request.prompt]
        service.clip_max_tokens(len(tokens), None, param="prompt")  # before detokenizing them
        if any(not 0 <= t < engine.n_vocab for t in tokens):
            raise bad_request("prompt holds token ids outside the vocabulary.", param="prompt")
        text = engine.detokenize(tokens)
    max_tokens = service.clip_max_tokens(len(tokens), requested_max_tokens(request), param="prompt")
    return PreparedChat(
        request=request, prompt=text, prompt_tokens=tokens, max_tokens=max_tokens,  # type: ignore[arg-type]
        sampling=service.sampling(request, request.logprobs), grammar=None, reasoning=None,
        stop_token_ids=service.stop_token_ids(request),
        completion=Completion(PlainText(), service.output_options(request, parsed=False)))


def add_routes(app: FastAPI, service: ChatService, worker: ChatWorker) -> None:
    from autoparser.server.app import ResponseMeta, sse, tracker, usage

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        body = parse_completion_request(await request.body())
        model_name = service.check_model(body.model)
        run = await prepare_and_start(worker, lambda: prepare_text(service, body), body.stream,
                                      tracker(request, "completions"))
        prepared = run.prepared
        meta = ResponseMeta(model_name, prefix="cmpl-")
        head = meta.head("text_completion")
        echo = prepared.prompt if body.echo else ""
        if not body.stream:
            result = await run.result(request)
            text = echo + (result.message.get("content") or "")
            logprobs = _logprobs(prepared, prepared.completion.logprobs, len(echo))
            return JSONResponse({**head, "choices": [_choice(text, logprobs, result.finish_reason)],
                                 "usage": usage(result)})

        async def chunks() -> Any:
            offset = len(echo)
            if echo:
                yield sse({**head, "choices": [_choice(echo, None, None)]})
            async for batch in run.batches():
                out: list[bytes] = []
                for kind, payload in batch:
                    if kind == "error":
                        out.append(sse({**head, "choices": [],
                                        "error": event_error(payload)}))
                        continue
                    deltas = payload if kind == "deltas" else payload.final_deltas
                    for delta in deltas:
                        text = delta.get("content") or ""
                        out.append(sse({**head, "choices": [_choice(
                            text, _logprobs(prepared, delta.get("_logprobs") or [], offset), None)]}))
                        offset += len(text)
                    if kind == "done":
                        rest = _logprobs(prepared, prepared.completion.take_pending_logprobs(), offset)
                        out.append(sse({**head, "choices": [_choice("", rest, payload.finish_reason)]}))
                        if body.stream_options is not None and body.stream_options.include_usage:
                            out.append(sse({**head, "choices": [], "usage": usage(payload)}))
                yield b"".join(out)
            yield b"data: [DONE]\n\n"

        return StreamResponse(chunks(), ping=15, sep="\n", client_close_handler_callable=run.on_close)


def _choice(text: str, logprobs: dict[str, Any] | None, finish_reason: str | None) -> dict[str, Any]:
    return {"text": text, "index": 0, "logprobs": logprobs, "finish_reason": finish_reason}


def _logprobs(prepared: PreparedChat, entries: list[Any], offset: int) -> dict[str, Any] | None:
    top = prepared.request.top_logprobs_wanted()
    return None if top is None else completion_logprobs(entries, top, offset)
