"""`autoparser serve`: check the arguments, load the model, analyze its template, serve.

Start-up failures a user can cause (a missing model, a template that does not compile, a port
in use, a public address without an API key) end with one line on stderr and a non-zero exit
code, never a traceback: 2 for bad arguments or input files, 1 for the environment.
The listening socket is bound before the model loads, so a port in use fails at once, and
`--port 0` takes a free port (the line "listening on http://HOST:PORT" says which).
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger("autoparser.server")

#: Context tokens per slot that the default --parallel keeps, and the most slots it picks.
SLOT_TOKENS = 4096
MAX_DEFAULT_PARALLEL = 4
MAX_PARALLEL = 64
ACCEPT_BACKLOG = 128
"""Connections the kernel queues for the server, and the most it accepts in one turn."""


class StartupError(Exception):
    """A start-up failure to report as one line; `exit_code` 2 for bad input, 1 otherwise."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """The `serve` options, for `autoparser serve` and `python -m autoparser.server`."""
    parser.add_argument("--model", default=None, help="the GGUF model file (or --upstream)")
    parser.add_argument("--upstream", default=None, metavar="URL",
                        help="generate with the llama-server at URL (http://HOST:PORT) through its "
                             "/completion endpoint instead of loading a model; the template, the "
                             "context size and the slots are read from it")
    parser.add_argument("--upstream-api-key", default=os.environ.get("AUTOPARSER_UPSTREAM_API_KEY"),
                        help="the --upstream server's API key (default: $AUTOPARSER_UPSTREAM_API_KEY)")
    parser.add_argument("--chat-template-file", default=None,
                        help="use this chat template instead of the GGUF's tokenizer.chat_template")
    parser.add_argument("--n-gpu-layers", type=int, default=0,
                        help="layers to offload to the GPU; -1 offloads all (default 0)")
    parser.add_argument("--n-ctx", type=int, default=4096,
                        help="context length in tokens, shared by the --parallel slots (default 4096)")
    parser.add_argument("--parallel", type=int, default=None,
                        help="generations run at once, each in its own slot of n-ctx/parallel tokens "
                             f"(default: one slot per {SLOT_TOKENS} tokens of context, at most "
                             f"{MAX_DEFAULT_PARALLEL}, at least 1)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: half the cores)")
    parser.add_argument("--device-sampling", choices=("auto", "on", "off"), default="auto",
                        help="sample inside llama_decode where a request allows it (default auto: "
                             "with layers on a GPU; on a CPU the host's sampling costs less)")
    parser.add_argument("--no-prefix-cache", action="store_true",
                        help="decode every prompt from scratch instead of reusing a slot's cached prefix")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to bind (default 127.0.0.1; other addresses need --api-key)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    parser.add_argument("--api-key", default=os.environ.get("AUTOPARSER_API_KEY"),
                        help="require 'Authorization: Bearer KEY' (default: $AUTOPARSER_API_KEY)")
    parser.add_argument("--max-queue", type=int, default=16,
                        help="requests that may wait for the model; more get 503 (default 16)")
    parser.add_argument("--tool-call-policy", choices=("lenient", "strict"), default="lenient",
                        help="default policy for text around tool calls (default lenient)")
    parser.add_argument("--reasoning-budget", type=int, default=None,
                        help="default most reasoning tokens per request, after which the server closes "
                             "the reasoning itself (default: no limit)")
    parser.add_argument("--tool-preamble", choices=("auto", "off"), default="auto",
                        help="auto: when the template never shows tool definitions, list the tools in a "
                             "system preamble (default auto)")
    parser.add_argument("--served-model-name", action="append", default=None,
                        help="a model id the server answers to; may be given several times, the first is "
                             "the one responses carry (default: the GGUF file name). The GGUF's own "
                             "general.name and the file name are always answered to as well")
    parser.add_argument("--max-body-bytes", type=int, default=8 * 1024 * 1024,
                        help="largest accepted request body (default 8 MiB)")
    parser.add_argument("--max-connections", type=int, default=512,
                        help="open connections at most; more get 503 (default 512, lowered to fit the "
                             "open-file limit)")
    parser.add_argument("--header-timeout", type=float, default=10.0,
                        help="seconds a client may take to send a request's headers; then 408 (default 10)")
    parser.add_argument("--body-timeout", type=float, default=60.0,
                        help="seconds a client may take to send a request's body; then 408 (default 60)")
    parser.add_argument("--allowed-hosts", default=None,
                        help="comma-separated names the Host header may carry, '*' for any (default: "
                             "localhost, 127.0.0.1 and ::1 on a loopback address, any name otherwise)")
    parser.add_argument("--cors-allow-origins", default=None,
                        help="comma-separated origins whose web pages may call the API, '*' for any "
                             "(default: none)")
    parser.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))


def run_server(args: argparse.Namespace) -> int:
    """Serve until interrupted; returns the process exit code."""
    _configure_logging(getattr(args, "log_level", "info"))
    try:
        _check_arguments(args)
        sock = bind_socket(args.host, args.port)
    except StartupError as exc:
        print(f"autoparser serve: error: {exc}", file=sys.stderr)
        return exc.exit_code
    engine = None
    try:
        if args.upstream:
            engine = connect_upstream(args)
            analysis = analyze_template(args, engine)
            return _serve(args, sock, engine, analysis, start_worker=start_upstream_worker(analysis))
        engine = load_vocabulary(args)
        analysis = analyze_template(args, engine)
        return _serve(args, sock, engine, analysis)
    except StartupError as exc:
        print(f"autoparser serve: error: {exc}", file=sys.stderr)
        return exc.exit_code
    finally:
        sock.close()
        if engine is not None:
            engine.close()


# -- steps -----------------------------------------------------------------------------------------


def _check_arguments(args: argparse.Namespace) -> None:
    if not is_loopback(args.host) and not args.api_key:
        raise StartupError(f"refusing to listen on {args.host} without --api-key; "
                           "without a key the server only binds to a loopback address")
    if args.upstream:
        _check_upstream_arguments(args)
    elif not args.model:
        raise StartupError("give the model: --model MODEL.gguf, or --upstream URL of a llama-server")
    elif not Path(args.model).is_file():
        raise StartupError(f"model file not found: {args.model}")
    if args.chat_template_file and not Path(args.chat_template_file).exists():
        raise StartupError(f"chat template file not found: {args.chat_template_file}")
    if args.n_ctx < 16:
        raise StartupError(f"--n-ctx must be at least 16, got {args.n_ctx}")
    parallel = getattr(args, "parallel", None)
    if parallel is not None and parallel < 1:
        raise StartupError(f"--parallel must be at least 1, got {parallel}")
    if parallel is not None and parallel > MAX_PARALLEL:
        raise StartupError(f"--parallel must be at most {MAX_PARALLEL}, got {parallel}")
    if parallel is not None and args.n_ctx // parallel < 16:
        raise StartupError(f"--n-ctx {args.n_ctx} split between {parallel} slots leaves fewer than 16 "
                           "tokens each; raise --n-ctx or lower --parallel")
    if args.max_queue < 0:
        raise StartupError(f"--max-queue must not be negative, got {args.max_queue}")
    if not 0 <= args.port <= 65535:
        raise StartupError(f"--port must be between 0 and 65535, got {args.port}")
    if getattr(args, "max_connections", 1) < 1:
        raise StartupError(f"--max-connections must be at least 1, got {args.max_connections}")
    for option in ("header_timeout", "body_timeout"):
        if not getattr(args, option, 1.0) > 0:
            raise StartupError(f"--{option.replace('_', '-')} must be positive, got {getattr(args, option)}")


def _check_upstream_arguments(args: argparse.Namespace) -> None:
    from urllib.parse import urlparse

    if args.model:
        raise StartupError("--model and --upstream exclude each other: the upstream holds the model")
    engine_options = {"--parallel": getattr(args, "parallel", None) is not None,
                      "--n-gpu-layers": getattr(args, "n_gpu_layers", 0) != 0,
                      "--threads": getattr(args, "threads", None) is not None}
    given = [name for name, set_here in engine_options.items() if set_here]
    if given:
        raise StartupError(f"{', '.join(given)} belong to llama-server with --upstream: the front end "
                           "reads the slots and the context from it")
    url = urlparse(args.upstream)
    if url.scheme not in ("http", "https") or not url.netloc:
        raise StartupError(f"--upstream must be an http(s)://HOST:PORT address, got {args.upstream!r}")


def default_parallel(n_ctx: int) -> int:
    """Slots when --parallel is not given: one per SLOT_TOKENS of context, 1 to MAX_DEFAULT_PARALLEL."""
    return max(1, min(MAX_DEFAULT_PARALLEL, n_ctx // SLOT_TOKENS))


def parallel_slots(args: argparse.Namespace) -> int:
    parallel = getattr(args, "parallel", None)
    return parallel if parallel is not None else default_parallel(args.n_ctx)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind_socket(host: str, port: int) -> socket.socket:
    """The listening socket, bound now so that a port in use is reported before loading."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(ACCEPT_BACKLOG)
    except OSError as exc:
        sock.close()
        reason = "the port is already in use" if exc.errno in (98, 48, 10048) else exc.strerror
        raise StartupError(f"cannot listen on {host}:{port}: {reason}", exit_code=1) from None
    sock.set_inheritable(True)
    return sock


