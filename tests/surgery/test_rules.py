"""Streaming rules on small PyTorch models: recurrent state, transposed convs, 2-D convs with time on axis 2,
running sums, multi-input/-output graphs, several files as one model; refusals name every blocker.

Each model is exported with the TorchScript exporter (``dynamo=False``: docs/design.md, the dynamo exporter fails
on nn.LSTM with a dynamic time axis) and streamified; streamify's own proof already ran (stream == full on
real speech or seeded inputs); the tests check it again independently with raw ONNX Runtime.
"""

from __future__ import annotations

import numpy as np
import pytest

from cosyedge.errors import UsageError
from cosyedge.surgery import streamify
from tests.helpers.streaming import stream_feeds

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional


def _export(model, path, example, names_in, names_out, time_axes):
    dyn = {n: {0: "N", ax: "T"} for n, ax in zip(names_in + names_out, time_axes)}
    torch.onnx.export(model.eval(), example, str(path), input_names=names_in, output_names=names_out,
                      dynamic_axes=dyn, opset_version=17, dynamo=False)
    return path


def _assert_stream_equals_full(model, path, contract, feeds, chunks, atol=1e-5):
    with torch.no_grad():
        full = model(*[torch.from_numpy(v) for v in feeds.values()])
    full = full if isinstance(full, tuple) else (full,)
    for chunk in chunks:
        got = stream_feeds(path, contract, feeds, chunk)
        for o, ref in zip(contract.stream_outputs, full):
            ref = ref.numpy()
            d = o.delay_frames
            n = min(ref.shape[o.time_axis], got[o.name].shape[o.time_axis] - d)
            a = np.take(got[o.name], np.arange(d, d + n), axis=o.time_axis)
            b = np.take(ref, np.arange(n), axis=o.time_axis)
            err = float(np.abs(a - b).max())
            assert err <= atol, (o.name, chunk, err)


class GruNet(nn.Module):
    """Features (N, T, 16) -> GRU(32) -> GRU(24) -> linear (N, T, 8): NSNet2's form (layout 0 in ONNX)."""

    def __init__(self, cell=nn.GRU, batch_first=True):
        super().__init__()
        self.r1 = cell(16, 32, batch_first=batch_first)
        self.r2 = cell(32, 24, batch_first=batch_first)
        self.out = nn.Linear(24, 8)
        self.batch_first = batch_first

    def forward(self, x):
        if not self.batch_first:
            x = x.transpose(0, 1)
        h, _ = self.r1(x)
        h, _ = self.r2(torch.tanh(h))
        if not self.batch_first:
            h = h.transpose(0, 1)
        return torch.sigmoid(self.out(h))


@pytest.mark.parametrize("cell", [nn.GRU, nn.LSTM, nn.RNN])
def test_recurrent_states_batch_first_and_exact(tmp_path, cell):
    torch.manual_seed(0)
    model = GruNet(cell)
    path = _export(model, tmp_path / "rnn.onnx", (torch.zeros(1, 20, 16),), ["feat"], ["gain"], [1, 1])
    c = streamify(path, tmp_path / "rnn.stream.onnx", sample_rate_hz=16000, hop_samples=160)
    n_states = 4 if cell is nn.LSTM else 2
    assert [s.kind for s in c.states] == ["recurrent"] * n_states
    assert all(s.shape[0] == "N" and s.shape[1] == 1 for s in c.states)  # batch-first, not ONNX's (1, N, H)
    assert (c.total_stride, c.delay_samples, c.inputs[0].time_axis, c.inputs[0].kind) == (160, 0, 1, "features")
    feeds = {"feat": np.random.default_rng(1).standard_normal((2, 60, 16)).astype(np.float32)}
    _assert_stream_equals_full(model, tmp_path / "rnn.stream.onnx", c, feeds, [1, 6, 60])


