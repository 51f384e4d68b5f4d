"""Run a converter in a child process and report its outcome as service errors.

The child (``python -m converters``) does minutes of torch work; keeping it out of the API
process means the event loop and the GIL stay free for requests, and the API never imports
torch at all.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from converters.triton_config import DeploymentOptions
from embed_server.errors import ConversionFailed, ModelNotFound
from embed_server.model_names import ModelRef

logger = logging.getLogger(__name__)
_ABSOLUTE_PATH = re.compile(r"(?<![\w.])/[^\s'\"]+")


def _redact_paths(message: str, allowed: set[str]) -> str:
    """Hide internal paths from error bodies; paths the caller sent may be echoed back."""
    return _ABSOLUTE_PATH.sub(
        lambda m: m.group(0) if m.group(0).rstrip(".,:;)") in allowed else "<path>", message
    )


_PROJECT_ROOT = Path(__file__).resolve().parent.parent


async def run_converter(
    ref: ModelRef,
    out_dir: Path,
    options: DeploymentOptions,
    timeout_s: float,
    on_stage: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_PROJECT_ROOT), env.get("PYTHONPATH")) if p)
    model_name = ref.name
    args = ["--model-name", ref.name, "--triton-models", json.dumps(ref.triton_models)]
    if ref.pretrained is not None:
        args += ["--pretrained", ref.pretrained]
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "converters",
        ref.kind,
        *args,
        "--out",
        str(out_dir),
        "--options",
        json.dumps(asdict(options)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    outcome: dict[str, Any] = {}

    async def read_stdout() -> None:
        assert process.stdout is not None
        async for raw in process.stdout:
            try:
                message = json.loads(raw)
            except ValueError:
                continue
            if "stage" in message and on_stage is not None:
                on_stage(message["stage"])
            outcome.update({k: v for k, v in message.items() if k != "stage"})

    async def drain_stderr() -> bytes:
        assert process.stderr is not None
        return await process.stderr.read()

    try:
        _, stderr = await asyncio.wait_for(
            asyncio.gather(read_stdout(), drain_stderr()), timeout=timeout_s
        )
        await process.wait()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise ConversionFailed(
            f"model_name: conversion of {model_name!r} did not finish in {timeout_s:.0f} s"
        ) from None
    except asyncio.CancelledError:
        process.kill()
        raise

    if process.returncode == 0 and "result" in outcome:
        return outcome["result"]
    given = {ref.name, ref.pretrained or ""}
    if outcome.get("reason") == "not_found":
        raise ModelNotFound(f"model_name: {_redact_paths(outcome['error'], given)}")
    logger.error("conversion of %s failed: %s", model_name, stderr.decode(errors="replace")[-4000:])
    reason = outcome.get("error") or f"converter exited with status {process.returncode}"
    raise ConversionFailed(
        f"model_name: could not convert {model_name!r}: {_redact_paths(reason, given)}"
    )
