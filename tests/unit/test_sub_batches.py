import numpy as np
import pytest

pytest.importorskip("onnxruntime")

import sys
import types

# The runner imports Triton's utilities, which exist only inside Triton's stub.
sys.modules.setdefault(
    "triton_python_backend_utils", types.ModuleType("triton_python_backend_utils")
)
from embed_server.runner.model import plan_sub_batches  # noqa: E402


def efficiency(lengths, group):
    return lengths[group].sum() / (len(group) * lengths[group].max())


def test_every_row_runs_exactly_once_and_groups_stay_efficient():
    rng = np.random.default_rng(0)
    lengths = rng.integers(5, 60, size=200)
    groups = plan_sub_batches(lengths, efficiency=0.9, max_rows=64)
    seen = np.concatenate(groups)
    assert sorted(seen.tolist()) == list(range(200))
    assert all(len(g) <= 64 for g in groups)
    assert all(efficiency(lengths, g) >= 0.9 for g in groups)


def test_equal_lengths_make_one_full_batch():
    groups = plan_sub_batches(np.full(40, 12), efficiency=0.9, max_rows=64)
    assert [len(g) for g in groups] == [40]


def test_efficiency_one_groups_only_identical_lengths():
    lengths = np.array([3, 3, 7, 7, 7, 9])
    groups = plan_sub_batches(lengths, efficiency=1.0, max_rows=64)
    assert [sorted(lengths[g].tolist()) for g in groups] == [[3, 3], [7, 7, 7], [9]]


class RecordingSession:
    def __init__(self) -> None:
        self.batch_sizes: list[int] = []

    def run(self, names, feeds):
        rows = len(feeds["input_ids"])
        self.batch_sizes.append(rows)
        return [np.zeros((rows, 4), dtype=np.float32)]


def runner_with(single_text_session):
    from embed_server.runner.model import TritonPythonModel

    runner = TritonPythonModel()
    runner.session = RecordingSession()
    runner.single_text_session = single_text_session
    runner.output_names = ["embedding"]
    runner.efficiency = 0.9
    runner.max_rows = 64
    runner.reports_tokens = True
    return runner


def feed(*lengths):
    width = max(lengths)
    mask = np.array([[1] * n + [0] * (width - n) for n in lengths], dtype=np.int64)
    return {"input_ids": mask * 7, "attention_mask": mask}


def test_a_lone_text_runs_in_the_spinning_session_and_batches_do_not():
    spinning = RecordingSession()
    runner = runner_with(spinning)
    runner._run_text([feed(5)])
    runner._run_text([feed(5), feed(6)])
    runner._run_text([feed(5, 5)])
    assert spinning.batch_sizes == [1]
    assert runner.session.batch_sizes == [2, 2]


def test_without_a_spinning_session_a_lone_text_runs_in_the_batch_session():
    runner = runner_with(None)
    out = runner._run_text([feed(3)])
    assert runner.session.batch_sizes == [1]
    assert out[0]["token_counts"].tolist() == [[3, 3]]


def test_a_lone_padded_text_is_stripped_and_still_runs_in_the_spinning_session():
    spinning = RecordingSession()
    runner = runner_with(spinning)
    mask = np.array([[1, 1, 1, 0, 0]], dtype=np.int64)
    out = runner._run_text([{"input_ids": mask * 7, "attention_mask": mask}])
    assert spinning.batch_sizes == [1] and runner.session.batch_sizes == []
    assert out[0]["token_counts"].tolist() == [[3, 3]]
