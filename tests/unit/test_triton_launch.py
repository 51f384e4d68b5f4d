"""How Triton is started (its addresses and restricted APIs) and the key the API sends it."""

import asyncio
import subprocess
from pathlib import Path

import numpy as np
import pytest

from embed_server.exposure import UnsafeExposure
from embed_server.triton import TritonGateway
from embed_server.triton_access import GRPC_HEADER, HTTP_HEADER, RESTRICTED_GROUPS
from embed_server.triton_launcher import triton_launch
from tests.unit.test_triton_http import StandIn, triton_reply

PROJECT_ROOT = Path(__file__).resolve().parents[2]
GROUPS = ",".join(RESTRICTED_GROUPS)


def flags(argv: list[str], prefix: str) -> list[str]:
    return [arg for arg in argv if arg.startswith(prefix)]


def test_by_default_triton_listens_on_loopback_and_restricts_nothing(tmp_path):
    argv = triton_launch(tmp_path, tmp_path).argv
    assert flags(argv, "--http-address") == ["--http-address=127.0.0.1"]
    assert flags(argv, "--grpc-address") == ["--grpc-address=127.0.0.1"]
    assert flags(argv, "--metrics-address") == ["--metrics-address=127.0.0.1"]
    assert flags(argv, "--http-restricted-api") == flags(argv, "--grpc-restricted-protocol") == []


def test_with_a_key_every_api_but_health_demands_it(tmp_path):
    argv = triton_launch(tmp_path, tmp_path, host="0.0.0.0", api_key="s3cret").argv
    assert flags(argv, "--http-address") == ["--http-address=0.0.0.0"]
    rule = f"{GROUPS}:{HTTP_HEADER}=s3cret"
    assert flags(argv, "--http-restricted-api") == [f"--http-restricted-api={rule}"]
    assert flags(argv, "--grpc-restricted-protocol") == [f"--grpc-restricted-protocol={rule}"]
    assert "health" not in RESTRICTED_GROUPS
    assert {"model-repository", "model-config", "inference"} <= set(RESTRICTED_GROUPS)


def test_an_exposed_triton_without_a_key_is_refused(tmp_path):
    with pytest.raises(UnsafeExposure, match="EMBED_TRITON_API_KEY"):
        triton_launch(tmp_path, tmp_path, host="0.0.0.0")


def test_the_dev_script_refuses_an_exposed_triton_without_a_key(tmp_path):
    result = subprocess.run(
        ["bash", str(PROJECT_ROOT / "run_triton_server_dev.sh")],
        env={
            "PATH": "/usr/bin:/bin",
            "TRITON_NO_DOCKER": "1",
            "TRITON_HOST": "0.0.0.0",
            "MODEL_REPOSITORY": str(tmp_path),
            "PYTHON": str(PROJECT_ROOT / ".venv" / "bin" / "python"),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "EMBED_TRITON_API_KEY" in result.stderr


def test_the_gateway_sends_the_key_with_each_inference():
    reply = triton_reply({"embedding": np.ones((1, 3), np.float32)})

    async def run() -> dict[str, str]:
        async with StandIn(lambda _: reply) as triton:
            url = f"http://127.0.0.1:{triton.port}"
            gateway = TritonGateway("127.0.0.1:1", url, 5.0, api_key="s3cret")
            try:
                inputs = {"input_ids": np.ones((1, 2), np.int64)}
                await gateway.infer("m", inputs, ["embedding"], timeout_s=5.0)
            finally:
                await gateway.close()
            return triton.requests[0][0]

    assert asyncio.run(run())[HTTP_HEADER] == "s3cret"
    assert GRPC_HEADER == f"triton-grpc-protocol-{HTTP_HEADER}"  # the prefix Triton expects
