"""`tools/fuzz_requests.py`: a short fixed-seed run against the tiny model finds nothing, and its
checks do see a 500, a stream cut before `[DONE]` and an error body that is not JSON."""

from __future__ import annotations

import json
import random
from pathlib import Path

import httpx
import pytest
from corpora import tool_module

fuzz = tool_module("fuzz_requests")

pytest_plugins = ["tiny_model"]


def test_a_short_run_finds_nothing(tmp_path: Path, tiny_model_path: Path) -> None:
    out = tmp_path / "findings.json"
    status = fuzz.main(["--seed", "5", "--seconds", "8", "--out", str(out)])
    assert json.loads(out.read_text(encoding="utf-8")) == []
    assert status == 0


@pytest.mark.parametrize(("status", "headers", "text", "stream", "found"), [
    (500, {}, '{"error": {}}', False, "status 500"),
    (400, {}, "<html>bad</html>", False, "not JSON"),
    (200, {"content-type": "text/event-stream"}, "data: {}\n\n", True, "did not finish"),
    (200, {"content-type": "text/event-stream"}, "data: {}\n\ndata: [DONE]\n\n", True, None),
    (503, {}, '{"error": {}}', False, None),
])
def test_the_checks_see_what_is_wrong(status: int, headers: dict[str, str], text: str, stream: bool,
                                      found: str | None) -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(status, headers=headers, text=text))
    statuses = fuzz.Counter()
    with httpx.Client(transport=transport) as client:
        problem = fuzz.send(client, "http://x", "/v1/chat/completions", {"stream": stream}, statuses)
    assert (problem is None) if found is None else (found in problem)


def test_mutated_bodies_are_json_and_keep_generation_short() -> None:
    rng = random.Random(3)
    for _ in range(500):
        endpoint = rng.choice(sorted(fuzz.SEEDS))
        body = fuzz.mutate(rng.choice(fuzz.SEEDS[endpoint]), rng)
        json.loads(fuzz.encode(body).decode("utf-8", "surrogatepass"))
        limits = [body[key] for key in fuzz.TOKEN_LIMITS if isinstance(body.get(key), int)]
        assert all(limit <= 8 for limit in limits)
