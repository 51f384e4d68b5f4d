"""State files (the loaded set, load jobs) survive truncation, crashes and other workers."""

from __future__ import annotations

import json
import os
import time

from embed_server.jobs import Job, JobStore
from embed_server.loaded_set import LoadedSet


def test_a_truncated_loaded_set_is_reported_and_its_previous_version_used(tmp_path, caplog):
    loaded = LoadedSet(tmp_path)
    loaded.add("org/a", None)
    loaded.add("org/b", None)
    state = tmp_path / ".loaded_models.json"
    state.write_bytes(state.read_bytes()[:20])  # a disk that lost the file's tail

    assert LoadedSet(tmp_path).entries() == [{"model_name": "org/a", "pretrained": None}]
    assert "is unreadable" in caplog.text


def test_a_write_after_a_truncated_file_keeps_the_last_good_version(tmp_path):
    loaded = LoadedSet(tmp_path)
    loaded.add("org/a", None)
    loaded.add("org/b", None)
    (tmp_path / ".loaded_models.json").write_text("[{")
    loaded.add("org/c", None)
    names = [e["model_name"] for e in LoadedSet(tmp_path).entries()]
    assert names == ["org/a", "org/c"]
    backup = json.loads((tmp_path / ".loaded_models.json.bak").read_text())
    assert [e["model_name"] for e in backup] == ["org/a"]


def test_state_files_are_synced_before_and_after_their_rename(tmp_path, monkeypatch):
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    LoadedSet(tmp_path).add("org/a", None)
    JobStore(tmp_path / "jobs").save(Job(id="0" * 32, model_name="org/a", pretrained=None))
    assert any(".loaded_models.json" in path and path.endswith(".tmp") for path in synced)
    assert any("jobs/" in path and path.endswith(".tmp") for path in synced)
    assert str(tmp_path) in synced, "the folder is synced so the rename is durable"
    assert str(tmp_path / "jobs") in synced


def test_restore_failures_are_shared_and_cleared_by_a_load(tmp_path):
    LoadedSet(tmp_path).mark_failed("org/a", None, "converter crashed")
    other_worker = LoadedSet(tmp_path)
    assert [f.label for f in other_worker.failures()] == ["org/a"]
    assert other_worker.contains("org/a", None)
    other_worker.add("org/a", None)
    assert LoadedSet(tmp_path).failures() == []


def test_pruning_skips_a_job_file_another_worker_removed_meanwhile(tmp_path):
    store = JobStore(tmp_path)
    # stat() of a dangling link raises FileNotFoundError, exactly as a file removed
    # between the listing and the stat does.
    (tmp_path / "x.json").symlink_to(tmp_path / "gone.json")
    old = tmp_path / f"{'1' * 32}.json"
    old.write_text("{}")
    os.utime(old, (time.time() - 10, time.time() - 10))
    store.prune(older_than_s=5)
    assert not old.exists()


def test_an_unreadable_job_file_reads_as_no_job(tmp_path):
    store = JobStore(tmp_path)
    (tmp_path / f"{'2' * 32}.json").write_text('{"id": ')
    assert store.get("2" * 32) is None


def test_no_temporary_files_are_left_behind(tmp_path):
    LoadedSet(tmp_path).add("org/a", None)
    LoadedSet(tmp_path).add("org/b", None)
    JobStore(tmp_path / "jobs").save(Job(id="3" * 32, model_name="org/a", pretrained=None))
    assert not list(tmp_path.rglob("*.tmp"))
