"""The differentiable DNSMOS port scores real audio as the ONNX scorer of ``cosyedge eval`` does."""

from __future__ import annotations

import numpy as np
import pytest

from tests.eval.conftest import DEMO_CLEAN, DEMO_NOISY, read

torch = pytest.importorskip("torch")
pytest.importorskip("speechmos")


@pytest.fixture(scope="module")
def port():
    from cosyedge.eval.dnsmos_torch import build_dnsmos

    return build_dnsmos()


def test_port_equals_the_onnx_model_on_the_demo_recordings(port):
    import onnxruntime as ort

    from cosyedge.eval.dnsmos_torch import sig_bak_ovr_path

    sess = ort.InferenceSession(sig_bak_ovr_path(), providers=["CPUExecutionProvider"])
    raws = []
    for path in (DEMO_NOISY, DEMO_CLEAN):
        x, sr = read(path)
        assert sr == 16000 and len(x) >= 144160
        seg = np.ascontiguousarray(x[:144160][None], dtype=np.float32)
        want = sess.run(None, {"input_1": seg})[0]
        got = port.raw(torch.from_numpy(seg)).numpy()
        np.testing.assert_allclose(got, want, atol=1e-4)
        raws.append(want[0])
    # a check that could pass on a wrong port would see equal scores: the clean recording rates higher
    assert raws[1][1] > raws[0][1] + 0.3  # raw BAK


def test_reported_ovrl_equals_cosyedge_eval_and_has_a_gradient(port):
    from cosyedge.eval.metrics import dnsmos

    x, _ = read(DEMO_NOISY)
    seg = x[:144160].astype(np.float32)
    want = dnsmos(seg)  # one 9.01 s window: the score of cosyedge eval
    t = torch.from_numpy(seg.copy())[None].requires_grad_(True)
    got = port(t)[0]
    assert abs(float(got[0].detach()) - want["dnsmos_sig"]) < 1e-3
    assert abs(float(got[1].detach()) - want["dnsmos_bak"]) < 1e-3
    assert abs(float(got[2].detach()) - want["dnsmos_ovrl"]) < 1e-3
    got[2].backward()
    assert torch.isfinite(t.grad).all() and float(t.grad.abs().max()) > 0


def test_short_input_is_refused(port):
    with pytest.raises(ValueError, match="T >= 480"):
        port(torch.zeros(1, 320))
