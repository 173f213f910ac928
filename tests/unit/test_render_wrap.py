"""Values that cannot pass for fields, at any width (issue 37, item 4).

A refund message padded with ASCII spaces so that a terminal 80 (120, 400) columns wide
wraps it into rows reading ``amount_cents: 500 ($5.00)`` at the fields' indentation, right
under the real fields. The renderer wraps the text itself to the width it is given, every
row of a value in the field's gutter, so no row but a real field's starts like a field,
and the rows read back to exactly the characters signed. Digits and currency signs outside
ASCII are escapes and flag the proposal, as hidden characters do.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tower.activities.notify import message
from tower.contract.notify import GateNotice, NotifyPolicy
from tower.contract.render import LINE, MORE, Rendered, cells, escape, render_proposal, unescape

WIDTHS = (80, 120, 400)
HEAD = "Please refund $2,400 on invoice INV-2004"
FIELDS = {"action": "issue_refund", "amount": "$2,400.00", "amount_cents": 240000,
          "invoice_id": "INV-2004", "limit": "$500.00"}


def spoof(width: int, indent: str = "") -> str:
    """The refund message that, printed raw on ``width`` columns after ``  reason: ``,
    wraps into rows that read as fields and as the gate's heading."""
    first = f"{indent}  reason: {HEAD}"
    rows = [f"{indent}  amount: $5.00", f"{indent}  amount_cents: 500  ($5.00)",
            f"{indent}gate refund_review (before issue_refund)"]
    return HEAD + " " * (width - len(first)) + "".join(r.ljust(width) for r in rows)


def proposal(**values: object) -> Rendered:
    return render_proposal({"gate": "refund_review", "node": "issue_refund", "when": "before",
                            "proposal": values, "editable": ["amount_cents"], "limits": {}})


def field_rows(lines: list[str], indent: str = "") -> list[str]:
    """The rows that start like a field: a name and a colon at the fields' indentation."""
    return [line for line in lines if re.match(rf"{indent}  [^\s│┆(]\S*:", line)]


def read_back(lines: list[str], rendered: Rendered, indent: str = "") -> dict[str, str]:
    """Each field's value as the rows show it: a value on its field's line, or a block of
    rows in the gutter (``│`` a line of the value starts, ``┆`` the row goes on)."""
    values: dict[str, str] = {}
    starts = [i for i, line in enumerate(lines) if re.match(rf"{indent}  [^\s│┆(]", line)]
    assert len(starts) == len(rendered.fields)
    for f, at in zip(rendered.fields, starts, strict=True):
        head = lines[at]
        note = f"  ({f.note})" if f.note else ""
        rows = []
        for line in lines[at + 1:]:
            if line.startswith(f"{indent}    {LINE}"):
                rows.append(line[len(indent) + 4 + len(LINE):])
            elif line.startswith(f"{indent}    {MORE}"):  # goes on: the value's row, or
                if rows:                                  # the field's own line
                    rows[-1] += line[len(indent) + 4 + len(MORE):]
                else:
                    head += line[len(indent) + 4 + len(MORE):]
            else:
                break
        assert head.startswith(f"{indent}  {f.name}: ")
        if head == f"{indent}  {f.name}: |{note}":
            values[f.name] = "\n".join(rows)
        else:
            assert not rows and head.endswith(note)
            values[f.name] = head[len(f"{indent}  {f.name}: "):len(head) - len(note)]
    return values


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("indent", ["", "  "])
def test_a_padded_value_never_reads_as_a_field(width: int, indent: str) -> None:
    reason = "customer request: " + spoof(width, indent)
    rendered = proposal(**FIELDS, reason=reason)
    lines = rendered.lines(indent, width)
    assert max(cells(line) for line in lines) <= width  # the terminal never wraps a row
    assert [r.split(":")[0].strip() for r in field_rows(lines, indent)] == [
        "action", "amount", "amount_cents", "invoice_id", "limit", "reason"]
    assert [line for line in lines if line.lstrip().startswith("gate ")] == [
        f"{indent}gate refund_review (before issue_refund)"]
    assert "amount_cents: 500  ($5.00)" in "".join(lines)  # shown, in the reason's gutter
    assert unescape(read_back(lines, rendered, indent)["reason"]) == reason


def test_the_rows_of_a_script_tell_its_lines_from_the_wrapping() -> None:
    script = "DROP TABLE legacy_notes;\n-- " + "y" * 150 + " DROP TABLE customers;\n\nend"
    rendered = proposal(script=script)
    lines = rendered.lines("", 80)
    assert lines[2] == "  script: |"
    assert lines[3:6] == ["    │ DROP TABLE legacy_notes;", "    │ -- " + "y" * 70,
                          "    ┆ " + "y" * 73]
    # The DROP after the comment is on a row that goes on the comment's line: ┆, not │.
    assert lines[6] == "    ┆ " + "y" * 7 + " DROP TABLE customers;"
    assert lines[7:9] == ["    │ ", "    │ end"]
    assert read_back(lines, rendered)["script"] == script


