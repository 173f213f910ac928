"""Use Tower from your own code: start an agent run, follow it to its end, watch its live stream
(``stream``: the model's text as it forms, each step), list what waits for a decision, sign
and send one, retry a failed run from a node, replay histories.

Every call takes a ``temporalio.client.Client`` (``connect()`` makes one the way the CLI
does: TEMPORAL_ADDRESS and the envconfig profile, Tower's converter and codec), so the
SDK's own calls stay at hand. The CLI and the inbox use these and nothing else::

    from tower.client import RunEnd, connect, decide, follow, start_run
    from workflows.refund import RefundAgent, RefundRequest

    client = await connect()
    handle = await start_run(client, RefundAgent, RefundRequest(message="..."), id="r-1")
    async for seen in follow(handle):
        print(seen)  # each Transition, then the RunEnd (status, reason)

Names load on first use, so importing this package costs nothing until one is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tower.activities.stores import shared_server
    from tower.client._decisions import decide, last_request, send_decision
    from tower.client._follow import Position, RunEnd, follow
    from tower.client._pending import Deployment, NotGenuine, Waiting, pending, pending_of
    from tower.client._recovery import Retried, retry
    from tower.client._replies import reply_text, resolved
    from tower.client._runs import (
        describe,
        failure_of,
        has_workers,
        history_end,
        query,
        reason_of,
        start_run,
        update_while_open,
    )
    from tower.client._stream import stream
    from tower.client.connection import (
        DEFAULT_ADDRESS,
        TASK_QUEUE,
        ServerUnreachable,
        UnknownTenant,
        check_tenant,
        connect,
        connect_config,
        use_tenant,
    )
    from tower.client.errors import (
        ClientError,
        DecisionRefused,
        NeverStarted,
        ReplyMissing,
        RunClosed,
        RunNotFound,
        RunUnreadable,
    )
    from tower.contract.decisions import Verdict
    from tower.contract.search import start_attributes
    from tower.contract.stream import Reply
    from tower.temporal.replay import load, replay

# name -> the module that defines it, imported on first use.
_LAZY = {
    "DEFAULT_ADDRESS": "tower.client.connection",
    "TASK_QUEUE": "tower.client.connection",
    "ServerUnreachable": "tower.client.connection",
    "UnknownTenant": "tower.client.connection",
    "check_tenant": "tower.client.connection",
    "connect": "tower.client.connection",
    "connect_config": "tower.client.connection",
    "use_tenant": "tower.client.connection",
    "ClientError": "tower.client.errors",
    "DecisionRefused": "tower.client.errors",
    "NeverStarted": "tower.client.errors",
    "RunUnreadable": "tower.client.errors",
    "RunClosed": "tower.client.errors",
    "RunNotFound": "tower.client.errors",
    "ReplyMissing": "tower.client.errors",
    "reply_text": "tower.client._replies",
    "resolved": "tower.client._replies",
    "describe": "tower.client._runs",
    "failure_of": "tower.client._runs",
    "has_workers": "tower.client._runs",
    "history_end": "tower.client._runs",
    "query": "tower.client._runs",
    "reason_of": "tower.client._runs",
    "start_run": "tower.client._runs",
    "update_while_open": "tower.client._runs",
    "Position": "tower.client._follow",
    "RunEnd": "tower.client._follow",
    "follow": "tower.client._follow",
    "Deployment": "tower.client._pending",
    "NotGenuine": "tower.client._pending",
    "Waiting": "tower.client._pending",
    "pending": "tower.client._pending",
    "pending_of": "tower.client._pending",
    "decide": "tower.client._decisions",
    "last_request": "tower.client._decisions",
    "send_decision": "tower.client._decisions",
    "Retried": "tower.client._recovery",
    "retry": "tower.client._recovery",
    "load": "tower.temporal.replay",
    "replay": "tower.temporal.replay",
    "stream": "tower.client._stream",
    "start_attributes": "tower.contract.search",  # a run's first, set at its start
    "Verdict": "tower.contract.decisions",  # approve or reject
    "Reply": "tower.contract.stream",  # a reply as it forms
    "shared_server": "tower.activities.stores",  # whether the server is not the dev server
}

__all__ = [
    "ClientError", "DEFAULT_ADDRESS", "DecisionRefused", "Deployment", "NeverStarted",
    "NotGenuine", "Position", "Reply", "ReplyMissing", "Retried", "RunClosed", "RunEnd",
    "RunNotFound", "RunUnreadable",
    "ServerUnreachable", "TASK_QUEUE", "UnknownTenant", "Verdict", "Waiting", "check_tenant",
    "connect", "connect_config", "decide", "describe", "failure_of", "follow", "has_workers",
    "history_end", "last_request", "load", "pending", "pending_of", "query", "reason_of",
    "replay", "reply_text", "resolved", "retry", "send_decision", "shared_server",
    "start_attributes",
    "start_run", "stream", "update_while_open", "use_tenant",
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
