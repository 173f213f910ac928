"""TowerPlugin's run context freezes the heap while a process's workers run (heap.py); only
the process's first freeze pays a full collection first."""

from __future__ import annotations

import gc
from collections.abc import Callable

import pytest

from tower.temporal import _process as _heap
from tower.temporal._process import frozen_heap


async def test_the_heap_is_frozen_while_any_worker_runs_and_released_after_the_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Counted by calls, not by gc.get_freeze_count(): a frozen object that dies leaves the
    # permanent generation, so that count can fall while nothing is refrozen.
    calls: list[str] = []
    for name in ("freeze", "unfreeze"):
        monkeypatch.setattr(gc, name, _counted(name, getattr(gc, name), calls))
    assert gc.get_freeze_count() == 0
    async with frozen_heap():
        assert gc.get_freeze_count() > 0 and calls == ["freeze"]
        async with frozen_heap():  # a second worker in the same process: nothing refrozen
            assert calls == ["freeze"]
        assert calls == ["freeze"] and gc.get_freeze_count() > 0  # the first still runs
    assert calls == ["freeze", "unfreeze"] and gc.get_freeze_count() == 0


def _counted(name: str, real: Callable[..., object], calls: list[str]) -> Callable[..., None]:
    def call(*args: object) -> None:
        calls.append(name)
        real(*args)
    return call


async def test_only_the_process_s_first_freeze_collects_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    for name in ("freeze", "unfreeze", "collect"):
        monkeypatch.setattr(gc, name, _counted(name, getattr(gc, name), calls))
    monkeypatch.setattr(_heap, "_collected", False)  # as in a fresh process
    for _ in range(3):  # workers or replayers in turn
        async with frozen_heap():
            pass
    assert calls == ["collect", "freeze", "unfreeze", "freeze", "unfreeze", "freeze", "unfreeze"]
