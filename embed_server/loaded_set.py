"""Which models should be loaded, persisted in the model repository.

Triton forgets its loaded models when it restarts, and an API worker forgets everything
when it does. This file is the shared memory of the intended set: every worker updates it
under a file lock when it loads, unloads, deletes or evicts a model, and reads it to
restore exactly that set after a restart of either process.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_FILE = ".loaded_models.json"


class LoadedSet:
    def __init__(self, repository_root: Path) -> None:
        self._path = repository_root / _FILE
        self._lock_path = repository_root / f"{_FILE}.lock"

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self._lock_path, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _read(self) -> list[dict[str, str | None]]:
        try:
            entries = json.loads(self._path.read_text())
        except (FileNotFoundError, ValueError):
            return []
        return [e for e in entries if isinstance(e, dict) and "model_name" in e]

    def entries(self) -> list[dict[str, str | None]]:
        with self._locked():
            return self._read()

    def _write(self, entries: list[dict[str, str | None]]) -> None:
        partial = self._path.with_name(f"{_FILE}.{os.getpid()}")
        partial.write_text(json.dumps(entries, indent=2))
        os.replace(partial, self._path)

    def contains(self, model_name: str, pretrained: str | None) -> bool:
        return {"model_name": model_name, "pretrained": pretrained} in self.entries()

    def add(self, model_name: str, pretrained: str | None) -> None:
        entry = {"model_name": model_name, "pretrained": pretrained}
        with self._locked():
            entries = self._read()
            if entry not in entries:
                self._write([*entries, entry])

    def remove(self, model_name: str, pretrained: str | None) -> None:
        entry = {"model_name": model_name, "pretrained": pretrained}
        with self._locked():
            entries = self._read()
            if entry in entries:
                self._write([e for e in entries if e != entry])
