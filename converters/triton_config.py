"""Generate ``config.pbtxt`` for an exported ONNX model.

One generator for every model family: a converter describes its tensors, the deployment
options (from settings) say how Triton should batch and place it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

RUNNER_BACKEND_NAME = "onnxruntime_python"

_DTYPES = {"int64": "TYPE_INT64", "float32": "TYPE_FP32", "uint8": "TYPE_UINT8"}


@dataclass(frozen=True)
class TensorSpec:
    """One model input or output, without the batch dimension."""

    name: str
    dtype: Literal["int64", "float32", "uint8"]
    dims: tuple[int, ...]
    ragged: bool = False


@dataclass(frozen=True)
class DeploymentOptions:
    """How Triton should serve a model; filled from :class:`embed_server.settings.Settings`."""

    backend: Literal["onnxruntime", "python"] = "python"
    max_batch_size: int = 64
    max_queue_delay_us: int = 2000
    instance_count: int = 1
    instance_kind: Literal["cpu", "gpu"] = "cpu"
    intra_op_threads: int = 0
    single_text_spinning: bool = True
    padding_efficiency: float = 0.9
    warmup: bool = True
    # Past this queue length Triton rejects at once (the API answers 503 + Retry-After);
    # a request queued longer than the timeout is rejected too (504). 0: unbounded.
    max_queue_size: int = 512
    queue_timeout_us: int = 30_000_000
    # Not how Triton serves it but how the conversion may get it: a Hub model whose
    # selected files add up to more is refused before anything is downloaded.
    max_download_bytes: int = 10 * 1024**3


@dataclass(frozen=True)
class ModelSignature:
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    warmup_dims: dict[str, tuple[int, ...]] = field(default_factory=dict)


def _tensor_block(spec: TensorSpec, ragged_ok: bool) -> str:
    dims = ", ".join(str(d) for d in spec.dims)
    lines = [
        f'    name: "{spec.name}"',
        f"    data_type: {_DTYPES[spec.dtype]}",
        f"    dims: [ {dims} ]",
    ]
    if spec.ragged and ragged_ok:
        lines.append("    allow_ragged_batch: true")
    return "  {\n" + "\n".join(lines) + "\n  }"


def _warmup_block(signature: ModelSignature) -> str:
    entries = []
    for spec in signature.inputs:
        dims = signature.warmup_dims.get(spec.name, spec.dims)
        dims_text = ", ".join(str(d) for d in dims)
        data = "random_data: true" if spec.dtype == "uint8" else "zero_data: true"
        entries.append(
            "    inputs {\n"
            f'      key: "{spec.name}"\n'
            "      value: {\n"
            f"        data_type: {_DTYPES[spec.dtype]}\n"
            f"        dims: [ {dims_text} ]\n"
            f"        {data}\n"
            "      }\n"
            "    }"
        )
    return (
        "model_warmup [\n  {\n"
        '    name: "warmup"\n'
        "    batch_size: 1\n" + "\n".join(entries) + "\n  }\n]\n"
    )


def render_config(name: str, signature: ModelSignature, options: DeploymentOptions) -> str:
    """The text of ``config.pbtxt`` for model ``name``."""
    native = options.backend == "onnxruntime"
    head = 'platform: "onnxruntime_onnx"' if native else f'backend: "{RUNNER_BACKEND_NAME}"'
    inputs = ",\n".join(_tensor_block(s, ragged_ok=not native) for s in signature.inputs)
    outputs = ",\n".join(_tensor_block(s, ragged_ok=False) for s in signature.outputs)
    kind = "KIND_GPU" if options.instance_kind == "gpu" else "KIND_CPU"
    text = (
        f'name: "{name}"\n'
        f"{head}\n"
        f"max_batch_size: {options.max_batch_size}\n"
        f"input [\n{inputs}\n]\n"
        f"output [\n{outputs}\n]\n"
        "dynamic_batching {\n"
        f"  max_queue_delay_microseconds: {options.max_queue_delay_us}\n"
        "  default_queue_policy {\n"
        "    timeout_action: REJECT\n"
        f"    default_timeout_microseconds: {options.queue_timeout_us}\n"
        "    allow_timeout_override: true\n"
        f"    max_queue_size: {options.max_queue_size}\n"
        "  }\n"
        "}\n"
        f"instance_group [\n  {{\n    count: {options.instance_count}\n    kind: {kind}\n  }}\n]\n"
    )
    params: dict[str, str] = {}
    if native:
        if options.intra_op_threads:
            params["intra_op_thread_count"] = str(options.intra_op_threads)
    else:
        params["padding_efficiency"] = str(options.padding_efficiency)
        params["single_text_spinning"] = "1" if options.single_text_spinning else "0"
        if options.intra_op_threads:
            params["intra_op_threads"] = str(options.intra_op_threads)
    for key, value in params.items():
        text += f'parameters {{\n  key: "{key}"\n  value: {{ string_value: "{value}" }}\n}}\n'
    if options.warmup:
        text += _warmup_block(signature)
    return text
