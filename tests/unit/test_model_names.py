from pathlib import Path

import pytest

from embed_server.errors import BadRequest
from embed_server.model_names import sentence_transformer_ref


@pytest.mark.parametrize(
    "name",
    [
        "../x",
        "a/../../b",
        "..",
        "",
        " ",
        "a\x00b",
        "a\nb",
        "org/name/extra",
        "a//b",
        "x" * 300,
        "org/na--me",
        "-bad/name",
        "~/model",
        "C:\\models",
    ],
)
def test_malformed_names_are_refused(name):
    with pytest.raises(BadRequest, match="model_name"):
        sentence_transformer_ref(name, [])


def test_local_paths_need_a_configured_directory(tmp_path):
    with pytest.raises(BadRequest, match="EMBED_LOCAL_MODEL_DIRS is not set"):
        sentence_transformer_ref(str(tmp_path / "m"), [])


def test_local_paths_outside_the_allowed_directories_are_refused(tmp_path):
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    for outside in ("/etc", str(allowed / ".." / "other"), str(allowed)):
        with pytest.raises(BadRequest, match="not inside"):
            sentence_transformer_ref(outside, [allowed])


def test_symlink_escaping_the_allowed_directory_is_refused(tmp_path):
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "escape").symlink_to("/etc")
    with pytest.raises(BadRequest, match="not inside"):
        sentence_transformer_ref(str(allowed / "escape"), [allowed])


def test_local_path_inside_an_allowed_directory_is_accepted(tmp_path):
    ref = sentence_transformer_ref(str(tmp_path / "my-model"), [Path("/nowhere"), tmp_path])
    assert ref.primary.startswith("my-model_")


def test_triton_names_are_safe_and_collision_free():
    names = ["a/b", "a_b", "a-b", "A/b", "intfloat/e5-small-v2", "e5-small-v2"]
    refs = [sentence_transformer_ref(n, []) for n in names]
    bases = [r.primary for r in refs]
    assert len(set(bases)) == len(bases)
    for base in bases:
        assert "/" not in base and ".." not in base and not base.startswith(".")
    assert refs[4].primary.startswith("intfloat_e5-small-v2_")
    assert sentence_transformer_ref("a/b", []).primary == bases[0]


def test_clip_names_give_two_collision_free_triton_models(tmp_path):
    from embed_server.model_names import clip_ref

    ref = clip_ref("ViT-B-32", "laion2b_s34b_b79k", [])
    assert ref.triton_models["text"].startswith("ViT-B-32_laion2b_s34b_b79k_")
    assert ref.triton_models["text"].endswith("_text_encoder")
    assert ref.triton_models["image"].endswith("_image_encoder")
    # "_" joins the parts, so the digest must tell these apart.
    assert clip_ref("a_b", "c", []).primary != clip_ref("a", "b_c", []).primary
    local = clip_ref("ViT-B-32", str(tmp_path / "ckpt.pt"), [tmp_path])
    assert local.primary.startswith("ViT-B-32_ckpt_")


@pytest.mark.parametrize(
    ("model", "pretrained", "field"),
    [
        ("../x", "tag", "model_name"),
        ("ViT-B-32", "../../etc/passwd", "pretrained"),
        ("ViT-B-32", "/etc/passwd", "pretrained"),
        ("ViT-B-32", "", "pretrained"),
        ("ViT-B-32", None, "pretrained"),
        ("", "tag", "model_name"),
    ],
)
def test_clip_names_are_validated(model, pretrained, field):
    from embed_server.model_names import clip_ref

    with pytest.raises(BadRequest, match=field):
        clip_ref(model, pretrained, [])
