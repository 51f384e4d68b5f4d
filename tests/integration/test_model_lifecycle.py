"""Load, unload, delete, listing, metrics and refusals against the real server."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import DEFAULT_MODEL, api_without_triton

pytestmark = pytest.mark.integration


def repository_snapshot(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if ".locks" not in p.parts}


def test_load_of_a_loaded_model_answers_200(client):
    response = client.post("/load_sentence_transformer_model", json={"model_name": DEFAULT_MODEL})
    assert response.status_code == 200
    assert "already loaded" in response.json()["message"]


def test_unload_then_reload_without_reconverting(client, tiny_models, server):
    name = str(tiny_models.mean_dense)
    assert (
        client.post("/load_sentence_transformer_model", json={"model_name": name}).status_code
        == 200
    )
    assert client.post("/unload_model", json={"model_name": name}).status_code == 200
    response = client.post("/infer", json={"model_name": name, "text": ["x"]})
    assert response.status_code == 404
    assert "not loaded" in response.json()["detail"]
    assert any(
        m["model_name"] == name and not m["loaded"]
        for m in client.get("/repository_models").json()["models"]
    )
    started = time.monotonic()
    assert (
        client.post("/load_sentence_transformer_model", json={"model_name": name}).status_code
        == 200
    )
    assert time.monotonic() - started < 30  # a Triton load, not a conversion
    assert client.post("/infer", json={"model_name": name, "text": ["x"]}).status_code == 200
    second = client.post("/unload_model", json={"model_name": str(tiny_models.broken)})
    assert second.status_code == 404


def test_delete_removes_from_triton_and_repository(client, tiny_models, server):
    name = str(tiny_models.cls_no_normalize)
    assert (
        client.post("/load_sentence_transformer_model", json={"model_name": name}).status_code
        == 200
    )
    folders_before = {p.name for p in server.repository.iterdir()}
    response = client.post("/delete_model", json={"model_name": name})
    assert response.status_code == 200, response.text
    assert name not in {m["model_name"] for m in client.get("/loaded_models").json()["models"]}
    assert name not in {m["model_name"] for m in client.get("/repository_models").json()["models"]}
    assert len({p.name for p in server.repository.iterdir()}) == len(folders_before) - 1
    again = client.post("/delete_model", json={"model_name": name})
    assert again.status_code == 404
    assert "not in the model repository" in again.json()["detail"]


@pytest.mark.parametrize(
    "name",
    [
        "../x",
        "a/../../b",
        "/etc",
        "/etc/passwd",
        "",
        "   ",
        "a\nb",
        "x" * 300,
        "a//b",
        "..",
        "org/name/extra",
    ],
)
def test_hostile_names_are_refused_without_touching_disk(client, server, name):
    before = repository_snapshot(server.repository)
    for route in ("/load_sentence_transformer_model", "/unload_model", "/delete_model", "/infer"):
        body = {"model_name": name, "text": ["x"]} if route == "/infer" else {"model_name": name}
        response = client.post(route, json=body)
        assert 400 <= response.status_code < 500, (route, response.text)
        assert "model_name" in response.json()["detail"]
    assert repository_snapshot(server.repository) == before


def test_unknown_hub_model_is_404_with_reason(client, server):
    before = repository_snapshot(server.repository)
    response = client.post(
        "/load_sentence_transformer_model", json={"model_name": "nobody/does-not-exist"}
    )
    assert response.status_code == 404
    assert "nobody/does-not-exist" in response.json()["detail"]
    assert repository_snapshot(server.repository) == before


def test_failed_conversion_leaves_nothing_half_written(client, server, tiny_models):
    before = repository_snapshot(server.repository)
    response = client.post(
        "/load_sentence_transformer_model", json={"model_name": str(tiny_models.broken)}
    )
    assert response.status_code == 422
    assert "could not convert" in response.json()["detail"]
    assert repository_snapshot(server.repository) == before


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"text": ["x"]}, 422, "model_name"),
        ({"model_name": DEFAULT_MODEL, "text": [1, 2]}, 422, "text.0"),
        ({"model_name": DEFAULT_MODEL, "text": []}, 400, "text"),
        ({"model_name": DEFAULT_MODEL}, 400, "text"),
        ({"model_name": DEFAULT_MODEL, "text": ["x"], "image": ["data:,"]}, 400, "image"),
        ({"model_name": DEFAULT_MODEL, "text": ["x"], "bogus": 1}, 422, "bogus"),
        ({"model_name": "nobody/unknown", "text": ["x"]}, 404, "not loaded"),
    ],
)
def test_bad_infer_requests_get_clear_errors(client, body, status, words):
    response = client.post("/infer", json=body)
    assert response.status_code == status, response.text
    assert words in response.json()["detail"]


def test_malformed_json_is_422(client):
    response = client.post(
        "/infer", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert response.status_code == 422
    assert response.json()["detail"]


def test_listing_health_and_metrics(client):
    loaded = client.get("/loaded_models").json()["models"]
    assert DEFAULT_MODEL in {m["model_name"] for m in loaded}
    health = client.get("/health").json()
    assert health == {"status": "ok", "triton_ready": True}
    assert client.get("/ready").status_code == 200
    client.post("/infer", json={"model_name": DEFAULT_MODEL, "text": ["metrics please"]})
    stats = client.get("/metrics").json()["model_stats"]
    entry = next(s for s in stats if s["name"].startswith("sentence-transformers_all-MiniLM"))
    assert entry["version"] == "1"
    assert set(entry["inference_stats"]) == {
        "success",
        "fail",
        "queue",
        "compute_input",
        "compute_infer",
        "compute_output",
        "cache_hit",
        "cache_miss",
    }
    assert entry["inference_stats"]["success"]["count"] >= 1
    assert entry["batch_stats"] and entry["batch_stats"][0]["compute_infer"]["count"] >= 1


def test_concurrent_requests_are_batched_by_triton(client, server):
    def executed_batches() -> dict[int, int]:
        stats = client.get("/metrics").json()["model_stats"]
        entry = next(s for s in stats if s["name"].startswith("sentence-transformers_all-MiniLM"))
        return {b["batch_size"]: b["compute_infer"]["count"] for b in entry["batch_stats"]}

    before = executed_batches()

    async def burst() -> list[int]:
        async with httpx.AsyncClient(base_url=server.url, timeout=120) as http:
            body = {"model_name": DEFAULT_MODEL, "text": ["one sentence per request"]}
            responses = await asyncio.gather(*(http.post("/infer", json=body) for _ in range(64)))
            return [r.status_code for r in responses]

    assert set(asyncio.run(burst())) == {200}
    after = executed_batches()
    grown = {size: after.get(size, 0) - before.get(size, 0) for size in after}
    assert any(size > 1 and count > 0 for size, count in grown.items()), grown


def test_triton_down_gives_503_fast(server):
    """An API whose Triton is not running answers 503 at once, not a hang or a 500.

    It shares the session's repository, so the model exists on disk; only Triton is absent.
    """
    with api_without_triton(server.repository) as url:
        health = httpx.get(url + "/health", timeout=5)
        assert health.json() == {"status": "ok", "triton_ready": False}
        started = time.monotonic()
        response = httpx.post(url + "/infer", json={"model_name": DEFAULT_MODEL, "text": ["x"]})
        assert response.status_code == 503, response.text
        assert "Triton" in response.json()["detail"]
        assert time.monotonic() - started < 5
        ready = httpx.get(url + "/ready", timeout=10)
        assert ready.status_code == 503
        assert "Triton" in ready.json()["message"]


def test_conversion_runs_off_the_event_loop_and_a_killed_one_leaves_nothing(
    client, server, tiny_models
):
    """While a model converts, /health stays fast and other models keep answering; killing
    the converter mid-way gives a clear error and leaves the repository as it was."""
    import shutil
    import threading

    import numpy as np
    import psutil

    source = tiny_models.root / "tiny-killed"
    shutil.copytree(tiny_models.cls_no_normalize, source)
    before = repository_snapshot(server.repository)
    outcome: dict[str, httpx.Response] = {}

    def load() -> None:
        outcome["load"] = httpx.post(
            server.url + "/load_sentence_transformer_model",
            json={"model_name": str(source)},
            timeout=300,
        )

    loader = threading.Thread(target=load)
    loader.start()
    converter = None
    deadline = time.monotonic() + 60
    while converter is None and time.monotonic() < deadline:
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = " ".join(proc.info["cmdline"] or [])
            if "-m converters" in cmdline and str(source) in cmdline:
                converter = proc
        time.sleep(0.05)
    assert converter is not None, "the conversion never started"
    latencies = []
    for _ in range(15):
        started = time.monotonic()
        assert client.get("/health").status_code == 200
        latencies.append(time.monotonic() - started)
        other = client.post("/infer", json={"model_name": DEFAULT_MODEL, "text": ["meanwhile"]})
        assert other.status_code == 200
        time.sleep(0.05)
    converter.kill()
    loader.join(timeout=120)
    assert outcome["load"].status_code == 422, outcome["load"].text
    assert "could not convert" in outcome["load"].json()["detail"]
    assert float(np.percentile(latencies, 95)) < 0.1, latencies
    assert repository_snapshot(server.repository) == before


def test_delete_during_a_load_waits_for_it(client, server, tiny_models):
    """A delete sent while the model converts is serialised after the load, not interleaved."""
    import shutil
    import threading

    source = tiny_models.root / "tiny-serialised"
    shutil.copytree(tiny_models.mean_dense, source)
    before = repository_snapshot(server.repository)
    finished: dict[str, tuple[float, httpx.Response]] = {}

    def call(route: str) -> None:
        response = httpx.post(server.url + route, json={"model_name": str(source)}, timeout=300)
        finished[route] = (time.monotonic(), response)

    loader = threading.Thread(target=call, args=("/load_sentence_transformer_model",))
    loader.start()
    time.sleep(1.0)  # the load holds the model's lock, converting
    deleter = threading.Thread(target=call, args=("/delete_model",))
    deleter.start()
    loader.join(timeout=300)
    deleter.join(timeout=300)
    load_done, load = finished["/load_sentence_transformer_model"]
    delete_done, delete = finished["/delete_model"]
    assert load.status_code == 200, load.text
    assert delete.status_code == 200, delete.text
    assert delete_done >= load_done
    assert str(source) not in {
        m["model_name"] for m in client.get("/loaded_models").json()["models"]
    }
    assert repository_snapshot(server.repository) == before
