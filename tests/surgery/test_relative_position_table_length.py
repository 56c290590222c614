"""A relative-position table of fixed rows bounds the full-sequence graph, not the stream: ``--attention-window`` on a
model whose relative positions are sliced from such a table (ESPnet / CosyVoice ``EspnetRelPositionalEncoding``,
``pe[:, L // 2 - T + 1 : L // 2 + T]``) proves on as long an input as the table allows and says so; a window the table
cannot prove (the proof streams twice the window) or hold is refused naming the table, its rows and the longest
window it allows. Before, the proof ran the full graph on 8 x the window, past the table, and the refusal read "the
export fixed the time length" (the export had not).

The model: CosyVoice's chunk-aware conformer with unlimited left chunks (chunk 4) and an ESPnet relative table of
``max_len`` 600 (1199 rows: relative positions +-599): streamify's probes (512 and 532 frames) fit it, a proof of
8 x the window does not.
"""

from __future__ import annotations

import re

import pytest

from tests.helpers.cli_errors import refused

torch = pytest.importorskip("torch")

MAX_LEN = 600  # frames whose relative positions the table holds


@pytest.fixture(scope="module")
def rel_table_model(tmp_path_factory):
    from tests.helpers import models_attention as M

    model = M.build("cosyvoice_chunk_unlimited", pos="rel_espnet", num_blocks=1)
    model.pos_enc = M.EspnetRelPositionalEncoding(32, max_len=MAX_LEN)
    return M.export(model.eval(), tmp_path_factory.mktemp("rel") / "rel.onnx")


def _streamify(cli, src, out, window):
    return cli("streamify", src, "-o", out, "--sample-rate-hz", 16000, "--hop-samples", 640, "--frames-per-hop", 4,
               "--attention-window", window)


def test_a_window_the_table_can_prove_streams_with_the_proof_cut_to_the_table(rel_table_model, tmp_path, cli):
    out = tmp_path / "w200.stream.onnx"
    rc, _o, err = _streamify(cli, rel_table_model, out, 200)  # 8 x 200 frames > 600: cut to 600, >= 2 x 200
    assert rc == 0, err
    line = next(x for x in err.splitlines() if "the proof runs on" in x)
    assert re.search(r"the proof runs on 600 frames of 'x': the full-sequence graph runs no longer, the relative-"
                     r"position table '[^']+' of Slice node '[^']+' \(1199 rows\) holds the relative positions of 600 "
                     r"frames \(the stream has no such limit\)", line), line
    assert "export fixed the time length" not in err and out.exists()


def test_a_window_the_table_cannot_prove_is_refused_naming_the_table_and_the_longest_window(rel_table_model, tmp_path,
                                                                                          cli):
    out = tmp_path / "w400.stream.onnx"
    rc, _o, err = _streamify(cli, rel_table_model, out, 400)  # the proof needs 800 frames, the table holds 600
    line = refused(rc, err, 2)
    assert "export fixed the time length" not in line
    assert re.search(r"the relative-position table '[^']+' of Slice node '[^']+' \(1199 rows\) holds the relative "
                     r"positions of 600 frames and no more; the longest --attention-window it allows is 300 frames "
                     r"\(asked: 400\): give --attention-window 300 or less; nothing written", line), line
    assert not out.exists()
    rc, _o, err = _streamify(cli, rel_table_model, out, 300)  # the window the refusal names streams
    assert rc == 0, err


def test_a_window_past_the_table_is_refused_naming_it(rel_table_model, tmp_path, cli):
    out = tmp_path / "w700.stream.onnx"
    rc, _o, err = _streamify(cli, rel_table_model, out, 700)  # keys 703 frames back: the table reaches 599
    line = refused(rc, err, 2)
    assert re.search(r"come from the relative-position table '[^']+' of Slice node '[^']+' \(1199 rows\), which "
                     r"holds relative positions up to \+-599 frames, fewer than the \+-703 its chunked \(chunks of 4 "
                     r"frames, 175 left chunks\) attention reaches: the longest --attention-window it allows is 300 "
                     r"frames",
                     line), line
    assert not out.exists()
