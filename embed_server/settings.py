"""The one place configuration comes from: environment variables prefixed ``EMBED_``.

Every module receives a :class:`Settings` instance instead of reading the environment
itself, so a test can build the whole server from one object and the README can list
every knob from this file.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def _split(value: object, sep: str) -> list[str]:
    if isinstance(value, str):
        return [part.strip() for part in value.split(sep) if part.strip()]
    return list(value)  # type: ignore[arg-type]


class Settings(BaseSettings):
    """Typed view of the ``EMBED_*`` environment."""

    model_config = SettingsConfigDict(env_prefix="EMBED_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = 8686
    workers: int = Field(default=1, ge=1)
    # A non-loopback EMBED_HOST without EMBED_API_KEY refuses to start unless this is set:
    # an exposed server with an open admin API must be a decision, not a default.
    allow_unauthenticated: bool = False

    model_repository: Path = Path("model_repository")
    default_models: Annotated[list[str], NoDecode] = Field(default_factory=lambda: [DEFAULT_MODEL])
    local_model_dirs: Annotated[list[Path], NoDecode] = Field(default_factory=list)

    triton_grpc_url: str = "127.0.0.1:8001"
    # Inference goes over Triton's HTTP endpoint; empty means the gRPC URL's host at
    # triton_http_port.
    triton_http_url: str = ""
    triton_http_port: int = 8000
    triton_grpc_port: int = 8001
    triton_metrics_port: int = 8002
    # Where Triton's HTTP, gRPC and metrics servers bind. Triton's repository API can load
    # code, so it stays on loopback unless an operator exposes it on purpose (a split
    # deployment); a non-loopback address then requires EMBED_TRITON_API_KEY.
    triton_host: str = "127.0.0.1"
    # With a key, every Triton API group but health needs it in a request header; the API
    # sends it on each call. Required when triton_host is not loopback.
    triton_api_key: SecretStr | None = None
    # Triton's Prometheus endpoint, merged into /metrics/prometheus; empty means
    # http://127.0.0.1:<triton_metrics_port>/metrics.
    triton_metrics_url: str = ""
    # "auto" picks Triton's native ONNX Runtime backend when the server has one (NGC image)
    # and the project's Python runner otherwise (the pip-installed server).
    triton_backend: Literal["auto", "onnxruntime", "python"] = "auto"
    triton_backends_dir: Path = Path("/opt/tritonserver/backends")
    # Triton runs at this lower CPU priority, so the API's light work (health checks,
    # parsing, refusals) is never starved by inference on a small machine.
    triton_nice: int = Field(default=5, ge=0, le=19)
    # A tritonserver that stops answering its liveness endpoint this long is killed and
    # restarted (0: never). A crash can leave it alive but hung: its own fatal-signal
    # handler was seen blocking forever on the corrupted heap it was reporting.
    triton_hang_timeout_s: float = Field(default=15.0, ge=0.0)

    max_batch_size: int = Field(default=64, ge=1)
    # 0: requests that queue while an instance is busy still form batches, and a lone
    # request never waits for company (measured: the best p50 at concurrency 1).
    max_queue_delay_us: int = Field(default=0, ge=0)
    # 0 = auto: two CPU instances (one per GPU): on 2 cores two instances measured 5-17%
    # more texts/s than one under load and the lower p50 at concurrency 1, since one
    # instance's IPC and Python work overlaps the other's ONNX Runtime run.
    instance_count: int = Field(default=0, ge=0)
    instance_kind: Literal["auto", "cpu", "gpu"] = "auto"
    ort_intra_op_threads: int = Field(default=0, ge=0)
    # The runner serves a lone text from a second ONNX Runtime session whose threads spin
    # while it runs: about 1 ms less at concurrency 1, for a second copy of the weights.
    ort_single_text_spinning: bool = True
    # Share of real tokens the runner demands of each sub-batch it runs; below it a
    # dynamic batch is split by length instead of being padded to its longest text.
    padding_efficiency: float = Field(default=0.9, gt=0.0, le=1.0)
    # Length buckets for the native backend, which cannot take ragged batches.
    pad_to_multiple_of: int = Field(default=16, ge=1)
    warmup: bool = True

    # Image inputs (CLIP models).
    allow_private_urls: bool = False
    image_connect_timeout_s: float = Field(default=5.0, gt=0)
    image_read_timeout_s: float = Field(default=15.0, gt=0)
    image_total_timeout_s: float = Field(default=30.0, gt=0)
    image_max_bytes: int = Field(default=20 * 1024 * 1024, ge=1)
    image_max_redirects: int = Field(default=3, ge=0)
    image_max_pixels: int = Field(default=40_000_000, ge=1)
    max_images_per_request: int = Field(default=64, ge=1)
    # Connections one request may hold at once, so a request of many slow URLs cannot
    # take the whole shared pool (image_fetch_pool_size) from everyone else.
    image_fetches_per_request: int = Field(default=8, ge=1)
    image_fetch_pool_size: int = Field(default=64, ge=1)
    image_decode_workers: int = Field(default=2, ge=1)

    # Overload protection and request limits.
    max_inflight: int = Field(default=512, ge=1)
    request_timeout_s: float = Field(default=30.0, gt=0)
    triton_max_queue_size: int = Field(default=512, ge=0)
    max_items_per_request: int = Field(default=512, ge=1)
    max_text_chars: int = Field(default=50_000, ge=1)
    # Threads that tokenise texts too long to tokenise on the event loop (shared by all
    # requests; each request runs one chunk at a time there).
    tokenize_workers: int = Field(default=2, ge=1)
    max_body_bytes: int = Field(default=32 * 1024 * 1024, ge=1)
    max_loaded_models: int = Field(default=0, ge=0)

    # Access control: a bearer key for model management, optionally for inference too.
    api_key: SecretStr | None = None
    api_key_infer: bool = False

    conversion_timeout_s: float = Field(default=1800.0, gt=0)
    # Conversions running at once across all workers (each is a torch process of GBs);
    # one more is refused with 429 and Retry-After.
    max_conversions: int = Field(default=2, ge=1)
    # A Hub model whose files add up to more than this is refused before downloading.
    max_download_bytes: int = Field(default=10 * 1024**3, ge=1)
    # One JSON object per log line instead of plain text.
    log_json: bool = False
    # Bounds the API's status and unload calls to Triton. Inference calls get what remains
    # of the request's own deadline (request_timeout_s) instead, as Triton's queue timeout.
    triton_timeout_s: float = Field(default=60.0, gt=0)

    @field_validator("default_models", mode="before")
    @classmethod
    def _comma_list(cls, value: object) -> list[str]:
        return _split(value, ",")

    @field_validator("local_model_dirs", mode="before")
    @classmethod
    def _colon_list(cls, value: object) -> list[str]:
        return _split(value, ":")

    def resolved_backend(self) -> Literal["onnxruntime", "python"]:
        """The backend generated configs name, after resolving ``auto``."""
        if self.triton_backend != "auto":
            return self.triton_backend
        native = self.triton_backends_dir / "onnxruntime"
        return "onnxruntime" if native.is_dir() else "python"

    def resolved_triton_http_url(self) -> str:
        host = self.triton_grpc_url.rsplit(":", 1)[0] or "127.0.0.1"
        return self.triton_http_url or f"http://{host}:{self.triton_http_port}"

    def triton_connect_host(self) -> str:
        """Where this machine reaches the Triton it starts, written for a URL: a wildcard
        bind is reached on loopback."""
        host = self.triton_host
        if host in ("0.0.0.0", "::", ""):
            return "127.0.0.1"
        return f"[{host}]" if ":" in host else host

    def resolved_triton_metrics_url(self) -> str:
        return self.triton_metrics_url or (
            f"http://{self.triton_connect_host()}:{self.triton_metrics_port}/metrics"
        )

    def resolved_instance_count(self) -> int:
        if self.instance_count:
            return self.instance_count
        return 1 if self.resolved_instance_kind() == "gpu" else 2

    def resolved_instance_kind(self) -> Literal["cpu", "gpu"]:
        if self.instance_kind != "auto":
            return self.instance_kind
        return "gpu" if Path("/dev/nvidia0").exists() else "cpu"


@lru_cache
def get_settings() -> Settings:
    return Settings()
