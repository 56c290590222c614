"""streamify's output path: a positional output is never a full-sequence ONNX nor
anything but ``.onnx``; it replaces its own earlier stream output. One ``[!]`` line, nothing the user had is lost."""

from __future__ import annotations

import onnx

from cosyedge.cli.main import main
from tests.helpers.cli_errors import one_error_line
from tests.helpers.files import sha256
from tests.helpers.graphs import conv_onnx

HOP = 160

STREAMIFY_ARGS = ["--sample-rate-hz", "16000", "--hop-samples", str(HOP), "-q"]


def test_streamify_positional_output_refuses_a_full_sequence_onnx(tmp_path, capsys):
    """'streamify enc.onnx dec.onnx' (forgot -o; several files form one model) used to replace dec.onnx with enc's
    stream graph, exit 0."""
    enc, dec = conv_onnx(tmp_path / "enc.onnx"), conv_onnx(tmp_path / "dec.onnx")
    before = sha256(dec)
    assert main(["streamify", str(enc), str(dec), *STREAMIFY_ARGS]) == 2
    line = one_error_line(capsys)
    assert f"output {dec} (the last argument, no -o given) exists and is not a cosyedge stream ONNX" in line
    assert "refusing to write over it" in line
    assert sha256(dec) == before
    # with -o the same: an existing non-stream file is never written over
    assert main(["streamify", str(enc), "-o", str(dec), *STREAMIFY_ARGS]) == 2
    assert "[!] output -o " in one_error_line(capsys)
    assert sha256(dec) == before


def test_streamify_output_must_end_in_onnx(tmp_path, capsys):
    """'streamify enc.onnx notes.txt' replaced the notes with a protobuf; '-o x.txt' was accepted."""
    enc = conv_onnx(tmp_path / "enc.onnx")
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    assert main(["streamify", str(enc), str(notes), *STREAMIFY_ARGS]) == 2
    assert f"output {notes} (the last argument, no -o given): a stream ONNX file name must end in .onnx" in \
        one_error_line(capsys)
    assert notes.read_text() == "my notes\n"
    assert main(["streamify", str(enc), "-o", str(tmp_path / "x.txt"), *STREAMIFY_ARGS]) == 2
    assert "must end in .onnx" in one_error_line(capsys)
    assert not (tmp_path / "x.txt").exists()


def test_streamify_replaces_its_own_stream_output(tmp_path, capsys):
    """An earlier stream ONNX (cosyedge stream metadata) is still replaced: rerunning streamify works, both forms."""
    enc = conv_onnx(tmp_path / "enc.onnx")
    out = tmp_path / "enc.stream.onnx"
    assert main(["streamify", str(enc), str(out), *STREAMIFY_ARGS]) == 0
    assert main(["streamify", str(enc), str(out), *STREAMIFY_ARGS, "--name", "again"]) == 0
    meta = {p.key: p.value for p in onnx.load(str(out), load_external_data=False).metadata_props}
    assert meta["cosyedge.name"] == "again"
    assert main(["streamify", str(enc), "-o", str(out), *STREAMIFY_ARGS, "--name", "third"]) == 0
    meta = {p.key: p.value for p in onnx.load(str(out), load_external_data=False).metadata_props}
    assert meta["cosyedge.name"] == "third"
    # output == input keeps its own message
    assert main(["streamify", str(enc), str(enc), *STREAMIFY_ARGS]) == 2
    assert f"output {enc} is the input file" in one_error_line(capsys)
