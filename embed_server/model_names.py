"""Validate user-facing model names and map them to Triton model names.

This runs before anything touches disk. A Triton name is a readable slug plus a hash of
the exact user name, so two different names can never share a folder (``a/b`` and ``a_b``
slug alike but hash apart) and no name can climb out of the model repository.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from embed_server.errors import BadRequest

MAX_NAME_LENGTH = 256
_HUB_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
_HUB_ID = re.compile(rf"^(?:{_HUB_PART}/)?{_HUB_PART}$")
_SLUG_UNSAFE = re.compile(r"[^A-Za-z0-9-]+")


@dataclass(frozen=True)
class ModelRef:
    """A validated model name and the Triton model(s) that serve it."""

    name: str
    kind: str
    triton_base: str

    def triton_name(self, role: str | None = None) -> str:
        return self.triton_base if role is None else f"{self.triton_base}_{role}"


def _field_error(field: str, message: str) -> BadRequest:
    return BadRequest(f"{field}: {message}")


def _check_text(value: str, field: str) -> None:
    if not value or not value.strip():
        raise _field_error(field, "must not be empty")
    if len(value) > MAX_NAME_LENGTH:
        raise _field_error(field, f"longer than {MAX_NAME_LENGTH} characters")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise _field_error(field, "contains control characters")


def _check_local_path(value: str, field: str, allowed: list[Path]) -> None:
    if not allowed:
        raise _field_error(field, "local paths are refused: EMBED_LOCAL_MODEL_DIRS is not set")
    real = Path(os.path.realpath(value))
    for root in allowed:
        root_real = Path(os.path.realpath(root))
        if real != root_real and real.is_relative_to(root_real):
            return
    raise _field_error(field, f"{value!r} is not inside EMBED_LOCAL_MODEL_DIRS")


def validate_source_name(value: str, field: str, allowed_dirs: list[Path]) -> None:
    """Accept a Hub id (``org/name``) or an absolute path inside an allowed directory."""
    _check_text(value, field)
    if value.startswith("/"):
        _check_local_path(value, field, allowed_dirs)
        return
    if ".." in value or "--" in value or not _HUB_ID.match(value):
        raise _field_error(
            field, f"{value!r} is neither a Hugging Face id (org/name) nor an absolute path"
        )


def _slug(text: str) -> str:
    return _SLUG_UNSAFE.sub("_", text).strip("_")[:64] or "model"


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:8]


def sentence_transformer_ref(name: str, allowed_dirs: list[Path]) -> ModelRef:
    validate_source_name(name, "model_name", allowed_dirs)
    shown = Path(name).name if name.startswith("/") else name
    return ModelRef(
        name=name, kind="sentence_transformer", triton_base=f"{_slug(shown)}_{_digest(name)}"
    )
