"""Overload, faults, races, eviction, auth and hostile input against a real server.

One server for this module runs with two API workers, a low in-flight limit, a small
Triton queue, a limit of two loaded models and an API key, so each protection is live.
Its Triton is exposed (a split deployment) with a key, so every test here also shows the
API working against a Triton whose APIs demand that key.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import psutil
import pytest
import tritonclient.grpc as grpcclient
from sentence_transformers import SentenceTransformer
from tritonclient.utils import InferenceServerException

from embed_server.triton_access import GRPC_HEADER, HTTP_HEADER
from tests.conftest import (
    ARTIFACTS,
    HUB_TEST_ID,
    RunningServer,
    start_server,
    stop_server,
    wait_until,
)

pytestmark = pytest.mark.integration

KEY = "test-secret-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
TRITON_KEY = "test-triton-key"


def robust_env(tiny_models) -> dict[str, str]:
    return {
        "EMBED_DEFAULT_MODELS": str(tiny_models.cls_no_normalize),
        "EMBED_LOCAL_MODEL_DIRS": str(tiny_models.root),
        "HF_HOME": str(tiny_models.hf_home),
        "EMBED_WORKERS": "2",
        "EMBED_MAX_INFLIGHT": "4",
        "EMBED_TRITON_MAX_QUEUE_SIZE": "2",
        "EMBED_MAX_LOADED_MODELS": "2",
        "EMBED_API_KEY": KEY,
        "EMBED_TRITON_HOST": "0.0.0.0",
        "EMBED_TRITON_API_KEY": TRITON_KEY,
        "EMBED_MAX_ITEMS_PER_REQUEST": "50",
        "EMBED_MAX_TEXT_CHARS": "2000",
        "EMBED_MAX_BODY_BYTES": "200000",
        "EMBED_TRITON_HANG_TIMEOUT_S": "5",
        "EMBED_LOG_JSON": "true",
    }


@pytest.fixture(scope="module")
def robust(tmp_path_factory, tiny_models):
    repository = tmp_path_factory.mktemp("robust_repository")
    server = start_server(repository, ARTIFACTS / "robust.log", robust_env(tiny_models))
    try:
        wait_until(server, "/ready", timeout_s=300)
        yield server
    finally:
        stop_server(server)


def snapshot(root) -> set[str]:
    return {
        str(p.relative_to(root))
        for p in root.rglob("*")
        if ".locks" not in p.parts and not p.name.startswith(".loaded_models")
    }


def embed(server: RunningServer, model: str, texts: list[str]) -> httpx.Response:
    return httpx.post(server.url + "/infer", json={"model_name": model, "text": texts}, timeout=60)


def test_access_log_lines_are_json_with_the_request_id(robust, tiny_models):
    """With EMBED_LOG_JSON, every worker writes one JSON object per request."""
    model = str(tiny_models.cls_no_normalize)
    response = httpx.post(
        robust.url + "/infer",
        json={"model_name": model, "text": ["logged as json"]},
        headers={"X-Request-ID": "json-log-check"},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    deadline = time.monotonic() + 10
    entry = None
    while entry is None and time.monotonic() < deadline:
        for line in robust.log_path.read_text(errors="replace").splitlines():
            if line.startswith("{") and "json-log-check" in line:
                entry = json.loads(line)
        time.sleep(0.2)
    assert entry is not None, "no JSON access line for the request"
    assert entry["request_id"] == "json-log-check"
    assert entry["logger"] == "embed_server.access"
    assert (entry["route"], entry["model"], entry["status"]) == ("/infer", model, 200)
    assert entry["duration_ms"] > 0


def test_management_needs_the_api_key(robust, tiny_models):
    body = {"model_name": str(tiny_models.cls_no_normalize)}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
        response = httpx.post(robust.url + "/unload_model", json=body, headers=headers)
        assert response.status_code == 401
        assert "API key" in response.json()["detail"]
    assert KEY not in robust.log_path.read_text()
    ok = httpx.post(robust.url + "/load_sentence_transformer_model", json=body, headers=AUTH)
    assert ok.status_code == 200
    assert embed(robust, str(tiny_models.cls_no_normalize), ["no key needed"]).status_code == 200


def test_an_exposed_triton_demands_its_key_from_everyone_but_the_api(robust, tiny_models):
    """Only 127.0.0.1 is contacted; Triton listens on every interface here."""
    model = str(tiny_models.cls_no_normalize)
    models = httpx.get(robust.url + "/loaded_models").json()["models"]
    name = next(m["triton_models"]["text"] for m in models if m["model_name"] == model)
    triton = f"http://127.0.0.1:{robust.triton_http_port}"
    load = f"{triton}/v2/repository/models/{name}/load"
    for headers in ({}, {HTTP_HEADER: "wrong"}, {"Authorization": f"Bearer {TRITON_KEY}"}):
        for url in (f"{triton}/v2/repository/index", load):
            refused = httpx.post(url, headers=headers, timeout=30)
            assert refused.status_code == 403, (url, headers, refused.text)
    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{robust.triton_grpc_port}")
    with pytest.raises(InferenceServerException, match="restricted"):
        grpc.get_model_repository_index()
    assert grpc.is_server_live()  # health stays open: liveness probes need no secret
    keyed = grpc.get_model_repository_index(headers={GRPC_HEADER: TRITON_KEY}, as_json=True)
    assert name in {m["name"] for m in keyed["models"]}
    grpc.close()

    with_key = {HTTP_HEADER: TRITON_KEY}
    index = httpx.post(f"{triton}/v2/repository/index", headers=with_key, timeout=30)
    assert index.status_code == 200 and name in {m["name"] for m in index.json()}
    assert httpx.post(load, headers=with_key, timeout=120).status_code == 200
    # The API holds the key: its management and inference calls keep working.
    reload = httpx.post(
        robust.url + "/load_sentence_transformer_model",
        json={"model_name": model},
        headers=AUTH,
        timeout=300,
    )
    assert reload.status_code == 200, reload.text
    assert embed(robust, model, ["through a restricted Triton"]).status_code == 200
    assert httpx.get(robust.url + "/metrics", timeout=30).status_code == 200
    assert TRITON_KEY not in robust.log_path.read_text()


def test_oversize_requests_are_refused_and_change_nothing(robust, tiny_models):
    model = str(tiny_models.cls_no_normalize)
    before = snapshot(robust.repository)
    too_many = embed(robust, model, ["x"] * 51)
    assert too_many.status_code == 413 and "limit of 50" in too_many.json()["detail"]
    too_long = embed(robust, model, ["ok", "y" * 2001])
    assert too_long.status_code == 413 and too_long.json()["detail"].startswith("text.1: ")
    huge = httpx.post(
        robust.url + "/infer",
        content=json.dumps({"model_name": model, "text": ["z" * 300_000]}),
        headers={"content-type": "application/json"},
    )
    assert huge.status_code == 413 and "body" in huge.json()["detail"]

    def chunks():
        yield b'{"model_name": "' + model.encode() + b'", "text": ["'
        for _ in range(30):
            yield b"a" * 10_000
        yield b'"]}'

    streamed = httpx.post(
        robust.url + "/infer", content=chunks(), headers={"content-type": "application/json"}
    )
    assert streamed.status_code == 413
    for name in ("../../etc", "/etc/passwd", "a" * 300, "a\tb", "x/../../y"):
        response = httpx.post(
            robust.url + "/load_sentence_transformer_model",
            json={"model_name": name},
            headers=AUTH,
        )
        assert response.status_code == 400, response.text
        assert "/work" not in response.text and "Traceback" not in response.text
    assert snapshot(robust.repository) == before


def test_concurrent_loads_across_workers_convert_once(robust, tiny_models):
    name = str(tiny_models.mean_dense)

    async def load_all() -> list[int]:
        async with httpx.AsyncClient(base_url=robust.url, timeout=300, headers=AUTH) as http:
            body = {"model_name": name}
            calls = [http.post("/load_sentence_transformer_model", json=body) for _ in range(20)]
            return [r.status_code for r in await asyncio.gather(*calls)]

    assert set(asyncio.run(load_all())) == {200}
    conversions = [
        line
        for line in robust.log_path.read_text().splitlines()
        if "converted" in line and name in line
    ]
    assert len(conversions) == 1, conversions


def test_least_recently_used_model_is_evicted(robust, tiny_models):
    cls_model, dense_model = str(tiny_models.cls_no_normalize), str(tiny_models.mean_dense)
    for model in (cls_model, dense_model):
        response = httpx.post(
            robust.url + "/load_sentence_transformer_model",
            json={"model_name": model},
            headers=AUTH,
            timeout=300,
        )
        assert response.status_code == 200
    assert embed(robust, dense_model, ["used first"]).status_code == 200
    time.sleep(6)  # past the window in which a model counts as possibly in flight
    assert embed(robust, cls_model, ["used last"]).status_code == 200
    third = httpx.post(
        robust.url + "/load_sentence_transformer_model",
        json={"model_name": HUB_TEST_ID},
        headers=AUTH,
        timeout=300,
    )
    assert third.status_code == 200, third.text
    assert f"Unloaded {dense_model}" in third.json()["message"]
    loaded = {m["model_name"] for m in httpx.get(robust.url + "/loaded_models").json()["models"]}
    assert loaded == {cls_model, HUB_TEST_ID}
    persisted = json.loads((robust.repository / ".loaded_models.json").read_text())
    assert {e["model_name"] for e in persisted} == {cls_model, HUB_TEST_ID}


def _api_processes(server: RunningServer) -> list[psutil.Process]:
    port = server.url.rsplit(":", 1)[1]
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "uvicorn" in " ".join(cmdline) and port in cmdline:
            return [proc, *proc.children(recursive=True)]
    raise AssertionError("API process not found")


def _rss(processes: list[psutil.Process]) -> int:
    return sum(p.memory_info().rss for p in processes if p.is_running())


def test_saturation_gives_correct_answers_or_fast_503s(robust, tiny_models):
    model = str(tiny_models.cls_no_normalize)
    texts = [f"client text number {i} " + "word " * (i % 13) for i in range(40)]
    reference = SentenceTransformer(model, device="cpu").encode(texts)
    processes = _api_processes(robust)

    async def client(http: httpx.AsyncClient, worker: int, until: float, seen: dict) -> None:
        k = worker
        while time.monotonic() < until:
            index = k % len(texts)
            k += 7
            started = time.monotonic()
            response = await http.post("/infer", json={"model_name": model, "text": [texts[index]]})
            elapsed = time.monotonic() - started
            if response.status_code == 200:
                got = np.array(response.json()["text_embeddings"][0], dtype=np.float32)
                want = reference[index]
                cosine = float(got @ want / (np.linalg.norm(got) * np.linalg.norm(want)))
                seen["wrong"] += cosine < 0.999
                seen["ok"] += 1
            elif response.status_code == 503:
                assert response.headers.get("Retry-After"), response.text
                seen["503"] += 1
                seen["503_detail"].add(response.json()["detail"].split(":")[0])
                seen["max_503_s"] = max(seen["max_503_s"], elapsed)
                await asyncio.sleep(0.05)
            else:
                seen["other"].append((response.status_code, response.text[:200]))

    async def run(duration_s: float) -> dict:
        seen = {"ok": 0, "503": 0, "wrong": 0, "other": [], "503_detail": set(), "max_503_s": 0.0}
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
        async with httpx.AsyncClient(base_url=robust.url, timeout=60, limits=limits) as http:
            until = time.monotonic() + duration_s
            await asyncio.gather(*(client(http, w, until, seen) for w in range(200)))
        return seen

    asyncio.run(run(3))  # warm up connections, caches and allocator pools
    memory_before = _rss(processes)
    seen = asyncio.run(run(30))
    memory_after = _rss(processes)
    report = {k: (sorted(v) if isinstance(v, set) else v) for k, v in seen.items()}
    (ARTIFACTS / "saturation.json").write_text(json.dumps(report, indent=2, default=str))
    assert seen["other"] == [], seen["other"][:5]
    assert seen["wrong"] == 0
    assert seen["ok"] > 100 and seen["503"] > 0, report
    # Both refusals reach the client as 503 + Retry-After: the API's in-flight limit and
    # Triton's own queue policy (max_queue_size 2 here).
    assert any("queue" in detail for detail in seen["503_detail"]), report
    assert any("overloaded" in detail for detail in seen["503_detail"]), report
    assert memory_after <= memory_before * 1.2, (memory_before, memory_after)


LOAD_SCRIPT = """
import asyncio, sys, time, httpx
url, model, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
async def client(http, stop):
    while time.monotonic() < stop:
        r = await http.post("/infer", json={"model_name": model, "text": ["busy " * 40]})
        if r.status_code == 503:
            await asyncio.sleep(0.05)
