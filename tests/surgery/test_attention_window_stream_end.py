"""The ``--attention-window`` deviation line tells the truth about stream length and counts frames in words:

* a model whose positional table (256 rows here) ends every stream at 2.56 s: the line said "streams longer than
  2.55 s may differ more", though 'cosyedge run' refuses any longer stream; it now says streams end there;
* a window of 1 frame said "bounds attention to 1 frames" (:func:`cosyedge.log.plural`).

The model: a learned positional table of P rows added to hop-160 frames, causal single-head attention with unlimited
left context (what ``--attention-window`` bounds), a transposed-conv decoder."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn


class TableTransformer(nn.Module):
    def __init__(self, rows: int, d: int = 16):
        super().__init__()
        self.enc = nn.Conv1d(1, d, 160, stride=160)
        self.pe = nn.Parameter(torch.randn(1, rows, d) * 0.1)
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.dec = nn.ConvTranspose1d(d, 1, 160, stride=160)

    def forward(self, x):
        f = self.enc(x).transpose(1, 2)
        t = f.shape[1]
        f = f + self.pe[:, :t]
        q, k, v = self.q(f), self.k(f), self.v(f)
        i = torch.arange(t)
        sc = ((q @ k.transpose(1, 2)) / 4.0).masked_fill(i[None, :] > i[:, None], float("-inf"))
        return self.dec((f + torch.softmax(sc, -1) @ v).transpose(1, 2))


def _export(path, rows):
    torch.manual_seed(1)
    torch.onnx.export(TableTransformer(rows).eval(), (torch.randn(1, 1, 16000),), str(path), input_names=["audio"],
                      output_names=["enhanced"], dynamic_axes={"audio": {0: "N", 2: "T"}, "enhanced": {0: "N", 2: "T"}},
                      dynamo=False)
    return path


def _deviation_line(cli, src, out, window):
    rc, _o, err = cli("streamify", src, "-o", out, "--sample-rate-hz", 16000, "--hop-samples", 160,
                      "--attention-window", window)
    assert rc == 0, err
    return next(x for x in err.splitlines() if "differs from the unbounded original" in x)


def test_a_table_that_ends_every_stream_is_said_to_end_it(cli, tmp_path):
    src = _export(tmp_path / "p256.onnx", 256)
    line = _deviation_line(cli, src, tmp_path / "p256.stream.onnx", 300)
    assert ("streams end at 2.56 s, the length the model's positional table allows ('cosyedge run' refuses longer "
            "ones): the proof's input ran to that end (within one 10 ms step)") in line, line
    assert "longer than" not in line and "may differ more" not in line


def test_one_frame_is_one_frame(cli, tmp_path):
    src = _export(tmp_path / "p4096.onnx", 4096)
    line = _deviation_line(cli, src, tmp_path / "w1.stream.onnx", 1)
    assert "--attention-window bounds attention to 1 frame:" in line and "1 frames" not in line
    assert "so streams longer than" in line  # no table ends these streams: longer ones differ more
