"""How the terminal shows a run's stream (tower.cli.live): the reply forming in a
Live region on a terminal, a discarded attempt's text gone, JSON lines with --json, and
nothing but the final line in a pipe."""

from __future__ import annotations

import io
import json

from tower.cli.live import MODEL_KINDS, RUN_KINDS, LiveText, custom_line
from tower.contract.stream import (
    CUSTOM,
    DELTA,
    DISCARD,
    MODEL_FINISHED,
    MODEL_STARTED,
    TRANSITION,
    Reply,
    StreamEvent,
)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


EVENTS = [StreamEvent(MODEL_STARTED, {"attempt": "a"}, offset=1),
          StreamEvent(DELTA, {"attempt": "a", "text": "Half "}, offset=2),
          StreamEvent(DISCARD, {"attempt": "a", "reason": "worker lost"}, offset=3),
          StreamEvent(MODEL_STARTED, {"attempt": "b"}, offset=4),
          StreamEvent(DELTA, {"attempt": "b", "text": "The whole "}, offset=5),
          StreamEvent(DELTA, {"attempt": "b", "text": "reply."}, offset=6),
          StreamEvent(DELTA, {"attempt": "a", "text": " late"}, offset=7),  # a dead attempt
          StreamEvent(TRANSITION, {"source": "respond", "target": "listen"}, offset=8)]


def test_a_terminal_sees_the_reply_form_and_a_discarded_attempt_go() -> None:
    out = Terminal()
    view = LiveText(out, "chat-1", as_json=False, render=lambda t: f"… {t}")
    assert view.live is not None
    for event in EVENTS:
        view.take(event)
    view.close()
    drawn = out.getvalue()
    assert "… Half" in drawn and "… The whole reply." in drawn and "late" not in drawn
    assert "… retrying: worker lost" in drawn  # the lost attempt said so, then the next
    assert view.reply.text == "The whole reply." and view.reply.discarded == ["a"]
    assert view.offset == 8


def test_json_mode_prints_every_event_a_line_and_a_pipe_prints_nothing() -> None:
    out = io.StringIO()
    view = LiveText(out, "chat-1", as_json=True)
    for event in EVENTS:
        view.take(event)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line["offset"] for line in lines] == list(range(1, 9))
    assert lines[1] == {"event": DELTA, "run": "chat-1", "offset": 2, "kind": DELTA,
                        "attempt": "a", "text": "Half "}
    only_model = io.StringIO()
    view = LiveText(only_model, "r", as_json=True, kinds=MODEL_KINDS)
    for event in EVENTS:
        view.take(event)
    assert TRANSITION not in only_model.getvalue() and view.offset == 8
    piped = io.StringIO()
    view = LiveText(piped, "r", as_json=False)
    for event in EVENTS:
        view.take(event)
    assert piped.getvalue() == "" and view.reply.text == "The whole reply."


def test_the_fold_ignores_deltas_of_an_attempt_it_is_not_showing() -> None:
    reply = Reply()
    assert not reply.take(StreamEvent(DELTA, {"attempt": "x", "text": "stray"}))
    assert reply.text == ""


def test_the_fold_says_retrying_when_an_attempt_is_lost_and_shows_the_final_text_once(
) -> None:
    reply, states = Reply(), []
    for event in EVENTS:
        reply.take(event)
        states.append(reply.state)
        if event.offset == 3:
            assert reply.as_json() == {"text": "", "state": "retrying", "reason": "worker lost"}
    # "retrying" until the next attempt's first word.
    assert states[:5] == ["streaming", "streaming", "retrying", "retrying", "streaming"]
    assert reply.text == "The whole reply." and reply.discarded == ["a"]
    reply.take(StreamEvent(DISCARD, {"attempt": "a", "reason": "again"}, offset=9))
    assert reply.discarded == ["a"] and reply.state == "streaming"  # an old attempt: no change
    reply.take(StreamEvent(MODEL_FINISHED, {"attempt": "b"}, offset=10))
    assert reply.as_json() == {"text": "The whole reply.", "state": "finished", "reason": ""}


def test_a_nodes_own_event_is_one_inert_line_in_a_pipe_and_on_a_terminal() -> None:
    hostile = StreamEvent(CUSTOM, {"node": "lookup", "label": "progress\x1b[2J",
                                   "data": {"note": "[red]$5[/red]\r\x1b[1A", "n": 1}},
                          offset=1)
    line = custom_line(hostile)
    assert line == ('· lookup · progress\\x1b[2J {"n": 1, "note": '
                    '"[red]$5[/red]\\\\r\\\\u001b[1A"}')
    assert not any(ord(ch) < 32 for ch in line)
    pipe = io.StringIO()
    LiveText(pipe, "run-1", as_json=False, kinds=RUN_KINDS).take(hostile)
    assert pipe.getvalue() == line + "\n"
    terminal = Terminal()
    view = LiveText(terminal, "run-1", as_json=False, kinds=RUN_KINDS)
    view.take(hostile)
    view.close()
    assert "[red]$5[/red]" in terminal.getvalue() and "\x1b[2J" not in terminal.getvalue()
