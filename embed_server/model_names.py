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


def model_label(name: str, pretrained: str | None) -> str:
    """How messages and logs name a model: its name, and its weights when it has a tag."""
    return name if pretrained is None else f"{name} ({pretrained})"


@dataclass(frozen=True)
class ModelRef:
    """A validated model name and the Triton model(s) that serve it, by role."""

    name: str
    kind: str
    triton_models: dict[str, str]
    pretrained: str | None = None
    # The real paths checked against EMBED_LOCAL_MODEL_DIRS when ``name`` or ``pretrained``
    # is a local path. The converter opens these, never the given string again: a symlink
    # swapped after the check cannot redirect it. The given strings stay the model's
    # identity (display, Triton names, the loaded set).
    name_path: str | None = None
    pretrained_path: str | None = None

    @property
    def label(self) -> str:
        return model_label(self.name, self.pretrained)

    @property
    def primary(self) -> str:
        """The Triton model folder holding the metadata; it is written last and deleted first."""
        return self.triton_models["text"]


def _field_error(field: str, message: str) -> BadRequest:
    return BadRequest(f"{field}: {message}")


def _check_text(value: str, field: str) -> None:
    if not value or not value.strip():
        raise _field_error(field, "must not be empty")
    if len(value) > MAX_NAME_LENGTH:
        raise _field_error(field, f"longer than {MAX_NAME_LENGTH} characters")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise _field_error(field, "contains control characters")


def _check_local_path(value: str, field: str, allowed: list[Path]) -> str:
    """The real path of ``value``, once checked to lie inside an allowed directory."""
    if not allowed:
        raise _field_error(field, "local paths are refused: EMBED_LOCAL_MODEL_DIRS is not set")
    real = Path(os.path.realpath(value))
    for root in allowed:
        root_real = Path(os.path.realpath(root))
        if real != root_real and real.is_relative_to(root_real):
            return str(real)
    raise _field_error(field, f"{value!r} is not inside EMBED_LOCAL_MODEL_DIRS")


def validate_source_name(value: str, field: str, allowed_dirs: list[Path]) -> str | None:
    """Accept a Hub id (``org/name``) or an absolute path inside an allowed directory;
    returns the checked real path of the latter."""
    _check_text(value, field)
    if value.startswith("/"):
        return _check_local_path(value, field, allowed_dirs)
    if ".." in value or "--" in value or not _HUB_ID.match(value):
        raise _field_error(
            field, f"{value!r} is neither a Hugging Face id (org/name) nor an absolute path"
        )
    return None


def _slug(text: str) -> str:
    return _SLUG_UNSAFE.sub("_", text).strip("_")[:64] or "model"


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:8]


def sentence_transformer_ref(name: str, allowed_dirs: list[Path]) -> ModelRef:
    real_path = validate_source_name(name, "model_name", allowed_dirs)
    shown = Path(name).name if name.startswith("/") else name
    base = f"{_slug(shown)}_{_digest(name)}"
    return ModelRef(
        name=name, kind="sentence_transformer", triton_models={"text": base}, name_path=real_path
    )


_CLIP_ARCH = re.compile(r"^(?:hf-hub:)?[A-Za-z0-9][A-Za-z0-9._/-]*$")
_PRETRAINED_TAG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


HF_HUB_PREFIX = "hf-hub:"
# open_clip takes an ``hf-hub:`` model's weights from its repository and ignores any
# pretrained tag, so such models need none; this label stands in for it.
HUB_WEIGHTS = "hub"


def clip_ref(model_name: str, pretrained: str | None, allowed_dirs: list[Path]) -> ModelRef:
    """An OpenCLIP architecture plus a pretrained tag or a local checkpoint file."""
    _check_text(model_name, "model_name")
    if ".." in model_name or "//" in model_name or not _CLIP_ARCH.match(model_name):
        raise _field_error("model_name", f"{model_name!r} is not an OpenCLIP model name")
    if pretrained is None and model_name.startswith(HF_HUB_PREFIX):
        pretrained = HUB_WEIGHTS
    if pretrained is None:
        raise _field_error("pretrained", "required for CLIP models other than hf-hub: ones")
    _check_text(pretrained, "pretrained")
    real_path = None
    if pretrained.startswith("/"):
        real_path = _check_local_path(pretrained, "pretrained", allowed_dirs)
        shown = Path(pretrained).stem
    elif _PRETRAINED_TAG.match(pretrained) and ".." not in pretrained:
        shown = pretrained
    else:
        raise _field_error(
            "pretrained", f"{pretrained!r} is neither a pretrained tag nor an absolute path"
        )
    base = f"{_slug(model_name)}_{_slug(shown)}_{_digest(model_name, pretrained)}"
    return ModelRef(
        name=model_name,
        kind="clip",
        pretrained=pretrained,
        triton_models={"text": f"{base}_text_encoder", "image": f"{base}_image_encoder"},
        pretrained_path=real_path,
    )
