"""Export an OpenCLIP model as two Triton models: a text encoder and an image encoder.

The image encoder takes uint8 pixels (batch, height, width, 3) already resized and cropped
by the API; conversion to float, scaling to [0, 1] and the model's mean/std normalisation
happen inside the graph. The text encoder takes open_clip token ids at the model's context
length. Both return the un-normalised embedding, as ``encode_text``/``encode_image`` do.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import open_clip
import torch
from PIL import Image

from converters.layout import ONNX_FILE, VERSION, write_metadata
from converters.sources import SourceNotFound
from converters.triton_config import DeploymentOptions, ModelSignature, TensorSpec, render_config
from converters.verification import worst_cosine
from embed_server.model_names import HF_HUB_PREFIX
from embed_server.preprocessing.clip_bpe import build_tokenizer
from embed_server.preprocessing.clip_text import OPEN_CLIP_BPE, ClipTextTokenizer

ONNX_OPSET = 17
VERIFY_MIN_COSINE = 0.999
TOKENIZER_FILE = "tokenizer.json"


class _TextEncoder(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.encode_text(input_ids, normalize=False)


class _ImageEncoder(torch.nn.Module):
    def __init__(self, model: torch.nn.Module, mean: list[float], std: list[float]) -> None:
        super().__init__()
        self.model = model
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, 3, 1, 1))

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        x = pixels.permute(0, 3, 1, 2).to(torch.float32) / 255.0
        return self.model.encode_image((x - self.mean) / self.std, normalize=False)


def _create(model_name: str, pretrained: str) -> tuple[torch.nn.Module, Any, Any]:
    from_hub = model_name.startswith(HF_HUB_PREFIX)
    if not from_hub and model_name not in set(open_clip.list_models()):
        raise SourceNotFound(f"{model_name!r} is not an OpenCLIP architecture")
    if os.path.isabs(pretrained):
        if not os.path.isfile(pretrained):
            raise SourceNotFound(f"checkpoint {Path(pretrained).name!r} does not exist")
    elif not from_hub:
        tags = open_clip.list_pretrained_tags_by_model(model_name)
        if pretrained not in tags:
            raise SourceNotFound(
                f"{pretrained!r} is not a pretrained tag of {model_name} (known: {', '.join(tags)})"
            )
    try:
        # An hf-hub: model's weights come with it; open_clip ignores (and warns about) a tag.
        weights = None if from_hub else pretrained
        model, _, preprocess = open_clip.create_model_and_transforms(
            model_name, pretrained=weights, device="cpu"
        )
    except (OSError, RuntimeError) as error:
        if "offline" in str(error).lower() or "connect" in str(error).lower():
            raise SourceNotFound(
                f"{model_name} {pretrained} is not in the local cache and cannot be downloaded"
            ) from error
        raise
    return model.eval(), preprocess, open_clip.get_tokenizer(model_name)


_CLEAN_NAMES = {
    open_clip.tokenizer._clean_lower: "lower",
    open_clip.tokenizer._clean_whitespace: "whitespace",
    open_clip.tokenizer._clean_canonicalize: "canonicalize",
}
# Cases tokenisers disagree on: case, accents, HTML entities, odd spacing, punctuation,
# emoji, contractions, special tokens in the text (alone, glued to punctuation, upper
# case), a long word, and a text far past any context length (the end token must stay).
_TOKENIZER_PROBES = [
    "a photo of a cat",
    "A Photo of TWO Dogs, playing! It's, they'RE",
    "  caf\u00e9 &amp; cr\u00e8me br\u00fbl\u00e9e\t\n  under_scores  ",
    "\u6771\u4eac\u306e\u591c\u666f \U0001f303",
    "<end_of_text> x!<start_of_text> <START_OF_TEXT>",
    "supercalifragilistic" * 50,
    "word " * 400,
]


def _simple_tokenizer_metadata(tokenizer: Any, out_dir: Path) -> dict[str, Any]:
    if tokenizer.reduction_fn is not None:
        raise ValueError("tokenizers with a reduction mask are not supported")
    rust = build_tokenizer(Path(open_clip.tokenizer.default_bpe()))
    if rust.get_vocab_size() != tokenizer.vocab_size:
        raise ValueError("tokenizers with additional special tokens are not supported")
    rust.save(str(out_dir / TOKENIZER_FILE))
    return {
        "type": OPEN_CLIP_BPE,
        "tokenizer_file": TOKENIZER_FILE,
        "context_length": int(tokenizer.context_length),
        "clean": _CLEAN_NAMES[tokenizer.clean_fn],
    }


def _hf_tokenizer_metadata(tokenizer: Any, out_dir: Path) -> dict[str, Any]:
    if tokenizer.tokenizer_mode:
        raise ValueError(f"tokenizer mode {tokenizer.tokenizer_mode!r} is not supported")
    hf = tokenizer.tokenizer
    backend = getattr(hf, "backend_tokenizer", None)
    if backend is None:
        raise ValueError(f"{type(hf).__name__} has no fast (Rust) tokenizer to export")
    if hf.pad_token_id is None:
        raise ValueError("the model's tokenizer has no padding token")
    backend.save(str(out_dir / TOKENIZER_FILE))
    return {
        "type": "hf",
        "tokenizer_file": TOKENIZER_FILE,
        "context_length": int(tokenizer.context_length),
        "clean": _CLEAN_NAMES[tokenizer.clean_fn],
        "pad_token": str(hf.pad_token),
        "pad_token_id": int(hf.pad_token_id),
        "sep_token_id": hf.sep_token_id,
        "strip_sep_token": bool(tokenizer.strip_sep_token),
        "padding_side": hf.padding_side,
        "truncation_side": hf.truncation_side,
    }


def _tokenizer_metadata(tokenizer: Any, out_dir: Path) -> dict[str, Any]:
    """Save what the API needs to tokenise as open_clip does, and prove it does."""
    if isinstance(tokenizer, open_clip.tokenizer.SimpleTokenizer):
        metadata = _simple_tokenizer_metadata(tokenizer, out_dir)
    elif isinstance(tokenizer, open_clip.tokenizer.HFTokenizer):
        metadata = _hf_tokenizer_metadata(tokenizer, out_dir)
    else:
        raise ValueError(f"{type(tokenizer).__name__} text tokenisation is not supported")
    served = ClipTextTokenizer.from_model_dir(out_dir, metadata)
    want = tokenizer(_TOKENIZER_PROBES).numpy()
    got, _ = served(_TOKENIZER_PROBES)
    if got.shape != want.shape:
        raise ValueError(
            f"the served tokenisation has shape {got.shape}, open_clip's {tuple(want.shape)}"
        )
    differing = int((got != want).sum())
    if differing:
        raise ValueError(
            f"the served tokenisation differs from open_clip's in {differing} of "
            f"{want.size} token ids on the probe texts"
        )
    return metadata


def _export(module: torch.nn.Module, sample: torch.Tensor, name: str, path: Path) -> None:
    # The fused attention kernel that eval mode picks has no ONNX form.
    torch.backends.mha.set_fastpath_enabled(False)
    with torch.no_grad():
        torch.onnx.export(
            module,
            (sample,),
            str(path),
            input_names=[name],
            output_names=["embedding"],
            dynamic_axes={name: {0: "batch"}, "embedding": {0: "batch"}},
            opset_version=ONNX_OPSET,
            dynamo=False,
        )


def convert(
    model_name: str,
    pretrained: str,
    triton_models: dict[str, str],
    out_root: Path,
    options: DeploymentOptions,
    progress: Any = print,
) -> dict[str, Any]:
    import onnxruntime as ort

    model, preprocess, tokenizer = _create(model_name, pretrained)
    cfg = dict(getattr(model.visual, "preprocess_cfg", {}))
    size = cfg.get("size", model.visual.image_size)
    height, width = (size, size) if isinstance(size, int) else tuple(size)
    mean, std = list(cfg.get("mean")), list(cfg.get("std"))

    progress("export")
    text_dir = out_root / triton_models["text"]
    image_dir = out_root / triton_models["image"]
    for folder in (text_dir, image_dir):
        (folder / VERSION).mkdir(parents=True)
    tokenizer_meta = _tokenizer_metadata(tokenizer, text_dir)
    context = tokenizer_meta["context_length"]
    texts = ["a photo of a cat", "a diagram", "x " * 200]
    ids = tokenizer(texts)
    _export(_TextEncoder(model), ids, "input_ids", text_dir / VERSION / ONNX_FILE)
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, size=(2, height, width, 3), dtype=np.uint8)
    image_encoder = _ImageEncoder(model, mean, std).eval()
    _export(image_encoder, torch.from_numpy(pixels), "pixels", image_dir / VERSION / ONNX_FILE)

    progress("verify")
    text_session = ort.InferenceSession(str(text_dir / VERSION / ONNX_FILE))
    image_session = ort.InferenceSession(str(image_dir / VERSION / ONNX_FILE))
    with torch.no_grad():
        want_text = model.encode_text(ids).numpy()
        images = torch.stack([preprocess(Image.fromarray(p)) for p in pixels])
        want_image = model.encode_image(images).numpy()
    got_text = text_session.run(None, {"input_ids": ids.numpy()})[0]
    got_image = image_session.run(None, {"pixels": pixels})[0]
    cosine = min(worst_cosine(got_text, want_text), worst_cosine(got_image, want_image))
    if cosine < VERIFY_MIN_COSINE:
        raise RuntimeError(f"exported graphs disagree with open_clip (cosine {cosine})")

    dim = int(got_text.shape[1])
    text_signature = ModelSignature(
        inputs=[TensorSpec("input_ids", "int64", (context,))],
        outputs=[TensorSpec("embedding", "float32", (dim,))],
    )
    image_signature = ModelSignature(
        inputs=[TensorSpec("pixels", "uint8", (height, width, 3))],
        outputs=[TensorSpec("embedding", "float32", (int(got_image.shape[1]),))],
    )
    (text_dir / "config.pbtxt").write_text(
        render_config(triton_models["text"], text_signature, options)
    )
    (image_dir / "config.pbtxt").write_text(
        render_config(triton_models["image"], image_signature, options)
    )
    metadata = {
        "kind": "clip",
        "model_name": model_name,
        "pretrained": pretrained,
        "source": pretrained,
        "triton_models": triton_models,
        "embedding_dim": dim,
        "normalized": False,
        "text": tokenizer_meta,
        "image": {
            "height": height,
            "width": width,
            "resize_mode": cfg.get("resize_mode", "shortest"),
            "interpolation": cfg.get("interpolation", "bicubic"),
            "fill_color": int(cfg.get("fill_color", 0)),
            "mean": mean,
            "std": std,
        },
        "backend": options.backend,
        "max_batch_size": options.max_batch_size,
        "verified_min_cosine": cosine,
    }
    write_metadata(text_dir, metadata)
    return metadata
