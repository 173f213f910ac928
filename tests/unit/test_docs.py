"""The docs stay walkable: a short README, links that resolve, a quick start CI really runs."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_README_LINES = 250

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def pages() -> list[Path]:
    return [README, *sorted((ROOT / "docs").rglob("*.md"))]


def prose(text: str) -> str:
    """``text`` without its fenced code blocks (a link in a code sample is not a link)."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in HEADING.findall(prose(page.read_text(encoding="utf-8"))):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(prose(page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target} (no heading #{anchor} in {dest.name})")
    return broken


def test_the_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_README_LINES, (
        f"README.md has {lines} lines (at most {MAX_README_LINES}): move detail to a docs/ page")


def test_every_relative_link_resolves() -> None:
    broken = {str(page.relative_to(ROOT)): links
              for page in pages() if (links := broken_links(page))}
    assert not broken, broken


def test_every_docs_page_is_linked_from_the_readme_or_another_page() -> None:
    linked = {(page.parent / t.partition("#")[0]).resolve()
              for page in pages() for t in LINK.findall(prose(page.read_text(encoding="utf-8")))}
    orphans = [str(p.relative_to(ROOT)) for p in pages()[1:] if p.resolve() not in linked]
    assert not orphans, f"docs pages nobody links to: {orphans}"


def test_the_quick_start_is_what_ci_runs() -> None:
    """.ci/run runs the README's test command and its tiers as the README gives them, then
    reads both quick-start commands (the demo, the tests) from the README to run them
    verbatim in a fresh clone."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    readme = README.read_text(encoding="utf-8")
    demo = re.findall(r"^    (.*\.venv/bin/tower demo)$", readme, re.M)
    tests = re.findall(r"^    (.*\.venv/bin/pytest)$", readme, re.M)
    assert len(demo) == 1 and len(tests) == 1, (demo, tests)
    assert f"\n{tests[0]}\n" in ci, f".ci/run no longer runs the README's test command: {tests}"
    for pattern in (r"\.venv/bin/tower demo$", r"\.venv/bin/pytest$"):
        assert pattern in ci, f".ci/run no longer reads the README's command {pattern!r}"
    tiers = re.findall(r"^- `pytest (-m [^`]+)`", readme, re.M)  # as the README gives them
    assert [t.split()[1] for t in tiers] == ["cluster", "browser", "soak"], tiers
    for tier in tiers:
        assert f".venv/bin/pytest {tier}\n" in ci, tier


def test_the_link_checker_sees_a_broken_link(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# A page\n\n## Its part\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](there.md#its-part) [gone](missing.md) [bad](there.md#nope)\n"
                    "```\n[in code](not-a-link.md)\n```\n[web](https://example.com)\n")
    assert broken_links(page) == ["missing.md (no such file)",
                                  "there.md#nope (no heading #nope in there.md)"]
