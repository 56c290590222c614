"""Positions as users export them: fixed batch (1 or 2) as well as symbolic, library RoPE code, absolute tables.

Most streaming exports fix the batch (input ``[1, T, C]``: only the time axis dynamic). Streamify frees such a batch
(:mod:`cosyedge.surgery.batch`, proved at batch B and row by row at 2B) so that per-stream positions join the data at
its batch axis. Each model here is exported with both exporters (TorchScript ``dynamo=False`` with ``dynamic_axes``,
``dynamo=True`` with ``dynamic_shapes``) at a fixed batch of 1, a fixed batch of 2 and a symbolic batch; streamify's
proof must pass, and an own loop (OrtStreamSession, two different streams in one batch, 5 chunk sizes from the first
frame over 300 frames) must equal the full graph within 1e-5 of its peak.

Forms: an absolute sinusoidal table sliced to the length and added in (N, C, T) (``h + pe[:, :, :T]``) and, scaled, in
(N, T, C) (``x * sqrt(d) + pe[:, :T]``); a cumulative mean (``cumsum(h * h) / arange(1, T + 1)``); rotary embeddings
from the libraries' own code (:mod:`tests.library_rope`): Hugging Face transformers' Llama rotary class, torchtune's,
moshi's ``apply_rope`` and x-transformers'.
"""

from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest

from cosyedge.errors import UsageError
from cosyedge.surgery import streamify
from tests import library_rope
from tests.helpers.streams import feature_frames_streamed

torch = pytest.importorskip("torch")
nn = torch.nn

D, H = 16, 2
HD = D // H
CHUNKS = (1, 2, 3, 8, 25)
ATOL = 1e-5


def _sinusoid_table(rows: int, d: int = D) -> torch.Tensor:
    pos = torch.arange(rows).float()[:, None]
    div = torch.exp(torch.arange(0, d, 2).float() * (-math.log(10000.0) / d))
    pe = torch.zeros(rows, d)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
    return pe


class AbsNCT(nn.Module):
    """(N, C, T): causal conv, ``h + pe[:, :, :T]`` (a 4096-row table), 1x1 conv."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv1d(D, D, 3), nn.Conv1d(D, D, 1)
        self.register_buffer("pe", _sinusoid_table(4096).T[None])

    def forward(self, x):
        h = self.a(nn.functional.pad(x, (2, 0)))
        return self.b(h + self.pe[:, :, :h.shape[2]])


class AbsNTCScaled(nn.Module):
    """(N, T, C): ``lin(x) * sqrt(d) + pe[:, :T]``, linear."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(D, D), nn.Linear(D, D)
        self.register_buffer("pe", _sinusoid_table(4096)[None])

    def forward(self, x):
        return self.b(self.a(x) * math.sqrt(D) + self.pe[:, :x.shape[1]])


class CumMean(nn.Module):
    """(N, C, T): ``h / sqrt(cumsum(h * h) / arange(1, T + 1))`` (a causal running RMS), 1x1 conv."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv1d(D, D, 1), nn.Conv1d(D, D, 1)

    def forward(self, x):
        h = self.a(x)
        m = torch.cumsum(h * h, dim=2) / torch.arange(1, h.shape[2] + 1, dtype=h.dtype, device=h.device)
        return self.b(h / torch.sqrt(m + 1e-3))


class _Heads(nn.Module):
    """(N, T, C) -> queries and keys (N, T, H, HD) -> a library's RoPE -> q * k summed per head -> linear."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.o = nn.Linear(D, D), nn.Linear(D, D), nn.Linear(D, D)

    def heads(self, x):
        n, t, _ = x.shape
        return self.q(x).view(n, t, H, HD), self.k(x).view(n, t, H, HD)

    def out(self, q, k, x):
        return self.o((q * k).reshape(x.shape[0], x.shape[1], D) + x)


class HFLlamaRope(_Heads):
    """transformers' ``LlamaRotaryEmbedding`` + ``apply_rotary_pos_emb`` on (N, H, T, HD), positions as Llama makes
    them (``arange(T).unsqueeze(0)``)."""

    def __init__(self):
        super().__init__()
        rope, self.apply, cfg = library_rope.hf_llama()
        self.rope = rope(config=cfg(hidden_size=D, num_attention_heads=H, head_dim=HD, max_position_embeddings=4096))

    def forward(self, x):
        q, k = (t.transpose(1, 2) for t in self.heads(x))
        pos = torch.arange(x.shape[1], device=x.device).unsqueeze(0)
        cos, sin = self.rope(x, pos)
        q, k = self.apply(q, k, cos, sin)
        return self.out(q.transpose(1, 2), k.transpose(1, 2), x)


