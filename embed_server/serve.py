"""``make serve``: run Triton and the API together and stop both cleanly.

Triton runs through ``run_triton_server_dev.sh`` (the README's way) in its own process
group, so stopping it also stops the Python backend stubs it spawned. If Triton dies it
is started again with back-off; the API itself keeps answering (503) meanwhile.

Nothing starts when the settings would expose the API or Triton without a key
(:mod:`embed_server.exposure`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from embed_server.exposure import UnsafeExposure, check_exposure
from embed_server.settings import Settings

PROJECT_ROOT = Path(__file__).resolve().parent.parent
_STOP_GRACE_S = 20.0


def _log(message: str) -> None:
    print(f"[serve] {message}", flush=True)


def _triton_live(host: str, port: int) -> bool:
    """Triton's health API, which stays open when its other APIs demand a key."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/v2/health/live", timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


def _stop_group(process: subprocess.Popen[bytes], name: str) -> None:
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        process.wait(timeout=_STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        _log(f"{name} did not stop in {_STOP_GRACE_S:.0f} s; killing it")
        _kill_group(process)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


class HangWatch:
    """Tells a hung Triton (alive, not answering) from a busy one: probes every
    ``_PROBE_EVERY_S`` and reports a hang only after ``timeout_s`` without one answer."""

    _PROBE_EVERY_S = 2.0

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.reset()

    def reset(self) -> None:
        self._last_answer = self._last_probe = time.monotonic()

    def hung(self, host: str, port: int) -> bool:
        now = time.monotonic()
        if not self.timeout_s or now - self._last_probe < self._PROBE_EVERY_S:
            return False
        self._last_probe = now
        if _triton_live(host, port):
            self._last_answer = now
            return False
        if now - self._last_answer >= self.timeout_s:
            self.reset()
            return True
        return False


class Supervisor:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.triton: subprocess.Popen[bytes] | None = None
        self.api: subprocess.Popen[bytes] | None = None
        self.stopping = False
        self.triton_address = settings.triton_connect_host()

    def start_triton(self) -> None:
        env = dict(os.environ)
        env.update(
            MODEL_REPOSITORY=str(self.settings.model_repository.resolve()),
            TRITON_HOST=self.settings.triton_host,
            TRITON_HTTP_PORT=str(self.settings.triton_http_port),
            TRITON_GRPC_PORT=str(self.settings.triton_grpc_port),
            TRITON_METRICS_PORT=str(self.settings.triton_metrics_port),
            PYTHON=sys.executable,
        )
        self.triton = subprocess.Popen(
            ["bash", str(PROJECT_ROOT / "run_triton_server_dev.sh")],
            env=env,
            start_new_session=True,
        )

    def start_api(self) -> None:
        env = dict(os.environ)
        env.setdefault(
            "EMBED_TRITON_GRPC_URL", f"{self.triton_address}:{self.settings.triton_grpc_port}"
        )
        if self.settings.workers > 1 and "PROMETHEUS_MULTIPROC_DIR" not in env:
            # Each worker counts in its own files here; a scrape of any worker sums them.
            env["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="embed-prometheus-")
        self.api = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "app:app",
                "--host",
                self.settings.host,
                "--port",
                str(self.settings.port),
                "--workers",
                str(self.settings.workers),
                "--no-access-log",
            ],
            cwd=PROJECT_ROOT,
            env=env,
            start_new_session=True,
        )

    def wait_for_triton(self, timeout_s: float = 120.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self.stopping:
            if self.triton is not None and self.triton.poll() is not None:
                return False
            if _triton_live(self.triton_address, self.settings.triton_http_port):
                return True
            time.sleep(0.3)
        return False

    def stop(self, *_: object) -> None:
        self.stopping = True

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        self.start_triton()
        if not self.wait_for_triton():
            _log("Triton did not start; see its log above")
            self.shutdown()
            return 1
        self.start_api()
        _log(
            f"API listening on http://{self.settings.host}:{self.settings.port} (Triton HTTP "
            f":{self.settings.triton_http_port}, gRPC :{self.settings.triton_grpc_port})"
        )
        backoff = 1.0
        watch = HangWatch(self.settings.triton_hang_timeout_s)
        while not self.stopping:
            time.sleep(0.2)
            if self.api is not None and self.api.poll() is not None:
                _log(f"API exited with status {self.api.returncode}; stopping")
                break
            if self.triton is not None and watch.hung(
                self.triton_address, self.settings.triton_http_port
            ):
                _log(
                    f"Triton has not answered for {watch.timeout_s:.0f} s; killing it "
                    "(process group) to restart it"
                )
                _kill_group(self.triton)
            if self.triton is not None and self.triton.poll() is not None and not self.stopping:
                _log(
                    f"Triton exited with status {self.triton.returncode}; "
                    f"restarting in {backoff:.0f} s"
                )
                time.sleep(backoff)
                backoff = min(backoff * 2, 30.0)
                self.start_triton()
                if self.wait_for_triton():
                    backoff = 1.0
                watch.reset()
        self.shutdown()
        return 0

    def shutdown(self) -> None:
        _log("stopping")
        if self.api is not None:
            _stop_group(self.api, "API")
        if self.triton is not None:
            _stop_group(self.triton, "Triton")
        _log("stopped")


def main() -> int:
    settings = Settings()
    try:
        check_exposure(settings)
    except UnsafeExposure as error:
        print(f"[serve] refusing to start: {error}", file=sys.stderr, flush=True)
        return 2
    return Supervisor(settings).run()
