"""The CLI run as a subprocess against the real server, and the load-job API it polls."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import DEFAULT_MODEL, PROJECT_ROOT

pytestmark = pytest.mark.integration


def cli(server, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "embed_server", args[0], "--url", server.url, *args[1:]],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def cli_model(tiny_models) -> str:
    """A private copy of a tiny model, so this module's unload and delete touch nobody else."""
    target = tiny_models.root / "cli-dense"
    shutil.copytree(tiny_models.mean_dense, target)
    return str(target)


def conversions(client) -> float:
    text = client.get("/metrics/prometheus").text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "embed_conversion_duration_seconds_count"
        and sample.labels == {"kind": "sentence_transformer", "outcome": "converted"}
    )


def test_load_shows_every_stage_and_the_model_serves(server, client, cli_model):
    converted_before = conversions(client)
    result = cli(server, "load", cli_model, "--poll", "0.1")
    assert result.returncode == 0, result.stderr
    assert "loaded" in result.stdout
    progress = result.stderr.splitlines()
    for step, stage in enumerate(("download", "export", "verify", "load"), start=1):
        assert any(line.endswith(f"{step}/4 {stage}") for line in progress), result.stderr
    assert progress[-1] == "[" + "#" * 24 + "] 4/4 done"
    assert conversions(client) == converted_before + 1

    models = cli(server, "models")
    assert models.returncode == 0 and cli_model in models.stdout


def test_infer_prints_the_embeddings(server, reference_default):
    result = cli(server, "infer", DEFAULT_MODEL, "A man is eating food.", "Ok")
    assert result.returncode == 0, result.stderr
    got = np.array(json.loads(result.stdout)["text_embeddings"], dtype=np.float32)
    want = reference_default.encode(["A man is eating food.", "Ok"])
    np.testing.assert_allclose(got, want, atol=2e-4)


def test_unload_then_delete(server, cli_model):
    assert cli(server, "load", cli_model).returncode == 0
    unloaded = cli(server, "unload", cli_model)
    assert unloaded.returncode == 0, unloaded.stderr
    assert cli_model not in cli(server, "models").stdout
    on_disk = cli(server, "models", "--all").stdout
    assert any(cli_model in line and "on disk" in line for line in on_disk.splitlines())
    deleted = cli(server, "delete", cli_model)
    assert deleted.returncode == 0, deleted.stderr
    assert cli_model not in cli(server, "models", "--all").stdout


def test_failures_are_one_line_on_stderr_and_status_1(server, tiny_models):
    missing = cli(server, "infer", "nobody/no-such-model", "x")
    assert missing.returncode == 1
    assert missing.stderr.startswith("error: HTTP 404: model_name:")
    broken = cli(server, "load", str(tiny_models.broken), "--poll", "0.2")
    assert broken.returncode == 1
    assert "error: model_name: could not convert" in broken.stderr
    unreachable = subprocess.run(
        [sys.executable, "-m", "embed_server", "models", "--url", "http://127.0.0.1:9"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert unreachable.returncode == 1 and "cannot reach" in unreachable.stderr


def test_bench_reports_a_request_rate(server):
    if (PROJECT_ROOT / "benchmark.py").is_file():
        result = cli(server, "bench", "--help")
        assert result.returncode == 0
        return
    result = cli(server, "bench", "--duration", "1", "--concurrency", "1", timeout=120)
    assert result.returncode == 0, result.stderr
    assert " req/s" in result.stdout
    rate = float(result.stdout.split(" req/s")[0].split()[-1])
    assert rate > 0


def test_job_api_reports_status_and_errors(server):
    with httpx.Client(base_url=server.url, timeout=60) as http:
        started = http.post("/jobs/load", json={"model_name": DEFAULT_MODEL})
        assert started.status_code == 202
        job = started.json()
        assert job["status"] in ("queued", "running", "succeeded")
        assert job["stages"] == ["download", "export", "verify", "load"]
        for _ in range(100):
            job = http.get(f"/jobs/{job['id']}").json()
            if job["status"] not in ("queued", "running"):
                break
            time.sleep(0.1)
        assert job["status"] == "succeeded"
        assert job["message"] == f"Model {DEFAULT_MODEL} is already loaded."
        assert http.get("/jobs/0123456789abcdef0123456789abcdef").status_code == 404
        assert http.get("/jobs/..%2F..%2Fetc").status_code == 404
        refused = http.post("/jobs/load", json={"model_name": "../../etc"})
        assert refused.status_code == 400
        assert refused.json()["detail"].startswith("model_name:")
