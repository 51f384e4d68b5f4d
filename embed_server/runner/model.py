"""The project's one ONNX Runtime runner, served by Triton as a Python-based backend.

Every generated model whose config says ``backend: "onnxruntime_python"`` runs through this
file; everything model-specific (the ONNX file, thread counts, padding policy) comes from
the model's folder and ``config.pbtxt``.

Text models take ragged batches: the dynamic batcher hands ``execute`` requests padded to
their own longest text. The runner strips that padding, sorts every text in the batch by
length and runs ONNX Runtime on sub-batches whose padding stays within the configured
efficiency, so a long text never makes a batch of short ones pay for its length.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

# The backend stub's interpreter ignores PYTHONPATH; the launcher names the environment
# holding onnxruntime and numpy here instead (unset on images that install them globally).
sys.path[:0] = [p for p in os.environ.get("EMBED_RUNNER_SITE_PACKAGES", "").split(":") if p]

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
import triton_python_backend_utils as pb_utils  # noqa: E402

TOKEN_INPUTS = ("input_ids", "attention_mask")
# Per row: its real tokens and the width of the sub-batch it ran in. The API sums these
# into its padding counters. (Triton's custom-metric API is not used: one metric family
# shared by several models is freed when one of them unloads, and the next update from
# another corrupted tritonserver's heap.)
TOKEN_COUNTS = "token_counts"


def plan_sub_batches(lengths: np.ndarray, efficiency: float, max_rows: int) -> list[np.ndarray]:
    """Group row indices by length so that real/padded tokens >= ``efficiency`` per group.

    Rows are taken shortest first; a group closes when adding the next (longer) row would
    pad the group below the target or when it holds ``max_rows`` rows.
    """
    order = np.argsort(lengths, kind="stable")
    groups: list[np.ndarray] = []
    start = 0
    real = 0
    for position, row in enumerate(order):
        length = int(lengths[row])
        count = position - start + 1
        if position > start and (count > max_rows or (real + length) < efficiency * count * length):
            groups.append(order[start:position])
            start, real = position, 0
        real += length
    if start < len(order):
        groups.append(order[start:])
    return groups


class TritonPythonModel:
    """initialize / execute / finalize, nothing else."""

    def initialize(self, args: dict[str, Any]) -> None:
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        model_path = os.path.join(
            args["model_repository"], args["model_version"], params.get("onnx_file", "model.onnx")
        )
        threads = int(params.get("intra_op_threads", "0"))
        providers: list[Any] = ["CPUExecutionProvider"]
        on_gpu = args.get("model_instance_kind") == "GPU"
        if on_gpu and "CUDAExecutionProvider" in ort.get_available_providers():
            device = int(args.get("model_instance_device_id", "0"))
            providers.insert(0, ("CUDAExecutionProvider", {"device_id": device}))

        def open_session(spinning: bool) -> ort.InferenceSession:
            options = ort.SessionOptions()
            if threads > 0:
                options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            options.add_session_config_entry("session.intra_op.allow_spinning", str(int(spinning)))
            # Spin only inside a run: idle spinners would take the cores from the next step.
            options.add_session_config_entry("session.force_spinning_stop", "1")
            return ort.InferenceSession(model_path, options, providers=providers)

        # Batches run without spinning: under load spinning threads take the cores the
        # other instance, Triton and the facade need (measured: a third fewer texts/s).
        self.session = open_session(spinning=False)
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.ragged = all(name in self.input_names for name in TOKEN_INPUTS)
        # A lone text is latency-bound: waking sleeping threads for each of the model's
        # parallel sections costs about 1 ms of its 8 on a 2-core CPU. A second session,
        # spinning only while it runs, serves batches of one text.
        self.single_text_session = None
        if self.ragged and not on_gpu and params.get("single_text_spinning", "1") == "1":
            self.single_text_session = open_session(spinning=True)
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.efficiency = float(params.get("padding_efficiency", "0.9"))
        self.max_rows = max(1, int(config.get("max_batch_size", 0)) or 64)
        self.reports_tokens = any(o["name"] == TOKEN_COUNTS for o in config.get("output", []))

    def execute(self, requests: list[Any]) -> list[Any]:
        try:
            feeds = [self._inputs(request) for request in requests]
            if self.ragged:
                outputs = self._run_text(feeds)
            else:
                outputs = self._run_dense(feeds)
        except Exception as error:
            message = f"inference failed: {error}"
            return [pb_utils.InferenceResponse(error=pb_utils.TritonError(message))] * len(requests)
        return [
            self._response(request, out) for request, out in zip(requests, outputs, strict=True)
        ]

    def finalize(self) -> None:
        self.session = None
        self.single_text_session = None

    def _inputs(self, request: Any) -> dict[str, np.ndarray]:
        return {
            name: pb_utils.get_input_tensor_by_name(request, name).as_numpy()
            for name in self.input_names
        }

    def _run_dense(self, feeds: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        merged = {name: np.concatenate([f[name] for f in feeds]) for name in self.input_names}
        results = self.session.run(self.output_names, merged)
        bounds = np.cumsum([0] + [len(f[self.input_names[0]]) for f in feeds])
        return [
            {name: out[lo:hi] for name, out in zip(self.output_names, results, strict=True)}
            for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)
        ]

    def _run_text(self, feeds: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        lone_mask = feeds[0]["attention_mask"] if len(feeds) == 1 else None
        if lone_mask is not None and len(lone_mask) == 1 and lone_mask.all():
            return [self._run_lone_text(feeds[0])]
        rows_ids = [row for f in feeds for row in f["input_ids"]]
        lengths = np.array(
            [int(m.sum()) for f in feeds for m in f["attention_mask"]], dtype=np.int64
        )
        lengths = np.maximum(lengths, 1)
        results: dict[str, np.ndarray] = {}
        widths = np.empty(len(lengths), dtype=np.int64)
        for group in plan_sub_batches(lengths, self.efficiency, self.max_rows):
            width = int(lengths[group].max())
            ids = np.zeros((len(group), width), dtype=np.int64)
            mask = np.zeros((len(group), width), dtype=np.int64)
            for slot, row in enumerate(group):
                n = int(lengths[row])
                ids[slot, :n] = rows_ids[row][:n]
                mask[slot, :n] = 1
            outs = self._session_for(len(lengths)).run(
                self.output_names, {"input_ids": ids, "attention_mask": mask}
            )
            widths[group] = width
            for name, out in zip(self.output_names, outs, strict=True):
                if name not in results:
                    results[name] = np.empty((len(lengths), *out.shape[1:]), dtype=out.dtype)
                results[name][group] = out
        if self.reports_tokens:
            results[TOKEN_COUNTS] = np.stack([lengths, widths], axis=1)
        bounds = np.cumsum([0] + [len(f["input_ids"]) for f in feeds])
        return [
            {name: arr[lo:hi] for name, arr in results.items()}
            for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)
        ]

    def _run_lone_text(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One text without padding, as a request of one arrives when nothing else queued:
        the latency-bound case, so no stripping, grouping or copying."""
        outs = self._session_for(1).run(self.output_names, feed)
        results = dict(zip(self.output_names, outs, strict=True))
        if self.reports_tokens:
            width = feed["attention_mask"].shape[1]
            results[TOKEN_COUNTS] = np.array([[width, width]], dtype=np.int64)
        return results

    def _session_for(self, rows: int) -> ort.InferenceSession:
        if rows == 1 and self.single_text_session is not None:
            return self.single_text_session
        return self.session

    def _response(self, request: Any, outputs: dict[str, np.ndarray]) -> Any:
        wanted = request.requested_output_names() or self.output_names
        tensors = [pb_utils.Tensor(name, np.ascontiguousarray(outputs[name])) for name in wanted]
        return pb_utils.InferenceResponse(output_tensors=tensors)
