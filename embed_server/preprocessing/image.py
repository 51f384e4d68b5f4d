"""Decode image bytes and bring them to a CLIP model's input, pixel for pixel as open_clip.

open_clip's eval ``preprocess`` is a chain of PIL operations (resize with the model's
interpolation, centre crop or pad, RGB conversion) followed by scaling and mean/std
normalisation. The PIL part runs here, in the same order, so the pixels are identical; the
arithmetic part lives inside the ONNX graph, so Triton receives uint8 (4x less data).
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

from embed_server.errors import BadRequest

_INTERPOLATION = {"bicubic": Image.Resampling.BICUBIC, "bilinear": Image.Resampling.BILINEAR}


@dataclass(frozen=True)
class ImageSpec:
    """The model's preprocessing settings, as open_clip's ``PreprocessCfg`` records them."""

    height: int
    width: int
    resize_mode: str = "shortest"
    interpolation: str = "bicubic"
    fill_color: int = 0

    @classmethod
    def from_metadata(cls, meta: dict[str, Any]) -> ImageSpec:
        return cls(
            height=int(meta["height"]),
            width=int(meta["width"]),
            resize_mode=meta.get("resize_mode", "shortest"),
            interpolation=meta.get("interpolation", "bicubic"),
            fill_color=int(meta.get("fill_color", 0)),
        )


def _scaled_size(image: Image.Image, target: tuple[int, int], longest: float) -> tuple[int, int]:
    """(height, width) keeping the aspect ratio, as open_clip's ``ResizeKeepRatio``."""
    height, width = image.size[1], image.size[0]
    ratio_h, ratio_w = height / target[0], width / target[1]
    ratio = max(ratio_h, ratio_w) * longest + min(ratio_h, ratio_w) * (1.0 - longest)
    return round(height / ratio), round(width / ratio)


def _short_side_size(image: Image.Image, size: int) -> tuple[int, int]:
    """(height, width) with the short side at ``size``, as torchvision's ``Resize(int)``."""
    width, height = image.size
    short, long = (width, height) if width <= height else (height, width)
    if short == size:
        return height, width
    new_long = int(size * long / short)
    return (new_long, size) if width <= height else (size, new_long)


def _center_crop_or_pad(image: Image.Image, height: int, width: int, fill: int) -> Image.Image:
    img_w, img_h = image.size
    if width > img_w or height > img_h:
        left = (width - img_w) // 2 if width > img_w else 0
        top = (height - img_h) // 2 if height > img_h else 0
        padded_w, padded_h = max(width, img_w), max(height, img_h)
        fill_value: Any = (
            fill if image.mode in ("L", "P", "1", "I", "F") else (fill,) * len(image.getbands())
        )
        canvas = Image.new(image.mode, (padded_w, padded_h), fill_value)
        if image.mode == "P" and image.getpalette():
            canvas.putpalette(image.getpalette())
        canvas.paste(image, (left, top))
        image = canvas
        img_w, img_h = image.size
        if (img_w, img_h) == (width, height):
            return image
    top = int(round((img_h - height) / 2.0))
    left = int(round((img_w - width) / 2.0))
    return image.crop((left, top, left + width, top + height))


def prepare(image: Image.Image, spec: ImageSpec) -> np.ndarray:
    """uint8 HWC RGB array of the model's input size."""
    resample = _INTERPOLATION.get(spec.interpolation, Image.Resampling.BICUBIC)
    target = (spec.height, spec.width)
    if spec.resize_mode == "squash":
        image = image.resize((spec.width, spec.height), resample)
    elif spec.resize_mode == "longest":
        height, width = _scaled_size(image, target, longest=1.0)
        image = image.resize((width, height), resample)
        image = _center_crop_or_pad(image, spec.height, spec.width, spec.fill_color)
    else:
        if spec.height == spec.width:
            height, width = _short_side_size(image, spec.height)
            if (height, width) != (image.size[1], image.size[0]):
                image = image.resize((width, height), resample)
        else:
            height, width = _scaled_size(image, target, longest=0.0)
            image = image.resize((width, height), Image.Resampling.BICUBIC)
        image = _center_crop_or_pad(image, spec.height, spec.width, 0)
    return np.asarray(image.convert("RGB"), dtype=np.uint8)


def decode(data: bytes, index: int, max_pixels: int) -> Image.Image:
    """Open and fully decode image bytes, refusing decompression bombs before decoding.

    Opening reads only the header; the pixel count is checked against our own limit
    before ``load()`` decompresses anything.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
        width, height = image.size
        if width * height > max_pixels:
            raise BadRequest(
                f"image.{index}: {width}x{height} pixels exceeds the limit of {max_pixels} "
                "(decompression bomb refused)"
            )
        image.load()
    except BadRequest:
        raise
    except Image.DecompressionBombError:
        raise BadRequest(f"image.{index}: decompression bomb refused") from None
    except Exception:
        raise BadRequest(f"image.{index}: not a decodable image") from None
    return image


def decode_and_prepare(data: bytes, index: int, spec: ImageSpec, max_pixels: int) -> np.ndarray:
    return prepare(decode(data, index, max_pixels), spec)
