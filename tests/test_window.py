"""Unit: context windows on refs, log summaries, the content-addressed message store."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError

from tower import Message
from tower.activities.messages import MessageStore
from tower.contract.wire import MessageRef
from tower.contract.wire import message_ref as ref_of
from tower.core.carry import summarize
from tower.core.engine import Transition
from tower.core.window import WindowPolicy, estimate_tokens, over_budget, prune, split

POLICY = WindowPolicy(max_messages=4, keep_recent=2, max_tokens=1000, prune_chars=100)


def _ref(role: str, chars: int, name: str | None = None):
    return ref_of(Message(role=role, content="x" * chars, name=name))  # type: ignore[arg-type]


def needs_reduction(policy: WindowPolicy, refs: list[MessageRef]) -> bool:
    return over_budget(policy, len(refs), estimate_tokens(refs))


def test_reduction_triggers_on_count_or_tokens() -> None:
    small = [_ref("user", 10)] * 4
    assert not needs_reduction(POLICY, small)
    assert needs_reduction(POLICY, [*small, _ref("assistant", 10)])
    assert needs_reduction(POLICY, [_ref("tool", 5000, "search_docs")])
    assert estimate_tokens([_ref("user", 400)]) == 101


def test_split_never_orphans_a_tool_result() -> None:
    refs = [_ref("user", 1), _ref("assistant", 2), _ref("user", 3), _ref("tool", 4, "t"),
            _ref("assistant", 5)]
    older, recent = split(POLICY, refs)
    assert older == refs[:2] and recent == refs[2:]
    assert split(POLICY, refs[:1]) == ([], refs[:1])


def test_prune_replaces_only_large_tool_payloads() -> None:
    refs = [_ref("tool", 1000, "t"), _ref("tool", 100, "t"), _ref("user", 5000)]
    assert [r.pruned for r in prune(POLICY, refs)] == [True, False, False]
    assert estimate_tokens(prune(POLICY, refs)[:1]) < estimate_tokens(refs[:1])


def test_log_summary_folds_runs_and_keeps_the_last_moves() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    log = [Transition(step=i, source="a" if i % 2 else "b", target="b" if i % 2 else "a",
                      reason="edge", at=at) for i in range(1, 8)]
    first = summarize(None, log[:4])
    both = summarize(first, log[4:], recent=3)
    assert (first.runs, first.first_step, first.last_step) == (1, 1, 4)
    assert (both.runs, both.transitions, both.first_step, both.last_step) == (2, 7, 1, 7)
    assert both.moves == {"a -> b": 4, "b -> a": 3}
    assert [t.step for t in both.recent] == [5, 6, 7]


def test_log_summary_stays_small_whatever_a_step_carried() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    huge = {"context": [{"ref": "f" * 32, "role": "user", "chars": 400}] * 2000}
    log = [Transition(step=i, source="a", target="a", reason="r" * 5000, update=huge,
                      at=at, calls=["model:x"] * 100) for i in range(1, 50)]
    carried = summarize(summarize(None, log[:25]), log[25:])
    assert all(t.update == {} and len(t.reason) == 200 and len(t.calls) == 10
               for t in carried.recent)
    assert len(carried.model_dump_json()) < 3000  # the log itself was megabytes
    assert len(str([t.model_dump() for t in log])) > 1_000_000


def test_store_is_content_addressed_and_names_missing_messages(tmp_path: Path) -> None:
    store = MessageStore(tmp_path / "m.sqlite")
    hello, tool = Message(role="user", content="hello"), Message(role="tool", name="t",
                                                                 content="y" * 500)
    refs = store.put([hello, tool, hello])
    assert refs[0] == refs[2] and refs[0] != ref_of(Message(role="assistant", content="hello"))
    pruned = refs[1].model_copy(update={"pruned": True})
    loaded = store.get([refs[1], pruned, refs[0]])
    assert loaded[0] == tool and loaded[2] == hello
    assert "500-character output of tool t pruned" in loaded[1].content
    with pytest.raises(ApplicationError, match="no message"):
        store.get([ref_of(Message(role="user", content="never stored"))])


def test_a_window_is_one_content_addressed_ref(tmp_path: Path) -> None:
    store = MessageStore(tmp_path / "m.sqlite")
    summary = store.put([Message(role="assistant", content="Summary: earlier talk")])[0]
    earlier = store.put([Message(role="user", content="x" * 400)])
    new = [Message(role="user", content="hi"), Message(role="assistant", content="hello")]
    refs, window = store.put_with_window(new, (summary, earlier))
    assert window is not None and window.messages == 4
    assert window.tokens == estimate_tokens([summary, *earlier, *refs])
    # Same list, same ref; the store gives the list back, and its messages.
    assert store.put_window(summary, [*earlier, *refs]) == window
    assert store.put_window(None, [*earlier, *refs]).ref != window.ref
    assert store.get_window(window) == (summary, [*earlier, *refs])
    assert store.get(refs) == new
    with pytest.raises(ApplicationError, match="no window"):
        store.get_window(window.model_copy(update={"ref": "0" * 32}))
