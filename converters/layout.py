"""What a converted model folder holds besides Triton's own files; shared with the API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

METADATA_FILE = "embedding_model.json"
ONNX_FILE = "model.onnx"
VERSION = "1"


def write_metadata(folder: Path, metadata: dict[str, Any]) -> None:
    (folder / METADATA_FILE).write_text(json.dumps(metadata, indent=2))
