"""A demo keeps its data in a folder of its own; only the newest few are kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from tower.cli import demo
from tower.cli.demo import KEEP, DemoData


def test_only_the_newest_demos_folders_are_kept_and_never_the_one_being_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(demo, "DEMOS", tmp_path / "demo")
    tags = [f"20261203-1200{i:02d}-abcd" for i in range(KEEP + 3)]
    for tag in tags:
        DemoData(tag).make()
    assert sorted(p.name for p in (tmp_path / "demo").iterdir()) == tags[-KEEP:]
    # A demo whose tag sorts first (made in the same second as others) keeps its folder.
    early = DemoData("20261203-115959-0000").make()
    kept = sorted(p.name for p in (tmp_path / "demo").iterdir())
    assert early.folder.is_dir() and len(kept) == KEEP
    assert kept == [early.tag, *tags[-(KEEP - 1):]]
