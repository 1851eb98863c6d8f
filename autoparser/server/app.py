"""The HTTP shell: FastAPI routes, SSE streaming, auth, body limit and error objects.

Everything that decides what to answer lives in `service` (request -> job), `completion`
(tokens -> deltas) and `worker` (the queue); this module only moves their results over HTTP.
"""

from __future__ import annotations

import hmac
import inspect
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from json.encoder import encode_basestring as _encode_string  # type: ignore[attr-defined]
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from autoparser.server.errors import APIError, error_body, event_error
from autoparser.server.guards import GuardSettings, RequestGuardMiddleware, clean_request_id
from autoparser.server.logprobs import chat_logprobs
from autoparser.server.metrics import CONTENT_TYPE, RequestTracker, ServerMetrics
from autoparser.server.protocol import parse_request
from autoparser.server.runner import Run, StreamResponse, prepare_and_start, public
from autoparser.server.service import ChatService, PreparedChat
from autoparser.server.worker import ChatWorker, GenerationResult

log = logging.getLogger("autoparser.server")

OPEN_PATHS = {"/health"}
"""Paths answered without the API key, so load balancers can probe liveness."""


def create_app(service: ChatService, worker: ChatWorker) -> FastAPI:
    """The ASGI app for one loaded model. `worker` must be started by the caller."""
    app = FastAPI(title="autoparser", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.service = service
    app.state.worker = worker
    app.state.metrics = metrics = ServerMetrics(running=lambda: worker.running, waiting=lambda: worker.waiting)
    settings = service.settings
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    if settings.api_key:
        app.add_middleware(ApiKeyMiddleware, api_key=settings.api_key)
    if settings.cors_allow_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_allow_origins),
                           allow_methods=["GET", "POST"], allow_headers=["*"], expose_headers=["x-request-id"])
    app.add_middleware(RequestGuardMiddleware, settings=GuardSettings(settings.allowed_hosts))
    app.add_middleware(RequestIdMiddleware)
    _add_error_handlers(app)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        state = worker.health()
        if inspect.isawaitable(state):  # a worker in front of another server asks it
            state = await state
        return {"status": "ok", "busy": worker.busy, "waiting": worker.waiting,
                "slots": {"total": worker.n_parallel, "busy": worker.running},
                "queue": {"waiting": worker.waiting, "max": worker.max_queue}, **state}

    @app.get("/metrics")
    async def metrics_text() -> Response:
        return Response(metrics.exposition(), media_type=CONTENT_TYPE)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [_model_card(service, name) for name in service.model_names]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str) -> dict[str, Any]:
        return _model_card(service, service.check_model(model_id))

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        chat = parse_request(await request.body())
        model_name = service.check_model(chat.model)
        if chat.n > 1:
            from autoparser.server.choices import several_choices

            return await several_choices(request, service, worker, chat, model_name)
        run = await prepare_and_start(worker, lambda: service.prepare(chat), chat.stream,
                                      tracker(request, "chat"))
        prepared = run.prepared
        meta = ResponseMeta(model_name)
        if chat.stream:
            return StreamResponse(stream_chunks(run, meta), ping=15, sep="\n",
                                       client_close_handler_callable=run.on_close)
        result = await run.result(request)
        return JSONResponse(completion_body(prepared, result, meta))

    from autoparser.server import agui, completions, responses

    completions.add_routes(app, service, worker)
    responses.add_routes(app, service, worker)
    agui.add_routes(app, service, worker)
    return app


def tracker(request: Request, endpoint: str) -> RequestTracker:
    """The metrics and anomaly-log tracker of one generating request."""
    state = request.app.state
    return RequestTracker(state.metrics, state.service.anomalies, request_id(request), endpoint)


def request_id(request: Request) -> str:
    return getattr(request.state, "request_id", "") or ""


# -- responses -------------------------------------------------------------------------------------


class ResponseMeta:
    """The fields every response and chunk of one request shares."""

    def __init__(self, model: str, prefix: str = "chatcmpl-"):
        self.id = prefix + uuid.uuid4().hex
        self.created = int(time.time())
        self.model = model

    def head(self, kind: str) -> dict[str, Any]:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}


def choice_body(prepared: PreparedChat, result: GenerationResult, index: int = 0) -> dict[str, Any]:
    top = prepared.request.top_logprobs_wanted()
    logprobs = None if top is None else chat_logprobs(prepared.completion.logprobs, top)
    return {"index": index, "message": _wire_message(result.message), "logprobs": logprobs,
            "finish_reason": result.finish_reason}


def completion_body(prepared: PreparedChat, result: GenerationResult, meta: ResponseMeta) -> dict[str, Any]:
    request = prepared.request
    body = {
        **meta.head("chat.completion"),
        "choices": [choice_body(prepared, result)],
        "usage": usage(result),
        **timings(result),
    }
    extensions = prepared.completion.extensions()
    if extensions is not None:
        body["extensions"] = extensions
    if request.full_text:
        body["full_text"] = prepared.completion.text
    add_debug_fields(body, prepared)
    return body


