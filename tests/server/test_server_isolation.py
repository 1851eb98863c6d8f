"""The model runs in a supervised worker process; the HTTP front end outlives its crashes.

First the supervisor alone, with stand-in worker processes that crash or hang (no model): every
job the worker was running ends with an error event, a wedged worker is killed once a cancelled
job outstays its grace or a step its limit, and the jobs waiting behind run on the restarted
worker. Then the real server (tiny model): the worker process is killed with SIGKILL in the
middle of a stream, and the stream ends with `finish_reason: "error"` and `[DONE]`, the request
queued behind it is answered by the restarted worker, `/health` shows the restart, and the next
request succeeds once the model is back.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

import httpx
import pytest

from autoparser.server.completion import Completion, OutputOptions
from autoparser.server.supervisor import EngineFacts, EngineSettings, SupervisedWorker
from autoparser.server.worker import GenerationEnd, GenerationJob

# -- stand-in worker processes (module level: the spawned child imports them) ----------------------


def crashing_worker(_settings: EngineSettings, conn: Connection, _busy_since: Any) -> None:
    """Ready at once; dies as a native crash would at its first job, answers them after a restart."""
    conn.send(("ready", EngineFacts(os.getpid(), 64, 1, False)))
    marker = _settings.model_path
    while True:
        kind, *rest = conn.recv()
        if kind == "stop":
            return
        if kind != "job":
            continue
        if not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(139)
        job_id = rest[0]
        end = GenerationEnd("stop", prompt_tokens=2, completion_tokens=1, prefill_ms=0.0, decode_ms=[])
        conn.send([(job_id, ("tokens", (["answered"], None))), (job_id, ("done", end))])  # one message, several events


def telling_worker(settings: EngineSettings, conn: Connection, _busy_since: Any) -> None:
    """Sends a stream's first text, writes down the front end's next message, then ends the job."""
    conn.send(("ready", EngineFacts(os.getpid(), 64, 1, False)))
    _, job_id, _spec = conn.recv()
    conn.send([(job_id, ("tokens", (["first"], None)))])
    with open(settings.model_path, "w") as told:
        told.write(repr(conn.recv()))
    end = GenerationEnd("stop", prompt_tokens=2, completion_tokens=1, prefill_ms=0.0, decode_ms=[])
    conn.send([(job_id, ("done", end))])
    with contextlib.suppress(EOFError):
        conn.recv()


def wedged_worker(_settings: EngineSettings, conn: Connection, _busy_since: Any) -> None:
    """Takes jobs and never answers or honours a cancellation, like a thread stuck in native code."""
    conn.send(("ready", EngineFacts(os.getpid(), 64, 1, False)))
    with contextlib.suppress(EOFError):  # until the front end stops
        while True:
            conn.recv()


class PlainText:
    """A parser stream that reads everything as content."""

    def __init__(self) -> None:
        self.text = ""

    def feed(self, text: str) -> list[dict[str, Any]]:
        self.text += text
        return [{"content": text}]

    def finish(self) -> list[dict[str, Any]]:
        return []

    def message(self) -> dict[str, Any]:
        return {"role": "assistant", "content": self.text or None}


def job(events: list[tuple[str, Any]]) -> GenerationJob:
    return GenerationJob(prompt_tokens=[1, 2], max_tokens=4, sampling=None, grammar=None, stop_token_ids=(),
                         ignore_eos=False, completion=Completion(PlainText(), OutputOptions()),
                         post=events.append)


def wait_for(condition: Any, within: float) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def stuck_step_worker(_settings: EngineSettings, conn: Connection, busy_since: Any) -> None:
    """Starts a step at its first job and never finishes it (a grammar that takes forever per token)."""
    conn.send(("ready", EngineFacts(os.getpid(), 64, 1, False)))
    with contextlib.suppress(EOFError):  # the front end stopped before sending a job
        conn.recv()
        busy_since.value = time.monotonic()
        while True:
            time.sleep(1)


def test_a_crashed_worker_fails_its_jobs_and_restarts(tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings = EngineSettings(model_path=str(tmp_path / "crashed-once"), n_ctx=64, n_parallel=1)
    worker = SupervisedWorker(settings, max_queue=4, target=crashing_worker)
    first_pid = worker.start(timeout=60).pid
    try:
        held: list[tuple[str, Any]] = []
        worker.submit(job(held))
        wait_for(lambda: held, 60)
        assert held[0][0] == "error" and "exit code 139" in held[0][1] and "Retry" in held[0][1]
        wait_for(lambda: worker.health()["worker"] == "ok" and worker.restarts == 1, 60)
        assert worker.pid != first_pid
        after: list[tuple[str, Any]] = []
        worker.submit(job(after))
        wait_for(lambda: len(after) == 2, 60)
        assert after[0] == ("deltas", [{"content": "answered"}])  # the front end parsed the worker's text
        kind, result = after[1]
        assert kind == "done" and result.message["content"] == "answered" and result.finish_reason == "stop"
        assert not worker.busy
    finally:
        worker.stop()


def test_the_worker_hears_when_a_stream_has_shown_its_first_text(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Until then it sends the stream's tokens with each step, for the time to first token."""
    told = tmp_path / "told"
    worker = SupervisedWorker(EngineSettings(str(told), n_ctx=64, n_parallel=1), max_queue=4, target=telling_worker)
    worker.start(timeout=60)
    try:
        events: list[tuple[str, Any]] = []
        worker.submit(job(events))
        wait_for(lambda: len(events) == 2, 60)
        assert events[0] == ("deltas", [{"content": "first"}])
        assert told.read_text() == "('shown', 0)"
    finally:
        worker.stop()


