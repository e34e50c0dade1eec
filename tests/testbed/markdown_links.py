"""The relative links and images of a Markdown text, as a renderer sees them (code spans and blocks hold none).

Shared by the documents test (tests/core/test_docs.py) and the packaging test, which checks that the
wheel's long description links only to files the sdist carries.
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

from markdown_it import MarkdownIt

# CommonMark plus GitHub's tables: a link in a table cell is a link too.
_PARSER = MarkdownIt("commonmark").enable("table")


def link_targets(text: str) -> list[str]:
    """Every link's href and image's src, in document order."""
    targets = []
    for block in _PARSER.parse(text):
        for token in block.children or ():
            if token.type == "link_open":
                targets.append(str(token.attrs["href"]))
            elif token.type == "image":
                targets.append(str(token.attrs["src"]))
    return targets


def relative_paths(text: str) -> list[str]:
    """The file paths that the relative links and images point to (no scheme, no host; anchors dropped)."""
    paths = []
    for target in link_targets(text):
        parts = urlsplit(target)
        if not parts.scheme and not parts.netloc and parts.path:
            paths.append(unquote(parts.path))
    return paths
