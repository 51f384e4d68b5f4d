import json

import pytest

from converters.layout import METADATA_FILE
from embed_server.repository import ModelRepository


def finished_staging(repo: ModelRepository, name: str, extra: str | None = None):
    staging = repo.new_staging_dir()
    folder = staging / name
    folder.mkdir()
    (folder / "config.pbtxt").write_text(f'name: "{name}"')
    (folder / METADATA_FILE).write_text(json.dumps({"model_name": name}))
    if extra:
        (staging / extra).mkdir()
        (staging / extra / "config.pbtxt").write_text(f'name: "{extra}"')
    return staging


def test_a_model_appears_only_when_committed(tmp_path):
    repo = ModelRepository(tmp_path)
    staging = finished_staging(repo, "m")
    assert repo.list_models() == []
    assert not repo.is_complete("m")
    repo.commit(staging, "m")
    assert repo.is_complete("m")
    assert [m["model_name"] for m in repo.list_models()] == ["m"]
    assert [p.name for p in tmp_path.iterdir()] == ["m"]


def test_two_folder_models_commit_and_delete_together(tmp_path):
    repo = ModelRepository(tmp_path)
    (tmp_path / "m_image").mkdir()  # debris of an interrupted earlier commit
    repo.commit(finished_staging(repo, "m_text", extra="m_image"), "m_text")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m_image", "m_text"]
    assert (tmp_path / "m_image" / "config.pbtxt").is_file()
    assert repo.delete(["m_text", "m_image"], "m_text") is True
    assert list(tmp_path.iterdir()) == []


def test_leftovers_of_a_killed_conversion_are_removed(tmp_path):
    repo = ModelRepository(tmp_path)
    finished_staging(repo, "m")
    assert len(repo.remove_leftovers()) == 1
    assert list(tmp_path.iterdir()) == []


def test_delete_reports_missing_models(tmp_path):
    repo = ModelRepository(tmp_path)
    repo.commit(finished_staging(repo, "m"), "m")
    assert repo.delete(["m"], "m") is True
    assert repo.delete(["m"], "m") is False
    assert repo.metadata("m") is None


def test_commit_refuses_to_overwrite(tmp_path):
    repo = ModelRepository(tmp_path)
    repo.commit(finished_staging(repo, "m"), "m")
    with pytest.raises(FileExistsError):
        repo.commit(finished_staging(repo, "m"), "m")
