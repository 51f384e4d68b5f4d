"""Replace a small state file so that a crash or power loss leaves the old or the new
version, never a truncated one.

``os.replace`` alone is atomic for readers but not durable: after a power loss the rename
can be on disk before the data it points to, which reads back as an empty or truncated
file. Syncing the data before the rename, and the folder after it, orders the two.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path


def replace_durably(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` through a temporary file in the same folder."""
    partial = target.with_name(f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(partial, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    sync_folder(target.parent)


def sync_folder(folder: Path) -> None:
    """Make the folder's latest renames and unlinks durable."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
