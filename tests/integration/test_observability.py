"""Prometheus exposition, request ids and per-request log lines, on the real server."""

from __future__ import annotations

import json
import re
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import DEFAULT_MODEL, PROJECT_ROOT

pytestmark = pytest.mark.integration


def scrape(client) -> dict[str, list]:
    response = client.get("/metrics/prometheus")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    families: dict[str, list] = {}
    for family in text_string_to_metric_families(response.text):
        families.setdefault(family.name, []).extend(family.samples)
    return families


def value(families, sample_name: str, **labels) -> float:
    family = re.sub(r"_(total|bucket|count|sum)$", "", sample_name)
    return sum(
        s.value
        for s in families.get(family, [])
        if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items())
    )


def test_a_request_shows_up_with_route_model_and_status(client):
    before = scrape(client)
    for _ in range(3):
        response = client.post("/infer", json={"model_name": DEFAULT_MODEL, "text": ["hi there"]})
        assert response.status_code == 200
    refused = client.post("/infer", json={"model_name": DEFAULT_MODEL, "text": []})
    assert refused.status_code == 400
    after = scrape(client)
    ok = {"route": "/infer", "model": DEFAULT_MODEL, "status": "200"}
    assert (
        value(after, "embed_requests_total", **ok) - value(before, "embed_requests_total", **ok)
        == 3
    )
    bad = {"route": "/infer", "model": DEFAULT_MODEL, "status": "400"}
    assert (
        value(after, "embed_requests_total", **bad) - value(before, "embed_requests_total", **bad)
        == 1
    )
    reason = {"route": "/infer", "reason": "bad_request"}
    assert (
        value(after, "embed_refusals_total", **reason)
        - value(before, "embed_refusals_total", **reason)
        == 1
    )
    latency = {"route": "/infer", "model": DEFAULT_MODEL}
    assert (
        value(after, "embed_request_duration_seconds_count", **latency)
        - value(before, "embed_request_duration_seconds_count", **latency)
        == 4
    )
    tokens = value(after, "embed_tokens_total", model=DEFAULT_MODEL)
    assert tokens - value(before, "embed_tokens_total", model=DEFAULT_MODEL) >= 3 * 4
    assert "embed_requests_in_flight" in after


def test_triton_nv_series_are_merged_into_the_same_scrape(client):
    client.post("/infer", json={"model_name": DEFAULT_MODEL, "text": ["for triton"]})
    families = scrape(client)
    assert value(families, "embed_triton_metrics_up") == 1
    success = [s for s in families.get("nv_inference_request_success", []) if s.value > 0]
    assert success, sorted(name for name in families if name.startswith("nv_"))
    assert any(s.labels["model"].startswith("sentence-transformers_all-MiniLM") for s in success)
    assert "nv_inference_queue_duration_us" in families


def test_runner_reports_real_and_padded_tokens_of_its_sub_batches(client):
    before = scrape(client)
    texts = ["short", "a much longer sentence " * 6, "mid length text here"]
    response = client.post("/infer", json={"model_name": DEFAULT_MODEL, "text": texts})
    assert response.status_code == 200
    after = scrape(client)

    def grown(kind: str) -> float:
        return value(after, "embed_batch_tokens_total", model=DEFAULT_MODEL, kind=kind) - value(
            before, "embed_batch_tokens_total", model=DEFAULT_MODEL, kind=kind
        )

    real = grown("real")
    assert real == value(after, "embed_tokens_total", model=DEFAULT_MODEL) - value(
        before, "embed_tokens_total", model=DEFAULT_MODEL
    )
    # Lengths this different are not all padded to the longest (that would be ~0.4 here):
    # every sub-batch keeps real/padded >= EMBED_PADDING_EFFICIENCY (0.9).
    assert real > 0
    assert real <= grown("padded") <= real / 0.9


def test_json_metrics_keep_their_shape(client):
    body = client.get("/metrics").json()
    assert set(body) == {"model_stats"}
    assert {"name", "inference_stats", "batch_stats"} <= set(body["model_stats"][0])


def test_request_id_is_echoed_or_generated_and_logged(client, server):
    given = client.post(
        "/infer",
        json={"model_name": DEFAULT_MODEL, "text": ["log me"]},
        headers={"X-Request-ID": "trace-4242"},
    )
    assert given.headers["X-Request-ID"] == "trace-4242"
    generated = client.get("/health").headers["X-Request-ID"]
    assert re.fullmatch(r"[0-9a-f]{32}", generated)
    hostile = client.get("/health", headers={"X-Request-ID": "bad id\twith spaces"})
    assert re.fullmatch(r"[0-9a-f]{32}", hostile.headers["X-Request-ID"])
    deadline = time.monotonic() + 10
    line = None
    while line is None and time.monotonic() < deadline:
        line = next(
            (row for row in server.log_path.read_text().splitlines() if "[trace-4242]" in row), None
        )
        time.sleep(0.2)
    assert line is not None
    assert re.search(
        rf"embed_server\.access .*POST /infer {re.escape(DEFAULT_MODEL)} 200 [\d.]+ ms", line
    )


def test_grafana_dashboard_queries_only_series_the_scrape_has(client):
    client.post("/infer", json={"model_name": DEFAULT_MODEL, "text": ["for grafana"]})
    families = scrape(client)
    dashboard = json.loads((PROJECT_ROOT / "dashboards" / "grafana.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    names = {n for e in exprs for n in re.findall(r"\b(?:embed|nv)_[a-z_]+", e)}
    assert len(names) >= 12
    family_of = {n: re.sub(r"_(total|bucket|sum|count)$", "", n) for n in names}
    missing = {n for n in names if n not in families and family_of[n] not in families}
    assert not missing
