"""``Range`` over time becomes a per-stream int64 position counter (N, 1).

Four forms, each exported with both exporters (TorchScript ``dynamo=False`` with dynamic_axes, ``dynamo=True`` with
dynamic_shapes) and streamified (streamify's proof already compared chunked with full on real speech): a sinusoidal
encoding from ``arange`` (a), an encoding table sliced to the length ``pe[:, :T]`` and gathered at ``arange(T)`` (b),
asteroid's cumulative layer norm ``cumsum / arange(1, T + 1)`` (c), a position-dependent scale (d). Each is checked
again here with an own OrtStreamSession loop at 8 chunk sizes from the first frame over hundreds of frames; per-stream
counters in StreamPool; FP16 and INT8 builds keep the counter int64. Positions that need the sequence's end are
refused by name.
"""

from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest

from cosyedge.errors import UsageError
from cosyedge.surgery import streamify

torch = pytest.importorskip("torch")
nn, F = torch.nn, torch.nn.functional

HOP = 16  # waveform models: samples per hop; feature models: one frame per hop (16 kHz contract, hop 160)


class SinPE(nn.Module):
    """(a) features (N, T, 16) + sin/cos(arange(T) * freq), then a linear."""

    def __init__(self, d=16):
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.register_buffer("freq", torch.exp(torch.arange(0, d, 2).float() * (-math.log(10000.0) / d)))

    def forward(self, x):
        ang = torch.arange(x.shape[1], device=x.device).float().unsqueeze(1) * self.freq
        return self.lin(x + torch.cat([torch.sin(ang), torch.cos(ang)], dim=-1))


class TablePE(nn.Module):
    """(b) features (N, T, 16) + pe[:, :T] (slice) or pe[0][arange(T)] (gather) of a 5000-row table."""

    def __init__(self, mode, d=16):
        super().__init__()
        self.mode = mode
        self.register_buffer("pe", torch.randn(1, 5000, d, generator=torch.Generator().manual_seed(0)) * 0.5)
        self.lin = nn.Linear(d, d)

    def forward(self, x):
        t = x.shape[1]
        pe = self.pe[:, :t] if self.mode == "slice" else self.pe[0][torch.arange(t, device=x.device)]
        return self.lin(x + pe)


class CumNorm(nn.Module):
    """(c) causal conv + asteroid's CumLN (``cumsum / arange(C, C (T + 1), C)``), waveform (N, 1, T) in and out."""

    def __init__(self, c=8):
        super().__init__()
        self.conv = nn.Conv1d(1, c, 4)
        self.gamma = nn.Parameter(torch.ones(1, c, 1) * 0.5)
        self.beta = nn.Parameter(torch.zeros(1, c, 1))

    def forward(self, x):
        x = self.conv(F.pad(x, (3, 0)))
        cum_sum = torch.cumsum(x.sum(1, keepdim=True), dim=-1)
        cum_pow_sum = torch.cumsum(x.pow(2).sum(1, keepdim=True), dim=-1)
        cnt = torch.arange(start=x.shape[1], end=x.shape[1] * (x.shape[-1] + 1), step=x.shape[1], dtype=x.dtype,
                           device=x.device).view(1, -1)
        cum_mean = cum_sum / cnt
        cum_var = cum_pow_sum / cnt - cum_mean.pow(2)
        return (self.gamma * (x - cum_mean) / (cum_var + 1e-8).sqrt() + self.beta).mean(1, keepdim=True)


