"""Reducers and updates: pure, no server."""

from __future__ import annotations

from typing import Annotated

import pytest
from pydantic import Field

from tower import ADD, APPEND, AgentState, Message, custom
from tower.core.state import UpdateError, Usage, apply_update


def keep_max(old: int, new: int) -> int:
    return max(old, new)


class Sample(AgentState):
    notes: Annotated[list[str], APPEND] = Field(default_factory=list)
    count: Annotated[int, ADD] = 0
    label: str = ""
    high: Annotated[int, custom(keep_max)] = 0


def test_each_reducer_merges_its_own_way() -> None:
    s = Sample(notes=["a"], count=2, label="x", high=5)
    new = apply_update(s, {"notes": ["b", "c"], "count": 3, "label": "y", "high": 4})
    assert (new.notes, new.count, new.label, new.high) == (["a", "b", "c"], 5, "y", 5)
    assert (s.notes, s.count, s.label) == (["a"], 2, "x"), "the old state never changes"


def test_append_takes_a_single_item_and_messages_are_validated() -> None:
    new = apply_update(Sample(), {"notes": "one", "messages": [{"role": "user", "content": "hi"}]})
    assert new.notes == ["one"]
    assert new.messages == [Message(role="user", content="hi")]


def test_usage_adds_up() -> None:
    s = apply_update(Sample(), {"usage": Usage(calls=1, prompt_tokens=10, cost_usd=0.5)})
    s = apply_update(s, {"usage": Usage(calls=1, completion_tokens=3, cost_usd=0.25)})
    assert s.usage == Usage(calls=2, prompt_tokens=10, completion_tokens=3, cost_usd=0.75)


@pytest.mark.parametrize(
    ("update", "words"),
    [
        ({"nope": 1}, "unknown field 'nope'"),
        ({"step": 99}, "protected field 'step'"),
        ({"status": "DONE"}, "protected field 'status'"),
        ({"count": "many"}, "count"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages"),
    ],
)
def test_bad_updates_are_refused_by_name_and_change_nothing(
    update: dict[str, object], words: str
) -> None:
    s = Sample(count=1)
    with pytest.raises(UpdateError, match=words):
        apply_update(s, update)
    assert s == Sample(count=1)