def test_bidirectional_gru_refused_naming_the_node(tmp_path):
    model = nn.GRU(16, 8, batch_first=True, bidirectional=True)

    class Bi(nn.Module):
        def __init__(self):
            super().__init__()
            self.g = model

        def forward(self, x):
            return self.g(x)[0]

    path = _export(Bi(), tmp_path / "bi.onnx", (torch.zeros(1, 20, 16),), ["x"], ["y"], [1, 1])
    with pytest.raises(UsageError, match=r"GRU node '[^']+': direction 'bidirectional' reads the sequence"):
        streamify(path, tmp_path / "out.onnx", sample_rate_hz=16000, hop_samples=160)
    assert not (tmp_path / "out.onnx").exists()


class TwoDimNet(nn.Module):
    """(N, C, T, F) with causal time pads on axis 2, frequency 'same' pads, a strided-in-frequency conv, a
    grouped conv, a frequency-only ConvTranspose and a GRU over frames: DeepFilterNet's shapes."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(2, 8, (3, 3), padding=(0, 1))
        self.c2 = nn.Conv2d(8, 8, (2, 3), stride=(1, 2), padding=(0, 1), groups=4)
        self.up = nn.ConvTranspose2d(8, 4, (1, 4), stride=(1, 2), padding=(0, 1))
        self.gru = nn.GRU(8 * 4, 16, batch_first=True)
        self.lin = nn.Linear(16, 4 * 8)

    def forward(self, x, y):
        h = torch.relu(self.c1(F.pad(x, (0, 0, 2, 0))))
        h = torch.relu(self.c2(F.pad(h, (0, 0, 1, 0))))  # (N, 8, T, 4)
        n, c, t, f = h.shape
        r, _ = self.gru(h.permute(0, 2, 1, 3).reshape(n, t, c * f))
        g = self.lin(r).reshape(n, t, 4, 8).permute(0, 2, 1, 3)  # (N, 4, T, 8)
        return self.up(h) * torch.sigmoid(g) + y, r


def test_two_dim_convs_time_on_axis_2_two_inputs_two_outputs(tmp_path):
    torch.manual_seed(0)
    model = TwoDimNet()
    ex = (torch.zeros(1, 2, 12, 8), torch.zeros(1, 4, 12, 8))
    path = _export(model, tmp_path / "2d.onnx", ex, ["x", "y"], ["z", "r"], [2, 2, 2, 1])
    c = streamify(path, tmp_path / "2d.stream.onnx", sample_rate_hz=48000, hop_samples=480)
    assert [i.name for i in c.inputs] == ["x", "y"] and [o.name for o in c.outputs] == ["z", "r"]
    assert [o.time_axis for o in c.outputs] == [2, 1] and c.total_stride == 480
    assert sorted(s.kind for s in c.states) == ["context", "context", "recurrent"]
    rng = np.random.default_rng(2)
    feeds = {"x": rng.standard_normal((1, 2, 50, 8)).astype(np.float32),
             "y": rng.standard_normal((1, 4, 50, 8)).astype(np.float32)}
    _assert_stream_equals_full(model, tmp_path / "2d.stream.onnx", c, feeds, [1, 5])


class DeconvNet(nn.Module):
    """Strided causal conv down x4, ConvTranspose up x4 (kernel 8: an overlap of 4 frames, bias once)."""

    def __init__(self, k=8, s=4):
        super().__init__()
        self.down = nn.Conv1d(1, 6, k, stride=s)
        self.up = nn.ConvTranspose1d(6, 1, k, stride=s)
        self.k, self.s = k, s

    def forward(self, x):
        return self.up(torch.tanh(self.down(F.pad(x, (self.k - self.s, 0)))))


def test_transposed_conv_overlap_state_bias_once(tmp_path):
    torch.manual_seed(0)
    model = DeconvNet()
    path = _export(model, tmp_path / "dc.onnx", (torch.zeros(1, 1, 64),), ["x"], ["y"], [2, 2])
    c = streamify(path, tmp_path / "dc.stream.onnx", sample_rate_hz=16000, hop_samples=16)
    assert sorted(s.kind for s in c.states) == ["context", "overlap"] and c.total_stride == 4
    overlap = next(s for s in c.states if s.kind == "overlap")
    assert overlap.shape == ["N", 1, 4]
    feeds = {"x": np.random.default_rng(3).standard_normal((1, 1, 400)).astype(np.float32)}
    _assert_stream_equals_full(model, tmp_path / "dc.stream.onnx", c, feeds, [4, 16, 40])


class CumulativeLayerNorm(nn.Module):
    """Causal conv + cumulative layer norm over (channels, time so far), as in Conv-TasNet's cLN."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(1, 4, 3)

    def forward(self, x):
        h = self.conv(F.pad(x, (2, 0)))
        c = h.shape[1]
        s = torch.cumsum(h.sum(1, keepdim=True), dim=2)
        s2 = torch.cumsum((h * h).sum(1, keepdim=True), dim=2)
        cnt = torch.cumsum(torch.ones_like(h[:, :1]), dim=2) * c
        mean = s / cnt
        var = s2 / cnt - mean * mean
        return (h - mean) / torch.sqrt(var + 1e-5)


