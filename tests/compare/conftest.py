"""Fixtures of the compare/check tests: short real utterances, engines built in tmp dirs, bad candidates.

Nothing here depends on the committed baseline or the bundled model's hash: the reference is copied into
a tmp folder, every engine and baseline is made there, INT8 is calibrated on recordings cut from the
bundled audio (tests/precision/int8_fixtures.py: the demo's first 10 s and tests/data), and the compared
utterances are demo audio after 10 s (never calibrated on).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
import soundfile as sf
from onnx import helper, numpy_helper

from cosyedge.artifacts import StreamContract
from cosyedge.models import REFERENCE_STREAM_ONNX
from tests.precision import int8_fixtures as fx

SR = 16000
QDQ_SCALE = "/blocks.0/conv/conv/Conv/state_concat_output/act_scale"
"""Activation Q/DQ scale multiplied by 4 in the bad INT8 candidate (the Concat(state, x) of block 0)."""


def eval_segments() -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(name, noisy, clean) 3 s pieces of the demo after 10 s: real speech never used for calibration."""
    noisy, clean = fx.eval_pair()
    n = 3 * SR
    return [("demo-late-noisy", noisy[:n], clean[:n]), ("demo-late-clean", clean[n:2 * n], clean[n:2 * n])]


@pytest.fixture(scope="session")
def cmp_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("compare")


@pytest.fixture(scope="session")
def utt_dir(cmp_dir) -> Path:
    """``noisy/`` + ``clean/`` folder of :func:`eval_segments` (for ``--utterances``)."""
    d = cmp_dir / "utts"
    for sub in ("noisy", "clean"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    for name, noisy, clean in eval_segments():
        sf.write(str(d / "noisy" / f"{name}.wav"), noisy, SR, subtype="FLOAT")
        sf.write(str(d / "clean" / f"{name}.wav"), clean, SR, subtype="FLOAT")
    return d


@pytest.fixture(scope="session")
def utts(utt_dir):
    from cosyedge.compare.utterances import utterances_from

    return utterances_from(utt_dir, SR)


@pytest.fixture(scope="session")
def ref_onnx(cmp_dir) -> Path:
    p = cmp_dir / "reference.stream.onnx"
    shutil.copy(REFERENCE_STREAM_ONNX, p)
    return p


@pytest.fixture(scope="session")
def calib_dir(cmp_dir) -> Path:
    from cosyedge.precision.calibset import make_calibration_set

    rec = fx.write_recordings(cmp_dir / "recordings", count=16, seconds=1.5)
    return make_calibration_set(cmp_dir / "calib", from_dir=rec).folder


@pytest.fixture(scope="session")
def engines(cmp_dir) -> Path:
    return cmp_dir / "engines"


@pytest.fixture(scope="session")
def int8_engine(ref_onnx, engines, calib_dir) -> Path:
    from cosyedge.builders import build_engine

    return build_engine(ref_onnx, backend="onnxruntime", out_dir=engines, precision="int8", calib=calib_dir)


@pytest.fixture(scope="session")
def int8_flat_engine(ref_onnx, engines, calib_dir) -> Path:
    """The INT8 engine with the ``trt`` placement: a flat graph whose every Q/DQ tensor the layer bisection can read
    (the default ``ort_matmul`` engine keeps its layers in the body of a Scan over hops)."""
    from cosyedge.builders import build_engine
    from cosyedge.builders.config import BuildConfig, Calibration

    return build_engine(ref_onnx, backend="onnxruntime", out_dir=engines,
                        config=BuildConfig(precision="int8", calibration=Calibration(set=calib_dir), placement="trt"))


@pytest.fixture(scope="session")
def qdq_x4_flat(cmp_dir, int8_flat_engine) -> Path:
    """:func:`qdq_x4` of the flat (``trt``-placement) INT8 engine."""
    m = onnx.load(str(int8_flat_engine / "model.onnx"))
    hit = [t for t in m.graph.initializer if t.name == QDQ_SCALE]
    assert len(hit) == 1, "the INT8 model has no Q/DQ scale " + QDQ_SCALE
    hit[0].CopyFrom(numpy_helper.from_array((numpy_helper.to_array(hit[0]) * 4).astype(np.float32), hit[0].name))
    p = cmp_dir / "qdq_x4_flat.onnx"
    onnx.save(m, str(p))
    return p


@pytest.fixture(scope="session")
def fp32_engine(ref_onnx, engines) -> Path:
    from cosyedge.builders import build_engine

    return build_engine(ref_onnx, backend="onnxruntime", out_dir=engines, precision="fp32")


@pytest.fixture(scope="session")
def qdq_x4(cmp_dir, int8_engine) -> Path:
    """The INT8 engine's model with one quantized layer's weight scales multiplied by 4 (bare ONNX; the default INT8
    engine, ort_matmul with dynamic activations, holds no activation scale: its first block conv's
    DynamicQuantizeMatMul weight scales, in the body of its Scan over hops, named with the body's prefix)."""
    from cosyedge.passes.hop_scan import BODY_PREFIX
    from cosyedge.precision.bodies import iter_graphs

    m = onnx.load(str(int8_engine / "model.onnx"))
    layer = BODY_PREFIX + "/blocks.0/conv/conv/Conv/"
    hit = [t for g in iter_graphs(m.graph) for t in g.initializer
           if t.name.startswith(layer) and t.name.endswith("/weight_scale")]
    assert len(hit) == 1, "the INT8 model has no weight scale under " + layer
    hit[0].CopyFrom(numpy_helper.from_array((numpy_helper.to_array(hit[0]) * 4).astype(np.float32), hit[0].name))
    p = cmp_dir / "qdq_x4.onnx"
    onnx.save(m, str(p))
    return p


@pytest.fixture(scope="session")
def drop_state(cmp_dir, ref_onnx) -> Path:
    """The reference with every state_out multiplied by 0: the state is dropped between chunks."""
    m = onnx.load(str(ref_onnx))
    c = StreamContract.from_onnx(m)
    m.graph.initializer.append(numpy_helper.from_array(np.zeros((), np.float32), "zero_f"))
    for s in c.states:
        for node in m.graph.node:
            node.output[:] = [f"{s.output}_kept" if o == s.output else o for o in node.output]
        m.graph.node.append(helper.make_node("Mul", [f"{s.output}_kept", "zero_f"], [s.output],
                                             name=f"drop_{s.output}"))
    p = cmp_dir / "drop_state.onnx"
    onnx.save(m, str(p))
    return p


@pytest.fixture(scope="session")
def two_state(cmp_dir) -> tuple[Path, Path, tuple[str, str]]:
    """(reference, candidate with its two equal-shape state_out tensors swapped, the two names)."""
    from tests.helpers.models import make_two_state_model

    ref = make_two_state_model(cmp_dir / "two_state.onnx", hop=4)
    m = onnx.load(str(ref))
    c = StreamContract.from_onnx(m)
    a, b = c.states[0].output, c.states[1].output
    swap = {a: b, b: a}
    for node in m.graph.node:
        node.output[:] = [swap.get(o, o) for o in node.output]
    p = cmp_dir / "two_state_swapped.onnx"
    onnx.save(m, str(p))
    return ref, p, (a, b)
