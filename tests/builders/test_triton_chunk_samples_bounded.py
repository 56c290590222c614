"""``build --backend triton --chunk-samples N`` is bounded up front like run's and compare's chunks
(:data:`cosyedge.artifacts.contract.MAX_CHUNK_MS`, 10 s): 16000000 samples ran 206 s at 2.9 GB, 1e12 ended in
"out of memory" (exit 3). A longer chunk is a bad argument: exit 2, one line naming the option, nothing written."""

from __future__ import annotations

import pytest

from cosyedge.artifacts.contract import MAX_CHUNK_MS
from cosyedge.builders import triton as tb
from cosyedge.errors import UsageError
from cosyedge.models import REFERENCE_STREAM_ONNX



LONGEST = int(MAX_CHUNK_MS * 16000 // 1000)  # the reference model: 16 kHz, stride 160


@pytest.mark.parametrize("chunk", [LONGEST + 160, 160 * 10**10])  # both multiples of the stride
def test_cli_chunk_samples_longer_than_10_s_is_refused(cli, tmp_path, chunk):
    rc, out, err = cli("build", "--backend", "triton", "-o", tmp_path / "engines", "--chunk-samples", chunk)
    assert rc == 2, err
    assert err.count("\n") == 1 and err.startswith("[!] ") and "Traceback" not in err
    assert f"--chunk-samples {chunk}: a chunk is at most 10 s ({LONGEST} samples at 16000 Hz" in err
    assert not (tmp_path / "engines").exists()


def test_library_chunk_samples_bound(tmp_path):
    with pytest.raises(UsageError, match=f"at most 10 s .{LONGEST} samples"):
        tb.build_triton(REFERENCE_STREAM_ONNX, out_dir=tmp_path, chunk_samples=LONGEST + 160)
    assert not any(tmp_path.iterdir())
