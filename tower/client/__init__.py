"""Use Tower from your own code: start an agent run, follow it to its end, watch its live stream
(``stream``: the model's text as it forms, each step), list what waits for a decision, sign
and send one, retry a failed run from a node.

Every call takes a ``temporalio.client.Client`` (``connect()`` makes one the way the CLI
does: TEMPORAL_ADDRESS and the envconfig profile, Tower's converter and codec), so the
SDK's own calls stay at hand (a run's queries, updates and signals are named, with their
types, in ``tower.contract.names``)::

    from tower.client import RunEnd, connect, decide, follow, start_run
    from workflows.refund import RefundAgent, RefundRequest

    client = await connect()
    handle = await start_run(client, RefundAgent, RefundRequest(message="..."), id="r-1")
    async for seen in follow(handle):
        print(seen)  # each Transition, then the RunEnd (status, reason)

A call that fails raises a ``TowerError`` (every error of Tower's is one), whose ``code``, a
``Code``, says why: read it, never the message's words.

Names load on first use, so importing this package costs nothing until one is used. What
only the CLI and the inbox use stays in this package's own modules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tower.activities.stores import shared_server
    from tower.client._decisions import decide
    from tower.client._follow import RunEnd, follow
    from tower.client._pending import pending
    from tower.client._recovery import retry
    from tower.client._runs import start_run, update_while_open
    from tower.client._stream import stream
    from tower.client.connection import connect, use_tenant
    from tower.client.errors import DecisionRefused
    from tower.contract.decisions import Verdict
    from tower.contract.failures import Code, TowerError
    from tower.contract.search import start_attributes
    from tower.contract.stream import Reply

# name -> the module that defines it, imported on first use.
_LAZY = {
    "connect": "tower.client.connection",
    "use_tenant": "tower.client.connection",
    # Every error Tower raises is a TowerError; its `code` (a Code) says which.
    "TowerError": "tower.contract.failures",
    "Code": "tower.contract.failures",
    "DecisionRefused": "tower.client.errors",
    "start_run": "tower.client._runs",
    "update_while_open": "tower.client._runs",
    "RunEnd": "tower.client._follow",
    "follow": "tower.client._follow",
    "pending": "tower.client._pending",
    "decide": "tower.client._decisions",
    "retry": "tower.client._recovery",
    "stream": "tower.client._stream",
    "start_attributes": "tower.contract.search",  # a run's first, set at its start
    "Verdict": "tower.contract.decisions",  # approve or reject
    "Reply": "tower.contract.stream",  # a reply as it forms
    "shared_server": "tower.activities.stores",  # whether the server is not the dev server
}

__all__ = [
    "Code", "DecisionRefused", "Reply", "RunEnd", "TowerError", "Verdict", "connect", "decide",
    "follow", "pending", "retry", "shared_server", "start_attributes", "start_run", "stream",
    "update_while_open", "use_tenant",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tower.client' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return list(__all__)
