"""`tower run`'s outcome lines: a run that recovered and ended DONE prints no `error:` line
(what it recovered from is history, said as such), and a node named twice is named once."""

from __future__ import annotations

import pytest

from tower.cli.cmd_run import print_outcome


def test_a_run_that_recovered_prints_no_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    print_outcome("DONE", {"errors": ["reason: reason: the model's answer did not validate"],
                           "messages": [{"role": "assistant", "content": "Refunded."}]})
    out = capsys.readouterr().out
    assert "error:" not in out
    assert out.splitlines() == ["status: DONE", "reply: Refunded.",
                                "recovered from: reason: the model's answer did not validate"]


def test_a_failed_run_prints_its_error_once_named(capsys: pytest.CaptureFixture[str]) -> None:
    print_outcome("FAILED", {"errors": ["pay: pay: declined"]})
    assert capsys.readouterr().out.splitlines() == ["status: FAILED", "error: pay: declined"]
