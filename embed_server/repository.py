"""The model repository on disk: the shared truth about which models exist.

A model folder appears only when complete: converters write into a hidden staging folder
inside the repository (same filesystem), which is renamed into place in one step. Deletion
renames the folder away first, so Triton and readers never see half a model.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

from converters.layout import METADATA_FILE

_STAGING_PREFIX = ".staging-"
_TRASH_PREFIX = ".trash-"


class ModelRepository:
    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self._metadata_cache: dict[str, tuple[float, dict[str, Any]]] = {}

    def path(self, triton_name: str) -> Path:
        return self.root / triton_name

    def is_complete(self, triton_name: str) -> bool:
        folder = self.path(triton_name)
        return (folder / METADATA_FILE).is_file() and (folder / "config.pbtxt").is_file()

    def metadata(self, triton_name: str) -> dict[str, Any] | None:
        """Metadata of a complete model, cached until its file changes."""
        meta_path = self.path(triton_name) / METADATA_FILE
        try:
            mtime = meta_path.stat().st_mtime
        except FileNotFoundError:
            self._metadata_cache.pop(triton_name, None)
            return None
        cached = self._metadata_cache.get(triton_name)
        if cached and cached[0] == mtime:
            return cached[1]
        data = json.loads(meta_path.read_text())
        self._metadata_cache[triton_name] = (mtime, data)
        return data

    def list_models(self) -> list[dict[str, Any]]:
        found = []
        for entry in sorted(self.root.iterdir()):
            if entry.name.startswith(".") or not entry.is_dir():
                continue
            meta = self.metadata(entry.name)
            if meta is not None:
                found.append(meta)
        return found

    def new_staging_dir(self) -> Path:
        path = self.root / f"{_STAGING_PREFIX}{uuid.uuid4().hex}"
        path.mkdir()
        return path

    def commit(self, staging: Path, primary: str) -> None:
        """Move each Triton model folder of a finished staging folder into place.

        The ``primary`` folder (holding the metadata) moves last: until it is in place the
        model does not exist, and a folder without metadata is replaced by the next commit.
        """
        folders = sorted(staging.iterdir(), key=lambda p: p.name == primary)
        for folder in folders:
            target = self.path(folder.name)
            if target.exists():
                if self.is_complete(folder.name):
                    raise FileExistsError(f"{folder.name} already exists")
                self._remove(target)
            os.rename(folder, target)
        self.discard(staging)

    def discard(self, path: Path) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def delete(self, names: list[str], primary: str) -> bool:
        """Remove a model's folders, metadata first, so it vanishes from listings at once."""
        existing = [n for n in sorted(names, key=lambda n: n != primary) if self.path(n).is_dir()]
        for name in existing:
            self._remove(self.path(name))
            self._metadata_cache.pop(name, None)
        return bool(existing)

    def _remove(self, folder: Path) -> None:
        trash = self.root / f"{_TRASH_PREFIX}{uuid.uuid4().hex}"
        os.rename(folder, trash)
        shutil.rmtree(trash, ignore_errors=True)

    def remove_leftovers(self, older_than_s: float = 0.0) -> list[str]:
        """Delete staging and trash folders left by a crash or a killed conversion.

        Only folders older than ``older_than_s`` go: another API worker may be converting
        into a younger one right now.
        """
        removed = []
        cutoff = time.time() - older_than_s
        for entry in self.root.iterdir():
            if entry.name.startswith((_STAGING_PREFIX, _TRASH_PREFIX)) and (
                entry.stat().st_mtime <= cutoff
            ):
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry.name)
        return removed
