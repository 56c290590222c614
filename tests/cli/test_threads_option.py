"""Every ``--threads`` option warns in one line above the CPU count."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from cosyedge.cli.main import main
from tests.helpers import models

HOP = 160


@pytest.fixture(scope="module")
def delay_onnx(tmp_path_factory) -> Path:
    """A stream ONNX (pure delay: hop 160, delay 160 at 16 kHz), made by hand: no torch, no training."""
    return models.make_delay_model(tmp_path_factory.mktemp("m") / "delay.onnx", delay_samples=HOP, hop=HOP)


def test_threads_above_the_cpu_count_warns_in_one_line(delay_onnx, tmp_path, monkeypatch, warnings_seen):
    from cosyedge.cli import options

    monkeypatch.setattr(options, "available_cpus", lambda: 2)
    sf.write(tmp_path / "in.wav", np.zeros(3200, np.float32), 16000)
    args = ["run", str(tmp_path / "in.wav"), "-o", str(tmp_path / "out.wav"), "--engine", str(delay_onnx)]
    assert main(args + ["--threads", "64"]) == 0
    warned = [r.getMessage() for r in warnings_seen if "--threads" in r.getMessage()]
    assert warned == ["--threads 64 is more than the 2 CPU cores this process can use: ONNX Runtime's threads "
                      "then wait on each other (64 on 2 cores ran 25x slower than 1 thread); give --threads 2 or less"]
    warnings_seen.clear()
    assert main(args + ["--threads", "2", "-q"]) == 0
    assert not [r for r in warnings_seen if "--threads" in r.getMessage()]


def test_every_threads_option_warns_above_the_cpu_count():
    import click

    from cosyedge.cli.main import cli
    from cosyedge.cli.options import warn_threads_above_cpus

    seen = []

    def walk(cmd, path):
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(None):
                walk(cmd.get_command(None, name), path + [name])
            return
        for p in cmd.params:
            if p.name == "threads":
                seen.append((" ".join(path), p.callback is warn_threads_above_cpus))

    walk(cli, [])
    assert {"run", "compare", "eval", "calib amax", "calib int8"} <= {c for c, _ in seen}, seen
    assert all(ok for _, ok in seen), seen