class TorchtuneRope(_Heads):
    """torchtune's ``RotaryPositionalEmbeddings`` (a 4096-row cos/sin cache) on (N, T, H, HD)."""

    def __init__(self):
        super().__init__()
        self.rope = library_rope.torchtune_rope()(dim=HD, max_seq_len=4096)

    def forward(self, x):
        q, k = self.heads(x)
        return self.out(self.rope(q), self.rope(k), x)


class MoshiRope(_Heads):
    """moshi's ``apply_rope`` on (N, T, H, HD) (``time_before_heads``), offset zeros per batch row as its transformer
    starts a sequence."""

    def __init__(self):
        super().__init__()
        self.apply = library_rope.moshi_apply_rope()

    def forward(self, x):
        q, k = self.heads(x)
        offset = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)
        q, k = self.apply(q, k, offset, time_before_heads=True)
        return self.out(q, k, x)


class XTransformersRope(_Heads):
    """x-transformers' ``RotaryEmbedding.forward_from_seq_len`` + ``apply_rotary_pos_emb`` on (N, H, T, HD)."""

    def __init__(self):
        super().__init__()
        rope, self.apply = library_rope.x_transformers_rope()
        self.rope = rope(HD)

    def forward(self, x):
        q, k = (t.transpose(1, 2) for t in self.heads(x))
        freqs, scale = self.rope.forward_from_seq_len(x.shape[1])
        q, k = self.apply(q, freqs, scale), self.apply(k, freqs, scale)
        return self.out(q.transpose(1, 2), k.transpose(1, 2), x)


# name: (class, time axis)
MODELS = {"abs_nct": (AbsNCT, 2), "abs_ntc_scaled": (AbsNTCScaled, 1), "cummean": (CumMean, 2),
          "hf_llama_rope": (HFLlamaRope, 1), "torchtune_rope": (TorchtuneRope, 1), "moshi_rope": (MoshiRope, 1),
          "x_transformers_rope": (XTransformersRope, 1)}


def export_fixed_or_symbolic(model, path, ax: int, dynamo: bool, batch: str, t: int = 64):
    """Export ``model`` (input ``x``, output ``y``) with the time axis ``ax`` dynamic and the batch ``"1"``, ``"2"``
    (fixed, as most streaming exports) or ``"N"`` (symbolic, :func:`tests.helpers.models_attention.export`)."""
    from tests.helpers.models_attention import export

    n = 2 if batch == "2" else 1
    x = torch.randn((n, t, D) if ax == 1 else (n, D, t), generator=torch.Generator().manual_seed(0))
    if batch == "N":
        return export(model, path, (x,), dynamo, ax)
    model = model.eval()
    with torch.no_grad():
        if dynamo:
            torch.onnx.export(model, (x,), str(path), input_names=["x"], output_names=["y"], dynamo=True,
                              dynamic_shapes=({ax: torch.export.Dim("T", min=2, max=100000)},), verbose=False)
        else:
            torch.onnx.export(model, (x,), str(path), input_names=["x"], output_names=["y"], opset_version=17,
                              dynamo=False, dynamic_axes={"x": {ax: "T"}, "y": {ax: "T"}})
    return path


def _speech_frames(t: int, ax: int, n: int = 2) -> np.ndarray:
    from tests.helpers.models_attention import speech_features

    return speech_features(t, ax, n)


def _stream_errors(name, tmp_path, dynamo, batch):
    cls, ax = MODELS[name]
    torch.manual_seed(0)
    tag = f"{name}_{'dynamo' if dynamo else 'ts'}_{batch}"
    src = export_fixed_or_symbolic(cls(), tmp_path / f"{tag}.onnx", ax, dynamo, batch)
    out = tmp_path / f"{tag}.stream.onnx"
    c = streamify(src, out, sample_rate_hz=16000, hop_samples=160, frames_per_hop=1)
    assert c.proof["max_abs"] <= ATOL * max(1.0, c.proof.get("peak", 1.0)), c.proof
    x = _speech_frames(300, ax)
    full = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    rows = 2 if batch == "2" else 1
    ref = np.concatenate([full.run(None, {"x": x[i:i + rows]})[0] for i in range(0, 2, rows)])
    peak = float(np.abs(ref).max())
    errs = {}
    for k in CHUNKS:
        y = feature_frames_streamed(out, x, ax, k)
        n = y.shape[ax]
        errs[k] = float(np.abs(y - np.take(ref, np.arange(n), axis=ax)).max()) / peak
    return c, errs


