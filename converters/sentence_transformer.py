"""Export a sentence-transformers model to a Triton model folder.

The whole module pipeline (Transformer, Pooling in the model's own mode, Dense layers,
Normalize) goes inside one ONNX graph, so the server's output is what
``SentenceTransformer.encode`` returns. When the pipeline ends in Normalize the graph also
exposes the embedding before it, so a request can ask for un-normalised vectors.

Tokenisation stays outside the graph (the API tokenises with Hugging Face ``tokenizers``),
so the tokenizer is saved beside the model with its fixed padding removed: padding every
text to 128 tokens costs several times the compute of padding per batch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.modules import Normalize, Pooling
from tokenizers import Tokenizer

from converters.layout import ONNX_FILE, VERSION, write_metadata
from converters.triton_config import DeploymentOptions, ModelSignature, TensorSpec, render_config
from converters.verification import worst_cosine
from embed_server.preprocessing.text import TextPreprocessor

ONNX_OPSET = 17
VERIFY_MIN_COSINE = 0.9999
VERIFY_TEXTS = [
    "A man is eating food.",
    "The quick brown fox jumps over the lazy dog near the riverbank at dawn.",
    "Ok",
    " ".join(["A very long sentence that keeps going so that it is truncated."] * 60),
]


class _Pipeline(torch.nn.Module):
    """The model's modules end to end, taking token ids and mask as plain tensors."""

    def __init__(self, model: SentenceTransformer, wants_token_types: bool) -> None:
        super().__init__()
        self.model = model
        self.wants_token_types = wants_token_types

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        features: dict[str, Any] = {"input_ids": input_ids, "attention_mask": attention_mask}
        if self.wants_token_types:
            features["token_type_ids"] = torch.zeros_like(input_ids)
        before_normalize = None
        for module in self.model:
            if isinstance(module, Normalize):
                before_normalize = features["sentence_embedding"]
            features = module(features)
        embedding = features["sentence_embedding"]
        return embedding, embedding if before_normalize is None else before_normalize


def _pooling_mode(model: SentenceTransformer) -> str:
    for module in model:
        if isinstance(module, Pooling):
            return str(module.get_config_dict().get("pooling_mode", "unknown"))
    return "none"


def _plain_tokenizer(model: SentenceTransformer, max_length: int) -> Tokenizer:
    backend = model.tokenizer.backend_tokenizer
    tokenizer = Tokenizer.from_str(backend.to_str())
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=max_length)
    return tokenizer


def _feeds(preprocessor: TextPreprocessor, texts: list[str]) -> dict[str, np.ndarray]:
    batch = preprocessor.encode(texts)
    return {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask}


def _verify(onnx_path: Path, model: SentenceTransformer, preprocessor: TextPreprocessor) -> float:
    """Worst cosine between the exported graph, fed by the API's own tokenisation, and
    ``encode`` over sample texts."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    got = session.run(["embedding"], _feeds(preprocessor, VERIFY_TEXTS))[0]
    want = model.encode(VERIFY_TEXTS, convert_to_numpy=True)
    return worst_cosine(got, want)


def convert(
    source_dir: Path,
    model_name: str,
    triton_models: dict[str, str],
    out_root: Path,
    options: DeploymentOptions,
    progress: Any = print,
) -> dict[str, Any]:
    """Write ``out_root/<triton name>`` as a complete Triton model folder; return metadata."""
    progress("export")
    triton_name = triton_models["text"]
    out_dir = out_root / triton_name
    model = SentenceTransformer(str(source_dir), device="cpu", local_files_only=True).eval()
    max_length = int(model.max_seq_length or 512)
    tokenizer = _plain_tokenizer(model, max_length)
    text_metadata = {
        "lowercase": bool(getattr(model[0], "do_lower_case", False)),
        "prompts": dict(model.prompts or {}),
        "default_prompt_name": model.default_prompt_name,
    }
    preprocessor = TextPreprocessor(tokenizer, text_metadata)
    wants_token_types = "token_type_ids" in model.tokenizer.model_input_names
    pipeline = _Pipeline(model, wants_token_types).eval()

    version_dir = out_dir / VERSION
    version_dir.mkdir(parents=True)
    onnx_path = version_dir / ONNX_FILE
    sample = _feeds(preprocessor, VERIFY_TEXTS[:3])
    with torch.no_grad():
        torch.onnx.export(
            pipeline,
            (torch.from_numpy(sample["input_ids"]), torch.from_numpy(sample["attention_mask"])),
            str(onnx_path),
            input_names=["input_ids", "attention_mask"],
            output_names=["embedding", "unnormalized"],
            dynamic_axes={
                "input_ids": {0: "batch", 1: "sequence"},
                "attention_mask": {0: "batch", 1: "sequence"},
                "embedding": {0: "batch"},
                "unnormalized": {0: "batch"},
            },
            opset_version=ONNX_OPSET,
            dynamo=False,
        )

    progress("verify")
    cosine = _verify(onnx_path, model, preprocessor)
    if cosine < VERIFY_MIN_COSINE:
        raise RuntimeError(f"exported graph disagrees with sentence-transformers (cosine {cosine})")

    dim = int(model.get_embedding_dimension())
    # The Python runner also reports, per text, its tokens and its sub-batch's width.
    reports_padding = options.backend == "python"
    token_counts = [TensorSpec("token_counts", "int64", (2,))] if reports_padding else []
    signature = ModelSignature(
        inputs=[
            TensorSpec("input_ids", "int64", (-1,), ragged=True),
            TensorSpec("attention_mask", "int64", (-1,), ragged=True),
        ],
        outputs=[
            TensorSpec("embedding", "float32", (dim,)),
            TensorSpec("unnormalized", "float32", (dim,)),
            *token_counts,
        ],
        warmup_dims={"input_ids": (16,), "attention_mask": (16,)},
    )
    (out_dir / "config.pbtxt").write_text(render_config(triton_name, signature, options))
    tokenizer.save(str(out_dir / "tokenizer.json"))
    metadata = {
        "kind": "sentence_transformer",
        "model_name": model_name,
        "source": str(source_dir),
        "triton_models": triton_models,
        "embedding_dim": dim,
        "max_seq_length": max_length,
        "pooling": _pooling_mode(model),
        "normalized": any(isinstance(m, Normalize) for m in model),
        **text_metadata,
        "backend": options.backend,
        "reports_padding": reports_padding,
        "max_batch_size": options.max_batch_size,
        "verified_min_cosine": cosine,
    }
    write_metadata(out_dir, metadata)
    return metadata
