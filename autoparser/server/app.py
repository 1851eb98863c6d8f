"""The HTTP shell: FastAPI routes, SSE streaming, auth, body limit and error objects.

Everything that decides what to answer lives in `service` (request -> job), `completion`
(tokens -> deltas) and `worker` (the queue); this module only moves their results over HTTP.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sse_starlette.sse import EventSourceResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from autoparser.server.errors import APIError, error_body
from autoparser.server.protocol import parse_request
from autoparser.server.service import ChatService, PreparedChat
from autoparser.server.worker import AsyncChannel, GenerationJob, GenerationResult, GenerationWorker

log = logging.getLogger("autoparser.server")

DISCONNECT_POLL_S = 0.25
OPEN_PATHS = {"/health"}
"""Paths answered without the API key, so load balancers can probe liveness."""


def create_app(service: ChatService, worker: GenerationWorker) -> FastAPI:
    """The ASGI app for one loaded model. `worker` must be started by the caller."""
    app = FastAPI(title="autoparser", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.service = service
    app.state.worker = worker
    settings = service.settings
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    if settings.api_key:
        app.add_middleware(ApiKeyMiddleware, api_key=settings.api_key)
    _add_error_handlers(app)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "busy": worker.busy, "waiting": worker.waiting}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [_model_card(service)]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str) -> dict[str, Any]:
        if model_id != settings.model_name:
            raise APIError(404, f"The model {model_id!r} does not exist.", param="model",
                           code="model_not_found")
        return _model_card(service)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        chat = parse_request(await request.body())
        prepared = await run_in_threadpool(service.prepare, chat)
        channel = AsyncChannel(asyncio.get_running_loop())
        job = GenerationJob(
            prompt_tokens=prepared.prompt_tokens, max_tokens=prepared.max_tokens,
            sampling=prepared.sampling, grammar=prepared.grammar,
            stop_token_ids=prepared.stop_token_ids, ignore_eos=chat.ignore_eos,
            completion=prepared.completion, make_stats=_new_stats, post=channel.post,
            reasoning=prepared.reasoning, stream_deltas=chat.stream)
        worker.submit(job)
        meta = ResponseMeta(service.settings.model_name)
        if chat.stream:
            async def on_close(_message: Message) -> None:
                job.cancel()

            return EventSourceResponse(stream_chunks(prepared, job, channel, meta), ping=15, sep="\n",
                                       client_close_handler_callable=on_close)
        result = await wait_for_result(request, job, channel)
        return JSONResponse(completion_body(prepared, result, meta))

    return app


# -- responses -------------------------------------------------------------------------------------


class ResponseMeta:
    """The fields every response and chunk of one request shares."""

    def __init__(self, model: str):
        self.id = "chatcmpl-" + uuid.uuid4().hex
        self.created = int(time.time())
        self.model = model

    def head(self, kind: str) -> dict[str, Any]:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}


def completion_body(prepared: PreparedChat, result: GenerationResult, meta: ResponseMeta) -> dict[str, Any]:
    message = _wire_message(result.message)
    body = {
        **meta.head("chat.completion"),
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": result.finish_reason}],
        "usage": _usage(result),
        **_timings(result),
    }
    request = prepared.request
    extensions = prepared.completion.extensions()
    if extensions is not None:
        body["extensions"] = extensions
    if request.full_text:
        body["full_text"] = prepared.completion.text
    _add_debug_fields(body, prepared)
    return body


async def stream_chunks(prepared: PreparedChat, job: GenerationJob, channel: AsyncChannel,
                        meta: ResponseMeta) -> AsyncIterator[bytes]:
    """SSE events: a role chunk, one chunk per delta, the finish chunk, usage, `[DONE]`.

    Events that arrived together are written together: each delta keeps its own chunk, but a
    client that fell behind costs one write per batch rather than one per token.
    """
    head = meta.head("chat.completion.chunk")
    try:
        first = _chunk(head, {"role": "assistant", "content": ""})
        _add_debug_fields(first, prepared)
        yield _sse(first)
        finished = False
        while not finished:
            out: list[bytes] = []
            for kind, payload in await channel.take():
                if kind == "deltas":
                    out.extend(_sse(_chunk(head, delta)) for delta in payload)
                elif kind == "error":
                    out.append(_sse({**_chunk(head, {}, "error"),
                                     "error": error_body(500, payload, code="generation_error")["error"]}))
                    finished = True
                    break
                else:
                    out.extend(_final_chunks(prepared, payload, head))
                    finished = True
                    break
            if out:
                yield b"".join(out)
        yield b"data: [DONE]\n\n"
    finally:
        job.cancel()  # a no-op after a normal end; frees the slot when the client went away


def _final_chunks(prepared: PreparedChat, result: GenerationResult, head: dict[str, Any]) -> list[bytes]:
    """The held-back deltas, the chunk with finish_reason and timings, and usage if asked for."""
    request = prepared.request
    out = [_sse(_chunk(head, delta)) for delta in result.final_deltas]
    last = {**_chunk(head, {}, result.finish_reason), **_timings(result)}
    if request.full_text:
        last["full_text"] = prepared.completion.text
    out.append(_sse(last))
    if request.stream_options is not None and request.stream_options.include_usage:
        out.append(_sse({**head, "choices": [], "usage": _usage(result)}))
    return out


async def wait_for_result(request: Request, job: GenerationJob, channel: AsyncChannel) -> GenerationResult:
    """The finished generation; cancels it if the client disconnects while waiting."""
    try:
        while True:
            try:
                events = await asyncio.wait_for(channel.take(), DISCONNECT_POLL_S)
            except TimeoutError:
                if await request.is_disconnected():
                    job.cancel()
                    raise APIError(499, "The client closed the connection.", code="client_closed") from None
                continue
            for kind, payload in events:
                if kind == "done":
                    return payload
                if kind == "error":
                    raise APIError(500, payload, code="generation_error")
    finally:
        job.cancel()


def _chunk(head: dict[str, Any], delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]}


def _sse(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


def _wire_message(message: dict[str, Any]) -> dict[str, Any]:
    """The parser's message as the API returns it: no tool_calls key means none were made."""
    out = {"role": "assistant", "content": message.get("content"),
           "reasoning_content": message.get("reasoning_content")}
    out.update({k: v for k, v in message.items() if k not in out})
    out["tool_calls"] = message.get("tool_calls") or None
    return out


