"""Replay in a project's tests: ``assert_replays`` over its recorded histories (the machinery
is ``tower.temporal.replay``'s, which the client and the CLI use too)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tower.temporal.plugin import TowerPlugin
from tower.temporal.replay import DEFAULT_NAMESPACE, Replayed, load, replay, report

__all__ = ["Replayed", "assert_replays", "history_files", "load", "replay"]


def history_files(*folders: str | Path) -> list[Path]:
    """Every ``*.json`` history under ``folders``, sorted; an empty folder is an error,
    so a misplaced path cannot turn the replay tests into zero tests."""
    files: list[Path] = []
    for folder in folders:
        found = sorted(Path(folder).rglob("*.json"))
        if not found:
            raise FileNotFoundError(f"no *.json histories under {folder}")
        files += found
    return files


async def assert_replays(
    *paths: str | Path, workflows: Sequence[type], namespace: str = DEFAULT_NAMESPACE,
    plugin: TowerPlugin | None = None,
) -> list[Replayed]:
    """Replay ``paths`` (files or folders) against ``workflows``; AssertionError naming
    every history that fails, as ``tower replay`` reports it."""
    results = await replay(load(paths), workflows=workflows, namespace=namespace,
                           plugin=plugin)
    failures = [report(r) for r in results if not r.ok]
    assert not failures, "histories do not replay:\n" + "\n".join(failures)
    return results
