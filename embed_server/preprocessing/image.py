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
# What people send: photos (JPEG; the multi-picture JPEGs many phones write open through
# Pillow's JPEG opener, as format MPO), web images (PNG, GIF, WEBP) and BMP. Every other
# decoder Pillow has (EPS through Ghostscript, PSD, dozens of rare formats) is attack
# surface nobody needs here. TIFF is left out too: scanners and archives write it, browsers
# mostly do not show it, and libtiff with its many codecs is the largest of those decoders.
ALLOWED_FORMATS = ("JPEG", "PNG", "GIF", "WEBP", "BMP")


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


def _scaled_size(size: tuple[int, int], target: tuple[int, int], longest: float) -> tuple[int, int]:
    """(height, width) keeping the aspect ratio, as open_clip's ``ResizeKeepRatio``."""
    width, height = size
    ratio_h, ratio_w = height / target[0], width / target[1]
    ratio = max(ratio_h, ratio_w) * longest + min(ratio_h, ratio_w) * (1.0 - longest)
    return round(height / ratio), round(width / ratio)


def _short_side_size(source: tuple[int, int], size: int) -> tuple[int, int]:
    """(height, width) with the short side at ``size``, as torchvision's ``Resize(int)``."""
    width, height = source
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


def resized_size(source: tuple[int, int], spec: ImageSpec) -> tuple[int, int] | None:
    """(width, height) the resize step makes of a ``source`` (width, height), in every
    resize mode; None when the image keeps its size. Known before any pixel is touched."""
    target = (spec.height, spec.width)
    if spec.resize_mode == "squash":
        return spec.width, spec.height
    if spec.resize_mode == "longest":
        height, width = _scaled_size(source, target, longest=1.0)
    elif spec.height == spec.width:
        height, width = _short_side_size(source, spec.height)
        if (width, height) == source:
            return None
    else:
        height, width = _scaled_size(source, target, longest=0.0)
    return width, height


def prepare(image: Image.Image, spec: ImageSpec) -> np.ndarray:
    """uint8 HWC RGB array of the model's input size."""
    size = resized_size(image.size, spec)
    if size is not None:
        # open_clip resizes a non-square "shortest" target with bicubic whatever the model says.
        non_square = spec.resize_mode == "shortest" and spec.height != spec.width
        resample = _INTERPOLATION.get(spec.interpolation, Image.Resampling.BICUBIC)
        image = image.resize(size, Image.Resampling.BICUBIC if non_square else resample)
    if spec.resize_mode != "squash":
        fill = spec.fill_color if spec.resize_mode == "longest" else 0
        image = _center_crop_or_pad(image, spec.height, spec.width, fill)
    return np.asarray(image.convert("RGB"), dtype=np.uint8)


def _refuse_costly(image: Image.Image, index: int, spec: ImageSpec, max_pixels: int) -> None:
    """Refuse, from the header alone, an image whose decoding or resizing costs too much.

    The resized size counts as much as the source: a 1x40,000 PNG of 100 bytes becomes
    224x8,960,000 on a "shortest" model (2e9 pixels); a 1000x1 one becomes 224x0 on a
    "longest" model, which no resize can make.
    """
    width, height = image.size
    if width * height > max_pixels:
        raise BadRequest(
            f"image.{index}: {width}x{height} pixels exceeds the limit of {max_pixels} "
            "(decompression bomb refused)"
        )
    size = resized_size(image.size, spec)
    if size is None:
        return
    if min(size) < 1:
        raise BadRequest(
            f"image.{index}: {width}x{height} pixels is too thin to resize to the model's "
            f"input (it would become {size[0]}x{size[1]})"
        )
    if size[0] * size[1] > max_pixels:
        raise BadRequest(
            f"image.{index}: {width}x{height} pixels would be resized to {size[0]}x{size[1]}, "
            f"over the limit of {max_pixels} pixels"
        )


def _format_of(data: bytes) -> str | None:
    """The format Pillow would take these bytes for, judged on its signature checks alone
    (no decoder of a refused format parses anything)."""
    Image.init()
    prefix = data[:16]
    for name, (_, accept) in Image.OPEN.items():
        try:
            if accept is not None and accept(prefix):
                return name
        except Exception:  # some checks assume a full prefix; a short body is no image
            continue
    return None


def decode(data: bytes, index: int, spec: ImageSpec, max_pixels: int) -> Image.Image:
    """Open and fully decode image bytes of an allowed format, refusing costly images first.

    Opening reads only the header; the pixel counts of the source and of the resized
    image are checked against our own limit before ``load()`` decompresses anything.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data), formats=ALLOWED_FORMATS)
        _refuse_costly(image, index, spec, max_pixels)
        image.load()
    except BadRequest:
        raise
    except Image.DecompressionBombError:
        raise BadRequest(f"image.{index}: decompression bomb refused") from None
    except Image.UnidentifiedImageError:
        found = _format_of(data)
        if found is None or found in ALLOWED_FORMATS:
            raise BadRequest(f"image.{index}: not a decodable image") from None
        raise BadRequest(
            f"image.{index}: {found} images are not accepted "
            f"(accepted: {', '.join(ALLOWED_FORMATS)})"
        ) from None
    except Exception:
        raise BadRequest(f"image.{index}: not a decodable image") from None
    return image


def decode_and_prepare(data: bytes, index: int, spec: ImageSpec, max_pixels: int) -> np.ndarray:
    return prepare(decode(data, index, spec, max_pixels), spec)
