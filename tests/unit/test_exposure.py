"""A server others can reach does not start without a key: the check, every way of
starting the API, and the Docker image."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from embed_server.api.app import create_app
from embed_server.exposure import UnsafeExposure, check_api_exposure, is_loopback
from embed_server.settings import Settings
from tests.conftest import free_port

PROJECT_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost"])
def test_loopback_addresses(host):
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "example.org", "", "127.0.0.1x"])
def test_everything_else_counts_as_exposed(host):
    assert not is_loopback(host)


def test_a_public_bind_without_a_key_is_refused_naming_the_way_out():
    with pytest.raises(UnsafeExposure) as refused:
        check_api_exposure(Settings(host="0.0.0.0"))
    assert "EMBED_API_KEY" in str(refused.value)
    assert "EMBED_ALLOW_UNAUTHENTICATED=true" in str(refused.value)
    with pytest.raises(UnsafeExposure):
        check_api_exposure(Settings(host="0.0.0.0", api_key=""))  # an empty key protects nothing


def test_a_key_a_loopback_bind_or_the_explicit_opt_out_may_start():
    check_api_exposure(Settings(host="0.0.0.0", api_key="k"))
    check_api_exposure(Settings(host="0.0.0.0", allow_unauthenticated=True))
    check_api_exposure(Settings(host="127.0.0.1"))


def test_create_app_refuses_too_so_uvicorn_app_app_cannot_skip_the_check():
    with pytest.raises(UnsafeExposure, match="EMBED_API_KEY"):
        create_app(Settings(host="0.0.0.0"))


def test_serve_refuses_a_public_bind_without_a_key_before_starting_triton(tmp_path):
    # Free ports, should the check fail and a server start after all.
    ports = (
        "EMBED_PORT",
        "EMBED_TRITON_HTTP_PORT",
        "EMBED_TRITON_GRPC_PORT",
        "EMBED_TRITON_METRICS_PORT",
    )
    env = {
        **os.environ,
        **{name: str(free_port()) for name in ports},
        "EMBED_HOST": "0.0.0.0",
        "EMBED_MODEL_REPOSITORY": str(tmp_path / "repository"),
        "TRITON_NO_DOCKER": "1",
    }
    for name in ("EMBED_API_KEY", "EMBED_ALLOW_UNAUTHENTICATED"):
        env.pop(name, None)
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "embed_server", "serve"],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:  # it started: stop it and what it started, as serve does
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
    assert process.returncode != 0
    assert time.monotonic() - started < 30
    assert "EMBED_API_KEY" in err and "EMBED_ALLOW_UNAUTHENTICATED=true" in err
    assert "Triton" not in out  # nothing was started
    assert not (tmp_path / "repository").exists()


def test_the_docker_image_publishes_only_the_api_and_never_runs_it_open():
    dockerfile = (PROJECT_ROOT / "Dockerfile").read_text()
    instructions = re.sub(r"\\\n", " ", dockerfile)
    exposed = [line.split()[1:] for line in instructions.splitlines() if line.startswith("EXPOSE")]
    assert exposed == [["8686"]]
    assert "ALLOW_UNAUTHENTICATED" not in instructions
    env_line = next(line for line in instructions.splitlines() if line.startswith("ENV "))
    assert "EMBED_HOST=0.0.0.0" in env_line  # hence the key is required to start
    assert "EMBED_API_KEY=" not in env_line  # and no key is baked into the image
    triton_host = re.search(r"EMBED_TRITON_HOST=(\S+)", env_line)
    assert triton_host is None or is_loopback(triton_host.group(1))