def _usage(result: GenerationResult) -> dict[str, Any]:
    return {"prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens,
            "total_tokens": result.prompt_tokens + result.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": result.cached_tokens}}


def _timings(result: GenerationResult) -> dict[str, Any]:
    return {"prefill_time": round(result.prefill_ms, 3),
            "decode_time_arr": [round(ms, 3) for ms in result.decode_ms]}


def _add_debug_fields(body: dict[str, Any], prepared: PreparedChat) -> None:
    if prepared.request.return_prompt:
        body["prompt"] = prepared.prompt
    if prepared.warnings:
        body["warnings"] = prepared.warnings


def _model_card(service: ChatService) -> dict[str, Any]:
    return {"id": service.settings.model_name, "object": "model", "created": 0,
            "owned_by": "autoparser", "max_model_len": int(service.engine.n_ctx)}


def _new_stats() -> Any:
    from autoparser.llama.engine import GenerationStats

    return GenerationStats()


# -- errors ----------------------------------------------------------------------------------------


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def api_error(_request: Request, exc: APIError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers or None)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(error_body(400, str(exc.errors()[:1])), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else "HTTP error"
        return JSONResponse(error_body(exc.status_code, message), status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def internal_error(_request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return JSONResponse(error_body(500, f"Internal server error: {type(exc).__name__}"), status_code=500)


# -- middleware ------------------------------------------------------------------------------------


async def _send_error(send: Send, status: int, message: str, code: str,
                      headers: dict[str, str] | None = None) -> None:
    body = json.dumps(error_body(status, message, code=code)).encode()
    raw_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw_headers += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body})


class ApiKeyMiddleware:
    """`Authorization: Bearer KEY` on every request but the liveness probe; 401 otherwise."""

    def __init__(self, app: ASGIApp, api_key: str):
        self.app = app
        self._expected = f"Bearer {api_key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        given = dict(scope.get("headers") or []).get(b"authorization", b"")
        if not hmac.compare_digest(given, self._expected):
            await _send_error(send, 401, "Missing or wrong API key: send 'Authorization: Bearer <key>'.",
                              "invalid_api_key", {"WWW-Authenticate": "Bearer"})
            return
        await self.app(scope, receive, send)


class BodyTooLarge(APIError):
    pass


class BodyLimitMiddleware:
    """413 for bodies over `max_bytes`, by Content-Length or while a chunked body arrives."""

    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            await _send_error(send, 413, self._message(), "body_too_large")
            return
        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge(413, self._message(), code="body_too_large")
            return message

        await self.app(scope, counting_receive, send)

    def _message(self) -> str:
        return f"The request body is larger than the limit of {self.max_bytes} bytes."