def test_cumulative_norm_streams_with_running_sums_after_the_first_chunk(tmp_path):
    """A running-sum state per CumSum: exact on every chunk, not only the first (a one-chunk check would pass
    a graph that restarts the sums)."""
    torch.manual_seed(0)
    model = CumulativeLayerNorm()
    path = _export(model, tmp_path / "cln.onnx", (torch.zeros(1, 1, 64),), ["x"], ["y"], [2, 2])
    c = streamify(path, tmp_path / "cln.stream.onnx", sample_rate_hz=16000, hop_samples=16)
    assert sorted(s.kind for s in c.states).count("running") == 3
    feeds = {"x": np.random.default_rng(4).standard_normal((1, 1, 320)).astype(np.float32)}
    _assert_stream_equals_full(model, tmp_path / "cln.stream.onnx", c, feeds, [16, 64], atol=1e-4)


@pytest.mark.parametrize("norm, match", [
    (lambda: nn.GroupNorm(2, 4), r"InstanceNormalization node|GroupNormalization node"),
    (lambda: nn.InstanceNorm1d(4), r"InstanceNormalization node '[^']+': normalises over the time axis 2"),
    ("mean", r"ReduceMean node '[^']+': reduces over the time axis 2"),
])
def test_norms_and_means_over_time_refused_exit_2_nothing_written(tmp_path, norm, match):
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv1d(1, 4, 3)
            self.norm = None if norm == "mean" else norm()

        def forward(self, x):
            h = self.conv(F.pad(x, (2, 0)))
            return h - h.mean(-1, keepdim=True) if self.norm is None else self.norm(h)

    path = _export(Net(), tmp_path / "n.onnx", (torch.zeros(1, 1, 64),), ["x"], ["y"], [2, 2])
    with pytest.raises(UsageError, match=match):
        streamify(path, tmp_path / "out.onnx", sample_rate_hz=16000, hop_samples=16)
    assert not (tmp_path / "out.onnx").exists()


def test_every_blocker_named_in_one_run(tmp_path):
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv1d(1, 4, 3)
            self.gru = nn.GRU(4, 4, batch_first=True, bidirectional=True)

        def forward(self, x):
            h = self.conv(F.pad(x, (2, 0)))
            h = h - h.mean(-1, keepdim=True)
            return self.gru(h.transpose(1, 2))[0]

    path = _export(Net(), tmp_path / "n.onnx", (torch.zeros(1, 1, 64),), ["x"], ["y"], [2, 1])
    with pytest.raises(UsageError) as err:
        streamify(path, tmp_path / "out.onnx", sample_rate_hz=16000, hop_samples=16)
    msg = str(err.value)
    assert "2 nodes block it" in msg and "ReduceMean node" in msg and "GRU node" in msg and "\n" not in msg