async def main():
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        stop = time.monotonic() + seconds
        await asyncio.gather(*(client(http, stop) for _ in range(32)))
asyncio.run(main())
"""


def test_health_is_fast_while_saturated(robust, tiny_models):
    """Load comes from another process, as it would in production; /health is probed here."""
    load = subprocess.Popen(
        [sys.executable, "-c", LOAD_SCRIPT, robust.url, str(tiny_models.cls_no_normalize), "10"]
    )
    latencies = []
    try:
        time.sleep(2)
        with httpx.Client(base_url=robust.url, timeout=10) as http:
            while load.poll() is None:
                started = time.monotonic()
                assert http.get("/health").status_code == 200
                latencies.append(time.monotonic() - started)
                time.sleep(0.1)
    finally:
        load.wait(timeout=60)
    assert len(latencies) > 30
    assert float(np.percentile(latencies, 95)) < 0.1, sorted(latencies)[-5:]


def _kill_tritonserver(server: RunningServer, sig: int = signal.SIGKILL) -> int:
    marker = f"--http-port={server.triton_http_port}"
    for proc in psutil.process_iter(["cmdline"]):
        if marker in (proc.info["cmdline"] or []):
            proc.send_signal(sig)
            return proc.pid
    raise AssertionError("no tritonserver process found")


def test_triton_crash_gives_fast_503s_and_recovers_with_models(robust, tiny_models):
    model = str(tiny_models.cls_no_normalize)
    assert embed(robust, model, ["before the crash"]).status_code == 200
    _kill_tritonserver(robust)
    time.sleep(0.3)
    saw_503 = saw_not_ready = False
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        started = time.monotonic()
        response = embed(robust, model, ["during the outage"])
        elapsed = time.monotonic() - started
        if response.status_code == 200:
            break
        assert response.status_code == 503, response.text
        assert elapsed < 1.0, elapsed
        if response.status_code == 503:
            saw_503 = True
            assert response.headers.get("Retry-After")
            # The outage can end between the two calls, so one 503 from /ready suffices.
            ready = httpx.get(robust.url + "/ready", timeout=5)
            saw_not_ready = saw_not_ready or ready.status_code == 503
        time.sleep(0.2)
    assert saw_503
    assert saw_not_ready, "/ready never reported the outage"
    assert response.status_code == 200, "traffic did not recover after Triton came back"
    wait_until(robust, "/ready", timeout_s=120)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _serves_within(server: RunningServer, model: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if embed(server, model, ["are you there"]).status_code == 200:
            return True
        time.sleep(0.2)
    return False


def _load_retrying(url: str, body: dict[str, str], timeout_s: float) -> httpx.Response:
    deadline = time.monotonic() + timeout_s
    while True:
        response = httpx.post(url, json=body, headers=AUTH, timeout=300)
        if response.status_code != 503 or time.monotonic() > deadline:
            return response
        time.sleep(float(response.headers.get("Retry-After", "1")))


def test_a_hung_triton_is_killed_and_restarted_with_its_models(robust, tiny_models):
    """A tritonserver alive but not answering (here: stopped) is replaced, not waited on."""
    model = str(tiny_models.cls_no_normalize)
    # Each of the two workers' watchers sees a restarted Triton on its own half-second
    # poll, so right after an earlier outage one worker may still refuse for a moment.
    assert _serves_within(robust, model, timeout_s=10), "the model is not served before the hang"
    hung = _kill_tritonserver(robust, signal.SIGSTOP)
    try:
        # Once the API's watcher has seen it stop answering (within ~2.5 s), requests are
        # refused at once rather than held until their deadline.
        time.sleep(3)
        started = time.monotonic()
        refused = embed(robust, model, ["during the hang"])
        assert refused.status_code == 503, refused.text
        assert time.monotonic() - started < 1.0
        deadline = time.monotonic() + 180
        recovered = False
        while time.monotonic() < deadline and not recovered:
            try:
                recovered = embed(robust, model, ["after the hang"]).status_code == 200
            except httpx.TimeoutException:
                pass
            time.sleep(1)
        assert recovered, "traffic did not recover after the hung Triton was replaced"
        assert _gone(hung), "the hung tritonserver is still there"
        assert "Triton has not answered for 5 s" in robust.log_path.read_text()
    finally:
        if psutil.pid_exists(hung):
            os.kill(hung, signal.SIGKILL)


def test_a_model_that_cannot_be_restored_is_reported_not_retried_forever(robust, tiny_models):
    """A model whose files broke while loaded: after a Triton restart its restore fails.
    Inference on it says so (500 with the reason), /ready names it, the other models
    serve, and loading it again once it is repaired clears the failure."""
    default, model = str(tiny_models.cls_no_normalize), str(tiny_models.mean_dense)
    body = {"model_name": model}
    load = robust.url + "/load_sentence_transformer_model"
    # Right after the previous test's Triton restart the loaded models may all be in use
    # or being restored (EMBED_MAX_LOADED_MODELS=2): a 503 with Retry-After says retry.
    assert _load_retrying(load, body, timeout_s=60).status_code == 200
    listed = httpx.get(robust.url + "/repository_models", headers=AUTH, timeout=30).json()
    folder = next(m for m in listed["models"] if m["model_name"] == model)["triton_models"]
    weights = robust.repository / folder["text"] / "1" / "model.onnx"
    intact = weights.read_bytes()
    weights.write_bytes(b"not an onnx model")
    try:
        _kill_tritonserver(robust)
        time.sleep(0.3)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            response = embed(robust, model, ["after the restart"])
            if response.status_code != 503:
                break
            time.sleep(0.3)
        assert response.status_code == 500, response.text
        detail = response.json()["detail"]
        assert detail.startswith(f"model_name: {model!r} could not be restored: "), detail
        assert detail.endswith("load it again") and "Traceback" not in detail
        assert str(robust.repository) not in detail
        assert embed(robust, default, ["still serving"]).status_code == 200
        ready = wait_until(robust, "/ready", timeout_s=120)
        assert model in ready.json()["message"]
    finally:
        weights.write_bytes(intact)
    # The default model was just used and the other one may be being restored by the
    # second worker: eviction may answer 503 with Retry-After for a moment.
    assert _load_retrying(load, body, timeout_s=60).status_code == 200
    assert embed(robust, model, ["repaired"]).status_code == 200
    assert httpx.get(robust.url + "/ready", timeout=30).json()["message"] == "ready"


def test_api_restart_restores_the_loaded_models(robust, tmp_path_factory, tiny_models):
    loaded_before = {
        m["model_name"] for m in httpx.get(robust.url + "/loaded_models").json()["models"]
    }
    assert loaded_before
    stop_server(robust)
    restarted = start_server(
        robust.repository, ARTIFACTS / "robust-restart.log", robust_env(tiny_models)
    )
    try:
        wait_until(restarted, "/ready", timeout_s=300)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            models = httpx.get(restarted.url + "/loaded_models").json()["models"]
            if {m["model_name"] for m in models} >= loaded_before:
                break
            time.sleep(1)
        assert {m["model_name"] for m in models} >= loaded_before
    finally:
        stop_server(restarted)


def test_fuzzing_the_openapi_schema_finds_no_server_errors(server):
    """schemathesis against the session server: no 5xx and no hang."""
    command = [
        str(Path(sys.executable).parent / "st"),
        "run",
        f"{server.url}/openapi.json",
        "--checks",
        "not_a_server_error",
        "--max-examples",
        "25",
        "--request-timeout",
        "60",
        "--phases",
        "examples,coverage,fuzzing",
        "--exclude-path-regex",
        "^/(delete_model|unload_model)$",
        "--suppress-health-check",
        "all",
        "--workers",
        "1",
    ]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=900, env={**os.environ, "NO_COLOR": "1"}
    )
    (ARTIFACTS / "schemathesis.txt").write_text(result.stdout + result.stderr)
    server_log = server.log_path.read_text(errors="replace").splitlines()
    supervisor_lines = [line for line in server_log if line.startswith("[serve]")]
    assert result.returncode == 0, "\n".join(
        [result.stdout[-4000:], "server log:", *supervisor_lines, *server_log[-60:]]
    )
