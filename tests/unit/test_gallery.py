"""The agent gallery (docs/gallery.md) shows every registered agent, with its current picture."""

from __future__ import annotations

from gallery import BEGIN, PAGE, TRY_IT, gallery, render

from workflows.registry import AGENTS


def test_the_gallery_page_is_current() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert BEGIN in text, "no gallery in docs/gallery.md: run `python tests/gallery.py`"
    assert render(text) == text, "docs/gallery.md is stale: run `python tests/gallery.py`"


def test_every_agent_has_a_purpose_and_a_picture() -> None:
    section = gallery()
    for name, agent in AGENTS.items():
        assert f"## {name}\n" in section
        assert f"tower run {name} " in section or TRY_IT[name] in section, name
        assert agent.__doc__, f"{name}: the workflow class needs a one-line docstring"
    assert section.count("stateDiagram-v2") == len(AGENTS)