def test_a_cancelled_job_that_wedges_the_worker_gets_it_restarted() -> None:
    settings = EngineSettings(model_path="unused", n_ctx=64, n_parallel=1)
    worker = SupervisedWorker(settings, max_queue=4, cancel_grace_s=0.5, target=wedged_worker)
    first_pid = worker.start(timeout=60).pid
    try:
        stuck: list[tuple[str, Any]] = []
        queued: list[tuple[str, Any]] = []
        wedging = job(stuck)
        worker.submit(wedging)
        worker.submit(job(queued))
        time.sleep(0.2)
        assert not stuck
        wedging.cancel()  # the client went away; the worker does not notice
        wait_for(lambda: stuck, 30)
        assert stuck[0][0] == "error"
        wait_for(lambda: worker.health()["worker"] == "ok" and worker.restarts == 1, 60)
        assert worker.pid != first_pid
        assert not queued and worker.running == 1  # the waiting job went to the new worker
    finally:
        worker.stop()
    assert queued and queued[0][0] == "error"  # nothing is left without an answer, even at shut-down


def test_a_step_that_never_ends_gets_the_worker_restarted() -> None:
    settings = EngineSettings(model_path="unused", n_ctx=64, n_parallel=1)
    worker = SupervisedWorker(settings, max_queue=4, step_limit_s=0.5, target=stuck_step_worker)
    worker.start(timeout=60)
    try:
        events: list[tuple[str, Any]] = []
        started = time.monotonic()
        worker.submit(job(events))
        wait_for(lambda: events, 30)
        assert events[0][0] == "error" and "SIGKILL" in events[0][1]
        assert time.monotonic() - started < 10
        wait_for(lambda: worker.restarts == 1, 30)
    finally:
        worker.stop()


def test_the_queue_bound_holds_and_waiting_cancelled_jobs_end() -> None:
    settings = EngineSettings(model_path="unused", n_ctx=64, n_parallel=1)
    worker = SupervisedWorker(settings, max_queue=1, target=wedged_worker)
    worker.start(timeout=60)
    try:
        worker.submit(job([]))
        worker.submit(job([]))
        from autoparser.server.errors import APIError

        with pytest.raises(APIError) as info:
            worker.submit(job([]))
        assert info.value.status == 503 and worker.waiting == 1 and worker.running == 1
    finally:
        worker.stop()


# -- the real server ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    pytest.importorskip("llama_cpp")
    from server_harness import find_template, start_server, tiny_model

    model = tiny_model(find_template("deepseek-ai-DeepSeek-V3.1.jinja"))
    served = start_server(model, "--n-ctx", "4096", "--parallel", "1",
                          log_dir=tmp_path_factory.mktemp("isolation"))
    yield served
    served.stop()


LONG = {"model": "tiny", "messages": [{"role": "user", "content": "Tell a long story."}],
        "max_tokens": 4000, "ignore_eos": True}


