"""Pixels from the API's torch-free code equal open_clip's own."""

from __future__ import annotations

import io
import time

import numpy as np
import open_clip
import pytest
from PIL import Image

from embed_server.errors import BadRequest
from embed_server.preprocessing.image import ImageSpec, decode, decode_and_prepare, prepare
from tests.images import bomb_png, encode, sample_images

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
    ours = prepare(decode(data, 0, spec, 10**8), spec)
    theirs = open_clip_pixels(Image.open(io.BytesIO(data)), **cfg)
    assert ours.shape == (height, width, 3) and ours.dtype == np.uint8
    np.testing.assert_allclose(normalized(ours), theirs, atol=1e-5)


SPEC = ImageSpec(height=224, width=224)


def test_decompression_bombs_and_garbage_are_refused():
    with pytest.raises(BadRequest, match=r"image\.3: .*exceeds the limit"):
        decode(bomb_png(), 3, SPEC, max_pixels=20_000_000)
    with pytest.raises(BadRequest, match=r"image\.1: not a decodable image"):
        decode(b"GIF89a but not really", 1, SPEC, max_pixels=10**8)


def thin_png(width: int, height: int) -> bytes:
    return encode(Image.new("L", (width, height), 128), "PNG")


@pytest.mark.parametrize(
    ("source", "spec", "max_pixels", "reason"),
    [
        # The case: 100 bytes, upscaled to 224x8,960,000 (2e9 pixels, ~8 GB).
        ((1, 40_000), SPEC, 40_000_000, "would be resized to 224x8960000"),
        ((1, 2_000), SPEC, 1_000_000, "would be resized to 224x448000"),
        ((3_000, 1), ImageSpec(height=192, width=256), 1_000_000, "would be resized to"),
        ((1_000, 1), ImageSpec(224, 224, resize_mode="longest"), 10**8, "too thin"),
        ((1, 1_000), ImageSpec(224, 224, resize_mode="longest"), 10**8, "too thin"),
    ],
    ids=["1x40000-shortest", "1x2000-shortest", "3000x1-non-square", "1000x1-longest", "1x1000"],
)
def test_resizes_past_the_limit_or_to_nothing_are_refused_from_the_header(
    source, spec, max_pixels, reason
):
    data = thin_png(*source)
    started = time.perf_counter()
    with pytest.raises(BadRequest, match=rf"^image\.2: {source[0]}x{source[1]} pixels .*{reason}"):
        decode_and_prepare(data, 2, spec, max_pixels)
    assert time.perf_counter() - started < 0.5


def test_thin_images_within_the_limits_still_resize():
    squash = ImageSpec(224, 224, resize_mode="squash")
    assert decode_and_prepare(thin_png(1_000, 1), 0, squash, 10**8).shape == (224, 224, 3)
    assert decode_and_prepare(thin_png(1, 200), 0, SPEC, 10**8).shape == (224, 224, 3)


@pytest.mark.parametrize("fmt", ["PPM", "TIFF", "EPS", "PCX", "ICO"])
def test_formats_outside_the_allowed_list_are_refused_naming_the_format(fmt):
    data = encode(Image.new("RGB", (64, 48), (10, 200, 30)), fmt)
    assert Image.open(io.BytesIO(data)).format == fmt  # Pillow would open it
    with pytest.raises(BadRequest, match=rf"^image\.4: {fmt} images are not accepted"):
        decode_and_prepare(data, 4, SPEC, 10**8)


@pytest.mark.parametrize("data", [b"", b"P", b"II*", b"\x00\x00\x01"])
def test_a_few_bytes_are_not_a_decodable_image(data):
    with pytest.raises(BadRequest, match=r"^image\.0: not a decodable image"):
        decode_and_prepare(data, 0, SPEC, 10**8)


def test_multi_picture_jpegs_from_phones_are_accepted():
    frames = [Image.new("RGB", (64, 48), c) for c in ((200, 10, 10), (10, 10, 200))]
    buffer = io.BytesIO()
    frames[0].save(buffer, "MPO", save_all=True, append_images=frames[1:])
    assert Image.open(io.BytesIO(buffer.getvalue())).format == "MPO"
    pixels = decode_and_prepare(buffer.getvalue(), 0, SPEC, 10**8)
    assert pixels.shape == (224, 224, 3) and pixels[..., 0].mean() > 150