def test_several_files_as_one_model(tmp_path):
    """An encoder and a decoder in two files (DeepFilterNet3's layout): one stream graph, proved."""
    torch.manual_seed(0)

    class Enc(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv1d(1, 8, 4, stride=2)

        def forward(self, x):
            return torch.tanh(self.conv(F.pad(x, (2, 0))))

    class Dec(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv1d(8, 2, 3)

        def forward(self, e):
            h = self.conv(F.pad(e, (2, 0)))
            n, _, t = h.shape
            return h.reshape(n, 1, 2, t).transpose(2, 3).reshape(n, 1, 2 * t)

    enc, dec = Enc().eval(), Dec().eval()
    _export(enc, tmp_path / "enc.onnx", (torch.zeros(1, 1, 32),), ["x"], ["e"], [2, 2])
    _export(dec, tmp_path / "dec.onnx", (torch.zeros(1, 8, 16),), ["e"], ["y"], [2, 2])
    c = streamify([tmp_path / "enc.onnx", tmp_path / "dec.onnx"], tmp_path / "ed.stream.onnx",
                  sample_rate_hz=16000, hop_samples=2, name="encdec")
    assert [i.name for i in c.inputs] == ["x"] and [o.name for o in c.outputs] == ["y"] and c.total_stride == 2

    class Both(nn.Module):
        def forward(self, x):
            return dec(enc(x))

    feeds = {"x": np.random.default_rng(5).standard_normal((1, 1, 200)).astype(np.float32)}
    _assert_stream_equals_full(Both(), tmp_path / "ed.stream.onnx", c, feeds, [2, 10])


class LookAheadLstm(nn.Module):
    """A valid (look-ahead) strided conv before an LSTM, as in Demucs's encoder: the LSTM's input is late in
    the stream, so its first frames come before the sequence's start; the start gate must hold its state."""

    def __init__(self, batch_first):
        super().__init__()
        self.conv = nn.Conv1d(1, 8, 8, stride=4)
        self.lstm = nn.LSTM(8, 8, batch_first=batch_first)
        self.up = nn.ConvTranspose1d(8, 1, 8, stride=4)
        self.batch_first = batch_first

    def forward(self, x):
        h = torch.relu(self.conv(x))  # (N, 8, T')
        h = h.transpose(1, 2) if self.batch_first else h.permute(2, 0, 1)
        r, _ = self.lstm(h)
        r = r.transpose(1, 2) if self.batch_first else r.permute(1, 2, 0)
        return self.up(r)


@pytest.mark.parametrize("batch_first", [True, False])
def test_recurrence_after_look_ahead_starts_at_the_real_first_frame(tmp_path, batch_first):
    torch.manual_seed(0)
    model = LookAheadLstm(batch_first)
    path = _export(model, tmp_path / "la.onnx", (torch.zeros(1, 1, 64),), ["x"], ["y"], [2, 2])
    c = streamify(path, tmp_path / "la.stream.onnx", sample_rate_hz=16000, hop_samples=16)
    assert c.delay_samples == 4 and "counter" in [s.kind for s in c.states]
    feeds = {"x": np.random.default_rng(6).standard_normal((2, 1, 400)).astype(np.float32)}
    _assert_stream_equals_full(model, tmp_path / "la.stream.onnx", c, feeds, [4, 8, 40], atol=1e-5)


def test_ort_session_streams_a_multi_input_model_and_checks_its_inputs(tmp_path):
    """OrtStreamSession.push takes a dict for a model whose inputs are features, returns every output, and
    refuses a wrong name, shape or dtype with one line."""
    from cosyedge.runtime import OrtStreamSession

    torch.manual_seed(0)
    model = TwoDimNet()
    ex = (torch.zeros(1, 2, 12, 8), torch.zeros(1, 4, 12, 8))
    path = _export(model, tmp_path / "2d.onnx", ex, ["x", "y"], ["z", "r"], [2, 2, 2, 1])
    c = streamify(path, tmp_path / "2d.stream.onnx", sample_rate_hz=48000, hop_samples=480)
    rng = np.random.default_rng(2)
    feeds = {"x": rng.standard_normal((2, 2, 30, 8)).astype(np.float32),
             "y": rng.standard_normal((2, 4, 30, 8)).astype(np.float32)}
    want = stream_feeds(tmp_path / "2d.stream.onnx", c, feeds, 3)
    got = {"z": [], "r": []}
    with OrtStreamSession(tmp_path / "2d.stream.onnx", chunk_samples=3 * 480, batch=2) as sess:
        for i in range(0, 30, 3):
            out = sess.push({k: np.ascontiguousarray(v[:, :, i:i + 3]) for k, v in feeds.items()})
            for k in got:
                got[k].append(out[k].copy())
        with pytest.raises(UsageError, match=r"missing \['y'\]"):
            sess.push({"x": feeds["x"][:, :, :3].copy()})
        with pytest.raises(UsageError, match=r"input 'y' has shape \(2, 4, 2, 8\), expected \(2, 4, 3, 8\)"):
            sess.push({"x": feeds["x"][:, :, :3].copy(), "y": feeds["y"][:, :, :2].copy()})
        with pytest.raises(UsageError, match="push a dict"):
            sess.push(feeds["x"][:, :, :3].copy())
    assert np.array_equal(np.concatenate(got["z"], axis=2), want["z"])
    assert np.array_equal(np.concatenate(got["r"], axis=1), want["r"])


def test_downstream_fp16_int8_accept_a_recurrent_look_ahead_graph(tmp_path):
    """A stream graph with an LSTM, a start gate, a pre-roll mask and an overlap state builds in FP16 (the
    LSTM and the tick-counter bookkeeping stay FP32; the FP16 round-trip strip once deleted a Cast in front
    of an Identity and broke the graph) and in INT8 (the LSTM stays float), and both stream."""
    import onnx

    from cosyedge.precision.calibset import load_calibration_set
    from cosyedge.precision.fp16 import fp16_onnx
    from cosyedge.precision.int8 import int8_onnx
    from cosyedge.runtime import OrtStreamSession, stream_array
    from cosyedge.cli.main import main
    from tests.precision import int8_fixtures as fx

    class WithMidConv(LookAheadLstm):  # a conv between the boundary layers: something for INT8 to quantize
        def __init__(self):
            super().__init__(True)
            self.mid = nn.Conv1d(8, 8, 3)

        def forward(self, x):
            h = torch.relu(self.conv(x)).transpose(1, 2)
            r = self.lstm(h)[0].transpose(1, 2)
            return self.up(torch.tanh(self.mid(F.pad(r, (2, 0)))))

    torch.manual_seed(0)
    model = WithMidConv()
    path = _export(model, tmp_path / "la.onnx", (torch.zeros(1, 1, 64),), ["x"], ["y"], [2, 2])
    streamify(path, tmp_path / "la.stream.onnx", sample_rate_hz=16000, hop_samples=160)
    info = fp16_onnx(tmp_path / "la.stream.onnx", tmp_path / "la.fp16.onnx")
    plan = info["fp32_nodes"]
    assert plan["/lstm/LSTM"] == "op LSTM" and any("~stream_gate" in n for n in plan)
    assert info["snr_db_vs_fp32"] > 60
    d = fx.write_recordings(tmp_path / "rec", count=16)
    assert main(["calib", "make", "--from", str(d), "--out", str(tmp_path / "calib")]) == 0
    int8_onnx(tmp_path / "la.stream.onnx", tmp_path / "la.int8.onnx", calib=load_calibration_set(tmp_path / "calib").folder)
    ops = {n.name: n.op_type for n in onnx.load(str(tmp_path / "la.int8.onnx")).graph.node}
    assert "QuantizeLinear" in ops.values() and ops["/lstm/LSTM"] == "LSTM"
    x = fx.eval_pair()[0][:16000]
    with OrtStreamSession(tmp_path / "la.stream.onnx") as s:
        ref = stream_array(s, x)
    for name in ("la.fp16.onnx", "la.int8.onnx"):
        with OrtStreamSession(tmp_path / name) as s:
            y = stream_array(s, x)
        snr = 10 * np.log10(np.sum(ref ** 2) / np.sum((y - ref) ** 2))
        assert snr > (50 if "fp16" in name else 15), (name, snr)


def test_proof_catches_a_wrong_rule_and_names_the_first_diverging_tensor(tmp_path, monkeypatch):
    """A CumSum streamed without its running-sum state is exact on the first chunk and wrong after it: the
    proof (several receptive fields, two chunk lengths) catches it, names the CumSum's output, writes nothing."""
    from cosyedge.errors import AccuracyError
    from cosyedge.surgery.rules import RULES, STREAM, load_all
    from cosyedge.surgery.rules.perframe import pass_through

    load_all()
    torch.manual_seed(0)
    path = _export(CumulativeLayerNorm(), tmp_path / "cln.onnx", (torch.zeros(1, 1, 64),), ["x"], ["y"], [2, 2])
    monkeypatch.setitem(RULES, (STREAM, "CumSum"), lambda node, ctx: pass_through(node, ctx, [0]))
    with pytest.raises(AccuracyError, match=r"differs from the full-sequence graph: .*first diverging tensor "
                                            r"'[^']*CumSum[^']*' \(output of CumSum node") as err:
        streamify(path, tmp_path / "out.onnx", sample_rate_hz=16000, hop_samples=16)
    assert "nothing written" in str(err.value) and not (tmp_path / "out.onnx").exists()
    assert err.value.exit_code == 5


class DualPath(nn.Module):
    """GTCRN/DPRNN-style dual path over (N, C, T, F): an intra-frame bidirectional GRU over frequency (time
    folded into its batch: per frame) and an inter-frame forward GRU over time (per frequency bin)."""

    def __init__(self, c=4, f=6, h=5):
        super().__init__()
        self.conv = nn.Conv2d(1, c, (2, 3), padding=(0, 1))
        self.intra = nn.GRU(c, h, batch_first=True, bidirectional=True)
        self.intra_fc = nn.Linear(2 * h, c)
        self.inter = nn.GRU(c, c, batch_first=True)

    def forward(self, x):  # (N, 1, T, F)
        h = self.conv(F.pad(x, (0, 0, 1, 0)))  # (N, C, T, F)
        n, c, t, f = h.shape
        a = h.permute(0, 2, 3, 1).reshape(n * t, f, c)  # sequences over frequency, one per frame
        a = self.intra_fc(self.intra(a)[0]).reshape(n, t, f, c)
        b = a.permute(0, 2, 1, 3).reshape(n * f, t, c)  # sequences over time, one per bin
        b = self.inter(b)[0].reshape(n, f, t, c).permute(0, 3, 2, 1)
        return b + h


def test_dual_path_intra_frame_bidirectional_gru_streams(tmp_path):
    """A bidirectional GRU over frequency is per frame (allowed); the GRU over time carries state."""
    torch.manual_seed(0)
    model = DualPath()
    path = _export(model, tmp_path / "dp.onnx", (torch.zeros(1, 1, 12, 6),), ["x"], ["y"], [2, 2])
    c = streamify(path, tmp_path / "dp.stream.onnx", sample_rate_hz=16000, hop_samples=160)
    assert sorted(s.kind for s in c.states) == ["context", "recurrent"]
    # the inter GRU's batch is N x 6 bins: its state is stored (N, 6, H), batch-first
    assert next(s for s in c.states if s.kind == "recurrent").shape == ["N", 6, 4]
    feeds = {"x": np.random.default_rng(8).standard_normal((2, 1, 40, 6)).astype(np.float32)}
    _assert_stream_equals_full(model, tmp_path / "dp.stream.onnx", c, feeds, [1, 4])


def test_gru_layout_1_hand_built(tmp_path):
    """An ONNX GRU with layout=1 (X (N, T, I)): the rule maps it to (N, 1, H) states, but ONNX Runtime cannot
    run it on CPU, so streamify stops with that reason before writing anything."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(9)
    i, h = 6, 5
    w = numpy_helper.from_array((0.5 * rng.standard_normal((1, 3 * h, i))).astype(np.float32), "W")
    r = numpy_helper.from_array((0.5 * rng.standard_normal((1, 3 * h, h))).astype(np.float32), "R")
    b = numpy_helper.from_array((0.1 * rng.standard_normal((1, 6 * h))).astype(np.float32), "B")
    nodes = [helper.make_node("GRU", ["x", "W", "R", "B"], ["y4"], name="gru", hidden_size=h, layout=1),
             helper.make_node("Squeeze", ["y4", "ax"], ["y"], name="sq")]
    ax = numpy_helper.from_array(np.array([2], dtype=np.int64), "ax")
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "T", i])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "T", h])], [w, r, b, ax])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]), str(tmp_path / "g.onnx"))
    # ONNX Runtime's CPU GRU has no layout=1 kernel, so neither the probes nor the proof can run it here: a
    # one-line ArtifactError (exit 3) that says so, nothing written
    from cosyedge.errors import ArtifactError

    with pytest.raises(ArtifactError, match=r"ONNX Runtime cannot run the full-sequence graph .*layout == 1"):
        streamify(tmp_path / "g.onnx", tmp_path / "g.stream.onnx", sample_rate_hz=16000, hop_samples=160)
    assert not (tmp_path / "g.stream.onnx").exists()


class ChanToBatch(nn.Module):
    """Channels folded into the batch before a shared causal conv: (N, 4, T) -> (N*4, 1, T) -> (N, 4, T)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv1d(1, 4, 1)
        self.shared = nn.Conv1d(1, 1, 5)

    def forward(self, x):
        h = self.a(x)
        n, c, t = h.shape
        return self.shared(F.pad(h.reshape(n * c, 1, t), (4, 0))).reshape(n, c, t).sum(1, keepdim=True)


def test_conv_state_on_a_folded_batch(tmp_path):
    """A conv whose batch holds N x 4 sequences keeps its state (N, 4, 1, P), batch-first (found by a newcomer
    check: the stream graph once failed in ONNX Runtime)."""
    torch.manual_seed(0)
    model = ChanToBatch()
    path = _export(model, tmp_path / "fold.onnx", (torch.zeros(2, 1, 64),), ["x"], ["y"], [2, 2])
    c = streamify(path, tmp_path / "fold.stream.onnx", sample_rate_hz=16000, hop_samples=160)
    assert [(s.kind, s.shape) for s in c.states] == [("context", ["N", 4, 1, 4])]
    feeds = {"x": np.random.default_rng(10).standard_normal((2, 1, 480)).astype(np.float32)}
    _assert_stream_equals_full(model, tmp_path / "fold.stream.onnx", c, feeds, [1, 160])


def test_time_axis_option_and_empty_model_errors(tmp_path):
    """--time-axis naming no input, or an axis out of range or the batch, is exit 2; an empty ONNX exit 3."""
    import subprocess
    import sys

    torch.manual_seed(0)
    path = _export(ChanToBatch(), tmp_path / "m.onnx", (torch.zeros(1, 1, 64),), ["x"], ["y"], [2, 2])
    (tmp_path / "empty.onnx").write_bytes(b"")

    def run(*args):
        return subprocess.run([sys.executable, "-m", "cosyedge.cli.main", "streamify", "-q", *args, "-o",
                               str(tmp_path / "out.onnx"), "--sample-rate-hz", "16000", "--hop-samples", "160"],
                              capture_output=True, text=True, timeout=120)

    for args, code, text in (([str(path), "--time-axis", "nope=2"], 2, "--time-axis names ['nope'], which are not "
                                                                       "inputs of the model (its inputs: ['x'])"),
                             ([str(path), "--time-axis", "x=7"], 2, "--time-axis x=7: input 'x' has shape"),
                             ([str(path), "--time-axis", "x=0"], 2, "time must be one of axes 1..2"),
                             ([str(tmp_path / "empty.onnx")], 3, "")):
        res = run(*args)
        lines = res.stderr.strip().splitlines()
        assert res.returncode == code and len(lines) == 1 and lines[0].startswith("[!] ") and text in lines[0], \
            (args, res.stderr)
        assert not (tmp_path / "out.onnx").exists()


def test_rules_do_not_import_the_walker():
    """Import circle 1 stays gone: the walker imports the rules, never the other way round (INT64_MAX lives in
    surgery/rules/__init__.py, BOOKKEEPING in artifacts/contract.py)."""
    import ast
    from pathlib import Path

    import cosyedge.surgery.rules as rules_pkg
    from cosyedge.artifacts import BOOKKEEPING
    from cosyedge.surgery.rules import INT64_MAX

    assert INT64_MAX == int(np.iinfo(np.int64).max)
    assert BOOKKEEPING == "~stream"
    for f in sorted(Path(rules_pkg.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.module != "cosyedge.surgery.walker", f"{f.name} imports the walker"
            elif isinstance(node, ast.Import):
                assert all(a.name != "cosyedge.surgery.walker" for a in node.names), f"{f.name} imports the walker"
