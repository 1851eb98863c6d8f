#!/usr/bin/env python3
"""Slow clients against the server: can they wedge it, and how much log do they cost?

A server is started on the tiny model with its open-file limit set to ``--nofile`` (1,024 by
default, a common default limit). Then ``--clients`` connections each send a request's headers
one byte a second for ``--seconds``, while ``/health`` is asked every half second. Printed: the
connections opened and dropped by the server, the ``/health`` statuses and their slowest and
median answer times, and how many bytes the server's log grew.

Usage::

    python tools/bench_slow_clients.py                      # 1,100 clients, 30 s, 1,024 files
    python tools/bench_slow_clients.py --clients 2000 --seconds 60 --nofile 4096
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_server import REPO, stop_server, tiny_model  # noqa: E402

HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"


def start(model: Path, log_path: Path, nofile: int) -> tuple[subprocess.Popen, str]:
    def limit_files() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    command = [sys.executable, "-m", "autoparser.server", "--model", str(model), "--port", "0", "--parallel", "1",
               "--n-ctx", "1024"]
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO,
                                   preexec_fn=limit_files)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = re.search(r"listening on (http://\S+)", log_path.read_text(errors="replace"))
        if found:
            try:
                if httpx.get(found.group(1) + "/health", timeout=2).status_code == 200:
                    return process, found.group(1)
            except httpx.HTTPError:
                pass
        if process.poll() is not None:
            sys.exit(f"the server exited:\n{log_path.read_text()}")
        time.sleep(0.1)
    process.kill()
    sys.exit("the server did not start")


async def slow_client(host: str, port: int, stats: dict[str, Any]) -> None:
    try:
        _reader, writer = await asyncio.open_connection(host, port)
    except OSError:
        stats["connect_failed"] += 1
        return
    stats["opened"] += 1
    try:
        for byte in HEAD + b"X-Padding: " + b"a" * 4000:
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(1.0)
    except OSError:
        stats["dropped"] += 1
    finally:
        writer.close()


async def flood(url: str, clients: int, seconds: float) -> dict[str, Any]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    stats: dict[str, Any] = {"opened": 0, "dropped": 0, "connect_failed": 0, "health": []}
    tasks = [asyncio.create_task(slow_client(host, int(port), stats)) for _ in range(clients)]
    deadline = time.monotonic() + seconds
    async with httpx.AsyncClient(timeout=seconds) as client:
        while time.monotonic() < deadline:
            started = time.monotonic()
            try:
                outcome: Any = (await client.get(url + "/health")).status_code
            except httpx.HTTPError as exc:
                outcome = type(exc).__name__
            stats["health"].append((time.monotonic() - started, outcome))
            await asyncio.sleep(0.5)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=1100)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--nofile", type=int, default=1024, help="the server's open-file limit")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = tiny_model(Path(tmp))
        log_path = Path(tmp) / "server.log"
        process, url = start(model, log_path, args.nofile)
        logged = log_path.stat().st_size
        try:
            stats = asyncio.run(flood(url, args.clients, args.seconds))
        finally:
            stop_server(process)
        grown = log_path.stat().st_size - logged
    times = sorted(t for t, _ in stats["health"])
    outcomes: dict[Any, int] = {}
    for _, outcome in stats["health"]:
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    print(f"{args.clients} slow clients for {args.seconds:g} s, server open-file limit {args.nofile}")
    print(f"connections opened {stats['opened']}, dropped by the server {stats['dropped']}, "
          f"connect failures {stats['connect_failed']}")
    print(f"/health: {len(times)} probes, {outcomes}, slowest {times[-1]:.2f} s, median {times[len(times) // 2]:.3f} s")
    print(f"log grew {grown:,} bytes (including the shutdown lines)")


if __name__ == "__main__":
    main()
