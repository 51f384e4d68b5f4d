"""Pixels and token ids from the API's torch-free code equal open_clip's own."""

from __future__ import annotations

import io

import numpy as np
import open_clip
import pytest
from PIL import Image

from embed_server.errors import BadRequest
from embed_server.preprocessing.clip_tokenizer import ClipTokenizer
from embed_server.preprocessing.image import ImageSpec, decode, prepare
from tests.images import bomb_png, sample_images

MEAN = np.array(open_clip.OPENAI_DATASET_MEAN, dtype=np.float32)
STD = np.array(open_clip.OPENAI_DATASET_STD, dtype=np.float32)


def open_clip_pixels(image: Image.Image, **cfg) -> np.ndarray:
    transform = open_clip.image_transform(is_train=False, **cfg)
    return transform(image).numpy().transpose(1, 2, 0)


def normalized(pixels: np.ndarray) -> np.ndarray:
    return (pixels.astype(np.float32) / 255.0 - MEAN) / STD


@pytest.mark.parametrize("name", sorted(sample_images()))
@pytest.mark.parametrize(
    "cfg",
    [
        {"image_size": 224},
        {"image_size": 224, "interpolation": "bilinear"},
        {"image_size": 224, "resize_mode": "squash"},
        {"image_size": 224, "resize_mode": "longest", "fill_color": 0},
        {"image_size": (192, 256)},
    ],
    ids=["bicubic", "bilinear", "squash", "longest", "non-square"],
)
def test_pixels_match_open_clip_preprocess(name, cfg):
    data, _ = sample_images()[name]
    size = cfg["image_size"]
    height, width = (size, size) if isinstance(size, int) else size
    spec = ImageSpec(
        height=height,
        width=width,
        resize_mode=cfg.get("resize_mode", "shortest"),
        interpolation=cfg.get("interpolation", "bicubic"),
        fill_color=cfg.get("fill_color", 0),
    )
    ours = prepare(decode(data, 0, 10**8), spec)
    theirs = open_clip_pixels(Image.open(io.BytesIO(data)), **cfg)
    assert ours.shape == (height, width, 3) and ours.dtype == np.uint8
    np.testing.assert_allclose(normalized(ours), theirs, atol=1e-5)


def test_decompression_bombs_and_garbage_are_refused():
    with pytest.raises(BadRequest, match=r"image\.3: .*exceeds the limit"):
        decode(bomb_png(), 3, max_pixels=20_000_000)
    with pytest.raises(BadRequest, match=r"image\.1: not a decodable image"):
        decode(b"GIF89a but not really", 1, max_pixels=10**8)


TEXTS = [
    "a photo of a cat",
    "Hello, WORLD!! it's 2024 &amp; &lt;b&gt; café naïve 日本語 😀",
    "  multiple   spaces\tand\nnewlines ",
    "",
    "don't you'll we've",
    "mojibake: â€™ Ã©",
    " ".join(["a text much longer than the context length"] * 30),
    "<start_of_text> inside <end_of_text>",
    "under_score and punctuation!?",
]


@pytest.mark.parametrize("clean", ["lower", "whitespace", "canonicalize"])
def test_token_ids_match_open_clip(clean):
    reference = open_clip.tokenizer.SimpleTokenizer(context_length=77, clean=clean)
    ours = ClipTokenizer(open_clip.tokenizer.default_bpe(), 77, clean)
    ids, counts = ours(TEXTS)
    np.testing.assert_array_equal(ids, reference(TEXTS).numpy())
    assert ids[6, -1] == reference.eot_token_id  # end-of-text kept on truncation
    assert counts[6] == 77
