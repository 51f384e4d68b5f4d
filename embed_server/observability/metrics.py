"""The facade's own Prometheus series, and the one function that reads them back.

Series are module-level, as ``prometheus_client`` expects, so any module can record into
them without plumbing. With several uvicorn workers each process holds its own counters;
``python -m embed_server serve`` then sets ``PROMETHEUS_MULTIPROC_DIR`` (before any worker
imports this module) so that a scrape of any worker sums all of them.
"""

from __future__ import annotations

import os

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.multiprocess import MultiProcessCollector

_LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_CONVERSION_BUCKETS = (5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0)

REQUESTS = Counter(
    "embed_requests",
    "HTTP requests answered, by route template, model and status code.",
    ("route", "model", "status"),
)
LATENCY = Histogram(
    "embed_request_duration_seconds",
    "Time from request start to the last response byte, by route template and model.",
    ("route", "model"),
    buckets=_LATENCY_BUCKETS,
)
IN_FLIGHT = Gauge(
    "embed_requests_in_flight",
    "Requests being handled right now.",
    multiprocess_mode="livesum",
)
REFUSALS = Counter(
    "embed_refusals",
    "Requests refused (4xx, or 503 while Triton is unavailable), by route and reason.",
    ("route", "reason"),
)
IMAGE_FETCH_FAILURES = Counter(
    "embed_image_fetch_failures",
    "Image inputs that could not be fetched, by reason.",
    ("reason",),
)
TOKENS = Counter("embed_tokens", "Text tokens embedded, by model.", ("model",))
IMAGES = Counter("embed_images", "Images embedded, by model.", ("model",))
BATCH_TOKENS = Counter(
    "embed_batch_tokens",
    "Tokens in the sub-batches the Triton runner executed, real or padded, by model.",
    ("model", "kind"),
)
CONVERSIONS = Histogram(
    "embed_conversion_duration_seconds",
    "Wall time of model conversions (download, export, verify), by kind and outcome.",
    ("kind", "outcome"),
    buckets=_CONVERSION_BUCKETS,
)

_REFUSAL_REASONS = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
    422: "invalid",
    429: "too_many_requests",
    503: "unavailable",
}


def refusal_reason(status: int) -> str | None:
    """Why a status code counts as a refusal, or None when it is a success or a fault."""
    if status in _REFUSAL_REASONS:
        return _REFUSAL_REASONS[status]
    return "client_error" if 400 <= status < 500 else None


def record_request(route: str, model: str, status: int, duration_s: float) -> None:
    REQUESTS.labels(route, model, str(status)).inc()
    LATENCY.labels(route, model).observe(duration_s)
    reason = refusal_reason(status)
    if reason is not None:
        REFUSALS.labels(route, reason).inc()


def record_usage(model: str, tokens: int, images: int) -> None:
    if tokens:
        TOKENS.labels(model).inc(tokens)
    if images:
        IMAGES.labels(model).inc(images)


def record_padding(model: str, real: int, padded: int) -> None:
    BATCH_TOKENS.labels(model, "real").inc(real)
    BATCH_TOKENS.labels(model, "padded").inc(padded)


def registry() -> CollectorRegistry:
    """The registry a scrape reads: every worker's files in multiprocess mode, else ours."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        merged = CollectorRegistry()
        MultiProcessCollector(merged)
        return merged
    return REGISTRY