def load_vocabulary(args: argparse.Namespace) -> Any:
    """The model's vocabulary, for the front end: the weights load in the worker process."""
    from autoparser.llama.vocabulary import Vocabulary

    try:
        return Vocabulary(args.model, n_ctx=args.n_ctx // parallel_slots(args), n_parallel=parallel_slots(args))
    except Exception as exc:  # llama.cpp reports any load failure as an exception or a NULL model
        raise StartupError(f"cannot load the model {args.model}: {exc}", exit_code=2) from None


def start_model_worker(args: argparse.Namespace, vocabulary: Any, max_queue: int) -> Any:
    """Load the model in its supervised worker process; the vocabulary learns the slots' size."""
    from autoparser.server.supervisor import EngineSettings, SupervisedWorker, WorkerStartError

    worker = SupervisedWorker(EngineSettings(
        model_path=args.model, n_ctx=args.n_ctx, n_parallel=parallel_slots(args),
        n_gpu_layers=args.n_gpu_layers, n_threads=args.threads,
        reuse_prefix=not getattr(args, "no_prefix_cache", False),
        device_sampling={"on": True, "off": False}.get(getattr(args, "device_sampling", "auto")),
        log_level=getattr(args, "log_level", "info")), max_queue=max_queue)
    try:
        facts = worker.start()
    except WorkerStartError as exc:
        raise StartupError(str(exc), exit_code=2) from None
    vocabulary.n_ctx, vocabulary.n_parallel = facts.n_ctx, facts.n_parallel
    vocabulary.n_ctx_total = facts.n_ctx * facts.n_parallel
    vocabulary.gpu_offload = facts.gpu_offload
    if facts.gpu_offload:
        say(f"GPU: used ({'all' if args.n_gpu_layers < 0 else args.n_gpu_layers} layers offloaded)")
    elif args.n_gpu_layers != 0:
        say("GPU: not used (this llama-cpp-python build has no GPU support; running on the CPU)")
    else:
        say("GPU: not used (--n-gpu-layers 0; running on the CPU)")
    say("sampling: " + ("inside llama_decode where a request allows it" if facts.device_sampling else "on the host"))
    return worker


def connect_upstream(args: argparse.Namespace) -> Any:
    """The upstream llama-server's vocabulary and facts (it must answer, its model loaded)."""
    from autoparser.server.upstream_client import UpstreamError, UpstreamVocabulary

    vocabulary = UpstreamVocabulary(args.upstream, api_key=getattr(args, "upstream_api_key", None))
    try:
        vocabulary.connect()
    except UpstreamError as exc:
        vocabulary.close()
        raise StartupError(f"--upstream: {exc}", exit_code=1) from None
    say(f"upstream: {vocabulary.base_url} ({vocabulary.n_parallel} slot(s) of {vocabulary.n_ctx} tokens)")
    return vocabulary


def start_upstream_worker(analysis: Any) -> Any:
    """The worker that streams generations from the upstream, once the template's special
    tokens are known (the upstream writes them out as text; a client cannot spell them)."""
    from autoparser.server.upstream import UpstreamWorker
    from autoparser.server.upstream_client import UpstreamError, special_token_candidates

    def start(args: argparse.Namespace, vocabulary: Any, max_queue: int) -> Any:
        try:
            vocabulary.learn_special_tokens(
                special_token_candidates(analysis, vocabulary.bos_token, vocabulary.eos_token))
        except UpstreamError as exc:
            raise StartupError(f"--upstream: {exc}", exit_code=1) from None
        log.info("upstream: special tokens written out as text: %s", sorted(vocabulary.special_tokens))
        return UpstreamWorker(vocabulary, max_queue)

    return start


def _model_label(args: argparse.Namespace, engine: Any) -> str:
    return f"{getattr(engine, 'base_url', args.upstream)}/props"


def template_source(args: argparse.Namespace, engine: Any) -> tuple[str, str]:
    """(Jinja text, where it came from): the --chat-template-file, else the GGUF's metadata."""
    if args.chat_template_file:
        try:
            from autoparser.load import load_template
        except ImportError:
            load_template = None
        try:
            if load_template is not None:
                return load_template(args.chat_template_file).source, args.chat_template_file
            return Path(args.chat_template_file).read_text(encoding="utf-8"), args.chat_template_file
        except Exception as exc:  # the loader's errors carry a one-line reason
            raise StartupError(f"cannot read the chat template {args.chat_template_file}: {exc}") from None
    if not args.model:
        if not engine.chat_template:
            raise StartupError(f"{_model_label(args, engine)} reports no chat_template; pass --chat-template-file")
        return engine.chat_template, f"{_model_label(args, engine)} (chat_template)"
    if not engine.chat_template:
        raise StartupError(f"{args.model} has no tokenizer.chat_template; pass --chat-template-file")
    return engine.chat_template, f"{Path(args.model).name} (tokenizer.chat_template)"


def analyze_template(args: argparse.Namespace, engine: Any) -> Any:
    from autoparser.isolation import analyze_isolated

    source, origin = template_source(args, engine)
    try:
        analysis = analyze_isolated(source, bos_token=engine.bos_token, eos_token=engine.eos_token)
    except Exception as exc:  # a template that does not compile or raises on every probe
        raise StartupError(f"the chat template from {origin} cannot be used: {exc}") from None
    from autoparser.summary import summary_rows

    log.info("template: %s", origin)
    for name, value in summary_rows(analysis):
        log.info("analysis: %s: %s", name, value)
    return analysis


def _serve(args: argparse.Namespace, sock: socket.socket, engine: Any, analysis: Any,
           start_worker: Callable[[argparse.Namespace, Any, int], Any] | None = None) -> int:
    """Serve until interrupted; `start_worker(args, engine, max_queue)` gives the generation
    worker (default: the supervised model worker process)."""
    import uvicorn
    from sse_starlette.sse import AppStatus

    from autoparser.server.app import create_app
    from autoparser.server.connections import ConnectionLimits, RateLimitFilter, guarded_protocol
    from autoparser.server.guards import default_allowed_hosts, parse_allowed_hosts
    from autoparser.server.service import ChatService, ServerSettings

    names = model_names(args, engine)
    host, port = sock.getsockname()[:2]
    allowed_hosts = getattr(args, "allowed_hosts", None)
    cors = getattr(args, "cors_allow_origins", None)
    settings = ServerSettings(
        model_name=names[0], model_aliases=names[1:],
        tool_call_policy=args.tool_call_policy, max_queue=args.max_queue,
        max_body_bytes=args.max_body_bytes, api_key=args.api_key,
        reasoning_budget=getattr(args, "reasoning_budget", None),
        tool_preamble=getattr(args, "tool_preamble", "auto"),
        allowed_hosts=(parse_allowed_hosts(allowed_hosts) if allowed_hosts
                       else default_allowed_hosts(host, is_loopback(args.host))),
        cors_allow_origins=tuple(o.strip() for o in cors.split(",") if o.strip()) if cors else ())
    limits = ConnectionLimits(header_timeout_s=getattr(args, "header_timeout", 10.0),
                              body_timeout_s=getattr(args, "body_timeout", 60.0),
                              max_connections=connection_cap(getattr(args, "max_connections", 512)))
    worker = (start_worker or start_model_worker)(args, engine, settings.max_queue)
    try:
        service = ChatService(analysis, engine, settings)
        app = create_app(service, worker)
        shown = f"[{host}]" if ":" in host else host
        # loop "auto": uvloop where it is installed (the server extra, but on Windows), whose
        # transports in C take less CPU per streamed piece than asyncio's
        config = uvicorn.Config(app, log_level=args.log_level, timeout_graceful_shutdown=3,
                                access_log=args.log_level == "debug", http=guarded_protocol(limits),
                                timeout_keep_alive=5, backlog=ACCEPT_BACKLOG, loop="auto")
        flood_filter = RateLimitFilter()
        for name in ("uvicorn.error", "uvicorn.access", "autoparser.server", "asyncio"):
            logging.getLogger(name).addFilter(flood_filter)
        AppStatus.disable_automatic_graceful_drain()  # the worker's drain ends every stream itself
        server = draining_server(config, worker)
        log.info("model %s, %d slot(s) of %d tokens, queue %d, model worker pid %s",
                 " = ".join(map(repr, service.model_names)), engine.n_parallel, engine.n_ctx,
                 settings.max_queue, worker.pid)
        say(f"listening on http://{shown}:{port}")
        with _terminate_raises():
            server.run(sockets=[sock])
    except (KeyboardInterrupt, Terminated):  # uvicorn shut down gracefully, then re-raised the signal
        pass
    finally:
        worker.stop()
    return 0


def model_names(args: argparse.Namespace, engine: Any) -> list[str]:
    """The names the server answers to: each `--served-model-name` (the first is the one
    responses carry), then the GGUF's `general.name` and the file name."""
    given = args.served_model_name or []
    if isinstance(given, str):
        given = [given]
    stem = served_name(args, engine)
    names = [*given, gguf_name(engine) or "", stem] if given else [stem, gguf_name(engine) or ""]
    return list(dict.fromkeys(name for name in names if name))


def gguf_name(engine: Any) -> str | None:
    """The model's own name from its GGUF metadata (`general.name`), when it has one."""
    model = getattr(engine, "_model", None)
    if model is None:
        return None
    import ctypes

    import llama_cpp

    buf = ctypes.create_string_buffer(256)
    length = llama_cpp.llama_model_meta_val_str(model, b"general.name", buf, len(buf))
    if length < 0:
        return None
    return buf.value.decode("utf-8", errors="replace").strip() or None


class Terminated(Exception):
    """SIGTERM, re-raised by uvicorn once it has shut down: the model worker is still to stop."""


@contextlib.contextmanager
def _terminate_raises() -> Iterator[None]:
    """While uvicorn serves, SIGTERM's default action (dying at once, without stopping the model
    worker) becomes `Terminated`; uvicorn handles the signal itself and raises it again after
    its graceful shutdown."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminated(_signum: int, _frame: Any) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def draining_server(config: Any, worker: Any) -> Any:
    """A uvicorn server that, at SIGTERM or Ctrl-C, first has the worker answer every request
    (running streams end with an error chunk and `[DONE]`, waiting requests get 503), so that
    uvicorn's graceful shutdown finds the connections finishing rather than cuts them."""
    import uvicorn

    class DrainingServer(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            first = not self.should_exit
            super().handle_exit(sig, frame)
            drain = getattr(worker, "drain", None)
            if first and drain is not None:  # not in the signal handler: the worker takes locks
                threading.Thread(target=drain, name="autoparser-drain", daemon=True).start()

    return DrainingServer(config)


def connection_cap(wanted: int) -> int:
    """`--max-connections`, lowered to leave room under the open-file limit (raised to its hard
    limit first), so that refusing a connection never fails for want of a descriptor."""
    try:
        import resource
    except ImportError:
        return wanted
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    ceiling = 65536 if hard == resource.RLIM_INFINITY else min(hard, 65536)
    for target in (ceiling, 10240, 4096):  # some systems refuse more than a fixed maximum
        if soft < target <= ceiling:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
                soft = target
                break
            except (OSError, ValueError):
                continue
    # Left for the connections being refused (64), one accept burst (the backlog, 128), the model,
    # the worker's pipe, logs and the thread pool.
    room = max(16, soft - 512)
    if wanted > room:
        log.warning("--max-connections %d lowered to %d to fit the open-file limit %d", wanted, room, soft)
    return min(wanted, room)


def served_name(args: argparse.Namespace, engine: Any) -> str:
    """The model id clients see by default: the GGUF's file name without its extension (with
    --upstream, the upstream's model id, which is its model's path unless it has an alias)."""
    name = args.model or getattr(engine, "model_id", "") or "model"
    return Path(name).stem or name


def say(line: str) -> None:
    """A start-up fact printed whatever the log level: the GPU use and the address."""
    print(f"autoparser: {line}", file=sys.stderr, flush=True)


def _configure_logging(level: str) -> None:
    logger = logging.getLogger("autoparser")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("autoparser: %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
    logger.setLevel(level.upper())
