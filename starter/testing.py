"""Replay your own recorded histories in your test suite (the CI recipe in the README).

    import pytest
    from starter.testing import assert_replays, history_files

    @pytest.mark.parametrize("path", history_files("tests/histories"), ids=str)
    async def test_history_replays(path):
        await assert_replays(path)

A history fails the test when the current code is non-deterministic against it
(named by workflow, event and cause) or when its transition log breaks a rule:
steps not strictly increasing, an undeclared move, DONE left, FAILED left
without an operator, or a path other than the one the original run recorded.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from starter.histories import Replayed, load, replay


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
    *paths: str | Path, workflows: Sequence[type] | None = None, namespace: str = "default",
) -> list[Replayed]:
    """Replay ``paths`` (files or folders) against the current code; AssertionError naming
    every history that fails. ``workflows`` replaces the registered agents; ``namespace``
    is the one the histories were recorded in."""
    results = await replay(load(paths), workflows=workflows, namespace=namespace)
    failures = []
    for r in results:
        if r.failure:
            failures.append(f"{r.source} (workflow {r.workflow_type}, id {r.workflow_id}): "
                            f"replay failed {r.failure}")
        failures += [f"{r.source} (workflow {r.workflow_type}, id {r.workflow_id}): {p}"
                     for p in r.problems]
    assert not failures, "histories do not replay:\n" + "\n".join(failures)
    return results
