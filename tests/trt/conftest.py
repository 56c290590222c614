"""Fixtures for the TensorRT tests: tiny stateful ONNX models and the fake TensorRT/pycuda stack."""

from __future__ import annotations

import pytest

from tests.helpers import models
from tests.trt import fakes

HOP = 4


@pytest.fixture(scope="session")
def onnx_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("trt_models")


@pytest.fixture(scope="session")
def two_state(onnx_dir):
    return models.make_two_state_model(onnx_dir / "two_state.onnx", hop=HOP)


@pytest.fixture(scope="session")
def fir(onnx_dir):
    return models.make_fir_model(onnx_dir / "fir.onnx", hop=HOP)


@pytest.fixture
def fake10(monkeypatch):
    """Fake TensorRT 10.3 + pycuda + cuda-python on one 'Orin' (sm 8.7)."""
    return fakes.install(monkeypatch, version="10.3.0")
