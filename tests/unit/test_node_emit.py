"""``ctx.emit``: what a node may publish (a short label, a small JSON object), checked the
same in a unit test as on a worker; and a transition event whose own kind is ``move``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from gatekit import in_process_tools

from tower import Message
from tower.contract.stream import (
    CUSTOM,
    CUSTOM_DATA_MAX,
    MOVE,
    TRANSITION,
    StreamEvent,
    custom_data,
)
from tower.testing import run_agent
from workflows.account import AccountAgent, AccountState


@pytest.mark.parametrize(("label", "data", "why"), [
    ("", {}, "label must be a non-empty string"),
    ("x" * 101, {}, "label must be a non-empty string"),
    (7, {}, "label must be a non-empty string"),
    ("progress", ["a list"], "data must be a dict"),
    ("progress", {"when": object()}, "data is not JSON"),
    ("progress", {"ratio": math.nan}, "data is not JSON"),
    ("progress", {"text": "x" * CUSTOM_DATA_MAX}, "more than 16384"),
])
def test_bad_input_to_emit_is_refused_saying_why(label: Any, data: Any, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        custom_data(label, data)


def test_what_is_emitted_is_the_json_a_reader_gets() -> None:
    hostile = "<script>alert(1)</script>\x1b[2J"
    keyed: dict[Any, Any] = {1: hostile, "n": (1, 2)}  # JSON's keys are strings
    assert custom_data("partial", keyed) == {
        "label": "partial", "data": {"1": hostile, "n": [1, 2]}}
    assert custom_data("progress", None) == {"label": "progress", "data": {}}


async def test_a_unit_test_sees_what_each_node_emitted(tmp_path: Path) -> None:
    run = await run_agent(AccountAgent, AccountState(
        messages=[Message(role="user", content="Check ACC-1001")]),
        tools=in_process_tools(tmp_path / "tools.sqlite"))
    emitted = {ctx.node.name: ctx.emitted for ctx in run.contexts if ctx.emitted}
    assert emitted == {"lookup_account": [{"label": "progress", "data": {
        "reading": "lookup_account", "arguments": {"account_id": "ACC-1001"}}}]}


def test_a_transition_event_keeps_its_kind_old_records_too() -> None:
    new = StreamEvent(TRANSITION, {"step": 2, "source": "a", "target": "b", MOVE: "route"},
                      offset=4)
    assert new.as_json() == {"offset": 4, "kind": TRANSITION, "step": 2, "source": "a",
                             "target": "b", MOVE: "route"}
    # Stored before ``move`` existed: the transition's kind was in the data, as ``kind``.
    old = StreamEvent(TRANSITION, {"step": 2, "kind": "node"}, offset=5)
    assert old.as_json() == {"offset": 5, "kind": TRANSITION, "step": 2, MOVE: "node"}
    # A node's data never hides what the event is.
    mine = StreamEvent(CUSTOM, {"label": "x", "kind": "fake", "offset": 99}, offset=6)
    assert mine.as_json() == {"offset": 6, "kind": CUSTOM, "label": "x"}
