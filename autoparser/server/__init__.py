"""An OpenAI-compatible chat server for one GGUF model, driven by the template's analysis.

`autoparser serve` (or `python -m autoparser.server`) loads the model with llama.cpp, analyzes
its chat template once, and answers `/v1/chat/completions` with `reasoning_content`, `content`
and `tool_calls` parsed by the analysis' parser, streaming or not, with grammars that keep tool
calls well-formed. The modules, from the wire inwards:

* `startup`: arguments, model loading, the listening socket, uvicorn;
* `app`: FastAPI routes, SSE, auth, body limit, OpenAI error objects;
* `protocol`: the request's fields and their checks;
* `service`: request -> prompt, token budget, grammar, parser, sampling;
* `worker`: the bounded FIFO queue and the one generation thread;
* `completion` and `stops`: the sans-IO core turning token texts into deltas.
"""

from autoparser.server.startup import add_serve_arguments, run_server

__all__ = ["add_serve_arguments", "create_app", "run_server"]


def create_app(service, worker):  # type: ignore[no-untyped-def]
    """The ASGI app; see `autoparser.server.app.create_app` (imported lazily: FastAPI is optional)."""
    from autoparser.server.app import create_app as _create_app

    return _create_app(service, worker)
