"""An OpenAI-compatible chat server for one GGUF model, driven by the template's analysis.

`autoparser serve` (or `python -m autoparser.server`) loads the model with llama.cpp in a
supervised worker process (the HTTP process keeps only its vocabulary), analyzes
its chat template once, and answers `/v1/chat/completions` with `reasoning_content`, `content`
and `tool_calls` parsed by the analysis' parser, streaming or not, with grammars that keep tool
calls well-formed; `/v1/responses` and `/v1/ag-ui` give the same answers in the Responses API's
and AG-UI's shapes, and `/v1/completions` continues raw prompts. The modules, from the wire inwards:

* `startup`: arguments, the vocabulary and the model worker, the listening socket, uvicorn;
* `app`: FastAPI routes, SSE, auth, request ids, body limit, OpenAI error objects;
* `completions`, `responses`, `agui`: the other endpoints (`segments` shapes deltas into items);
* `runner`: one request prepared and run through the worker, as the routes consume it;
* `protocol`: the request's fields and their checks;
* `service`: request -> prompt, token budget, grammar, parser, sampling;
* `preamble`: the tools preamble for templates that never show tool definitions;
* `logprobs`: per-token log-probabilities in the endpoints' wire formats;
* `supervisor`: the model worker process, restarted when it dies or gets stuck;
* `worker`: the bounded FIFO queue and the generation thread (inside the worker process);
* `completion` and `stops`: the sans-IO core turning token texts into deltas.
"""

from autoparser.server.startup import add_serve_arguments, run_server

__all__ = ["add_serve_arguments", "create_app", "run_server"]


def create_app(service, worker):  # type: ignore[no-untyped-def]
    """The ASGI app; see `autoparser.server.app.create_app` (imported lazily: FastAPI is optional)."""
    from autoparser.server.app import create_app as _create_app

    return _create_app(service, worker)
