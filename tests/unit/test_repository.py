import json

import pytest

from embed_server.repository import METADATA_FILE, ModelRepository


def finished_staging(repo: ModelRepository, name: str):
    staging = repo.new_staging_dir()
    (staging / "config.pbtxt").write_text(f'name: "{name}"')
    (staging / METADATA_FILE).write_text(json.dumps({"model_name": name}))
    return staging


def test_a_model_appears_only_when_committed(tmp_path):
    repo = ModelRepository(tmp_path)
    staging = finished_staging(repo, "m")
    assert repo.list_models() == []
    assert not repo.is_complete("m")
    repo.commit(staging, "m")
    assert repo.is_complete("m")
    assert [m["model_name"] for m in repo.list_models()] == ["m"]


def test_leftovers_of_a_killed_conversion_are_removed(tmp_path):
    repo = ModelRepository(tmp_path)
    finished_staging(repo, "m")
    assert len(repo.remove_leftovers()) == 1
    assert list(tmp_path.iterdir()) == []


def test_delete_reports_missing_models(tmp_path):
    repo = ModelRepository(tmp_path)
    repo.commit(finished_staging(repo, "m"), "m")
    assert repo.delete("m") is True
    assert repo.delete("m") is False
    assert repo.metadata("m") is None


def test_commit_refuses_to_overwrite(tmp_path):
    repo = ModelRepository(tmp_path)
    repo.commit(finished_staging(repo, "m"), "m")
    with pytest.raises(OSError):
        repo.commit(finished_staging(repo, "m"), "m")
