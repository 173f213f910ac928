"""A store that stops answering is said in a line, not a flood: the stream store's outage
once when it starts and once when it ends (tower/activities/streams.py), a workflow
task the payload store failed in one line without the SDK's traceback
(tower/temporal/_interceptors.py). The cluster tier shows the same with PostgreSQL
stopped for 30 s (tests/test_cluster_outage.py)."""

from __future__ import annotations

import logging
import sys

import pytest

from tower.activities import streams
from tower.activities.streams import Outage
from tower.temporal._interceptors import quiet_store_tracebacks
from tower.temporal.payloads import PayloadStoreUnavailable

# Where the SDK logs a workflow task it could not encode (its module's own logger).
SDK_WORKFLOW_LOGGER = "temporalio.worker._workflow"


class Store:
    url = "postgresql://tower:secret@db.internal:5432/tower"

    def __init__(self) -> None:
        self.up, self.appended = True, 0

    def append(self) -> None:
        if not self.up:
            raise OSError("connection refused\n\tIs the server running?")
        self.appended += 1


def test_a_stream_store_outage_is_said_once_and_its_end_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [100.0]
    monkeypatch.setattr(streams.time, "monotonic", lambda: clock[0])
    store = Store()
    outage = Outage(store)
    caplog.set_level(logging.INFO, logger="tower.streams")
    outage.publish(store.append)
    store.up = False
    for _ in range(500):  # a reply's deltas while the store is down: tried once
        outage.publish(store.append)
    clock[0] += streams.RETRY_SECONDS  # tried again, still down: nothing more said
    outage.publish(store.append)
    store.up = True
    outage.publish(store.append)  # within RETRY_SECONDS of the last try: dropped
    clock[0] += streams.RETRY_SECONDS
    outage.publish(store.append)
    said = [r.getMessage() for r in caplog.records]
    assert store.appended == 2 and len(said) == 2, said
    assert said[0] == ("stream store postgresql://tower:***@db.internal:5432/tower: not "
                       "published: connection refused; its events are dropped until it "
                       "answers (watchers miss them, runs go on)")
    assert said[1] == ("stream store postgresql://tower:***@db.internal:5432/tower answers "
                       "again after 4 s; 502 events were not published")
    assert "secret" not in "".join(said)


def test_a_workflow_task_the_payload_store_failed_is_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    quiet_store_tracebacks()
    quiet_store_tracebacks()  # once per process, however many workers
    logger = logging.getLogger(SDK_WORKFLOW_LOGGER)
    assert len(logger.filters) == 1
    try:
        try:
            raise PayloadStoreUnavailable("payload store postgresql://t:***@db/t is "
                                          "unreachable: connection refused")
        except PayloadStoreUnavailable as exc:
            raise RuntimeError("visitor failed") from exc
    except RuntimeError:
        logger.exception("Failed encoding completion on workflow with run ID %s", "r-1")
    try:
        raise KeyError("a bug")
    except KeyError:
        logger.exception("Failed encoding completion on workflow with run ID %s", "r-2")
    store, bug = caplog.records[-2:]
    assert store.exc_info is None and store.getMessage() == (
        "Failed encoding completion on workflow with run ID r-1: payload store "
        "postgresql://t:***@db/t is unreachable: connection refused; asked again until the "
        "store serves it")
    assert bug.exc_info is not None and bug.exc_info[0] is KeyError  # anything else: whole
    assert sys.exc_info() == (None, None, None)
