"""Every relative link in the Markdown docs leads to a file that exists, and an anchor to a heading in it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
TOP = ("README.md", "CONTRIBUTING.md", "CHANGELOG.md", "deploy/README.md")
DOCS = sorted([*(REPO / name for name in TOP), *(REPO / "docs").glob("*.md")])

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"`+[^`]*`+")
_LINK = re.compile(r"(?<!\\)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _prose(text: str) -> list[str]:
    """The lines outside fenced code blocks, with code spans blanked."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(_CODE_SPAN.sub("``", line))
    return lines


def links(path: Path) -> list[str]:
    return [m.group(1) for line in _prose(path.read_text()) for m in _LINK.finditer(line)]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case; punctuation but ``-`` and ``_`` dropped; spaces to ``-``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = text.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings (a repeated one gets -1, -2, ... as on GitHub)."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    fenced = False
    for line in path.read_text().splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else _HEADING.match(line)
        if m:
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target}: no file {dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.name}")
    return broken


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(doc: Path) -> None:
    assert doc.exists(), f"{doc} is missing"
    assert broken_links(doc) == []


def test_the_checker_finds_a_missing_file_and_a_missing_heading(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other\n\n## The `inlet verify` command: checks\n")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "# Doc\n\n[ok](other.md) [ok](other.md#the-inlet-verify-command-checks) [ok](#doc)\n"
        "[gone](nowhere.md) [bad anchor](other.md#nothing) [web](https://example.com/x.md)\n"
        "`[in code](nowhere2.md)`\n```\n[fenced](nowhere3.md)\n```\n"
    )
    assert broken_links(doc) == [
        f"nowhere.md: no file {tmp_path / 'nowhere.md'}",
        "other.md#nothing: no heading #nothing in other.md",
    ]


def test_the_readme_stays_short() -> None:
    assert len((REPO / "README.md").read_text().splitlines()) < 250
