"""The numbers behind ``/dashboard``: cumulative counters, read fresh on every poll.

Everything is cumulative (counters, histogram buckets, Triton's statistics); the page
takes differences between two polls to show rates and the latency of the last interval.
That keeps this side stateless, so it is the same whichever worker answers. The page's
own polling and Prometheus scrapes are left out of the request figures.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from typing import Any

from embed_server.errors import ServiceError
from embed_server.models import ModelManager
from embed_server.observability.metrics import registry
from embed_server.statistics import model_stats
from embed_server.triton import TritonGateway

_MONITORING_PREFIXES = ("/dashboard", "/metrics")


def _is_traffic(labels: dict[str, str]) -> bool:
    return not labels.get("route", "").startswith(_MONITORING_PREFIXES)


def facade_figures() -> dict[str, Any]:
    by_status: dict[str, float] = defaultdict(float)
    by_route: dict[str, float] = defaultdict(float)
    refusals: dict[str, float] = defaultdict(float)
    fetch_failures: dict[str, float] = defaultdict(float)
    buckets: dict[float, float] = defaultdict(float)
    totals = {"tokens": 0.0, "images": 0.0, "in_flight": 0.0}
    for family in registry().collect():
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "embed_requests_total" and _is_traffic(labels):
                by_status[labels["status"]] += sample.value
                by_route[labels["route"]] += sample.value
            elif sample.name == "embed_request_duration_seconds_bucket" and _is_traffic(labels):
                buckets[float(labels["le"])] += sample.value
            elif sample.name == "embed_refusals_total" and _is_traffic(labels):
                refusals[labels["reason"]] += sample.value
            elif sample.name == "embed_image_fetch_failures_total":
                fetch_failures[labels["reason"]] += sample.value
            elif sample.name == "embed_tokens_total":
                totals["tokens"] += sample.value
            elif sample.name == "embed_images_total":
                totals["images"] += sample.value
            elif sample.name == "embed_requests_in_flight":
                totals["in_flight"] += sample.value
    return {
        "requests_total": sum(by_status.values()),
        "requests_by_status": dict(by_status),
        "requests_by_route": dict(by_route),
        # 503 (Triton unavailable) is a refusal, as in the Prometheus series; not counted twice.
        "errors_total": sum(v for k, v in by_status.items() if k.startswith("5") and k != "503"),
        "refusals_total": sum(refusals.values()),
        "refusals_by_reason": dict(refusals),
        "image_fetch_failures": dict(fetch_failures),
        # JSON has no infinity; the last bucket's bound is sent as null.
        "latency_buckets": [
            [None if math.isinf(le) else le, count] for le, count in sorted(buckets.items())
        ],
        **totals,
    }


def _triton_figures(stats: list[dict[str, Any]]) -> list[dict[str, Any]]:
    figures = []
    for stat in model_stats(stats):
        inference = stat["inference_stats"]
        compute = ("compute_input", "compute_infer", "compute_output")
        figures.append(
            {
                "name": stat["name"],
                "requests": inference["success"]["count"],
                "failures": inference["fail"]["count"],
                "queue_ns": inference["queue"]["ns"],
                "compute_ns": sum(inference[k]["ns"] for k in compute),
                "executions": stat["execution_count"],
                "batch_executions": {
                    str(b["batch_size"]): b["compute_infer"]["count"] for b in stat["batch_stats"]
                },
            }
        )
    return figures


async def dashboard_data(manager: ModelManager, triton: TritonGateway) -> dict[str, Any]:
    try:
        models = await manager.loaded_models()
        triton_models = _triton_figures(await triton.statistics())
        triton_ready = True
    except ServiceError:
        models, triton_models, triton_ready = [], [], False
    return {
        "time": time.time(),
        "models": models,
        "triton_ready": triton_ready,
        "triton": triton_models,
        "facade": facade_figures(),
    }