@pytest.mark.slow
@pytest.mark.parametrize("batch", ["1", "2", "N"], ids=["batch1", "batch2", "batchN"])
@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("name", list(MODELS))
def test_positions_stream_exactly_at_any_batch(tmp_path, name, dynamo, batch):
    """Every form, both exporters, fixed batch 1 and 2 and symbolic: the stream graph takes any batch (input ``N``),
    has one int64 (N, 1) position counter, and two different streams in one batch equal the full graph (each at the
    export's batch) from the first frame at 5 chunk sizes, within 1e-5 of the peak."""
    if name == "torchtune_rope" and dynamo and batch != "1":
        pytest.skip("torch.export (torch 2.13) cannot trace torchtune's rope_cache.view(-1, T, 1, D // 2, 2) at a "
                    "batch above 1 ('Eq(Min(4096, T) // T, 2) is inconsistent'): no ONNX to streamify")
    c, errs = _stream_errors(name, tmp_path, dynamo, batch)
    assert [(s.shape, s.dtype) for s in c.states if s.kind == "position"] == [(["N", 1], "int64")], c.states
    assert c.delay_samples == 0
    assert max(errs.values()) <= ATOL, errs


class Unfreeable(nn.Module):
    """(1, C, T) fixed batch, processed as ``h[0]`` (C, T) with ``+ pe[:, :T]`` and unsqueezed back: the batch cannot
    be freed (the graph reads row 0 only)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv1d(D, D, 3), nn.Conv1d(D, D, 1)
        self.register_buffer("pe", _sinusoid_table(4096).T)

    def forward(self, x):
        h = self.a(nn.functional.pad(x, (2, 0)))[0]
        return self.b((h + self.pe[:, :h.shape[1]])[None])


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_fixed_batch_that_cannot_be_freed_streams_one_stream_per_run(tmp_path, dynamo, caplog):
    """A fixed batch of 1 that the graph itself depends on (``h[0]``) is kept: the log says why, positions meet its
    tensors as one stream, the stream graph equals the full graph, and StreamPool refuses it (one stream per run)."""
    import logging

    from cosyedge.errors import ArtifactError
    from cosyedge.runtime.pool import StreamPool

    src = export_fixed_or_symbolic(Unfreeable(), tmp_path / "unfree.onnx", 2, dynamo, "1")
    out = tmp_path / "unfree.stream.onnx"
    with caplog.at_level(logging.INFO, logger="cosyedge"):
        c = streamify(src, out, sample_rate_hz=16000, hop_samples=160, frames_per_hop=1)
    assert "freeing it failed (batch 2 mixes the streams" in caplog.text
    assert c.proof["max_abs"] <= ATOL, c.proof
    x = _speech_frames(200, 2, n=1)
    ref = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    for k in (1, 7):
        y = feature_frames_streamed(out, x, 2, k)
        assert float(np.abs(y - ref[..., :y.shape[2]]).max()) <= ATOL * float(np.abs(ref).max())
    with pytest.raises(ArtifactError, match="takes one stream per run"):
        StreamPool(out, max_streams=2, chunk_samples=160).activate()


class PosOverLength(nn.Module):
    """(N, T, C) + ``arange(T) / T`` (a position divided by the sequence's length)."""

    def forward(self, x):
        t = x.shape[1]
        return x + (torch.arange(t, device=x.device).float() / t)[None, :, None]


@pytest.mark.parametrize("batch", ["1", "N"], ids=["batch1", "batchN"])
def test_positions_over_the_length_are_refused_as_needing_it(tmp_path, batch):
    """``pos / T`` needs the sequence's total length: refused naming that reason (not a data or batch problem), at a
    fixed and a symbolic batch; nothing is written."""
    src = export_fixed_or_symbolic(PosOverLength(), tmp_path / "pt.onnx", 1, False, batch)
    out = tmp_path / "pt.stream.onnx"
    with pytest.raises(UsageError, match=r"computed from the sequence length alone .*needs the sequence's total length"):
        streamify(src, out, sample_rate_hz=16000, hop_samples=160, frames_per_hop=1)
    assert not out.exists()


class WaveAbsTable(nn.Module):
    """Waveform (1, 1, T) fixed batch: a strided causal conv (stride 2), ``h * sqrt(C) + pe[:, :, :T/2]``, a 1x1 conv
    and a transposed conv back to samples."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv1d(1, D, 4, stride=2)
        self.b = nn.Conv1d(D, D, 1)
        self.up = nn.ConvTranspose1d(D, 1, 2, stride=2)
        self.register_buffer("pe", 0.1 * _sinusoid_table(160000).T[None])  # 20 s: compare streams the 17 s demo

    def forward(self, x):
        h = self.a(nn.functional.pad(x, (2, 0)))
        return self.up(torch.tanh(self.b(h * 0.25 + self.pe[:, :, :h.shape[2]])))


@pytest.mark.slow
def test_a_freed_fixed_batch_keeps_pool_and_precision_guarantees(tmp_path):
    """A waveform model exported at a fixed batch of 1 with an absolute table: after streamify, StreamPool runs two
    streams that join 7 chunks apart, each equal to its solo run (own positions); ``build --fp16`` and ``--int8`` exit
    0 and ``cosyedge compare`` against the FP32 stream passes (exit 0) on real speech."""
    from cosyedge.cli.main import main
    from cosyedge.runtime import OrtStreamSession, stream_array
    from tests.precision import int8_fixtures as fx
    from tests.helpers.streams import staggered_pool_outputs

    m = WaveAbsTable().eval()
    src = tmp_path / "wave.onnx"
    with torch.no_grad():
        torch.onnx.export(m, (torch.randn(1, 1, 640),), str(src), input_names=["audio"], output_names=["enhanced"],
                          opset_version=17, dynamo=False, dynamic_axes={"audio": {2: "T"}, "enhanced": {2: "T"}})
    out = tmp_path / "wave.stream.onnx"
    c = streamify(src, out, sample_rate_hz=16000, hop_samples=160)
    assert c.max_stream_samples == 320000 and [s.shape for s in c.states if s.kind == "position"] == [["N", 1]]
    from cosyedge.surgery.proof import demo_audio

    x = demo_audio(16000, 6400)
    with OrtStreamSession(out, chunk_samples=160) as s:
        solo = stream_array(s, x)
    got, batches = staggered_pool_outputs(out, [x, x], 160, {0: 0, 1: 7}, {0: 40, 1: 47}, max_streams=4)
    assert batches == 33
    for k in (0, 1):
        assert len(got[k]) == 6400 and np.abs(got[k] - solo).max() <= 1e-6
    d = fx.write_recordings(tmp_path / "rec", count=16)
    assert main(["calib", "make", "--from", str(d), "--out", str(tmp_path / "calib")]) == 0
    for flags in (["--fp16"], ["--int8", "--calib", str(tmp_path / "calib")]):
        eng = tmp_path / ("e" + flags[0])
        assert main(["build", "-q", "--onnx", str(out), "--backend", "onnxruntime", "-o", str(eng)] + flags) == 0
        folder = next(p.parent for p in eng.glob("*/model.onnx"))
        assert main(["compare", "-q", str(out), str(folder)]) == 0, flags  # --seconds applies to --mark-all only


def test_a_fixed_batch_of_two_that_cannot_be_freed_is_refused(tmp_path):
    """A fixed batch of 2 that the graph depends on (rows mixed: ``h[0]``) is refused in one line naming the batch,
    why it stays fixed and the export fix; nothing is written."""
    src = export_fixed_or_symbolic(Unfreeable(), tmp_path / "unfree2.onnx", 2, False, "2")
    out = tmp_path / "unfree2.stream.onnx"
    with pytest.raises(UsageError, match=r"exported with a fixed batch of 2 that cannot be made dynamic \(batch 4 .*\): "
                                         r"export it with batch 1 or a dynamic batch axis"):
        streamify(src, out, sample_rate_hz=16000, hop_samples=160, frames_per_hop=1)
    assert not out.exists()
