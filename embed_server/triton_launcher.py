"""Start a real Triton server from the binary bundled in the ``nvidia-pytriton`` wheel.

The wheel ships ``tritonserver`` and the Python backend but no ONNX Runtime backend, so we
assemble a backend directory holding the Python backend plus the project's one shared
ONNX Runtime runner (``embed_server/runner/model.py``) as a Python-based backend.

``python -m embed_server.triton_launcher`` replaces itself with ``tritonserver`` (exec), so
whoever started it can signal the server directly.
"""

from __future__ import annotations

import argparse
import filecmp
import importlib.util
import os
import shutil
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from embed_server.exposure import UnsafeExposure, check_triton_exposure, key_value
from embed_server.settings import Settings
from embed_server.triton_access import bind_args, restriction_args

RUNNER_BACKEND_NAME = "onnxruntime_python"
_RUNNER_SOURCE = Path(__file__).resolve().parent / "runner" / "model.py"


def _pytriton_root() -> Path:
    """The installed ``pytriton`` package folder, found without importing it (we only
    need its files; the wheel was installed without its Python dependencies)."""
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("nvidia-pytriton is not installed (run: make install)")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def _stub_path(root: Path) -> Path:
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = root / "tritonserver" / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.exists():
        raise FileNotFoundError(f"no Triton Python backend stub for Python {version} in {root}")
    return stub


def build_backend_directory(target: Path) -> Path:
    """Lay out ``target`` as a Triton backend directory (idempotent)."""
    root = _pytriton_root()
    python_dir = target / "python"
    runner_dir = target / RUNNER_BACKEND_NAME
    python_dir.mkdir(parents=True, exist_ok=True)
    runner_dir.mkdir(parents=True, exist_ok=True)
    backend_src = root / "tritonserver" / "backends" / "python"
    sources = {
        python_dir / "libtriton_python.so": backend_src / "libtriton_python.so",
        python_dir / "triton_python_backend_utils.py": backend_src
        / "triton_python_backend_utils.py",
        python_dir / "triton_python_backend_stub": _stub_path(root),
        runner_dir / "model.py": _RUNNER_SOURCE,
    }
    # Copies, not symlinks: Triton refuses a backend library that resolves outside the
    # backend directory. Replaced atomically, so a running server never sees a file change
    # under it.
    for copy, source in sources.items():
        if copy.is_file() and not copy.is_symlink() and filecmp.cmp(source, copy, shallow=False):
            continue
        partial = copy.with_name(f".{copy.name}.{os.getpid()}")
        shutil.copy2(source, partial)
        os.replace(partial, copy)
    return target


@dataclass(frozen=True)
class TritonLaunch:
    """Everything needed to exec one Triton server process."""

    argv: list[str]
    env: dict[str, str]


def triton_launch(
    model_repository: Path,
    backend_directory: Path,
    http_port: int = 8000,
    grpc_port: int = 8001,
    metrics_port: int = 8002,
    extra_args: list[str] | None = None,
    *,
    host: str = "127.0.0.1",
    api_key: str | None = None,
) -> TritonLaunch:
    """The command line and environment of one server; raises :class:`UnsafeExposure`
    for a ``host`` beyond loopback without an ``api_key``."""
    check_triton_exposure(host, api_key)
    root = _pytriton_root()
    binary = root / "tritonserver" / "bin" / "tritonserver"
    argv = [
        str(binary),
        f"--model-repository={model_repository.resolve()}",
        f"--backend-directory={backend_directory.resolve()}",
        "--model-control-mode=explicit",
        f"--http-port={http_port}",
        f"--grpc-port={grpc_port}",
        f"--metrics-port={metrics_port}",
        *bind_args(host),
        *restriction_args(api_key),
        "--allow-metrics=true",
        # Nothing here reads the nv_cpu_* series, and generated configs are complete, so
        # neither CPU sampling nor a stub forked for config auto-completion is needed.
        "--allow-cpu-metrics=false",
        "--disable-auto-complete-config",
        "--log-verbose=0",
        *(extra_args or []),
    ]
    env = dict(os.environ)
    # The stub embeds libpython: load the one of this interpreter, not whatever the system
    # has; the runner adds this environment's site-packages itself (see runner/model.py).
    libdirs = [str(root.parent / "nvidia_pytriton.libs")]
    libpython_dir = sysconfig.get_config_var("LIBDIR")
    if libpython_dir:
        libdirs.insert(0, libpython_dir)
    if env.get("LD_LIBRARY_PATH"):
        libdirs.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = ":".join(libdirs)
    env["EMBED_RUNNER_SITE_PACKAGES"] = sysconfig.get_paths()["purelib"]
    return TritonLaunch(argv=argv, env=env)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model-repository", type=Path, default=Path("model_repository"))
    parser.add_argument("--backend-directory", type=Path, default=Path("build/triton_backends"))
    parser.add_argument("--http-port", type=int, default=8000)
    parser.add_argument("--grpc-port", type=int, default=8001)
    parser.add_argument("--metrics-port", type=int, default=8002)
    settings = Settings()
    parser.add_argument("--host", default=settings.triton_host, help="address Triton binds")
    parser.add_argument(
        "--nice", type=int, default=settings.triton_nice, help="CPU priority offset"
    )
    args, extra = parser.parse_known_args(argv)
    args.model_repository.mkdir(parents=True, exist_ok=True)
    backends = build_backend_directory(args.backend_directory)
    try:
        launch = triton_launch(
            args.model_repository,
            backends,
            args.http_port,
            args.grpc_port,
            args.metrics_port,
            extra,
            host=args.host,
            # From EMBED_TRITON_API_KEY, never from this command line.
            api_key=key_value(settings.triton_api_key),
        )
    except UnsafeExposure as error:
        raise SystemExit(f"refusing to start Triton: {error}") from None
    if shutil.which(launch.argv[0]) is None:
        raise SystemExit(f"tritonserver binary not executable: {launch.argv[0]}")
    if args.nice:
        os.nice(args.nice)
    os.execve(launch.argv[0], launch.argv, launch.env)


if __name__ == "__main__":
    main()
