"""The tools' database is created and seeded once, however many workers start on it at
once (each `python worker.py` opens it before it polls)."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path

from activities.tools.db import SEED_ACCOUNTS, connect
from activities.tools.orders import SEED_PRODUCTS

ROUNDS, PROCESSES = 8, 8  # the race is a matter of timing: several rounds of it


def _open(folders: list[str], start: multiprocessing.synchronize.Barrier) -> None:
    for folder in folders:
        start.wait(timeout=60)  # every process at the new database at the same moment
        connect(Path(folder) / "tools.sqlite").close()


def test_workers_starting_together_seed_the_database_once(tmp_path: Path) -> None:
    folders = [tmp_path / str(i) for i in range(ROUNDS)]
    spawn = multiprocessing.get_context("spawn")
    start = spawn.Barrier(PROCESSES)
    workers = [spawn.Process(target=_open, args=([str(f) for f in folders], start))
               for _ in range(PROCESSES)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert [w.exitcode for w in workers] == [0] * PROCESSES

    for folder in folders:
        with sqlite3.connect(folder / "tools.sqlite") as db:
            assert db.execute("SELECT COUNT(*) FROM accounts").fetchone()[0] == len(
                SEED_ACCOUNTS)
            assert db.execute("SELECT COUNT(*) FROM products").fetchone()[0] == len(
                SEED_PRODUCTS)
        with sqlite3.connect(folder / "databases" / "shop.sqlite") as shop:
            assert shop.execute("SELECT COUNT(*) FROM customers").fetchone()[0] == 2
        assert [p.name for p in (folder / "databases").iterdir()] == ["shop.sqlite"]
