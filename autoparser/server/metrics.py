"""`GET /metrics`: the server's counters and histograms in Prometheus' text format, and the
per-request tracker that feeds them and logs each protocol anomaly.

Every finished request counts once, by endpoint and outcome (its finish_reason, `error`, or
`cancelled` when the client went away first), with its prompt, cached and generated tokens.
The timings come from the generation itself: queue time from the job's hand-over to the worker
until it took a slot, time to first token from the request's arrival until the first token was
sampled (queue and prefill included), and the time of every later token. Each app has its own
registry, so several servers in one process (tests) keep apart.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from autoparser.server.anomalies import RULES, AnomalyFinder

log = logging.getLogger("autoparser.server")

PREFIX = "autoparser_"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0)
TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5)
CONTENT_TYPE = CONTENT_TYPE_LATEST


class ServerMetrics:
    """The metrics of one server, in their own registry."""

    def __init__(self, running: Callable[[], float] | None = None, waiting: Callable[[], float] | None = None):
        self.registry = registry = CollectorRegistry()
        self.requests = Counter(PREFIX + "requests", "Finished requests, by endpoint and outcome",
                                ["endpoint", "outcome"], registry=registry)
        self.prompt_tokens = Counter(PREFIX + "prompt_tokens", "Prompt tokens of finished requests",
                                     registry=registry)
        self.cached_tokens = Counter(PREFIX + "cached_prompt_tokens", "Prompt tokens reused from the cache",
                                     registry=registry)
        self.generated_tokens = Counter(PREFIX + "generation_tokens", "Generated tokens", registry=registry)
        self.anomalies = Counter(PREFIX + "protocol_anomalies", "Protocol anomalies in replies, by rule",
                                 ["rule"], registry=registry)
        for rule in RULES:
            self.anomalies.labels(rule=rule)
        self.queue_time = Histogram(PREFIX + "queue_time_seconds", "Wait for a generation slot",
                                    buckets=LATENCY_BUCKETS, registry=registry)
        self.ttft = Histogram(PREFIX + "time_to_first_token_seconds",
                              "From the request's arrival to its first generated token",
                              buckets=LATENCY_BUCKETS, registry=registry)
        self.per_token = Histogram(PREFIX + "time_per_output_token_seconds",
                                   "Time of each generated token after the first",
                                   buckets=TOKEN_BUCKETS, registry=registry)
        if running is not None:
            Gauge(PREFIX + "requests_running", "Requests generating now",
                  registry=registry).set_function(running)
        if waiting is not None:
            Gauge(PREFIX + "requests_waiting", "Requests waiting for a slot",
                  registry=registry).set_function(waiting)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class RequestTracker:
    """One request's way through the server, told to the metrics and the log when it ends."""

    def __init__(self, metrics: ServerMetrics, anomalies: AnomalyFinder | None, request_id: str,
                 endpoint: str):
        self.metrics = metrics
        self.anomalies = anomalies
        self.request_id = request_id
        self.endpoint = endpoint
        self.arrived = time.monotonic()
        self.submitted: float | None = None
        self.ended = False

    def on_submit(self, prepared: Any) -> None:
        self.submitted = time.monotonic()
        for warning in prepared.warnings:
            log.warning("request_id=%s warning: %s", self.request_id, warning)

    def on_done(self, prepared: Any, result: Any) -> None:
        if self.ended:
            return
        self.ended = True
        metrics = self.metrics
        metrics.requests.labels(self.endpoint, result.finish_reason).inc()
        metrics.prompt_tokens.inc(result.prompt_tokens)
        metrics.cached_tokens.inc(result.cached_tokens)
        metrics.generated_tokens.inc(result.completion_tokens)
        self._observe_times(result)
        if self.anomalies is not None and prepared.start_state:  # a parsed (chat) reply
            for anomaly in self.anomalies.find(prepared, result):
                metrics.anomalies.labels(rule=anomaly.rule).inc()
                log.warning("protocol anomaly: request_id=%s rule=%s: %s", self.request_id, anomaly.rule,
                            anomaly.detail)

    def on_end(self, outcome: str) -> None:
        """The request ended without a result: `error` or `cancelled`."""
        if not self.ended:
            self.ended = True
            self.metrics.requests.labels(self.endpoint, outcome).inc()

    def _observe_times(self, result: Any) -> None:
        started = getattr(result, "started_at", 0.0)
        if self.submitted is not None and started:
            self.metrics.queue_time.observe(max(0.0, started - self.submitted))
        if result.decode_ms:
            began = started or self.submitted or self.arrived
            first = (began - self.arrived) + (result.prefill_ms + result.decode_ms[0]) / 1000.0
            self.metrics.ttft.observe(max(0.0, first))
            observe = self.metrics.per_token.observe
            for ms in result.decode_ms[1:]:
                observe(ms / 1000.0)