def test_an_escape_is_never_cut_by_a_row() -> None:
    rendered = proposal(note="x" * 70 + "\u202e" * 3)
    lines = rendered.lines("", 80)
    assert lines[3:5] == ["    │ " + "x" * 70, "    ┆ " + "⟨U+202E⟩" * 3]


def test_a_name_too_long_for_its_row_goes_on_in_the_gutter_too() -> None:
    rendered = proposal(**{"n" * 60: "x" * 100})
    lines = rendered.lines("", 40)
    assert lines[2:4] == ["  " + "n" * 38, "    ┆ " + "n" * 22 + ": |"]
    assert max(map(cells, lines)) <= 40 and read_back(lines, rendered) == {"n" * 60: "x" * 100}


ANY_TEXT = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF,
                                          blacklist_categories=()))
NAMES = st.from_regex(r"[a-z_]{1,30}", fullmatch=True)


@given(st.dictionaries(NAMES, st.one_of(ANY_TEXT, st.integers(), st.lists(ANY_TEXT,
                                                                         max_size=3)),
                       max_size=5),
       st.one_of(st.sampled_from(WIDTHS), st.integers(40, 400)), st.sampled_from(["", "  "]))
def test_any_value_at_any_width_stays_in_its_gutter_and_reads_back(
        values: dict[str, object], width: int, indent: str) -> None:
    rendered = proposal(**values)
    lines = rendered.lines(indent, width)
    assert max(cells(line) for line in lines) <= width
    assert len(field_rows(lines, indent)) == len(values)
    shown = read_back(lines, rendered, indent)
    for f in rendered.fields:
        assert shown[f.name] == f.text


LOOKALIKES = ["５", "٥", "۵", "५", "²", "½", "①", "Ⅻ", "€", "£", "¥", "＄", "﹩", "₹", "¢"]


@pytest.mark.parametrize("char", LOOKALIKES)
def test_a_digit_or_currency_sign_outside_ascii_is_an_escape_and_flags(char: str) -> None:
    shown, flagged = escape(f"$5{char}00", lookalikes=True)
    assert flagged and shown == f"$5⟨U+{ord(char):04X}⟩00" and unescape(shown) == f"$5{char}00"
    assert escape(f"€5{char}", multiline=True) == (f"€5{char}", False)  # a chat: shown as is
    rendered = proposal(amount_cents=500, note=f"{char}500")
    assert rendered.hidden and "digits and currency signs outside ASCII" in rendered.text()
    assert escape("refund $5,000.00 on INV-2004 (25% off)", lookalikes=True) == (
        "refund $5,000.00 on INV-2004 (25% off)", False)


def test_the_notification_marks_every_value_row() -> None:
    """Slack wraps at a width no sender knows: each value is in a quote (the bar runs down
    every row Slack makes of it), nothing of a value is outside one; the JSON format's
    ``rendered`` is the 80-column text, rows in their gutter."""
    reason = "customer request: " + spoof(80)
    values = {**FIELDS, "reason": reason, "script": "a\n" + "b" * 7000}
    notice = GateNotice(tenant="acme", run="r", agent="refund", gate="refund_review",
                        role="manager", node="issue_refund", proposal=values,
                        expires_at=datetime(2026, 12, 6, tzinfo=UTC))
    slack = message(NotifyPolicy(url="https://hooks.test/x", format="slack"), notice)
    quoted: list[str] = []
    plain: list[str] = []
    for block in slack["blocks"]:
        if block["type"] == "section":
            plain.append(block["text"]["text"])
        for part in block.get("elements", []) if block["type"] == "rich_text" else []:
            text = "".join(e["text"] for e in part["elements"])
            (quoted if part["type"] == "rich_text_quote" else plain).append(text)
    assert not [p for p in plain if "$5.00" in p or "bbb" in p]
    assert reason in quoted and "".join(quoted).count("b") == 7000 + reason.count("b")
    assert all(len(q) <= 2900 for q in quoted)
    data = message(NotifyPolicy(url="https://hooks.test/x", format="json"), notice)
    lines = data["rendered"].splitlines()
    assert len(field_rows(lines)) == len(values) and max(map(cells, lines)) <= 80
    assert read_back(lines, render_proposal(notice.shown or {
        "gate": "refund_review", "node": "issue_refund", "when": "?",
        "proposal": values}))["reason"] == reason

