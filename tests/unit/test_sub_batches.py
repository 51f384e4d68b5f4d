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
