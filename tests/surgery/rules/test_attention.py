"""The forms attention takes in an ONNX graph, each streamed with a key/value cache and proved.

Small one-layer models, both exporters where they export: explicit ``q @ k^T`` with ``masked_fill`` (and the WeNet
habit of masking again after the Softmax), an additive float mask (0 / -1e9), ``F.scaled_dot_product_attention`` with
a bool mask (TorchScript adds ``Where(IsNaN(p), 0, p)`` after the Softmax), Einsum scores and values
(``nqhd,nkhd->nhqk``), WeNet's positional attention (``matrix_ac + matrix_bd``, the keys' positional projections a
second cache), ``nn.MultiheadAttention`` (dynamo: the TorchScript export bakes the length into a Reshape and
is refused with the export hint), the ONNX ``Attention`` op (opset 23, from the dynamo exporter and written by hand
with ``is_causal``). streamify's proof must pass; then an own ONNX Runtime loop over 8 x the window from the first
frame, at several chunk sizes, must equal the full graph. Refusals: full attention, a mask computed from a lengths
input, a relative-position bias, a mask that widens with the length.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from cosyedge.errors import UsageError
from cosyedge.surgery import streamify

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

D, H, W = 16, 2, 8  # channels, heads, window (frames)


def _band(t):
    i = torch.arange(t)
    d = i[:, None] - i[None, :]
    return (d >= 0) & (d < W)


def _chunk(t, c=4, left=2):
    ci = torch.arange(t) // c
    return (ci[None, :] <= ci[:, None]) & (ci[None, :] >= ci[:, None] - left)


class Heads(nn.Module):
    """(N, T, D) -> heads (N, H, T, D/H) -> attention of one ``form`` -> (N, T, D)."""

    def __init__(self, form):
        super().__init__()
        torch.manual_seed(0)
        self.form = form
        self.qkv, self.out = nn.Linear(D, 3 * D), nn.Linear(D, D)

    def forward(self, x):
        n, t, c = x.shape
        q, k, v = [z.view(n, t, H, c // H).transpose(1, 2) for z in self.qkv(x).chunk(3, -1)]
        f = self.form
        if f == "masked_fill_twice":  # WeNet MultiHeadedAttention.forward_attention
            m = _chunk(t)
            s = (q @ k.transpose(-1, -2) / 2.0).masked_fill(~m, float("-inf"))
            y = torch.softmax(s, -1).masked_fill(~m, 0.0) @ v
        elif f == "additive":
            s = q @ k.transpose(-1, -2) * 0.5 + torch.zeros(t, t).masked_fill(~_band(t), -1e9)
            y = torch.softmax(s, -1) @ v
        elif f == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=_band(t))
        elif f == "full":
            y = torch.softmax(q @ k.transpose(-1, -2), -1) @ v
        elif f == "post_only":  # masked after the Softmax only: normalised over future keys
            y = torch.softmax(q @ k.transpose(-1, -2), -1).masked_fill(~_band(t), 0.0) @ v
        elif f == "end_chunks":  # chunks counted from the sequence's end: needs the length
            ci = (torch.arange(t) + (-t) % 4) // 4
            m = (ci[None, :] <= ci[:, None]) & (ci[None, :] >= ci[:, None] - 2)
            y = torch.softmax((q @ k.transpose(-1, -2)).masked_fill(~m, float("-inf")), -1) @ v
        elif f == "widening":  # window T // 2: not one pattern at every length
            i = torch.arange(t)
            d = i[:, None] - i[None, :]
            s = (q @ k.transpose(-1, -2)).masked_fill(~((d >= 0) & (d < t // 2)), float("-inf"))
            y = torch.softmax(s, -1) @ v
        elif f == "relbias":  # a learned bias from the data over query x key time (not a mask)
            bias = (q.mean(-1, keepdim=True) - k.mean(-1, keepdim=True).transpose(-1, -2))
            s = (q @ k.transpose(-1, -2) + bias).masked_fill(~_band(t), float("-inf"))
            y = torch.softmax(s, -1) @ v
        return self.out(y.transpose(1, 2).reshape(n, t, c))


class RelPos(nn.Module):
    """WeNet ``RelPositionMultiHeadedAttention`` (wenet/transformer/attention.py; no rel_shift, as WeNet ships it):
    ``matrix_ac = (q + pos_bias_u) @ k^T``, ``matrix_bd = (q + pos_bias_v) @ p^T`` with ``p = linear_pos(pe[:, :T])``
    (RelPositionalEncoding's table), scores ``(ac + bd) / sqrt(d_k)``, a band mask. The positional projections of the
    key frames are a second key cache."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.q, self.k, self.v, self.pos = nn.Linear(D, D), nn.Linear(D, D), nn.Linear(D, D), nn.Linear(D, D, False)
        self.bu, self.bv = nn.Parameter(torch.randn(H, D // H)), nn.Parameter(torch.randn(H, D // H))
        p = torch.arange(5000).float()[:, None]
        div = torch.exp(torch.arange(0, D, 2).float() * -(np.log(10000.0) / D))
        pe = torch.zeros(5000, D)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(p * div), torch.cos(p * div)
        self.register_buffer("pe", pe[None])

    def forward(self, x):
        n, t, c = x.shape
        q = self.q(x).view(n, t, H, c // H)
        k, v = [m(x).view(n, t, H, c // H).transpose(1, 2) for m in (self.k, self.v)]
        p = self.pos(self.pe[:, :t]).view(1, t, H, c // H).transpose(1, 2)
        ac = (q + self.bu).transpose(1, 2) @ k.transpose(-2, -1)
        bd = (q + self.bv).transpose(1, 2) @ p.transpose(-2, -1)
        s = ((ac + bd) / math.sqrt(D // H)).masked_fill(~_band(t), float("-inf"))
        return (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(n, t, c)


class RelShift(RelPos):
    """NeMo ``RelPositionMultiHeadAttention`` (nemo/collections/asr/parts/submodules/multi_head_attention.py): relative
    positions ``T - 1 .. -(T - 1)`` (2T - 1 of them, the centre of the table), ``matrix_bd`` over them and
    Transformer-XL's ``rel_shift`` (pad, view, slice). Streams under its band window
    (tests/surgery/test_relative_positions.py)."""

    def forward(self, x):
        n, t, c = x.shape
        q = self.q(x).view(n, t, H, c // H)
        k, v = [m(x).view(n, t, H, c // H).transpose(1, 2) for m in (self.k, self.v)]
        p = self.pos(self.pe[:, 2500 - t + 1:2500 + t]).view(1, 2 * t - 1, H, c // H).transpose(1, 2)
        ac = (q + self.bu).transpose(1, 2) @ k.transpose(-2, -1)
        bd = (q + self.bv).transpose(1, 2) @ p.transpose(-2, -1)  # (N, H, T, 2T - 1)
        b, h, qlen, plen = bd.shape
        bd = nn.functional.pad(bd, (1, 0)).view(b, h, -1, qlen)[:, :, 1:].view(b, h, qlen, plen)[..., :t]
        s = ((ac + bd) / math.sqrt(D // H)).masked_fill(~_band(t), float("-inf"))
        return (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(n, t, c)


class Einsum(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.q, self.k, self.v = nn.Linear(D, D), nn.Linear(D, D), nn.Linear(D, D)

    def forward(self, x):
        n, t, c = x.shape
        q, k, v = [m(x).view(n, t, H, c // H) for m in (self.q, self.k, self.v)]
        s = torch.einsum("nqhd,nkhd->nhqk", q, k).masked_fill(~_band(t), float("-inf"))
        return torch.einsum("nhqk,nkhd->nqhd", s.softmax(-1), v).reshape(n, t, c)


class MHA(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.m = nn.MultiheadAttention(D, H, batch_first=True)

    def forward(self, x):
        return self.m(x, x, x, attn_mask=~_band(x.shape[1]), need_weights=False)[0]


class Lengths(nn.Module):
    """A key-padding mask from the data (frames that are all zeros are padding, as a batch padded to one length has):
    depends on values, not on shapes. (A separate lengths input has no time axis, which streamify refuses first.)"""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.q, self.k = nn.Linear(D, D), nn.Linear(D, D)

    def forward(self, x):
        t = x.shape[1]
        keep = x.abs().sum(-1) > 0  # (N, T)
        s = (self.q(x) @ self.k(x).transpose(1, 2)).masked_fill(~(keep[:, None, :] & _band(t)), float("-inf"))
        return torch.softmax(s, -1) @ x


def _export(model, path, dynamo, opset=None, extra=()):
    x = torch.randn(2 if dynamo else 1, 40, D)
    args = (x,) + tuple(extra)
    names = ["x"] + [f"in{i}" for i in range(len(extra))]
    if dynamo:
        shapes = {"x": {0: torch.export.Dim("N", max=64), 1: torch.export.Dim("T", min=2, max=4096)}}
        for i, e in enumerate(extra):
            shapes[f"in{i}"] = {0: shapes["x"][0]}
        kw = {"opset_version": opset} if opset else {}
        torch.onnx.export(model, args, str(path), input_names=names, output_names=["y"], dynamic_shapes=shapes,
                          dynamo=True, **kw)
    else:
        axes = {"x": {0: "N", 1: "T"}, "y": {0: "N", 1: "T"}}
        axes.update({f"in{i}": {0: "N"} for i in range(len(extra))})
        torch.onnx.export(model, args, str(path), input_names=names, output_names=["y"], dynamic_axes=axes,
                          dynamo=False, opset_version=17)
    return path


def _speechlike(t, seed=0):
    """(1, t, D) smooth, speech-like features (a random AR(1) process per channel): deterministic."""
    rng = np.random.default_rng(seed)
    e = rng.standard_normal((t, D)).astype(np.float32)
    x = np.zeros_like(e)
    for i in range(1, t):
        x[i] = 0.9 * x[i - 1] + 0.3 * e[i]
    return x[None]


def _own_loop(stream, full, chunks, frames, lead=0):
    """Stream ``frames`` of features through ``stream`` (own state loop, zeros at start) at each chunk size; return the
    worst max abs error against ``full`` (an ONNX path) over every frame, the first ones included."""
    x = _speechlike(frames)
    ref = ort.InferenceSession(str(full)).run(None, {"x": x})[0]
    sess = ort.InferenceSession(str(stream))
    ins = {i.name: i for i in sess.get_inputs()}
    worst = 0.0
    for c in chunks:
        st = {}
        for name, i in ins.items():
            if name.startswith("state_in"):
                dt = {"tensor(float)": np.float32, "tensor(int64)": np.int64}[i.type]
                st[name] = np.zeros([1 if not isinstance(d, int) else d for d in i.shape], dt)
        outs = []
        for s0 in range(0, frames, c):
            feeds = {"x": x[:, s0:s0 + c], **st}
            res = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
            outs.append(res["y"])
            st = {k.replace("state_out", "state_in"): v for k, v in res.items() if k.startswith("state_out")}
        y = np.concatenate(outs, axis=1)
        worst = max(worst, float(np.abs(y[:, lead:] - ref[:, :frames - lead]).max()))
    return worst


CASES = [("masked_fill_twice", False, 4), ("masked_fill_twice", True, 4), ("additive", False, 1),
         ("additive", True, 1), ("sdpa", False, 1), ("sdpa", True, 1), ("einsum", False, 1), ("einsum", True, 1),
         ("mha", True, 1), ("attention_op", True, 1), ("relpos", False, 1), ("relpos", True, 1)]


@pytest.mark.parametrize("form,dynamo,fph", CASES, ids=[f"{f}-{'dynamo' if d else 'ts'}" for f, d, _ in CASES])
def test_attention_forms_stream_with_a_kv_cache(tmp_path, form, dynamo, fph):
    model = {"einsum": Einsum, "mha": MHA, "relpos": RelPos}.get(form, None)
    model = model() if model else Heads("sdpa" if form == "attention_op" else form)
    src = _export(model.eval(), tmp_path / "m.onnx", dynamo, opset=23 if form == "attention_op" else None)
    ops = {n.op_type for n in onnx.load(str(src)).graph.node}
    if form == "attention_op":
        assert "Attention" in ops
    c = streamify(src, tmp_path / "m.stream.onnx", sample_rate_hz=16000, hop_samples=160, frames_per_hop=fph)
    kinds = sorted(s.kind for s in c.states)
    assert kinds == ["key"] * (2 if form == "relpos" else 1) + ["position", "value"], kinds
    assert c.proof["max_abs"] < 1e-5
    cache = 8 if form == "masked_fill_twice" else W - 1
    assert [a["cache_frames"] for a in c.attention] == [cache]
    chunks = (4, 8, 12) if fph == 4 else (1, 3, 8, 25)
    err = _own_loop(tmp_path / "m.stream.onnx", src, chunks, 8 * 25)
    assert err < 1e-5, err


def test_mha_torchscript_export_is_refused_with_the_export_hint(tmp_path):
    src = _export(MHA().eval(), tmp_path / "m.onnx", False)
    with pytest.raises(UsageError, match="the export fixed the time length.*dynamo=True"):
        streamify(src, tmp_path / "o.onnx", sample_rate_hz=16000, hop_samples=160, frames_per_hop=1)


def _hand_attention(causal, mask_kind):
    """An ONNX Attention node (opset 23) on 3-D Q/K/V (N, T, D) with q/kv_num_heads 2, written by hand."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((0.3 * rng.standard_normal((D, D))).astype(np.float32), n) for n in "QKV"]
    nodes = [helper.make_node("MatMul", ["x", n], [n.lower()]) for n in "QKV"]
    ins = ["q", "k", "v"]
    if mask_kind:
        inits += [numpy_helper.from_array(np.array(v, dtype=np.int64), n) for n, v in
                  (("one", [1]), ("z", 0), ("o", 1), ("w", W), ("ax0", [0]), ("ax1", [1]))]
        nodes += [helper.make_node("Shape", ["x"], ["shp"]),
                  helper.make_node("Gather", ["shp", "one"], ["t1"], axis=0),
                  helper.make_node("Squeeze", ["t1", "ax0"], ["t"]),
                  helper.make_node("Range", ["z", "t", "o"], ["r"]),
                  helper.make_node("Unsqueeze", ["r", "ax1"], ["ri"]),
                  helper.make_node("Unsqueeze", ["r", "ax0"], ["rj"]),
                  helper.make_node("Sub", ["ri", "rj"], ["d"]),
                  helper.make_node("Less", ["d", "w"], ["m"])]
        ins.append("m")
    nodes.append(helper.make_node("Attention", ins, ["y"], is_causal=int(causal), q_num_heads=H, kv_num_heads=H))
    g = helper.make_graph(nodes, "att", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "T", D])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "T", D])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])


def test_hand_written_attention_op_with_is_causal_and_a_band(tmp_path):
    # is_causal=1 and a mask d < W (which alone is not causal): together a band of W frames
    onnx.save(_hand_attention(True, True), tmp_path / "a.onnx")
    c = streamify(tmp_path / "a.onnx", tmp_path / "a.stream.onnx", sample_rate_hz=16000, hop_samples=160)
    assert c.attention[0]["pattern"].startswith(f"banded causal (sliding window of {W} frames)")
    assert _own_loop(tmp_path / "a.stream.onnx", tmp_path / "a.onnx", (1, 5, 16), 8 * 25) < 1e-5
    # is_causal alone: unlimited, refused; bounded with a window it streams and differs from the original
    onnx.save(_hand_attention(True, False), tmp_path / "c.onnx")
    with pytest.raises(UsageError, match="Attention node .*causal with unlimited left context.*--attention-window"):
        streamify(tmp_path / "c.onnx", tmp_path / "c.stream.onnx", sample_rate_hz=16000, hop_samples=160)
    c = streamify(tmp_path / "c.onnx", tmp_path / "c.stream.onnx", sample_rate_hz=16000, hop_samples=160,
                  attention_window=20)
    assert c.attention[0]["cache_frames"] == 19 and c.proof["attention_window"]["max_abs_vs_original"] > 1e-4
    # neither a mask nor is_causal: full attention
    onnx.save(_hand_attention(False, False), tmp_path / "f.onnx")
    with pytest.raises(UsageError, match=r"full \(bidirectional"):
        streamify(tmp_path / "f.onnx", tmp_path / "f.stream.onnx", sample_rate_hz=16000, hop_samples=160)


@pytest.mark.parametrize("form,why", [
    ("full", r"full \(bidirectional: every frame sees the whole sequence\)"),
    ("widening", "the pattern changes with the sequence length"),
    ("post_only", "applied only after the Softmax, which normalised over every key, later ones included"),
    ("end_chunks", "neither banded nor chunked"),
    ("relbias", "depends on the values of graph input 'x'.*relative position bias computed from the data"),
])
def test_unstreamable_attention_is_refused_naming_why(tmp_path, form, why):
    src = _export(Heads(form).eval(), tmp_path / "m.onnx", False)
    with pytest.raises(UsageError, match=why):
        streamify(src, tmp_path / "o.onnx", sample_rate_hz=16000, hop_samples=160, frames_per_hop=1)
    assert not (tmp_path / "o.onnx").exists()


def test_a_mask_from_a_lengths_input_is_refused_not_guessed(tmp_path):
    src = _export(Lengths().eval(), tmp_path / "m.onnx", False)
    with pytest.raises(UsageError, match="depends on the values of graph input 'x'.*key-padding mask from lengths"
                                         ".*refused, not guessed"):
        streamify(src, tmp_path / "o.onnx", sample_rate_hz=16000, hop_samples=160, frames_per_hop=1)


def test_a_float16_model_streams_with_float16_caches(tmp_path):
    """A model exported in float16 (TorchScript leaves its intermediate tensors untyped once streamify clears the
    export's shapes): the caches take the values' dtype (float16, not a float32 Concat partner), and the proof allows
    a few float16 steps."""
    class Half(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.q, self.k, self.v = nn.Linear(D, D), nn.Linear(D, D), nn.Linear(D, D)

        def forward(self, x):
            s = (self.q(x) @ self.k(x).transpose(1, 2)).masked_fill(~_band(x.shape[1]), float("-inf"))
            return torch.softmax(s, -1) @ self.v(x)

    src = tmp_path / "h.onnx"
    torch.onnx.export(Half().half().eval(), (torch.randn(1, 40, D).half(),), str(src), input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "N", 1: "T"}, "y": {0: "N", 1: "T"}}, dynamo=False,
                      opset_version=17)
    c = streamify(src, tmp_path / "h.stream.onnx", sample_rate_hz=16000, hop_samples=160, frames_per_hop=1)
    assert {s.kind: s.dtype for s in c.states} == {"key": "float16", "value": "float16", "position": "int64"}
    assert c.proof["max_abs"] < 4e-3
