"""OpenCLIP models with Hugging Face tokenizers, published to a local Hugging Face cache.

Each is a real open_clip architecture family at toy size with random weights, laid out as
an ``hf-hub:`` repository (``open_clip_config.json``, weights, tokenizer files), so the
server loads it through open_clip's own hub mechanism while the hub stays unreachable:

- ``siglip``: open_clip's own text transformer (last-token pooling, no causal mask) with a
  T5-style sentencepiece (Unigram) tokenizer and ``canonicalize`` cleaning, as SigLIP;
- ``roberta``: a Hugging Face RoBERTa text tower with its byte-level BPE tokenizer, as
  ``roberta-ViT-B-32`` and the xlm-roberta models.

The same model object that wrote the weights is returned as the reference, with the
tokenizer open_clip builds for such a config (``HFTokenizer`` on the same files).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_CORPUS = [
    "a photo of a cat sitting on a red chair",
    "two dogs playing in the snow near the lake",
    "the quick brown fox jumps over the lazy dog",
    "an aerial view of a city at night with bright lights",
    "a diagram of a neural network with many layers",
    "Caf\u00e9 cr\u00e8me and a croissant on a small table",
] * 20
_COMMIT = "89abcdef0123456789abcdef0123456789abcdef"
_VISION = {"image_size": 64, "layers": 2, "width": 64, "head_width": 32, "patch_size": 16}
_PREPROCESS = {
    "mean": [0.5, 0.5, 0.5],
    "std": [0.5, 0.5, 0.5],
    "interpolation": "bicubic",
    "resize_mode": "squash",
}


def hub_snapshot(hf_home: Path, repo_id: str, commit: str = _COMMIT) -> Path:
    """An empty snapshot folder of ``repo_id``, laid out as ``huggingface_hub`` caches it
    (``refs/main`` naming the commit), for the caller to fill."""
    folder = hf_home / "hub" / ("models--" + repo_id.replace("/", "--"))
    (folder / "snapshots" / commit).mkdir(parents=True)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(commit)
    return folder / "snapshots" / commit


@dataclass
class HubClip:
    model_name: str
    model: Any
    tokenizer: Any
    preprocess: Any


def unigram_tokenizer(folder: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.Unigram())
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=160, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>"
    )
    tokenizer.train_from_iterator(_CORPUS, trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="$A </s>", special_tokens=[("</s>", 1)]
    )
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
    ).save_pretrained(folder)


def byte_level_bpe_tokenizer(folder: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(_CORPUS, trainer)
    tokenizer.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        sep_token="</s>",
        cls_token="<s>",
        pad_token="<pad>",
        unk_token="<unk>",
    ).save_pretrained(folder)


def _text_config(variant: str, folder: Path, name_in_config: str) -> dict[str, Any]:
    from transformers import AutoTokenizer

    vocab_size = len(AutoTokenizer.from_pretrained(str(folder)))
    if variant == "siglip":
        return {
            "context_length": 32,
            "vocab_size": vocab_size,
            "hf_tokenizer_name": name_in_config,
            "tokenizer_kwargs": {"clean": "canonicalize"},
            "width": 64,
            "heads": 2,
            "layers": 2,
            "no_causal_mask": True,
            "proj_bias": True,
            "pool_type": "last",
            "norm_kwargs": {"eps": 1e-6},
        }
    return {
        "context_length": 24,
        "hf_model_name": name_in_config,
        "hf_tokenizer_name": name_in_config,
        "hf_proj_type": "mlp",
        "hf_pooler_type": "mean_pooler",
    }


def build_hub_clip(hf_home: Path, variant: str, seed: int) -> HubClip:
    """Publish a toy ``variant`` model as ``hf-hub:test-org/tiny-<variant>-clip``."""
    import open_clip
    import torch
    from transformers import RobertaConfig

    repo_id = f"test-org/tiny-{variant}-clip"
    snapshot = hub_snapshot(hf_home, repo_id)
    # Built here from a local copy (open_clip resolves names in config through the hub).
    local = hf_home.parent / f"tiny-{variant}-clip-local"
    local.mkdir()
    if variant == "siglip":
        unigram_tokenizer(local)
        # As in timm's hub repositories: a config without a transformers model type.
        (local / "config.json").write_text(json.dumps({"architecture": "tiny-siglip"}))
    else:
        byte_level_bpe_tokenizer(local)
        vocab_size = len(json.loads((local / "tokenizer.json").read_text())["model"]["vocab"])
        RobertaConfig(
            vocab_size=vocab_size,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=40,
            pad_token_id=1,
            bos_token_id=0,
            eos_token_id=2,
        ).save_pretrained(local)

    def model_config(name_in_config: str) -> dict[str, Any]:
        return {
            "embed_dim": 32,
            "vision_cfg": _VISION,
            "text_cfg": _text_config(variant, local, name_in_config),
            **({"init_logit_bias": -10} if variant == "siglip" else {}),
        }

    config_file = local / f"tiny-{variant}-clip-local.json"
    config_file.write_text(json.dumps(model_config(str(local))))
    open_clip.add_model_config(config_file)
    torch.manual_seed(seed)
    model = open_clip.create_model(config_file.stem, pretrained=None, pretrained_text=False)
    model = model.eval()

    for item in local.iterdir():
        if item != config_file:
            shutil.copy(item, snapshot / item.name)
    hub_config = model_config(repo_id)
    (snapshot / "open_clip_config.json").write_text(
        json.dumps({"model_cfg": hub_config, "preprocess_cfg": _PREPROCESS})
    )
    torch.save(model.state_dict(), snapshot / "open_clip_pytorch_model.bin")
    tokenizer = open_clip.tokenizer.HFTokenizer(
        str(local),
        context_length=hub_config["text_cfg"]["context_length"],
        **hub_config["text_cfg"].get("tokenizer_kwargs", {}),
    )
    preprocess = open_clip.image_transform(
        _VISION["image_size"],
        is_train=False,
        mean=_PREPROCESS["mean"],
        std=_PREPROCESS["std"],
        resize_mode=_PREPROCESS["resize_mode"],
        interpolation=_PREPROCESS["interpolation"],
    )
    return HubClip(f"hf-hub:{repo_id}", model, tokenizer, preprocess)


def publish_pretrained_tag(hf_home: Path, arch: str, tag: str, seed: int) -> Path:
    """Random weights for an open_clip pretrained tag, where open_clip's own download code
    looks for them: the tag's Hugging Face repository and file, in the local cache."""
    import open_clip
    import torch
    from open_clip.pretrained import get_pretrained_cfg

    owner, repo, filename = get_pretrained_cfg(arch, tag)["hf_hub"].split("/", 2)
    snapshot = hub_snapshot(hf_home, f"{owner}/{repo}")
    torch.manual_seed(seed)
    model = open_clip.create_model(arch, pretrained=None)
    weights = snapshot / (filename or "open_clip_pytorch_model.bin")
    torch.save(model.state_dict(), weights)
    return weights
