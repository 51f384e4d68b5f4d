"""`make serve` (python -m embed_server serve) starts Triton and the API and stops both."""

from __future__ import annotations

import signal
import subprocess

import httpx
import pytest

from tests.conftest import ARTIFACTS, start_server, stop_server, wait_until

pytestmark = pytest.mark.integration


def processes_mentioning(text: str) -> list[str]:
    listing = subprocess.run(
        ["ps", "-eww", "-o", "pid,args"], capture_output=True, text=True
    ).stdout
    return [line for line in listing.splitlines() if text in line and "ps -eww" not in line]


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_serve_stops_triton_and_stubs_cleanly(tmp_path, tiny_models, stop_signal):
    repository = tmp_path / f"repo-{stop_signal.name}"
    server = start_server(
        repository,
        ARTIFACTS / f"serve-{stop_signal.name}.log",
        {
            "EMBED_DEFAULT_MODELS": str(tiny_models.mean_dense),
            "EMBED_LOCAL_MODEL_DIRS": str(tiny_models.root),
        },
    )
    try:
        wait_until(server, "/ready", timeout_s=300)
        response = httpx.post(
            server.url + "/infer",
            json={"model_name": str(tiny_models.mean_dense), "text": ["hello"]},
            timeout=60,
        )
        assert response.status_code == 200
        assert "listening on http://" in server.log_path.read_text()
        assert processes_mentioning(str(repository)), "Triton should be running"
    finally:
        code = stop_server(server, stop_signal)
    assert code == 0
    assert processes_mentioning(str(repository)) == []
