"""Step events from workflow code to the run's stream, without I/O in the workflow.

``emit`` only puts an event on an in-memory queue, and only while the run makes new
progress (a replay emits nothing); a thread of the worker's process writes the queue to the
stream store, outside the sandbox. An event's key is the run id, its step and kind, so a
workflow task that runs again emits the same keys, which the store drops. Nothing here adds
a command: the history is the same with streaming on or off (tests/test_stream.py). Loaded
once outside the sandbox (all of ``tower`` is passed through): the registry is the process's.
"""

from __future__ import annotations

import queue
import threading
from functools import partial
from typing import Any

from temporalio import workflow

from tower.contract.stream import (
    CUSTOM,
    GATE_DECIDED,
    GATE_OPENED,
    MOVE,
    RUN_END,
    TRANSITION,
    StreamEvent,
    stream_name,
)

_SINKS: dict[tuple[str, str], Any] = {}  # (namespace, task queue) -> its StreamStore
_QUEUE: queue.SimpleQueue[tuple[Any, str, StreamEvent]] = queue.SimpleQueue()
_LOCK = threading.Lock()
_drainer: threading.Thread | None = None


def publish_steps(namespace: str, task_queue: str, store: Any) -> None:
    """Runs of this worker's task queue publish their step events to ``store``."""
    global _drainer
    with _LOCK:
        _SINKS[(namespace, task_queue)] = store
        if _drainer is None or not _drainer.is_alive():
            _drainer = threading.Thread(target=_drain, name="tower-stream-sink", daemon=True)
            _drainer.start()


def stop_publishing(namespace: str, task_queue: str) -> None:
    with _LOCK:
        _SINKS.pop((namespace, task_queue), None)


def emit(kind: str, step: int, data: dict[str, Any], nth: str = "") -> None:
    """From workflow code: publish a step event of this run, once (see the module doc)."""
    if workflow.unsafe.is_replaying():
        return
    info = workflow.info()
    store = _SINKS.get((info.namespace, info.task_queue))
    if store is None:  # this worker keeps no streams
        return
    key = f"{info.run_id}/{step}/{kind}{nth}"
    event = StreamEvent(kind, {"step": step, **data}, key=key)
    with workflow.unsafe.sandbox_unrestricted():
        _QUEUE.put((store, stream_name(info.namespace, info.workflow_id), event))


def _drain() -> None:
    while True:
        batch = [_QUEUE.get()]
        while True:  # what queued meanwhile goes in the same write
            try:
                batch.append(_QUEUE.get_nowait())
            except queue.Empty:
                break
        by_target: dict[tuple[int, str], tuple[Any, list[StreamEvent]]] = {}
        for store, stream, event in batch:
            by_target.setdefault((id(store), stream), (store, []))[1].append(event)
        for (_, stream), (store, events) in by_target.items():
            # Watchers lose events while the store is down; the run does not (said once).
            store.outage.publish(partial(store.append, stream, events), len(events))


def emit_move(before: Any, after: Any, transition: Any, updates: bool = False) -> None:
    """From ``MachineRun.record``: the transition, a gate it decided, the end.
    ``updates``: the transition event carries the update it applied (``stream_updates``)."""
    if workflow.unsafe.is_replaying() or not _SINKS:
        return
    from tower.core.engine import Kind
    from tower.core.gates import pending_record
    from tower.core.graph import TERMINALS

    step = transition.step
    move = {"source": transition.source, "target": transition.target,
            "reason": transition.reason, MOVE: transition.kind.value,
            "calls": list(transition.calls)}
    if updates:
        move["update"] = transition.model_dump(mode="json", include={"update"})["update"]
    emit(TRANSITION, step, move)
    if transition.kind == Kind.GATE:  # a gate opened: once attested (``gate_opened``)
        now, was = pending_record(after), pending_record(before)
        if now is None and was is not None:
            closed = next((r for r in reversed(after.approvals) if r.gate == was.gate), was)
            emit(GATE_DECIDED, step, {"gate": was.gate, "node": was.node,
                                      "status": closed.status.value})
    if after.node in TERMINALS:
        emit(RUN_END, step, {"status": after.status.value, "node": after.node})


def gate_opened(record: Any) -> None:
    """From the gate, once its request is published with the worker's attestation."""
    emit(GATE_OPENED, record.step, {"gate": record.gate, "node": record.node,
                                    "role": record.role,
                                    "expires_at": record.expires_at.isoformat()})


def emit_custom(step: int, n: int, node: str, event: dict[str, Any]) -> None:
    """From ``TemporalContext.emit``: the node's ``n``th own event of this visit."""
    if _SINKS:
        emit(CUSTOM, step, {"node": node, **event}, nth=f"/{n}")


def emit_tool(kind: str, step: int, tool: str, nth: int, **data: Any) -> None:
    """From ``TemporalContext.tool``: a tool call started or finished."""
    if _SINKS:
        emit(kind, step, {"tool": tool, **data}, nth=f"/{tool}/{nth}")
