"""The converter child process as the API runs it: overlong output lines, and the paths
it is given. A stand-in interpreter replaces ``python -m converters`` so the real
subprocess and pipe handling run without torch."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from converters.layout import METADATA_FILE
from converters.triton_config import DeploymentOptions
from embed_server.conversion import run_converter, run_reporting_child
from embed_server.model_names import clip_ref, sentence_transformer_ref

# Records its argv, prints a 100 KiB line (over asyncio's 64 KiB line limit) if asked to,
# writes a model folder like a converter, then reports the result.
_FAKE_CONVERTER = """#!{python}
import json, os, sys
from pathlib import Path
argv = sys.argv[1:]
Path({argv_file!r}).write_text(json.dumps(argv))
if os.environ.get("FAKE_CONVERTER_LONG_LINE"):
    print("warning: " + "x" * 100_000, flush=True)
out = Path(argv[argv.index("--out") + 1])
primary = json.loads(argv[argv.index("--triton-models") + 1])["text"]
metadata = {{"model_name": argv[argv.index("--model-name") + 1], "triton_models": {{}}}}
if "--pretrained" in argv:
    metadata["pretrained"] = argv[argv.index("--pretrained") + 1]
(out / primary).mkdir(parents=True)
(out / primary / "embedding_model.json").write_text(json.dumps(metadata))
print(json.dumps({{"stage": "export"}}), flush=True)
print(json.dumps({{"result": metadata}}), flush=True)
"""


@pytest.fixture
def fake_converter(tmp_path, monkeypatch) -> Path:
    """Makes ``sys.executable`` the stand-in; returns the file its argv is written to."""
    argv_file = tmp_path / "argv.json"
    script = tmp_path / "fake-python"
    script.write_text(_FAKE_CONVERTER.format(python=sys.executable, argv_file=str(argv_file)))
    script.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(script))
    return argv_file


def _convert(ref, out: Path) -> dict:
    stages: list[str] = []
    result = asyncio.run(run_converter(ref, out, DeploymentOptions(), 60, stages.append))
    assert stages == ["export"]
    return result


def test_a_converter_line_over_64_kib_is_skipped_and_the_result_still_read(
    tmp_path, fake_converter, monkeypatch
):
    monkeypatch.setenv("FAKE_CONVERTER_LONG_LINE", "1")
    ref = sentence_transformer_ref("org/model", [])
    assert _convert(ref, tmp_path / "out")["model_name"] == "org/model"


def test_the_reader_survives_overlong_lines_with_and_without_an_ending():
    child = (
        "import json, sys\n"
        "sys.stdout.write('y' * 200_000 + '\\n')\n"
        "sys.stdout.write(json.dumps({'stage': 'download'}) + '\\n')\n"
        "sys.stdout.write('z' * 150_000)\n"
    )
    messages: list[dict] = []
    returncode, _ = asyncio.run(
        run_reporting_child([sys.executable, "-c", child], dict(os.environ), 30, messages.append)
    )
    assert (returncode, messages) == (0, [{"stage": "download"}])


def test_the_converter_opens_the_checked_real_path_even_if_the_link_is_swapped(
    tmp_path, fake_converter
):
    allowed = tmp_path / "models"
    (allowed / "checked").mkdir(parents=True)
    elsewhere = tmp_path / "secret"
    elsewhere.mkdir()
    link = allowed / "link"
    link.symlink_to(allowed / "checked")
    ref = sentence_transformer_ref(str(link), [allowed])
    link.unlink()
    link.symlink_to(elsewhere)  # swapped between the check and the conversion

    out = tmp_path / "out"
    result = _convert(ref, out)
    argv = json.loads(fake_converter.read_text())
    assert argv[argv.index("--model-name") + 1] == str((allowed / "checked").resolve())
    # The model keeps the name the caller gave, in the result and on disk.
    assert result["model_name"] == str(link)
    on_disk = json.loads((out / ref.primary / METADATA_FILE).read_text())
    assert on_disk["model_name"] == str(link)


def test_a_clip_checkpoint_is_passed_by_its_checked_real_path(tmp_path, fake_converter):
    allowed = tmp_path / "models"
    allowed.mkdir()
    (allowed / "weights.bin").write_bytes(b"")
    link = allowed / "latest.bin"
    link.symlink_to(allowed / "weights.bin")
    ref = clip_ref("ViT-B-32", str(link), [allowed])
    link.unlink()
    link.symlink_to(tmp_path / "elsewhere.bin")

    result = _convert(ref, tmp_path / "out")
    argv = json.loads(fake_converter.read_text())
    assert argv[argv.index("--pretrained") + 1] == str((allowed / "weights.bin").resolve())
    assert argv[argv.index("--model-name") + 1] == "ViT-B-32"
    assert result["pretrained"] == str(link)
