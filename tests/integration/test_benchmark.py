"""benchmark.py's dynamic-batching scenario against the real Triton: batching must pay."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import PROJECT_ROOT

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
