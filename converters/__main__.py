"""Run one conversion in its own process: ``python -m converters sentence_transformer ...``.

The API starts conversions this way so that minutes of torch work never share the event
loop or the GIL with request handling, memory is returned when the process exits, and a
killed conversion can only leave a staging folder behind. The protocol is one JSON object
per stdout line: ``{"stage": ...}`` while working, then ``{"result": ...}`` or
``{"error": ..., "reason": "not_found" | "too_large" | "failed"}``.

The source is found and checked (``converters.sources``, torch-free) before a family's
converter module is imported: importing torch and open_clip costs seconds, which a name
that answers to nothing must not.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from converters.sources import (
    DownloadTooLarge,
    SourceNotFound,
    check_clip_source,
    resolve_sentence_transformer,
)
from converters.triton_config import DeploymentOptions

EXIT_NOT_FOUND = 2
EXIT_FAILED = 3


def _emit(payload: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(payload) + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m converters")
    parser.add_argument("kind", choices=["sentence_transformer", "clip"])
    parser.add_argument("--model-name", required=True)
    parser.add_argument("--pretrained")
    parser.add_argument("--triton-models", required=True, help="role -> Triton name, as JSON")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--options", default="{}", help="DeploymentOptions as JSON")
    args = parser.parse_args(argv)
    # Minutes of CPU-heavy export must not starve the API or Triton on a small machine.
    os.nice(10)
    options = DeploymentOptions(**json.loads(args.options))
    triton_models = json.loads(args.triton_models)
    progress = lambda stage: _emit({"stage": stage})  # noqa: E731
    try:
        progress("download")
        if args.kind == "clip":
            check_clip_source(args.model_name, args.pretrained)
            from converters import clip

            metadata = clip.convert(
                args.model_name, args.pretrained, triton_models, args.out, options, progress
            )
        else:
            source = resolve_sentence_transformer(args.model_name, options.max_download_bytes)
            from converters import sentence_transformer

            metadata = sentence_transformer.convert(
                source, args.model_name, triton_models, args.out, options, progress
            )
    except SourceNotFound as error:
        _emit({"error": str(error), "reason": "not_found"})
        return EXIT_NOT_FOUND
    except DownloadTooLarge as error:
        _emit({"error": str(error), "reason": "too_large"})
        return EXIT_FAILED
    except Exception as error:
        _emit({"error": f"{type(error).__name__}: {error}", "reason": "failed"})
        return EXIT_FAILED
    _emit({"result": metadata})
    return 0


if __name__ == "__main__":
    sys.exit(main())
