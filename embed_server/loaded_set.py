"""Which models should be loaded, persisted in the model repository.

Triton forgets its loaded models when it restarts, and an API worker forgets everything
when it does. This file is the shared memory of the intended set: every worker updates it
under a file lock when it loads, unloads, deletes or evicts a model, and reads it to
restore exactly that set after a restart of either process. A model whose restore failed
stays in the set with the reason, so every worker can report it (instead of answering
"being loaded" forever) and the next restore tries it again.

The file is replaced durably, and the version it replaces is kept as ``.bak``: a file
found unreadable (a disk that lost its tail) is reported loudly and the previous version
is used, rather than silently restoring nothing.
"""

from __future__ import annotations

import fcntl
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embed_server.durable_file import replace_durably
from embed_server.model_names import model_label

logger = logging.getLogger(__name__)

_FILE = ".loaded_models.json"
_RESTORE_ERROR = "restore_error"


@dataclass(frozen=True)
class RestoreFailure:
    model_name: str
    pretrained: str | None
    reason: str

    @property
    def label(self) -> str:
        return model_label(self.model_name, self.pretrained)


def _parse(data: bytes) -> list[dict[str, Any]]:
    entries = json.loads(data)
    if not isinstance(entries, list):
        raise ValueError("not a JSON list")
    return [e for e in entries if isinstance(e, dict) and isinstance(e.get("model_name"), str)]


def _key(entry: dict[str, Any]) -> tuple[str, str | None]:
    return entry["model_name"], entry.get("pretrained")


class LoadedSet:
    def __init__(self, repository_root: Path) -> None:
        self._path = repository_root / _FILE
        self._backup = repository_root / f"{_FILE}.bak"
        self._lock_path = repository_root / f"{_FILE}.lock"

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self._lock_path, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _read(self) -> list[dict[str, Any]]:
        try:
            return _parse(self._path.read_bytes())
        except FileNotFoundError:
            return []
        except ValueError as error:
            logger.error(
                "%s is unreadable (%s); using the previous version %s",
                self._path,
                error,
                self._backup.name,
            )
        try:
            return _parse(self._backup.read_bytes())
        except (OSError, ValueError) as error:
            logger.error(
                "%s is unreadable too (%s): only the default models will be restored",
                self._backup,
                error,
            )
            return []

    def _write(self, entries: list[dict[str, Any]]) -> None:
        try:
            current: bytes | None = self._path.read_bytes()
            _parse(current)
        except (OSError, ValueError):
            current = None
        if current is not None:
            replace_durably(self._backup, current)
        replace_durably(self._path, json.dumps(entries, indent=2).encode())

    def _update(
        self, model_name: str, pretrained: str | None, entry: dict[str, Any] | None
    ) -> None:
        """Replace the entry of this model by ``entry`` (None: drop it), if that changes it."""
        with self._locked():
            entries = self._read()
            key = (model_name, pretrained)
            updated = [e for e in entries if _key(e) != key]
            if entry is not None:
                # In place, so that re-adding a listed model changes nothing.
                where = next((i for i, e in enumerate(entries) if _key(e) == key), len(updated))
                updated.insert(where, entry)
            if updated != entries:
                self._write(updated)

    def entries(self) -> list[dict[str, str | None]]:
        """The intended models, each as ``{"model_name": ..., "pretrained": ...}``."""
        with self._locked():
            return [
                {"model_name": e["model_name"], "pretrained": e.get("pretrained")}
                for e in self._read()
            ]

    def contains(self, model_name: str, pretrained: str | None) -> bool:
        return {"model_name": model_name, "pretrained": pretrained} in self.entries()

    def add(self, model_name: str, pretrained: str | None) -> None:
        """Record a model as loaded; a restore failure recorded for it is cleared."""
        entry = {"model_name": model_name, "pretrained": pretrained}
        self._update(model_name, pretrained, entry)

    def remove(self, model_name: str, pretrained: str | None) -> None:
        self._update(model_name, pretrained, None)

    def mark_failed(self, model_name: str, pretrained: str | None, reason: str) -> None:
        """Keep the model intended, with the reason its restore failed."""
        entry = {"model_name": model_name, "pretrained": pretrained, _RESTORE_ERROR: reason}
        self._update(model_name, pretrained, entry)

    def failures(self) -> list[RestoreFailure]:
        with self._locked():
            entries = self._read()
        return [
            RestoreFailure(e["model_name"], e.get("pretrained"), str(e[_RESTORE_ERROR]))
            for e in entries
            if e.get(_RESTORE_ERROR)
        ]

    def failure(self, model_name: str, pretrained: str | None) -> RestoreFailure | None:
        for failure in self.failures():
            if (failure.model_name, failure.pretrained) == (model_name, pretrained):
                return failure
        return None
