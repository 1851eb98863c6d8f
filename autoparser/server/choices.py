"""`n > 1` chat completions: n choices from one prompt, each its own generation and parser.

Each choice is prepared and queued as a request of its own (its own `Completion`, so its own
parser, stop strings and grammar state) and takes its own slot; with a `seed`, choice i samples
with `seed + i`, so the choices differ and each repeats itself. The prompt is read once: the
engine lets a choice wait for the one reading the prompt, then share its cells in its own slot
(`Engine._attach`); upstream, llama-server's own cache decides. The answer lists the choices by `index`; a
stream interleaves their chunks, each chunk naming its choice, and ends when all have ended.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from autoparser.server.errors import error_body
from autoparser.server.protocol import ChatCompletionRequest
from autoparser.server.runner import Run, StreamResponse, prepare_and_start
from autoparser.server.service import ChatService, PreparedChat
from autoparser.server.worker import ChatWorker, GenerationResult


def prepare_choice(service: ChatService, chat: ChatCompletionRequest, index: int) -> PreparedChat:
    prepared = service.prepare(chat)
    if chat.seed is not None and index:
        prepared.sampling = dataclasses.replace(prepared.sampling, seed=chat.seed + index)
    return prepared


async def several_choices(request: Request, service: ChatService, worker: ChatWorker,
                          chat: ChatCompletionRequest, model_name: str) -> Any:
    from autoparser.server.app import ResponseMeta, tracker

    runs: list[Run] = []
    try:
        for index in range(chat.n):
            runs.append(await prepare_and_start(worker, lambda i=index: prepare_choice(service, chat, i),
                                                chat.stream, tracker(request, "chat")))
    except BaseException:
        for run in runs:
            run.job.cancel()
        raise
    meta = ResponseMeta(model_name)
    if chat.stream:
        return StreamResponse(_stream(runs, meta), ping=15, sep="\n",
                              client_close_handler_callable=lambda _message: _cancel(runs))
    results = await asyncio.gather(*(run.result(request) for run in runs))
    return JSONResponse(_body(runs, list(results), meta))


async def _cancel(runs: list[Run]) -> None:
    for run in runs:
        run.job.cancel()


def _body(runs: list[Run], results: list[GenerationResult], meta: Any) -> dict[str, Any]:
    from autoparser.server.app import add_debug_fields, choice_body, timings

    choices = []
    for index, (run, result) in enumerate(zip(runs, results, strict=True)):
        choice = choice_body(run.prepared, result, index)
        extensions = run.prepared.completion.extensions()
        if extensions is not None:
            choice["extensions"] = extensions
        if run.prepared.request.full_text:
            choice["full_text"] = run.prepared.completion.text
        choices.append(choice)
    body = {**meta.head("chat.completion"), "choices": choices, "usage": _usage(results), **timings(results[0])}
    add_debug_fields(body, runs[0].prepared)
    return body


def _usage(results: list[GenerationResult]) -> dict[str, Any]:
    """The prompt counted once, as OpenAI counts it; the completions of all choices."""
    prompt = results[0].prompt_tokens
    completion = sum(result.completion_tokens for result in results)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": results[0].cached_tokens}}


async def _stream(runs: list[Run], meta: Any) -> AsyncIterator[bytes]:
    from autoparser.server.app import _chunk, _final_chunks, add_debug_fields, sse

    request = runs[0].prepared.request
    head = meta.head("chat.completion.chunk")
    top = request.top_logprobs_wanted()
    opening = []
    for index in range(len(runs)):
        first = _chunk(head, {"role": "assistant", "content": ""}, top=top, index=index)
        if index == 0:
            add_debug_fields(first, runs[0].prepared)
        opening.append(sse(first))
    yield b"".join(opening)
    # A queue as long as the choices: a reader that falls behind stops the pumps, so each
    # choice's own channel fills and pauses its generation (backpressure).
    batches: asyncio.Queue[tuple[int, list[tuple[str, Any]] | None]] = asyncio.Queue(maxsize=len(runs))
    pumps = [asyncio.create_task(_pump(index, run, batches)) for index, run in enumerate(runs)]
    results: list[GenerationResult] = []
    try:
        running = len(runs)
        while running:
            index, batch = await batches.get()
            if batch is None:
                running -= 1
                continue
            out: list[bytes] = []
            for kind, payload in batch:
                if kind == "deltas":
                    out.extend(sse(_chunk(head, delta, top=top, index=index)) for delta in payload)
                elif kind == "error":
                    out.append(sse({**_chunk(head, {}, "error", index=index),
                                    "error": error_body(500, payload, code="generation_error")["error"]}))
                else:
                    results.append(payload)
                    out.extend(_final_chunks(runs[index].prepared, payload, head, top, index, with_usage=False))
            yield b"".join(out)
        if request.stream_options is not None and request.stream_options.include_usage and results:
            yield sse({**head, "choices": [], "usage": _usage(results)})
        yield b"data: [DONE]\n\n"
    finally:
        for pump in pumps:
            pump.cancel()
        await _cancel(runs)


async def _pump(index: int, run: Run, batches: asyncio.Queue[Any]) -> None:
    """One choice's batches into the shared queue, then `None` for its end."""
    try:
        async for batch in run.batches():
            await batches.put((index, batch))
    except Exception as exc:  # noqa: BLE001 - the stream reports it as this choice's error
        await batches.put((index, [("error", f"{type(exc).__name__}: {exc}")]))
    await batches.put((index, None))
