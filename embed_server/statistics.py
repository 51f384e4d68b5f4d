"""Shape Triton's per-model statistics into the API's ``/metrics`` JSON.

Triton's JSON encoding of its protobuf writes 64-bit counters as strings and leaves out
zero fields; clients want numbers and every key present.
"""

from __future__ import annotations

from typing import Any

INFERENCE_STAT_KEYS = (
    "success",
    "fail",
    "queue",
    "compute_input",
    "compute_infer",
    "compute_output",
    "cache_hit",
    "cache_miss",
)
BATCH_STAT_KEYS = ("compute_input", "compute_infer", "compute_output")


def _duration(raw: dict[str, Any] | None) -> dict[str, int]:
    raw = raw or {}
    return {"count": int(raw.get("count", 0)), "ns": int(raw.get("ns", 0))}


def model_stats(raw_stats: list[dict[str, Any]]) -> list[dict[str, Any]]:
    shaped = []
    for stat in raw_stats:
        inference = stat.get("inference_stats", {})
        shaped.append(
            {
                "name": stat.get("name", ""),
                "version": stat.get("version", ""),
                "last_inference": int(stat.get("last_inference", 0)),
                "inference_count": int(stat.get("inference_count", 0)),
                "execution_count": int(stat.get("execution_count", 0)),
                "inference_stats": {k: _duration(inference.get(k)) for k in INFERENCE_STAT_KEYS},
                "batch_stats": [
                    {
                        "batch_size": int(batch.get("batch_size", 0)),
                        **{k: _duration(batch.get(k)) for k in BATCH_STAT_KEYS},
                    }
                    for batch in stat.get("batch_stats", [])
                ],
            }
        )
    return shaped
