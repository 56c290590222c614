"""Checks of a model repository before Triton loads it: the files its ``manifest.json`` hashes match their sha256
(:func:`check_manifest_hashes`), it holds models, and their folder paths can go in the Python backend's stub command
line (:data:`SHELL_SAFE_PATH`; a path that cannot is served through a symlink in the server's private folder).
"""

from __future__ import annotations

import re
from pathlib import Path

from cosyedge.errors import ArtifactError
from cosyedge.log import LOG

SHELL_SAFE_PATH = re.compile(r"^[A-Za-z0-9_./+,:=@%-]+$")
"""re.Pattern: a path Triton's Python backend can put in its ``bash -c`` stub command line (it joins the model's
folder path and instance name into that line unquoted: a space or a shell character breaks the stub's launch)."""


def check_manifest_hashes(repo: str | Path) -> int:
    """Check every file a repository's ``manifest.json`` hashes (any ``{"file": ..., "sha256": ...}`` entry with a
    path inside the repository: ``model``, ``artifact`` (config.pbtxt), ``triton.model_py``) against its sha256,
    before Triton loads it.

    A folder without manifest.json (a repository not written by cosyedge, or one assembled from several) is not
    checked.

    Args:
        repo (str | Path): The model repository.
    Returns:
        int: the number of files checked.
    Raises:
        ArtifactError: a hashed file is missing or differs from its hash (edited or corrupt): one line naming it.
    """
    import json

    from cosyedge.artifacts import sha256_file

    repo = Path(repo)
    path = repo / "manifest.json"
    if not path.is_file():
        return 0
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ArtifactError(f"{path} is not readable JSON ({err}): rebuild the repository") from None
    entries: list[tuple[str, str]] = []

    def walk(node) -> None:
        if isinstance(node, dict):
            f, h = node.get("file"), node.get("sha256")
            if (isinstance(f, str) and isinstance(h, str) and re.fullmatch(r"[0-9a-f]{64}", h)
                    and not Path(f).is_absolute() and ".." not in Path(f).parts):  # files of the repository only
                entries.append((f, h))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(manifest)
    for f, h in dict.fromkeys(entries):
        p = repo / f
        if not p.is_file():
            raise ArtifactError(f"{repo}: {f} is missing (the manifest lists it): rebuild the repository with "
                                f"'cosyedge build --backend triton'")
        if sha256_file(p) != h:
            raise ArtifactError(f"{repo}: {f} does not match its sha256 in manifest.json (edited or corrupt): "
                                f"rebuild the repository with 'cosyedge build --backend triton'")
    return len(entries)


class RepositoryChecks:
    """The repository checks of a :class:`~cosyedge.serve.server.TritonServer` (a mixin: it uses the server's
    ``repo``, ``models`` and ``_private_dir()``)."""

    def _check_repo(self) -> None:
        if not self.repo.is_dir():
            raise ArtifactError(f"model repository {self.repo} not found (build one with 'cosyedge build --backend "
                                f"triton --triton-backend python')")
        self.models = sorted(p.name for p in self.repo.iterdir() if (p / "config.pbtxt").is_file())
        if not self.models:
            raise ArtifactError(f"{self.repo} holds no model (no <model>/config.pbtxt): give the folder 'cosyedge "
                                f"build --backend triton' printed")
        if not (self.repo / "manifest.json").is_file():
            LOG.warning(f"{self.repo} has no manifest.json (not written by 'cosyedge build --backend triton'): its "
                        f"files are served unchecked")
        check_manifest_hashes(self.repo)
        for m in self.models:
            cfg = (self.repo / m / "config.pbtxt").read_text(errors="replace")
            if re.search(r'^\s*backend\s*:\s*"python"', cfg, re.M) and not SHELL_SAFE_PATH.match(m):
                raise ArtifactError(f"{self.repo}: model folder {m!r} cannot be served by Triton's Python backend "
                                    f"(it launches the model through a shell command line: letters, digits and "
                                    f"'_.+,:=@%-' only); rebuild with another --name")

    def _repo_for_triton(self) -> Path:
        """The repository path to give Triton: the real one, or a symlink to it in the private folder when the path
        holds a character the Python backend's stub command line cannot take (a space, a quote...)."""
        real = self.repo.resolve()
        if SHELL_SAFE_PATH.match(str(real)):
            return real
        link = self._private_dir() / "repository"
        link.symlink_to(real, target_is_directory=True)
        if not SHELL_SAFE_PATH.match(str(link)):
            raise ArtifactError(f"the path of {self.repo} has a character Triton's Python backend cannot take "
                                f"(a space or a shell character), and so has the temporary folder {link.parent}: "
                                f"move the repository or set TMPDIR")
        LOG.debug("serving %s through %s (its path has a character Triton's stub command line cannot take)", real,
                  link)
        return link
