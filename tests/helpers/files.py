"""What a command left on disk, and a disk that fills up."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path


def tree(folder: Path) -> list[str]:
    """Every path under ``folder`` (hidden temp files and folders included), relative, sorted."""
    return sorted(str(p.relative_to(folder)) for p in Path(folder).rglob("*"))


def sha256(path: Path) -> str:
    """The hex SHA-256 of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def full_disk_onnx_save(monkeypatch, calls: list | None = None):
    """Make every ``onnx.save``/``onnx.save_model`` write half the model, then fail as a full disk does (ENOSPC);
    the paths tried are appended to ``calls``. Returns the real ``onnx.save_model``."""
    import onnx

    real = onnx.save_model

    def save(model, f, *args, **kwargs):
        if calls is not None:
            calls.append(str(f))
        data = model.SerializeToString()
        with open(f, "wb") as out:
            out.write(data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(onnx, "save_model", save)
    monkeypatch.setattr(onnx, "save", save)
    return real
