"""Triton-only build options given with another backend are refused in one line that names the flags as the
command line spells them (``--idle-timeout-ms``, not the internal ``idle_us``)."""

from __future__ import annotations


def test_idle_timeout_without_triton_names_the_flag_the_user_gave(cli, tmp_path):
    rc, _, err = cli("build", "--backend", "onnxruntime", "--idle-timeout-ms", "100", "-o", tmp_path, "-q")
    lines = [ln for ln in err.splitlines() if ln.startswith("[!]")]
    assert rc == 2 and len(lines) == 1, err
    assert "--idle-timeout-ms applies to --backend triton only" in lines[0] and "idle-us" not in err
    rc, _, err = cli("build", "--backend", "onnxruntime", "--idle-timeout-ms", "100", "--max-queue-delay-us", "5",
                     "-o", tmp_path, "-q")
    lines = [ln for ln in err.splitlines() if ln.startswith("[!]")]
    assert rc == 2 and len(lines) == 1 and "--max-queue-delay-us, --idle-timeout-ms apply to --backend triton only" \
        in lines[0], err
    assert not any(tmp_path.iterdir())
