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
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from converters.layout import write_metadata
from converters.triton_config import DeploymentOptions
from embed_server.errors import (
    ConversionFailed,
    ModelNotFound,
    PayloadTooLarge,
    ServiceError,
    redact_paths,
)
from embed_server.model_names import ModelRef

logger = logging.getLogger(__name__)
_PROJECT_ROOT = Path(__file__).resolve().parent.parent


def converter_argv(ref: ModelRef, out_dir: Path, options: DeploymentOptions) -> list[str]:
    """The converter's command line. Local sources are passed by the real path checked when
    the name was validated (``ModelRef.name_path`` / ``pretrained_path``), never by the
    string the caller gave, which a swapped symlink could point elsewhere by now."""
    args = ["--model-name", ref.name_path or ref.name]
    args += ["--triton-models", json.dumps(ref.triton_models)]
    pretrained = ref.pretrained_path or ref.pretrained
    if pretrained is not None:
        args += ["--pretrained", pretrained]
    args += ["--out", str(out_dir), "--options", json.dumps(asdict(options))]
    return [sys.executable, "-m", "converters", ref.kind, *args]


async def read_messages(
    stream: asyncio.StreamReader, on_message: Callable[[dict[str, Any]], None]
) -> None:
    """Hand each JSON object line of ``stream`` to ``on_message`` until end of file.

    Any other line is skipped, including one longer than the reader's buffer limit (64 KiB
    by default; a library printing a long warning), which would otherwise raise out of a
    plain ``async for`` over the stream.
    """
    skipping = False
    while True:
        try:
            line = await stream.readuntil(b"\n")
        except asyncio.LimitOverrunError as error:
            # Drop what is buffered; the rest of the line is dropped when its end arrives.
            await stream.readexactly(error.consumed)
            skipping = True
            continue
        except asyncio.IncompleteReadError as error:
            line = error.partial
            if not line:
                return
        if skipping:
            skipping = False
            continue
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if isinstance(message, dict):
            on_message(message)


async def run_reporting_child(
    argv: list[str],
    env: dict[str, str],
    timeout_s: float,
    on_message: Callable[[dict[str, Any]], None],
) -> tuple[int, bytes]:
    """Run ``argv``, passing each JSON object it prints to ``on_message``; returns its exit
    status and stderr. The child is killed on timeout (``TimeoutError``), cancellation or
    any other failure."""
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env
    )
    assert process.stdout is not None and process.stderr is not None
    try:
        async with asyncio.timeout(timeout_s):
            _, stderr = await asyncio.gather(
                read_messages(process.stdout, on_message), process.stderr.read()
            )
            returncode = await process.wait()
    except asyncio.CancelledError:
        process.kill()
        raise
    except BaseException:
        process.kill()
        await process.wait()
        raise
    return returncode, stderr


def _keep_given_names(ref: ModelRef, out_dir: Path, result: dict[str, Any]) -> dict[str, Any]:
    """The converter saw real paths; the model keeps the names the caller gave."""
    given = {
        "model_name": (ref.name_path, ref.name),
        "pretrained": (ref.pretrained_path, ref.pretrained),
    }
    changes = {key: name for key, (real, name) in given.items() if real is not None}
    if not changes:
        return result
    result = {**result, **changes}
    write_metadata(out_dir / ref.primary, result)
    return result


# The converter's refusals that are the caller's to fix, by the reason it reports.
_REFUSALS: dict[str, type[ServiceError]] = {
    "not_found": ModelNotFound,
    "too_large": PayloadTooLarge,
}


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
    outcome: dict[str, Any] = {}

    def on_message(message: dict[str, Any]) -> None:
        if "stage" in message and on_stage is not None:
            on_stage(message["stage"])
        outcome.update({k: v for k, v in message.items() if k != "stage"})

    try:
        returncode, stderr = await run_reporting_child(
            converter_argv(ref, out_dir, options), env, timeout_s, on_message
        )
    except TimeoutError:
        raise ConversionFailed(
            f"model_name: conversion of {model_name!r} did not finish in {timeout_s:.0f} s"
        ) from None

    if returncode == 0 and "result" in outcome:
        return _keep_given_names(ref, out_dir, outcome["result"])
    given = {ref.name, ref.pretrained or ""}
    refusal = _REFUSALS.get(str(outcome.get("reason")))
    if refusal is not None:
        reason = _given_paths(ref, str(outcome["error"]))
        raise refusal(f"model_name: {redact_paths(reason, given)}")
    logger.error("conversion of %s failed: %s", model_name, stderr.decode(errors="replace")[-4000:])
    reason = outcome.get("error") or f"converter exited with status {returncode}"
    raise ConversionFailed(
        f"model_name: could not convert {model_name!r}: "
        f"{redact_paths(_given_paths(ref, str(reason)), given)}"
    )


def _given_paths(ref: ModelRef, message: str) -> str:
    """A converter message with the real paths it was given shown as the caller wrote them."""
    for real, given in ((ref.name_path, ref.name), (ref.pretrained_path, ref.pretrained)):
        if real is not None and given is not None:
            message = message.replace(real, given)
    return message
