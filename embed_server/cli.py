"""The terminal client: ``python -m embed_server load|infer|models|unload|delete|bench``.

Every command talks HTTP to a running server (``--url``), so it works the same against a
local ``serve`` and a remote deployment. Only the standard library is used: the CLI must
start fast and run wherever the server's requirements are installed. ``load`` starts a
background job (``POST /jobs/load``) and polls it to draw the conversion stages. With
``EMBED_API_KEY`` set, every call carries it as ``Authorization: Bearer``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from embed_server.exposure import key_value
from embed_server.settings import DEFAULT_MODEL, Settings

PROJECT_ROOT = Path(__file__).resolve().parent.parent
_BAR_WIDTH = 24


class CliError(Exception):
    """A failure worth one line on stderr and exit status 1."""


class Api:
    def __init__(self, url: str, timeout_s: float = 600.0, api_key: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers=self._headers
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            raise CliError(f"HTTP {error.code}: {_detail(error.read())}") from None
        except urllib.error.URLError as error:
            raise CliError(f"cannot reach {self.url}: {error.reason}") from None


def _detail(raw: bytes) -> str:
    try:
        body = json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")[:300]
    return str(body.get("detail", body)) if isinstance(body, dict) else str(body)


def _model_body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {"model_name": args.model}
    if args.pretrained is not None:
        body["pretrained"] = args.pretrained
    return body


class Progress:
    """A stage bar redrawn in place on a terminal; elsewhere one line per stage reached.

    Stages that passed between two polls are still printed, so a log shows them all.
    """

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._live = stream.isatty()
        self._printed: set[str] = set()

    def _line(self, stages: list[str], done: int, stage: str) -> str:
        filled = _BAR_WIDTH * done // len(stages)
        bar = "#" * filled + "-" * (_BAR_WIDTH - filled)
        step = stages.index(stage) + 1 if stage in stages else done
        return f"[{bar}] {step}/{len(stages)} {stage}"

    def show(self, job: dict[str, Any], elapsed_s: float) -> None:
        stages, done = job["stages"], job["stages_done"]
        current = job["stage"] or job["status"]
        if self._live:
            line = self._line(stages, len(done), current)
            self._stream.write(f"\r{line} ({elapsed_s:.0f} s)\033[K")
        else:
            reached = [*done, current] if current not in done else done
            for index, stage in enumerate(reached):
                if stage not in self._printed:
                    self._printed.add(stage)
                    self._stream.write(self._line(stages, min(index, len(done)), stage) + "\n")
        self._stream.flush()

    def finish(self, job: dict[str, Any]) -> None:
        if self._live:
            self._stream.write("\n")
        elif job["status"] == "succeeded":
            stages = job["stages"]
            self._stream.write(self._line(stages, len(stages), "done") + "\n")


def cmd_load(api: Api, args: argparse.Namespace) -> int:
    job = api.call("POST", "/jobs/load", _model_body(args))
    progress = Progress(sys.stderr)
    started = time.monotonic()
    while job["status"] in ("queued", "running"):
        progress.show(job, time.monotonic() - started)
        time.sleep(args.poll)
        job = api.call("GET", f"/jobs/{job['id']}")
    progress.show(job, time.monotonic() - started)
    progress.finish(job)
    if job["status"] != "succeeded":
        raise CliError(job["error"] or "the load failed")
    print(job["message"])
    return 0


def cmd_infer(api: Api, args: argparse.Namespace) -> int:
    body = _model_body(args)
    if args.text:
        body["text"] = args.text
    if args.image:
        body["image"] = args.image
    if args.normalize is not None:
        body["normalize"] = args.normalize
    print(json.dumps(api.call("POST", "/infer", body)))
    return 0


def cmd_models(api: Api, args: argparse.Namespace) -> int:
    path = "/repository_models" if args.all else "/loaded_models"
    models = api.call("GET", path)["models"]
    if not models:
        print("no models")
    for model in models:
        name = model["model_name"]
        if model.get("pretrained"):
            name += f" ({model['pretrained']})"
        state = "" if not args.all else ("  loaded" if model.get("loaded") else "  on disk")
        print(f"{name}  {model['kind']}  {model.get('embedding_dim', '?')} d{state}")
    return 0


def cmd_unload(api: Api, args: argparse.Namespace) -> int:
    print(api.call("POST", "/unload_model", _model_body(args))["message"])
    return 0


def cmd_delete(api: Api, args: argparse.Namespace) -> int:
    print(api.call("POST", "/delete_model", _model_body(args))["message"])
    return 0


def _bench_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m embed_server bench")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds")
    parser.add_argument("--texts", type=int, default=1, help="texts per request")
    return parser


def cmd_bench(api: Api, passthrough: list[str]) -> int:
    """Run the repository's ``benchmark.py`` when there is one, else a small closed loop."""
    script = PROJECT_ROOT / "benchmark.py"
    if script.is_file():
        return subprocess.call([sys.executable, str(script), "--url", api.url, *passthrough])
    args = _bench_parser().parse_args(passthrough)
    body = {
        "model_name": args.model,
        "text": [f"benchmark sentence {i}" for i in range(args.texts)],
    }
    latencies: list[float] = []
    failures: list[str] = []
    deadline = time.monotonic() + args.duration

    def worker() -> None:
        while time.monotonic() < deadline:
            started = time.perf_counter()
            try:
                api.call("POST", "/infer", body)
            except CliError as error:
                failures.append(str(error))
                continue
            latencies.append(time.perf_counter() - started)

    threads = [threading.Thread(target=worker) for _ in range(args.concurrency)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    if not latencies:
        raise CliError(f"no request succeeded: {failures[0] if failures else 'no time'}")
    latencies.sort()
    p50 = latencies[len(latencies) // 2] * 1000
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000
    rate = len(latencies) / elapsed
    print(
        f"{len(latencies)} requests in {elapsed:.1f} s at concurrency {args.concurrency}: "
        f"{rate:.1f} req/s, {rate * args.texts:.1f} texts/s, "
        f"p50 {p50:.1f} ms, p99 {p99:.1f} ms, {len(failures)} failed"
    )
    return 0 if not failures else 1


def add_commands(commands: argparse._SubParsersAction, default_url: str) -> None:
    """Register the client commands next to ``serve`` on the package's parser."""

    def client(name: str, help_text: str, model: bool = True) -> argparse.ArgumentParser:
        parser = commands.add_parser(name, help=help_text)
        parser.add_argument("--url", default=default_url, help=f"server (default {default_url})")
        if model:
            parser.add_argument("model", help="model name, Hub id or local path")
            parser.add_argument("--pretrained", help="OpenCLIP pretrained tag or checkpoint")
        return parser

    load = client("load", "convert if needed and load a model, with a progress bar")
    load.add_argument("--poll", type=float, default=0.5, help="seconds between status polls")
    infer = client("infer", "embed texts and/or images and print the JSON answer")
    infer.add_argument("text", nargs="*", help="texts to embed")
    infer.add_argument("--image", action="append", help="image URL or data URI (repeatable)")
    infer.add_argument("--normalize", action=argparse.BooleanOptionalAction, default=None)
    models = client("models", "list loaded models", model=False)
    models.add_argument("--all", action="store_true", help="every model in the repository")
    client("unload", "unload a model from Triton (it stays on disk)")
    client("delete", "unload a model and delete it from the repository")
    client("bench", "closed-loop load; runs benchmark.py with these arguments if present", False)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    """Run one client command; errors become one line on stderr and status 1."""
    api = Api(args.url, api_key=key_value(Settings().api_key))
    commands = {
        "load": cmd_load,
        "infer": cmd_infer,
        "models": cmd_models,
        "unload": cmd_unload,
        "delete": cmd_delete,
    }
    try:
        if args.command == "bench":
            return cmd_bench(api, extra)
        return commands[args.command](api, args)
    except CliError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
