"""The README stays short and is the way into the docs: at most 150 lines, every page under docs/ linked from it, every
relative link it holds pointing at a file that exists (anchors into Markdown pages at a heading that exists)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def _links(md: Path) -> list[str]:
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", md.read_text()) if not re.match(r"[a-z]+://", t)]


def _anchors(md: Path) -> set[str]:
    """GitHub's heading anchors of ``md``: lower case, punctuation dropped, spaces to hyphens."""
    heads = re.findall(r"^#+ (.+)$", md.read_text(), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


def test_readme_is_at_most_150_lines():
    assert len(README.read_text().splitlines()) <= 150


def test_every_doc_page_is_linked_from_the_readme():
    linked = {(ROOT / t.split("#", 1)[0]).resolve() for t in _links(README)}
    pages = sorted(p for p in (ROOT / "docs").rglob("*.md"))
    assert pages, "no docs"
    assert [p.relative_to(ROOT).as_posix() for p in pages if p.resolve() not in linked] == []


def test_readme_links_resolve():
    for target in _links(README):
        path, _, anchor = target.partition("#")
        dest = (ROOT / path).resolve() if path else README
        assert dest.exists(), target
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(dest), target
