"""`tower eval` never touches the deployment's stores (issue 37, item 8), run as a user runs
it: from the project's folder, with every store setting (TOWER_STREAMS, TOWER_MESSAGES,
TOWER_PAYLOAD_DIR, TOWER_STORE_URL, a payload threshold of 0 so every payload would go to
the payload store) naming live stores that already hold a deployment's entries: SQLite
files and a payload directory, and a real PostgreSQL (tests/pgserver.py). Afterwards each
store is byte for byte what it was: the files' bytes, every table's rows."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from pgserver import Postgres
from test_cli_eval import HISTORIES, example_project
from towercli import tower_cli

from tower.activities.messages import MessageStore
from tower.activities.stores import StoreSettings
from tower.activities.streams import open_streams
from tower.contract.messages import Message
from tower.contract.stream import StreamEvent

# A support run (model calls: conversation in the message store, text and steps in the
# stream store) and a refund approved and paid (a gate, a tool).
RECORDED = ("support-1.json", "refund-approved.json")


def live_stores(settings: StoreSettings) -> None:
    """Stores as a deployment left them: one run's conversation and stream in each."""
    messages = MessageStore(settings.messages)
    messages.put([Message(role="user", content="a deployment's message")])
    messages.close()  # closed now, not whenever it is collected (its files would change then)
    streams = open_streams(settings.streams)
    streams.append("acme/refund-live", [StreamEvent(kind="step", data={"node": "review"},
                                                    key="live-1")])
    streams.close()


def files(*roots: Path) -> dict[str, str]:
    """Every file under ``roots`` (a SQLite file's -wal and -journal beside it included)
    and its digest."""
    found: dict[str, str] = {}
    for root in roots:
        paths = sorted(root.parent.glob(root.name + "*")) if root.is_file() else \
            sorted(p for p in root.rglob("*") if p.is_file())
        for path in paths:
            found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def dump(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every table of the database at ``url`` and its rows, sorted."""
    import psycopg

    with psycopg.connect(url) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT schemaname || '.' || tablename FROM pg_tables "
            "WHERE schemaname NOT IN ('pg_catalog', 'information_schema') ORDER BY 1")]
        return {table: sorted(conn.execute(f"SELECT * FROM {table}").fetchall(), key=repr)
                for table in tables}


async def evaluate(project: Path, **settings: str) -> None:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("OPENAI_", "TEMPORAL_", "TOWER_DB", "TOWER_STORE",
                                 "TOWER_MESSAGES", "TOWER_STREAMS", "TOWER_PAYLOAD"))}
    code, out, err = await tower_cli(
        ["eval", *(str(HISTORIES / name) for name in RECORDED), "--fail-on", "changed"],
        env={**base, **settings}, cwd=project, timeout=600)
    assert code == 0, (out, err)
    assert "2 runs: 2 same, 0 changed, 0 regressed" in out, (out, err)
    assert "Traceback" not in err, err


async def test_an_eval_leaves_live_sqlite_stores_and_a_payload_directory_as_they_were(
    tmp_path: Path,
) -> None:
    project = example_project(tmp_path / "project")
    live = tmp_path / "deployment"
    live.mkdir()
    settings = StoreSettings(messages=str(live / "messages.sqlite"),
                             streams=str(live / "streams.sqlite"), payloads=str(live / "payloads"))
    live_stores(settings)
    (live / "payloads" / "ab").mkdir(parents=True)
    (live / "payloads" / "ab" / "ab12").write_bytes(b"a deployment's payload")
    before = files(live)
    await evaluate(project, TOWER_MESSAGES=settings.messages, TOWER_STREAMS=settings.streams,
                   TOWER_PAYLOAD_DIR=settings.payloads)
    assert files(live) == before
    # Nor did it make stores of its own in the project's folder (the local default).
    assert not (project / ".tower").exists()


async def test_an_eval_leaves_live_stores_on_postgresql_as_they_were(
    tmp_path: Path, pg_server: Postgres,
) -> None:
    """TOWER_STORE_URL (every store on PostgreSQL, the production setting); then
    TOWER_MESSAGES and TOWER_STREAMS each naming a database of their own beside it."""
    project = example_project(tmp_path / "project")
    url, streams, messages = (pg_server.database(name) for name in ("all", "streams", "msgs"))
    live_stores(StoreSettings(messages=url, streams=url, payloads=url))
    live_stores(StoreSettings(messages=messages, streams=streams, payloads=url))
    before = {u: dump(u) for u in (url, streams, messages)}
    assert all(before.values())
    await evaluate(project, TOWER_STORE_URL=url)
    await evaluate(project, TOWER_STORE_URL=url, TOWER_STREAMS=streams, TOWER_MESSAGES=messages)
    assert {u: dump(u) for u in (url, streams, messages)} == before
    assert not (project / ".tower").exists()
