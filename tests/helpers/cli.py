"""The CLI in a subprocess (for what must not run inside pytest: a segfault, stdout on /dev/full, file
permissions under another user)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def cosyedge_subprocess(*args, cwd: Path | None = None, engines_dir: Path | None = None, prefix=(), env=None,
                        timeout: int = 600, **kwargs) -> subprocess.CompletedProcess:
    """Run ``python -m cosyedge.cli.main ARGS`` with this checkout first on PYTHONPATH, in ``cwd``, with
    COSYEDGE_ENGINES_DIR set to ``engines_dir`` when given, under the command ``prefix`` (e.g. setpriv); stdout and
    stderr are captured as text unless ``stdout`` is given. Returns the CompletedProcess."""
    if env is None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        if engines_dir is not None:
            env["COSYEDGE_ENGINES_DIR"] = str(engines_dir)
    return subprocess.run([*prefix, sys.executable, "-m", "cosyedge.cli.main", *map(str, args)], cwd=cwd, env=env,
                          capture_output="stdout" not in kwargs, text=True, timeout=timeout, **kwargs)


def cosyedge_in_folder(folder: Path, *args, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run ``cosyedge ARGS`` in a subprocess with ``folder`` as the working folder and ``folder/engines`` as the
    engines folder."""
    return cosyedge_subprocess(*args, cwd=folder, engines_dir=Path(folder) / "engines", timeout=timeout)
