"""A second Ctrl-C (or a SIGTERM) while an interrupted command removes its half-written outputs cannot cut that
cleanup short: it left ``c1/.audio.XXXX`` with thousands of files after ``calib make``. The removal of an atomic
file's or folder's temp (:func:`cosyedge.artifacts.atomic_output`, :func:`~cosyedge.artifacts.atomic_folder`) and of
the calibration set's temp audio folder holds SIGINT and SIGTERM, then restores the handlers.

The second signal is simulated: ``shutil.rmtree`` (and ``Path.unlink``) send it to this process just before removing."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import numpy as np
import pytest

from cosyedge.artifacts import atomic_folder, atomic_output, signals_held
from cosyedge.cli.main import Terminated, _on_sigterm

RMTREE = shutil.rmtree


@pytest.fixture
def sigterm_raises():
    """SIGTERM as the CLI handles it (raises Terminated), not pytest's default (which ends the process)."""
    old = signal.signal(signal.SIGTERM, _on_sigterm)
    yield
    signal.signal(signal.SIGTERM, old)


def _second_signal_in_rmtree(monkeypatch, sig):
    sent = []

    def rmtree(path, *args, **kwargs):
        sent.append(Path(path).name)
        signal.raise_signal(sig)  # lands here, in the middle of the cleanup
        RMTREE(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", rmtree)
    return sent


@pytest.mark.parametrize("sig, first", [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, Terminated)])
def test_a_second_signal_cannot_interrupt_the_removal_of_a_temp_folder(tmp_path, monkeypatch, sigterm_raises,
                                                                       sig, first):
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    sent = _second_signal_in_rmtree(monkeypatch, sig)
    with pytest.raises(first), atomic_folder(tmp_path / "eng", "engine folder") as tmp:
        for i in range(50):
            (tmp / f"{i:05d}.wav").write_bytes(b"x" * 100)
        raise first()  # the first signal
    assert sent and list(tmp_path.iterdir()) == []  # the temp folder went whole
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers


def test_a_second_signal_cannot_interrupt_the_removal_of_a_temp_file(tmp_path, monkeypatch):
    unlink = Path.unlink

    def unlink_after_a_signal(self, *args, **kwargs):
        signal.raise_signal(signal.SIGINT)
        unlink(self, *args, **kwargs)

    monkeypatch.setattr(Path, "unlink", unlink_after_a_signal)
    with pytest.raises(KeyboardInterrupt), atomic_output(tmp_path / "out.wav") as tmp:
        tmp.write_bytes(b"half")
        raise KeyboardInterrupt()
    assert list(tmp_path.iterdir()) == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_signal_held_outside_an_interrupt_is_delivered_after(tmp_path, monkeypatch):
    """A Ctrl-C while a finished folder replaces the previous one is not lost: it comes after, the new folder in place."""
    dest = tmp_path / "eng"
    dest.mkdir()
    (dest / "old").write_text("old")
    _second_signal_in_rmtree(monkeypatch, signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        with atomic_folder(dest) as tmp:
            (tmp / "new").write_text("new")
    assert [p.name for p in tmp_path.iterdir()] == ["eng"] and [p.name for p in dest.iterdir()] == ["new"]
    with pytest.raises(KeyboardInterrupt):
        with signals_held():
            signal.raise_signal(signal.SIGINT)
            held = True
    assert held and signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_second_ctrl_c_cannot_leave_a_half_removed_calibration_set(tmp_path, monkeypatch):
    from cosyedge.precision.calibset import make_calibration_set

    def clips():
        rng = np.random.default_rng(0)
        for _ in range(20):
            x = (0.1 * rng.standard_normal((1, 16000))).astype(np.float32)
            yield x, x
        raise KeyboardInterrupt()  # the first Ctrl-C, mid-set

    sent = _second_signal_in_rmtree(monkeypatch, signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        make_calibration_set(tmp_path / "c1", count=100, clips=clips())
    assert sent and not (tmp_path / "c1").exists()  # no .audio.XXXX left, nor the folder the set made
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_signal_while_the_temp_folder_is_made_leaves_nothing(tmp_path, monkeypatch):
    """The first Ctrl-C can land right after the temp folder or file is made, before its removal is armed: the build
    test saw an engines/.eng.XXXX left (1 run in about 10)."""
    import tempfile

    mkdtemp, mkstemp = tempfile.mkdtemp, tempfile.mkstemp

    def made_then_signal(real):
        def made(*args, **kwargs):
            got = real(*args, **kwargs)
            signal.raise_signal(signal.SIGINT)
            return got
        return made

    monkeypatch.setattr(tempfile, "mkdtemp", made_then_signal(mkdtemp))
    monkeypatch.setattr(tempfile, "mkstemp", made_then_signal(mkstemp))
    with pytest.raises(KeyboardInterrupt), atomic_folder(tmp_path / "engines" / "eng", "engine folder"):
        pytest.fail("the body never runs")
    with pytest.raises(KeyboardInterrupt), atomic_output(tmp_path / "out.wav"):
        pytest.fail("the body never runs")
    assert list(tmp_path.iterdir()) == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
