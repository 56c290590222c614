"""Safe by default, on the fake TensorRT/pycuda stack (tests/trt/fakes.py): ``TrtStreamSession.push``
returns an array the caller owns (not the pinned host buffer the next chunk is copied into), and
``push(x, copy=False)`` opts in to that buffer. The ONNX Runtime sessions and StreamPool are covered in
``tests/runtime/test_push_returns_owned_arrays.py``."""

from __future__ import annotations

import numpy as np
import pytest

from cosyedge.builders import trt as bt
from cosyedge.builders.cache import load_or_rebuild
from tests.helpers import models
from tests.trt.conftest import HOP


@pytest.fixture
def engine(fake10, two_state, tmp_path):
    return load_or_rebuild(bt.build_trt(two_state, out_dir=tmp_path, max_batch=4))


@pytest.mark.parametrize("cuda_graph", [False, True])
def test_appended_trt_pushes_keep_every_chunk(engine, cuda_graph):
    x = (0.3 * np.random.default_rng(4).standard_normal(8 * HOP)).astype(np.float32)
    with engine(cuda_graph=cuda_graph) as s:
        outs = [s.push(x[i:i + HOP].reshape(1, 1, HOP))[models.OUTPUT] for i in range(0, x.size, HOP)]
        for i, a in enumerate(outs):
            assert a.shape == (1, 1, HOP) and a.dtype == np.float32
            assert not any(np.shares_memory(a, b) for b in outs[i + 1:])
        shared = [s.push(x[:HOP].reshape(1, 1, HOP), copy=False)[models.OUTPUT] for _ in range(2)]
        assert np.shares_memory(shared[0], shared[1])  # the opt-in: the session's pinned output buffer
    y = np.concatenate(outs, axis=2).reshape(-1)
    assert np.abs(y - models.two_state_reference(x)[0]).max() <= 1e-5
