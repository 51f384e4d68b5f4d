"""The converter checks its source before importing torch, and bounds Hub downloads.

The converter runs as the API runs it (``python -m converters`` in a child process); the
Hugging Face Hub is played by a real HTTP server on 127.0.0.1 (``HF_ENDPOINT``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from converters.sources import files_to_download

ROOT = Path(__file__).resolve().parents[2]
# Importing torch alone takes 3-5 s on the development machine; refusing takes well under.
FAST_S = 2.5


def run_converter(kind: str, *args: str, env: dict[str, str]) -> tuple[dict, float]:
    """Run the converter; returns its last JSON line and how long it took."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "converters", kind, "--triton-models", '{"text": "t"}', *args],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    elapsed = time.perf_counter() - started
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return lines[-1], elapsed


@pytest.fixture
def hf_env(tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    return {**env, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1"}


@pytest.mark.parametrize(
    ("kind", "args"),
    [
        ("sentence_transformer", ["--model-name", "org/missing"]),
        ("sentence_transformer", ["--model-name", "/nowhere/model"]),
        ("clip", ["--model-name", "NoSuchArchitecture", "--pretrained", "x"]),
        ("clip", ["--model-name", "ViT-B-32", "--pretrained", "/nowhere/weights.pt"]),
        ("clip", ["--model-name", "hf-hub:org/missing"]),
    ],
)
def test_a_missing_source_is_refused_before_torch_is_imported(tmp_path, hf_env, kind, args):
    """Before, the converter imported torch and open_clip first: 11-15 s to say not found."""
    message, elapsed = run_converter(
        kind, *args, "--out", str(tmp_path / "out"), env={**hf_env, "HF_HUB_OFFLINE": "1"}
    )
    assert message["reason"] == "not_found", message
    assert elapsed < FAST_S, f"took {elapsed:.1f} s"


def test_checking_sources_imports_neither_torch_nor_open_clip():
    check = (
        "import sys\n"
        "from converters.sources import (DEFAULT_MODEL, SourceNotFound, check_clip_source,\n"
        "    resolve_sentence_transformer)\n"
        "check_clip_source('ViT-B-32', None)\n"
        "assert resolve_sentence_transformer(DEFAULT_MODEL, 1).is_dir()\n"
        "for name in ('NoSuchArchitecture', 'hf-hub:org/missing'):\n"
        "    try:\n"
        "        check_clip_source(name, None)\n"
        "    except SourceNotFound:\n"
        "        pass\n"
        "    else:\n"
        "        raise AssertionError(name)\n"
        "heavy = {'torch', 'open_clip', 'sentence_transformers', 'transformers'}\n"
        "assert not heavy & set(sys.modules), heavy & set(sys.modules)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", check], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_only_files_a_sentence_transformer_loads_are_downloaded():
    names = [
        "config.json",
        "modules.json",
        "tokenizer.json",
        "1_Pooling/config.json",
        "model.safetensors",
        "pytorch_model.bin",
        "2_Dense/pytorch_model.bin",
        "tf_model.h5",
        "flax_model.msgpack",
        "rust_model.ot",
        "model.onnx",
        "onnx/model_quantized.onnx",
        "openvino/openvino_model.bin",
        "model.gguf",
    ]
    assert files_to_download(names) == [
        "config.json",
        "modules.json",
        "tokenizer.json",
        "1_Pooling/config.json",
        "model.safetensors",
        "2_Dense/pytorch_model.bin",  # no safetensors in that folder: the .bin is the weights
    ]


class FakeHub:
    """The Hub API for repository ``org/model``: its metadata, its file listing, and the
    files in ``contents``, resumable with Range (a body shorter than the size listed breaks
    off there on every attempt, as a dropped connection does). Records every request."""

    def __init__(self, sizes: dict[str, int], contents: dict[str, bytes]) -> None:
        self.requests: list[str] = []
        sha = "a" * 40
        siblings = [{"rfilename": name, "size": size} for name, size in sizes.items()]
        tree = [{"type": "file", "oid": "0" * 40, "path": n, "size": s} for n, s in sizes.items()]
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _send(self, status: int, body: bytes, length: int, **headers: str) -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(length))
                for key, value in headers.items():
                    self.send_header(key.replace("_", "-"), value)
                self.end_headers()
                if self.command == "GET":
                    self.wfile.write(body)
                if len(body) < length:
                    self.close_connection = True

            def _answer(self) -> None:
                hub.requests.append(f"{self.command} {self.path}")
                path = self.path.split("?")[0]
                if path.startswith("/api/models/org/model/tree/"):
                    return self._send(200, json.dumps(tree).encode(), len(json.dumps(tree)))
                if path.startswith("/api/models/org/model"):
                    info = json.dumps({"id": "org/model", "sha": sha, "siblings": siblings})
                    return self._send(200, info.encode(), len(info))
                name = path.removeprefix(f"/org/model/resolve/{sha}/")
                if name in contents:
                    headers = {"X_Repo_Commit": sha, "ETag": f'"{name}-etag"'}
                    start = int(self.headers.get("Range", "bytes=0-")[6:].split("-")[0])
                    if start:
                        headers["Content_Range"] = f"bytes {start}-{sizes[name] - 1}/{sizes[name]}"
                    body = contents[name][start:]
                    return self._send(206 if start else 200, body, sizes[name] - start, **headers)
                return self._send(404, b"not here", 8)

            def do_GET(self) -> None:
                self._answer()

            def do_HEAD(self) -> None:
                self._answer()

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture
def huge_hub() -> Iterator[FakeHub]:
    gib = 1024**3
    sizes = {
        "config.json": 700,
        "modules.json": 300,
        "model.safetensors": 3 * gib,
        "pytorch_model.bin": 3 * gib,
        "tf_model.h5": 3 * gib,
        "onnx/model.onnx": 3 * gib,
    }
    hub = FakeHub(sizes, contents={})
    yield hub
    hub.close()


def test_a_hub_model_over_the_download_limit_is_refused_before_downloading(
    tmp_path, hf_env, huge_hub
):
    """Before, the whole snapshot (12 GiB here) was downloaded with no limit."""
    message, elapsed = run_converter(
        "sentence_transformer",
        "--model-name",
        "org/model",
        "--out",
        str(tmp_path / "out"),
        "--options",
        json.dumps({"max_download_bytes": 2 * 1024**3}),
        env={**hf_env, "HF_ENDPOINT": huge_hub.url},
    )
    assert message["reason"] == "too_large"
    assert "3,221,226,472 bytes" in message["error"]  # the selected files: 3 GiB + 1000 bytes
    assert "EMBED_MAX_DOWNLOAD_BYTES" in message["error"]
    assert not [r for r in huge_hub.requests if "/resolve/" in r], huge_hub.requests
    assert elapsed < FAST_S, f"took {elapsed:.1f} s"
    assert not list((tmp_path / "hf").rglob("*.incomplete"))


def test_a_failed_download_leaves_no_partial_file_in_the_cache(tmp_path, hf_env):
    """huggingface_hub removes its own partial file when a download fails, but not one of
    an earlier conversion that was killed mid-download (timeout, crash): that one stayed
    in the cache for good, since each attempt writes under a new name."""
    blobs = tmp_path / "hf" / "hub" / "models--org--model" / "blobs"
    blobs.mkdir(parents=True)
    (blobs / "0123abcd.5f5f5f5f.incomplete").write_bytes(b"x" * 1000)
    contents = {"config.json": b"{}", "model.safetensors": b"x" * 50_000}
    hub = FakeHub({"config.json": 2, "model.safetensors": 100_000}, contents)
    try:
        message, _ = run_converter(
            "sentence_transformer",
            "--model-name",
            "org/model",
            "--out",
            str(tmp_path / "out"),
            env={**hf_env, "HF_ENDPOINT": hub.url},
        )
    finally:
        hub.close()
    assert message["reason"] == "not_found"
    assert "could not be downloaded" in message["error"]
    assert any("/resolve/" in r for r in hub.requests)  # the download was attempted
    assert not list((tmp_path / "hf").rglob("*.incomplete"))


def test_a_selective_download_is_found_in_the_cache_offline_afterwards(tmp_path, hf_env):
    """The cache checks a snapshot against the repository's full file listing: asked for
    everything, it would call the snapshot incomplete (the skipped formats are missing)."""
    contents = {"config.json": b"{}", "model.safetensors": b"w" * 10, "tf_model.h5": b"h" * 10}
    hub = FakeHub({name: len(body) for name, body in contents.items()}, contents)
    resolve = (
        "from converters.sources import resolve_sentence_transformer\n"
        "path = resolve_sentence_transformer('org/model', 1000)\n"
        "print(sorted(p.name for p in path.iterdir()))\n"
    )

    def run(**env: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", resolve],
            cwd=ROOT,
            env={**hf_env, "PYTHONPATH": str(ROOT), **env},
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    try:
        downloaded = run(HF_ENDPOINT=hub.url)
    finally:
        hub.close()
    assert downloaded == "['config.json', 'model.safetensors']"
    assert run(HF_HUB_OFFLINE="1") == downloaded
