"""Effects made before ``tower.effects``, so that an upgrade does not pay twice.

Tower's example and ``tower new`` projects used to record their effects in their own SQLite
table ``effects`` (``idempotency_key``, ``result``, …), keyed by the *decision*
(``<wid>/<chain>/<node>/<decision>/<tool>#<n>/<args hash>``). A run started before the
upgrade and then retried or forked under the new code asks for the same action under its
action key (``…/<node>@<visit>/<proposal>/…``), or, replaying its old path, under the old
key: either way the old record is found here and its first result returned (and recorded
in ``tower_effects``). A legacy record matches on everything but the decision — so a loop
that paid the same arguments on two visits of one node before the upgrade counts them as
one action (never two payments; docs/reliability.md says so).
"""

from __future__ import annotations

import json
import sqlite3

from tower.core.keys import legacy_pattern
from tower.effects._ledger import Made, Tx

TABLE = "effects"


def has_legacy(db: sqlite3.Connection) -> bool:
    """Whether ``db`` holds a pre-``tower.effects`` record of effects."""
    columns = {row[1] for row in db.execute(f"PRAGMA table_info({TABLE})")}
    return {"idempotency_key", "result"} <= columns


def legacy_made(tx: Tx, key: str) -> Made | None:
    """The effect recorded before the upgrade for ``key``'s action, if any."""
    row = tx.execute(f"SELECT result FROM {TABLE} WHERE idempotency_key=? AND result IS NOT "
                     "NULL", (key,)).fetchone()
    if row is None and (pattern := legacy_pattern(key)) is not None:
        prefix, suffix = pattern
        found = tx.execute(
            f"SELECT idempotency_key, result FROM {TABLE} WHERE substr(idempotency_key, 1, ?)"
            " = ? AND result IS NOT NULL", (len(prefix), prefix)).fetchall()
        row = next(((result,) for old, result in found if old.endswith(suffix)
                    and "/" not in old[len(prefix):-len(suffix)]), None)
    return None if row is None else Made(None, None, dict(json.loads(row[0])))
