"""What ``streamify --attention-window`` says is true: a window that chunked attention cannot keep exactly is said to be
rounded (up to one chunk, or down to whole chunks) in a warning and in the contract, never bounded silently to more or
less than asked; the look-ahead the proof measures across chunks is told apart from what chunked attention sees inside
a chunk (before: "look-ahead measured ... 0 samples" beside "look-ahead 7 frames inside a chunk"); the deviation from
the unbounded model is given over the proof input's first half and all of it, saying that it grows with length.

The model: CosyVoice's chunk-aware conformer with unlimited left chunks (chunk 8, one block, absolute positions).
"""

from __future__ import annotations

import re

import pytest

from cosyedge.surgery.masks import UNLIMITED, Pattern, window_rounding

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def chunk8(tmp_path_factory):
    from tests.helpers import models_attention as M

    return M.export(M.build("cosyvoice_chunk_unlimited", chunk=8, num_blocks=1),
                    tmp_path_factory.mktemp("chunk8") / "chunk8.onnx")


def _streamify(cli, src, out, window):
    return cli("streamify", src, "-o", out, "--sample-rate-hz", 16000, "--hop-samples", 1280, "--frames-per-hop", 8,
               "--attention-window", window)


@pytest.mark.parametrize("window,text", [
    (4, "attention window rounded up from 4 to 8 frames (a whole number of chunks of 8 frames, at least one: 1 left "
        "chunk)"),
    (12, "attention window rounded down from 12 to 8 frames (a whole number of chunks of 8 frames, at least one: 1 "
         "left chunk)"),
    (20, "attention window rounded down from 20 to 16 frames (a whole number of chunks of 8 frames, at least one: 2 "
         "left chunks)"),
    (16, "")])
def test_window_rounding_to_whole_chunks_is_named(window, text):
    assert window_rounding(Pattern("chunked", chunk=8, left=UNLIMITED), window) == text
    assert window_rounding(Pattern("causal"), window) == ""  # a causal window is kept exactly


def test_a_window_below_the_chunk_says_it_was_rounded_up(chunk8, tmp_path, cli):
    from cosyedge.artifacts import StreamContract

    out = tmp_path / "w4.stream.onnx"
    rc, _o, err = _streamify(cli, chunk8, out, 4)
    assert rc == 0, err
    assert (f"[W] {chunk8}: --attention-window 4: attention window rounded up from 4 to 8 frames (a whole number of "
            "chunks of 8 frames, at least one: 1 left chunk)") in err.splitlines()
    c = StreamContract.from_onnx(out)
    assert c.attention[0]["window_rounding"].startswith("attention window rounded up from 4 to 8 frames")
    # look-ahead: measured across chunks (0 samples: the hop holds whole chunks), seen inside a chunk (7 frames)
    la = next(x for x in err.splitlines() if "look-ahead" in x and "measured on the full graph" in x)
    assert ("look-ahead across chunks (inside a chunk, which arrives whole, chunked attention sees up to 7 frames "
            "ahead) measured on the full graph (input changed from several chunk boundaries (multiples of the 8-frame "
            "stride) on") in la and "0 samples = the delay the graph gives the stream" in la
    att = next(x for x in err.splitlines() if x.startswith("[I] attention at "))
    assert ("key/value cache 8 frames, a query sees up to 7 frames ahead inside its chunk, which a hop of whole chunks "
            "brings at once (no delay across chunks)") in att
    assert "look-ahead 7 frames inside a chunk" not in err
    # the deviation from the unbounded model: over the first half and all of the proof's input, growing with length
    dev = next(x for x in err.splitlines() if "differs from the unbounded original" in x)
    m = re.search(r"SNR ([\d.]+) dB over its first ([\d.]+) s, ([\d.]+) dB over all of it(: the deviation grows with "
                  r"the stream's length \(the original attends to all of the past, the bounded model to its window\), "
                  r"so streams longer than ([\d.]+) s differ more|; streams longer than ([\d.]+) s may differ more "
                  r"\(the original attends to all of the past\))", dev)
    assert m, dev
    p = c.proof["attention_window"]
    assert float(m.group(1)) == pytest.approx(p["snr_db_vs_original_first_half"], abs=0.05)
    assert float(m.group(3)) == pytest.approx(p["snr_db_vs_original"], abs=0.05)
    assert float(m.group(5) or m.group(6)) == pytest.approx(2 * float(m.group(2)), abs=0.02) == p["seconds"]
    assert p["grows_with_length"] == (p["snr_db_vs_original_first_half"] > p["snr_db_vs_original"]) == \
        (m.group(5) is not None)


def test_a_window_of_whole_chunks_says_nothing_of_rounding(chunk8, tmp_path, cli):
    out = tmp_path / "w16.stream.onnx"
    rc, _o, err = _streamify(cli, chunk8, out, 16)
    assert rc == 0, err
    assert "rounded" not in err