class PosScale(nn.Module):
    """(d) causal conv, then ``* (1 + 0.01 * arange(T))``, waveform (N, 1, T) in and out."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(1, 1, 3)

    def forward(self, x):
        h = self.conv(F.pad(x, (2, 0)))
        return h * (1 + 0.01 * torch.arange(h.shape[-1], device=x.device))


MODELS = {"sin_pe": (SinPE, True), "table_slice": (lambda: TablePE("slice"), True),
          "table_gather": (lambda: TablePE("gather"), True), "cum_norm": (CumNorm, False),
          "pos_scale": (PosScale, False)}


def _export(model, path, feat, dynamo):
    from tests.helpers.models_attention import export

    return export(model, path, (torch.zeros(1, 64, 16) if feat else torch.zeros(1, 1, 64),), dynamo, 1 if feat else 2)


def _speech(n):
    from tests.precision import int8_fixtures as fx

    return np.ascontiguousarray(fx.eval_pair()[0][:n].astype(np.float32))


def _streamify(name, tmp_path, dynamo):
    cls, feat = MODELS[name]
    torch.manual_seed(0)
    src = _export(cls(), tmp_path / f"{name}{int(dynamo)}.onnx", feat, dynamo)
    out = tmp_path / f"{name}{int(dynamo)}.stream.onnx"
    if feat:
        c = streamify(src, out, sample_rate_hz=16000, hop_samples=160, frames_per_hop=1)
    else:
        c = streamify(src, out, sample_rate_hz=16000, hop_samples=HOP)
    return src, out, c, feat


def _full(src, x):
    sess = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def _own_loop(out, x, feat, chunk):
    """Stream ``x`` (features (1, T, 16) or waveform (1, 1, T)) through OrtStreamSession ``chunk`` frames/samples at
    a time from a new stream; returns the output concatenated."""
    from cosyedge.runtime import OrtStreamSession

    parts = []
    if feat:
        with OrtStreamSession(out, chunk_samples=chunk * 160) as s:
            for i in range(0, x.shape[1] - x.shape[1] % chunk, chunk):
                parts.append(s.push({"x": np.ascontiguousarray(x[:, i:i + chunk])})["y"].copy())
        return np.concatenate(parts, axis=1)
    from cosyedge.runtime import stream_array

    with OrtStreamSession(out, chunk_samples=chunk) as s:
        return stream_array(s, x.reshape(-1))


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("name", list(MODELS))
def test_positions_stream_exactly_at_eight_chunk_sizes(tmp_path, name, dynamo):
    """One int64 (N, 1) position state (plus the conv/running-sum states of the waveform models); stream == full
    from the first frame at 8 chunk sizes over 400 feature frames / 8000 samples (500 frames) of real speech."""
    src, out, c, feat = _streamify(name, tmp_path, dynamo)
    pos = [s for s in c.states if s.kind == "position"]
    assert [(s.shape, s.dtype) for s in pos] == [(["N", 1], "int64")]
    assert c.proof["max_abs"] <= 1e-5 * max(1.0, c.proof.get("peak", 1.0)) or c.proof["snr_db"] > 90
    speech = _speech(8000)
    x = speech[:6400].reshape(1, 400, 16) * 4 if feat else speech.reshape(1, 1, -1)
    ref = _full(src, x)
    errs = {}
    for k in (1, 2, 3, 4, 5, 8, 16, 25):
        chunk = k if feat else k * HOP
        y = _own_loop(out, x, feat, chunk)
        n = y.shape[1] if feat else y.shape[-1]
        want = ref[:, :n] if feat else ref.reshape(-1)[:n]
        errs[k] = float(np.abs(y.reshape(want.shape) - want).max())
        assert n >= (x.shape[1] if feat else x.shape[-1]) - chunk
    print(name, "dynamo" if dynamo else "torchscript", errs)
    assert max(errs.values()) <= 2e-5 * max(1.0, float(np.abs(ref).max())), errs


def test_per_stream_counters_in_stream_pool(tmp_path):
    """StreamPool: two streams that join 7 chunks apart run in one batch with their own positions; each equals
    its solo run (a shared counter would give the late stream the early stream's positions)."""
    from cosyedge.runtime import OrtStreamSession, StreamPool, stream_array

    _, out, _, _ = _streamify("pos_scale", tmp_path, False)
    x = _speech(6400)
    with OrtStreamSession(out, chunk_samples=32) as s:
        solo = stream_array(s, x)
    got = {0: [], 1: []}
    with StreamPool(out, max_streams=4, chunk_samples=32) as pool:
        a = pool.join()
        ids, b = {a: 0}, None
        for i in range(0, 6400 + 7 * 32, 32):
            if i == 7 * 32:
                b = pool.join()
                ids[b] = 1
            if i < 6400:
                pool.submit(a, x[i:i + 32].copy())
            if b is not None:
                j = i - 7 * 32
                pool.submit(b, x[j:j + 32].copy())
            for sid, y in pool.tick().items():
                got[ids[sid]].append(np.asarray(y).reshape(-1).copy())
    for k in (0, 1):
        y = np.concatenate(got[k])
        assert np.abs(y - solo[:len(y)]).max() <= 1e-6 and len(y) == 6400


def test_fp16_and_int8_builds_keep_the_int64_counter(tmp_path):
    """`cosyedge build --fp16` and `--int8` on the cumulative-norm model: exit 0, the position state stays int64 in
    the engine's ONNX, and the engines stream close to FP32 on real speech."""
    import onnx

    from cosyedge.cli.main import main
    from cosyedge.runtime import OrtStreamSession, stream_array
    from tests.precision import int8_fixtures as fx

    _, out, c, _ = _streamify("cum_norm", tmp_path, False)
    pos = next(s for s in c.states if s.kind == "position")
    d = fx.write_recordings(tmp_path / "rec", count=16)
    assert main(["calib", "make", "--from", str(d), "--out", str(tmp_path / "calib")]) == 0
    x = _speech(8000)
    with OrtStreamSession(out) as s:
        ref = stream_array(s, x)
    for flags in (["--fp16"], ["--int8", "--calib", str(tmp_path / "calib")]):
        eng = tmp_path / ("e" + flags[0])
        assert main(["build", "-q", "--onnx", str(out), "--backend", "onnxruntime", "-o", str(eng)] + flags) == 0
        model = next(eng.glob("*/model.onnx"))
        m = onnx.load(str(model))
        types = {v.name: v.type.tensor_type.elem_type for v in list(m.graph.input) + list(m.graph.output)}
        assert types[pos.input] == types[pos.output] == onnx.TensorProto.INT64
        with OrtStreamSession(model) as s:
            y = stream_array(s, x)
        snr = 10 * np.log10(np.sum(ref ** 2) / max(float(np.sum((y - ref) ** 2)), 1e-30))
        assert snr > (40 if flags[0] == "--fp16" else 10), (flags, snr)


class _Neg(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.conv = nn.Conv1d(1, 1, 3)
        self.fn = fn

    def forward(self, x):
        h = self.conv(F.pad(x, (2, 0)))
        return h * self.fn(h.shape[-1], h)


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("fn, match", [
    (lambda t, h: (t - torch.arange(t, device=h.device)).float(),
     r"(Sub|Range) node '[^']+': .*(the sequence length|total length)"),
    (lambda t, h: torch.arange(t, device=h.device).float() / t,
     r"(Div|Range|Cast) node '[^']+': .*(the sequence length|total length)"),
    (lambda t, h: torch.arange(t, device=h.device).flip(0).float(), r"(Slice|Range) node '[^']+': "),
    (lambda t, h: torch.arange(t - 1, -1, -1, device=h.device).float(), r"Range node '[^']+': .*"),
    (lambda t, h: torch.arange(t + 2, device=h.device)[2:].float(), r"Range node '[^']+': counts 2 positions beyond"),
], ids=["T-pos", "pos/T", "flip", "countdown", "beyond"])
def test_positions_that_need_the_end_are_refused_by_name(tmp_path, fn, match, dynamo):
    """Closed world: positions combined with the total length, reversed, counted down or longer than the time axis
    are refused (exit 2: UsageError) naming the node; nothing is written."""
    try:
        path = _export(_Neg(fn), tmp_path / "neg.onnx", False, dynamo)
    except Exception as err:  # an exporter that cannot export the form has nothing to refuse
        pytest.skip(f"exporter: {str(err)[:80]}")
    with pytest.raises(UsageError, match=match):
        streamify(path, tmp_path / "neg.stream.onnx", sample_rate_hz=16000, hop_samples=HOP)
    assert not (tmp_path / "neg.stream.onnx").exists()


def test_positions_as_a_graph_output_refused(tmp_path):
    class Out(nn.Module):
        def forward(self, x):
            return x + 0 * x, torch.arange(x.shape[-1], device=x.device).float().view(1, 1, -1) * 2

    torch.onnx.export(Out(), (torch.zeros(1, 1, 64),), str(tmp_path / "o.onnx"), input_names=["x"],
                      output_names=["y", "p"], opset_version=17, dynamo=False,
                      dynamic_axes={"x": {0: "N", 2: "T"}, "y": {0: "N", 2: "T"}, "p": {2: "T"}})
    with pytest.raises(UsageError, match=r"positions counted from the sequence start as a graph output"):
        streamify(tmp_path / "o.onnx", tmp_path / "o.stream.onnx", sample_rate_hz=16000, hop_samples=HOP)


def test_thirdparty_cumulative_layernorm_now_streams(tmp_path):
    """The third-party cumulative layer norm that was once refused on ``Range`` (tests/thirdparty_models.py,
    once a refusal case of test_thirdparty.py) streams: exit 0 with a position state, proved."""
    import subprocess
    import sys

    from cosyedge.artifacts import StreamContract
    from tests import thirdparty_models as tm

    p = tm.negative_onnx("cumulative_layernorm", tmp_path / "cln.onnx")
    out = tmp_path / "cln.stream.onnx"
    res = subprocess.run([sys.executable, "-m", "cosyedge.cli.main", "streamify", "-q", str(p), "-o", str(out),
                          "--sample-rate-hz", "16000", "--hop-samples", "160"], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    c = StreamContract.from_onnx(out)
    assert "position" in [s.kind for s in c.states]


def test_a_stream_longer_than_the_encoding_table_is_refused_in_one_line(tmp_path):
    """An encoding table of 600 rows (``pe[:, :T]``) counts 600 frames: streamify records the limit in the contract
    (``max_stream_samples``) and a session refuses the chunk that would pass it, naming the table's length; reset()
    starts a new stream."""
    from cosyedge.runtime.ort import OrtStreamSession

    class Table(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.lin = nn.Linear(16, 16)
            self.register_buffer("pe", torch.randn(1, 600, 16))

        def forward(self, x):
            return self.lin(x + self.pe[:, :x.shape[1]])

    src = tmp_path / "pe.onnx"
    torch.onnx.export(Table().eval(), (torch.randn(1, 40, 16),), str(src), input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "N", 1: "T"}, "y": {0: "N", 1: "T"}}, dynamo=False, opset_version=17)
    c = streamify(src, tmp_path / "pe.stream.onnx", sample_rate_hz=16000, hop_samples=160, frames_per_hop=1)
    assert c.max_stream_samples == 600 * 160
    x = np.zeros((1, 1, 16), np.float32)
    with OrtStreamSession(tmp_path / "pe.stream.onnx") as s:
        for _ in range(600):
            s.push({"x": x})
        with pytest.raises(UsageError, match=r"position table holds 96000 samples \(6 s\).*reset\(\)"):
            s.push({"x": x})
        s.reset()
        s.push({"x": x})
    from cosyedge.runtime.pool import StreamPool

    with StreamPool(tmp_path / "pe.stream.onnx", max_streams=2) as pool:  # per stream: a later joiner has its own
        a = pool.join()
        for _ in range(300):
            pool.push({a: {"x": x[0]}})
        b = pool.join()
        for _ in range(300):
            pool.push({a: {"x": x[0]}, b: {"x": x[0]}})
        with pytest.raises(UsageError, match=f"stream {a} is longer than the model can count positions"):
            pool.submit(a, {"x": x[0]})
        pool.push({b: {"x": x[0]}})


def test_an_embedding_of_positions_bounds_the_stream_length_too(tmp_path):
    """``nn.Embedding(3000, C)(arange(T))`` (a Gather of the table by positions) records 3000 frames as well."""

    class Emb(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.lin, self.emb = nn.Linear(16, 16), nn.Embedding(3000, 16)

        def forward(self, x):
            return self.lin(x + self.emb(torch.arange(x.shape[1])))

    src = tmp_path / "emb.onnx"
    torch.onnx.export(Emb().eval(), (torch.randn(1, 40, 16),), str(src), input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "N", 1: "T"}, "y": {0: "N", 1: "T"}}, dynamo=False, opset_version=17)
    c = streamify(src, tmp_path / "emb.stream.onnx", sample_rate_hz=16000, hop_samples=160, frames_per_hop=1)
    assert c.max_stream_samples == 3000 * 160