def test_killing_the_worker_mid_stream_ends_every_request_with_an_error(server) -> None:  # type: ignore[no-untyped-def]
    health = server.health()
    assert health["worker"] == "ok" and health["worker_pid"] != server.process.pid
    restarts, worker_pid = health["worker_restarts"], health["worker_pid"]
    http = server.http(timeout=120)
    queued: dict[str, Any] = {}

    def queued_request() -> None:  # waits behind the stream in the only slot
        queued["response"] = http.post("/v1/chat/completions", json={**LONG, "max_tokens": 8})

    events: list[dict[str, Any]] = []
    done = False
    with http.stream("POST", "/v1/chat/completions", json={**LONG, "stream": True}) as response:
        assert response.status_code == 200
        behind = threading.Thread(target=queued_request)
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                break
            events.append(json.loads(line[6:]))
            if len(events) == 3:
                behind.start()
                wait_for(lambda: server.health()["waiting"] >= 1, 10)
                killed_at = time.monotonic()
                os.kill(worker_pid, signal.SIGKILL)
    behind.join(120)
    assert done, "the stream ended without [DONE]"
    last = events[-1]
    assert last["choices"][0]["finish_reason"] == "error" and "error" in last, last
    assert "restart" in last["error"]["message"]
    waited = queued["response"]  # it waited in the queue, so it ran on the restarted worker
    assert waited.status_code == 200 and waited.json()["choices"][0]["finish_reason"] == "length", waited.text
    wait_for(lambda: server.health()["worker"] == "ok", 120)
    restart_s = time.monotonic() - killed_at
    health = server.health()
    assert health["worker_restarts"] == restarts + 1 and health["worker_pid"] != worker_pid
    print(f"worker restarted in {restart_s:.2f} s")
    answer = http.post("/v1/chat/completions", json={**LONG, "max_tokens": 4})
    assert answer.status_code == 200 and answer.json()["choices"][0]["finish_reason"] == "length"
    assert server.process.poll() is None


def test_a_request_sent_while_the_worker_restarts_runs_once_it_is_back(server) -> None:  # type: ignore[no-untyped-def]
    health = server.health()
    os.kill(health["worker_pid"], signal.SIGKILL)
    wait_for(lambda: server.health()["worker_restarts"] == health["worker_restarts"] + 1, 30)
    started = time.monotonic()
    answer = httpx.post(server.base_url + "/v1/chat/completions", json={**LONG, "max_tokens": 4}, timeout=120)
    assert answer.status_code == 200, answer.text
    print(f"answered {time.monotonic() - started:.2f} s after the restart began")
    assert server.health()["worker"] == "ok"


def test_a_plain_request_running_when_the_worker_dies_gets_a_5xx_error(server) -> None:  # type: ignore[no-untyped-def]
    wait_for(lambda: server.health()["worker"] == "ok", 60)
    health = server.health()
    outcome: dict[str, Any] = {}
    running = threading.Thread(target=lambda: outcome.setdefault("response", httpx.post(
        server.base_url + "/v1/chat/completions", json=LONG, timeout=120)))
    running.start()
    wait_for(lambda: server.health()["busy"], 10)
    time.sleep(0.2)
    os.kill(health["worker_pid"], signal.SIGKILL)
    running.join(120)
    response = outcome["response"]
    assert 500 <= response.status_code < 600, response.text[:300]
    error = response.json()["error"]
    assert "restart" in error["message"] and error["code"] == "generation_error"
    wait_for(lambda: server.health()["worker"] == "ok", 120)
    assert server.health()["worker_restarts"] == health["worker_restarts"] + 1


def test_the_worker_sends_events_together_and_a_first_text_or_an_end_at_once(monkeypatch: Any) -> None:
    """The worker process' outbox: streamed text waits up to FLUSH_S to travel with later tokens,
    in one message for every request; a request's first text and its end go with the round."""
    from autoparser.server import supervisor

    sent: list[Any] = []

    class Pipe:
        def send(self, message: Any) -> None:
            sent.append(message)

    monkeypatch.setattr(supervisor, "FLUSH_S", 60.0)
    outbox = supervisor._Outbox(Pipe())  # type: ignore[arg-type]
    outbox.add(1, ("deltas", ["a"]), urgent=True)
    outbox.add(2, ("deltas", ["b"]), urgent=False)
    outbox.flush_when_due()
    assert sent == [[(1, ("deltas", ["a"])), (2, ("deltas", ["b"]))]]
    outbox.add(1, ("deltas", ["c"]), urgent=False)
    outbox.flush_when_due()
    assert len(sent) == 1  # held back: FLUSH_S has not passed
    outbox.add(2, ("done", "result"), urgent=True)
    outbox.flush_when_due()
    assert sent[1] == [(1, ("deltas", ["c"])), (2, ("done", "result"))]
    monkeypatch.setattr(supervisor, "FLUSH_S", 0.0)
    outbox.add(1, ("deltas", ["d"]), urgent=False)
    outbox.flush_when_due()
    assert sent[2] == [(1, ("deltas", ["d"]))]
    outbox.flush_when_due()
    assert len(sent) == 3  # nothing to send: no empty message