async def stream_chunks(run: Run, meta: ResponseMeta) -> AsyncIterator[bytes]:
    """SSE events: a role chunk, one chunk per delta, the finish chunk, usage, `[DONE]`; the last
    batch's chunks and `[DONE]` in one piece (one write)."""
    prepared = run.prepared
    head = meta.head("chat.completion.chunk")
    top = prepared.request.top_logprobs_wanted()
    first = _chunk(head, {"role": "assistant", "content": ""}, top=top)
    if prepared.request.full_text:
        first["full_text"] = ""
    add_debug_fields(first, prepared)
    yield sse(first)
    plain = PlainChunks(head)
    out: list[bytes] = []
    async for batch in run.batches():
        out = []
        for kind, payload in batch:
            if kind == "deltas":
                out.extend(plain.encode(delta) if top is None and plain.fits(delta) else sse(_chunk(head, delta, top=top))
                           for delta in payload)
            elif kind == "error":
                out.append(sse({**_chunk(head, {}, "error"),
                                "error": event_error(payload)}))
            else:
                out.extend(_final_chunks(prepared, payload, head, top))
            if kind != "deltas":
                out.append(DONE)
        yield b"".join(out)
    if not out or out[-1] is not DONE:  # no batch ended the stream
        yield DONE


DONE = b"data: [DONE]\n\n"


class PlainChunks:
    """SSE events of the deltas that carry nothing but public fields and no log-probabilities,
    the bulk of a stream: the chunk around the delta is the same for all of them, so it is
    serialised once and only the delta per token (byte for byte what :func:`sse` writes)."""

    def __init__(self, head: dict[str, Any]):
        around = sse({**head, "choices": [{"index": 0, "delta": None, "logprobs": None, "finish_reason": None}]})
        self._before, self._after = around.split(b'"delta":null', 1)
        self._before += b'"delta":'

    @staticmethod
    def fits(delta: dict[str, Any]) -> bool:
        return not any(key.startswith("_") for key in delta)

    def encode(self, delta: dict[str, Any]) -> bytes:
        if len(delta) == 1:
            ((key, value),) = delta.items()
            if type(value) is str:  # a text delta: the string alone goes through the encoder
                text = '{"' + key + '":' + _encode_string(value) + "}" if key.isidentifier() else None
                if text is not None:
                    return self._before + text.encode() + self._after
        return self._before + json.dumps(delta, ensure_ascii=False, separators=(",", ":")).encode() + self._after


def _final_chunks(prepared: PreparedChat, result: GenerationResult, head: dict[str, Any],
                  top: int | None, index: int = 0, with_usage: bool = True) -> list[bytes]:
    """The held-back deltas, the chunk with finish_reason and timings, and usage if asked for."""
    request = prepared.request
    out = [sse(_chunk(head, delta, top=top, index=index)) for delta in result.final_deltas]
    last = {**_chunk(head, {}, result.finish_reason, index=index), **timings(result)}
    rest = prepared.completion.take_pending_logprobs()
    if top is not None and rest:
        last["choices"][0]["logprobs"] = chat_logprobs(rest, top)
    if request.full_text:
        last["full_text"] = prepared.completion.text
    out.append(sse(last))
    if with_usage and request.stream_options is not None and request.stream_options.include_usage:
        out.append(sse({**head, "choices": [], "usage": usage(result)}))
    return out


def _chunk(head: dict[str, Any], delta: dict[str, Any], finish_reason: str | None = None,
           top: int | None = None, index: int = 0) -> dict[str, Any]:
    entries = delta.get("_logprobs")
    logprobs = chat_logprobs(entries, top) if entries and top is not None else None
    chunk = {**head, "choices": [{"index": index, "delta": public(delta), "logprobs": logprobs,
                                  "finish_reason": finish_reason}]}
    if "_full_text" in delta:
        chunk["full_text"] = delta["_full_text"]
    return chunk


def sse(data: dict[str, Any], event: str | None = None) -> bytes:
    line = b"data: " + json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"
    return line if event is None else b"event: " + event.encode() + b"\n" + line


def _wire_message(message: dict[str, Any]) -> dict[str, Any]:
    """The parser's message as the API returns it: no tool_calls key means none were made."""
    out = {"role": "assistant", "content": message.get("content"),
           "reasoning_content": message.get("reasoning_content")}
    out.update({k: v for k, v in message.items() if k not in out})
    out["tool_calls"] = message.get("tool_calls") or None
    return out


def usage(result: GenerationResult) -> dict[str, Any]:
    return {"prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens,
            "total_tokens": result.prompt_tokens + result.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": result.cached_tokens}}


def timings(result: GenerationResult) -> dict[str, Any]:
    return {"prefill_time": round(result.prefill_ms, 3),
            "decode_time_arr": [round(ms, 3) for ms in result.decode_ms]}


def add_debug_fields(body: dict[str, Any], prepared: PreparedChat) -> None:
    if prepared.request.return_prompt:
        body["prompt"] = prepared.prompt
    if prepared.warnings:
        body["warnings"] = prepared.warnings


def _model_card(service: ChatService, name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0,
            "owned_by": "autoparser", "max_model_len": int(service.engine.n_ctx)}


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

    @app.exception_handler(ClientDisconnect)
    async def client_gone(_request: Request, _exc: ClientDisconnect) -> Response:
        return Response(status_code=499)  # never delivered: the client hung up (or timed out) mid-body

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


class RequestIdMiddleware:
    """Every response carries `x-request-id`: the client's own when it sent one, else a new one."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = clean_request_id(dict(scope.get("headers") or []).get(b"x-request-id", b""))
        scope.setdefault("state", {})["request_id"] = request_id.decode("ascii", "replace")

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [h for h in message.get("headers") or [] if h[0].lower() != b"x-request-id"]
                message = {**message, "headers": [*headers, (b"x-request-id", request_id)]}
            await send(message)

        await self.app(scope, receive, send_with_id)


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
