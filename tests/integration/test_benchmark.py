"""benchmark.py's dynamic-batching scenario against the real Triton: batching must pay."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import CLIP_ARCH, PROJECT_ROOT

pytestmark = pytest.mark.integration


def test_dynamic_batching_multiplies_throughput(server, tmp_path):
    command = [
        sys.executable,
        str(PROJECT_ROOT / "benchmark.py"),
        "--scenario",
        "batching",
        "--duration",
        "4",
        "--clients",
        "200",
        "--model-repository",
        str(server.repository),
        "--triton-http",
        f"http://127.0.0.1:{server.triton_http_port}",
        "--triton-grpc",
        f"127.0.0.1:{server.triton_grpc_port}",
        "--output",
        str(tmp_path),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "batching.json").read_text())
    assert report["without_batching"] < 15  # one 100 ms batch at a time: ~10 requests/s
    assert report["speedup"] >= 4, report
    assert "instances needed" in result.stdout


def test_text_sweep_reports_every_point_against_the_in_process_limit(server, tmp_path):
    command = [
        sys.executable,
        str(PROJECT_ROOT / "benchmark.py"),
        "--url",
        server.url,
        "--concurrency",
        "1",
        "4",
        "--texts-per-request",
        "8",
        "--duration",
        "1.5",
        "--warmup",
        "0.5",
        "--limit-seconds",
        "0.5",
        "--model-repository",
        str(server.repository),
        "--output",
        str(tmp_path),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "benchmark-text.json").read_text())
    assert [p["concurrency"] for p in report["points"]] == [1, 4]
    for point in report["points"]:
        assert point["items_per_s"] > 0 and not point["errors"]
        assert point["triton"]["mean_executed_batch"] >= 1
        assert point["triton"]["padding_efficiency"] >= 0.9
    limit = report["limit"]
    assert len(limit["runs"]) == 2
    assert limit["texts_per_s"] == max(limit["by_batch_size"].values()) > 0
    assert limit["batch1_latency_ms_p50"] == min(r["batch1_latency_ms_p50"] for r in limit["runs"])
    assert "In-process ONNX Runtime limit" in result.stdout
    assert (tmp_path / "benchmark-text.png").stat().st_size > 0


def test_image_sweep_fetches_generated_images_from_a_local_http_server(
    server, clip_checkpoint, tmp_path
):
    command = [
        sys.executable,
        str(PROJECT_ROOT / "benchmark.py"),
        "--url",
        server.url,
        "--mode",
        "images",
        "--clip-model",
        CLIP_ARCH,
        "--clip-pretrained",
        str(clip_checkpoint),
        "--concurrency",
        "2",
        "--images-per-request",
        "2",
        "--duration",
        "1.5",
        "--warmup",
        "0.5",
        "--output",
        str(tmp_path),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "benchmark-images.json").read_text())
    [point] = report["points"]
    assert point["items_per_request"] == 2 and point["items_per_s"] > 0
    assert not point["errors"]
    assert point["triton"]["mean_executed_batch"] >= 2
    assert (tmp_path / "benchmark-images.png").stat().st_size > 0
