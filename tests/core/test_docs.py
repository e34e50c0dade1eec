"""The documents: README.md stays short, every document in resources/docs/ is in its index, and every
relative link or image in them leads to a file of the repository."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.testbed.markdown_links import link_targets, relative_paths

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "resources" / "docs"
# Issue 27: "at most about 200 lines"; the rest belongs in resources/docs/.
README_MAX_LINES = 220

DOCUMENTS = [README, *sorted(DOCS.glob("*.md"))]


def test_readme_is_short():
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines: move detail to resources/docs/"


def test_readme_indexes_every_document():
    linked = {(README.parent / path).resolve() for path in relative_paths(README.read_text())}
    assert sorted(DOCS.glob("*.md")), "no documents in resources/docs/"
    assert [doc.name for doc in sorted(DOCS.glob("*.md")) if doc.resolve() not in linked] == []


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: str(path.relative_to(REPO)))
def test_relative_links_resolve(document):
    broken = [path for path in relative_paths(document.read_text()) if not (document.parent / path).exists()]
    assert broken == [], f"{document.relative_to(REPO)} links to missing files"


def test_links_are_read_as_a_renderer_reads_them():
    text = "\n".join([
        "![shot](../shot.png) and [guide](user-guide.md#install) and [site](https://example.org/x)",
        "`[not](a-link.md)` in a code span, [mail](mailto:a@b.c), [here](#top)",
        "",
        "    [indented](code-block.md)",
        "",
        "| a | b |",
        "|---|---|",
        "| [cell](cell.md) | x |",
    ])
    assert link_targets(text) == ["../shot.png", "user-guide.md#install", "https://example.org/x", "mailto:a@b.c",
                                  "#top", "cell.md"]
    assert relative_paths(text) == ["../shot.png", "user-guide.md", "cell.md"]
