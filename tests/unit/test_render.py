"""The one rendering of a proposal (tower.contract.render): whole, inert, recoverable.

Property-style: for any text, the shown text holds no raw control, bidi, format or other
invisible character, and ``unescape`` gives back exactly the characters signed.
"""

from __future__ import annotations

import unicodedata
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tower.cli.output import table
from tower.client._pending import mismatch
from tower.contract.decisions import GateRecord, canonical_proposal, digest_of, proposal_digest
from tower.contract.pending import EditLimit, PendingView
from tower.contract.render import escape, render_proposal, unescape
from tower.contract.trust import AttestClaims

AT = datetime(2026, 12, 4, tzinfo=UTC)
BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
HOSTILE = ("\x1b[1A\x1b[2K\r\x08\x7f\x9b\x00" + BIDI + "\u200b\u200d\ufeff\u2028\u2029"
           "\u00a0\u3000\U000e0001\ue000\ufe0f\u115f")
# Any character at all, lone surrogates and unassigned code points included.
ANY_TEXT = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF,
                                          blacklist_categories=()))


def raw_invisible(text: str, *, allow_newline: bool) -> list[str]:
    """The characters of ``text`` a terminal or browser would not show as themselves."""
    bad = []
    for ch in text:
        if ch == "\n" and allow_newline:
            continue
        if ch != " " and (unicodedata.category(ch) in {"Cc", "Cf", "Cs", "Co", "Cn", "Zl",
                                                       "Zp", "Zs"} or ch in BIDI):
            bad.append(ch)
    return bad


def lookalikes(text: str) -> list[str]:
    """Digits and currency signs outside ASCII (``５``, ``٥``, ``€``): shown as escapes too."""
    return [ch for ch in text if not ch.isascii()
            and unicodedata.category(ch) in {"Nd", "Nl", "No", "Sc"}]


@given(ANY_TEXT)
def test_shown_text_holds_no_raw_invisible_and_reads_back_exactly(text: str) -> None:
    shown, hidden = escape(text)
    assert raw_invisible(shown, allow_newline=False) == []
    assert unescape(shown) == text
    assert hidden == bool(raw_invisible(text, allow_newline=False))
    # In a proposal, digits and currency signs outside ASCII are escapes too.
    shown, hidden = escape(text, lookalikes=True)
    assert raw_invisible(shown, allow_newline=False) == [] and lookalikes(shown) == []
    assert unescape(shown) == text
    assert hidden == bool(raw_invisible(text, allow_newline=False) + lookalikes(text))


@given(ANY_TEXT)
def test_multiline_keeps_newlines_only(text: str) -> None:
    shown, _ = escape(text, multiline=True)
    assert raw_invisible(shown, allow_newline=True) == []
    assert shown.count("\n") == text.count("\n")
    assert unescape(shown) == text


@given(st.dictionaries(ANY_TEXT, st.one_of(ANY_TEXT, st.integers(), st.booleans(),
                                           st.lists(ANY_TEXT, max_size=3)), max_size=5))
def test_a_whole_proposal_renders_inert(values: dict[str, object]) -> None:
    rendered = render_proposal({"gate": "g", "node": "n", "when": "before",
                                "proposal": values, "editable": [], "limits": {}})
    text = rendered.text()
    assert raw_invisible(text, allow_newline=True) == []
    for f in rendered.fields:  # every key and value reads back
        assert unescape(f.name) in values


def test_every_hostile_character_is_a_visible_escape_and_marked() -> None:
    shown, hidden = escape("refund $2,400" + HOSTILE + "[/x] \\x1b ⟨U+202E⟩")
    assert hidden
    assert shown.startswith("refund $2,400\\x1b[1A\\x1b[2K\\r\\x08\\x7f\\x9b\\x00⟨U+202A⟩")
    for code in ("⟨U+202E⟩", "⟨U+2066⟩", "⟨U+200B⟩", "⟨U+FEFF⟩", "⟨U+2028⟩", "⟨U+00A0⟩",
                 "⟨U+E0001⟩", "⟨U+FE0F⟩", "⟨U+115F⟩"):
        assert code in shown
    # Markup and look-alike escapes are text, told apart from real escapes.
    assert shown.endswith("[/x] \\\\x1b ⟨U+27E8⟩U+202E⟩")
    assert escape("plain $5.00 text") == ("plain $5.00 text", False)


def test_the_rendering_is_of_the_canonical_proposal_whole() -> None:
    script = "DROP TABLE legacy_notes;\n" + "-- note\n" * 40 + "DROP TABLE customers;"
    record = GateRecord(
        gate="dba_review", node="apply", when="before", visit=1, step=3, role="dba",
        run_id="r1", proposal={"script": script, "amount_cents": 240000, "long": "x" * 10_000,
                               "reason": "ok\x1b[2K\r$5"},
        editable=["amount_cents"], limits={"amount_cents": EditLimit(max=240000, rule="lower")},
        requested_at=AT, expires_at=AT)
    canonical = canonical_proposal(record)
    assert digest_of(canonical) == proposal_digest(record)
    rendered = render_proposal(canonical)
    lines = rendered.lines()
    assert lines[0] == "gate dba_review (before apply)"
    assert "  amount_cents: 240000  ($2,400.00)" in lines
    # Never cut: wrapped to 80 columns by the renderer, every row in the value's gutter.
    long = lines.index("  long: |")
    rows = lines[long + 1:long + 138]
    assert rows[0] == "    │ " + "x" * 73 and rows[136] == "    ┆ " + "x" * 72
    assert rows[1:136] == ["    ┆ " + "x" * 73] * 135
    assert "  reason: ok\\x1b[2K\\r$5" in lines
    last = lines.index("    │ DROP TABLE customers;")
    assert "  script: |" in lines and lines[last + 1] == "editable: amount_cents"
    assert 'limit amount_cents: {"max": 240000.0, "min": null, "rule": "lower"}' in lines
    assert rendered.hidden and lines[-3].startswith("WARNING: this proposal contains hidden")


def test_a_memo_shows_only_what_is_hashed() -> None:
    """A memo's own ``proposal`` is ignored once it carries ``shown``: what the surfaces
    read can never differ from what the attested digest is of."""
    shown = {"v": 1, "gate": "g", "node": "n", "when": "before", "editable": [],
             "limits": {}, "proposal": {"amount_cents": 240000, "note": "x"}}
    view = PendingView.model_validate({
        "gate": "g", "node": "n", "when": "before", "step": 1, "role": "r",
        "requested_at": AT, "expires_at": AT, "shown": shown,
        "proposal": {"amount_cents": "500"}})
    assert view.proposal == {"amount_cents": "240000", "note": "x"}
    assert "proposal" not in view.memo() and view.memo()["shown"] == shown


def test_a_listing_refuses_a_memo_whose_shown_proposal_is_not_the_attested_one() -> None:
    """Issue 30, item 4: with everything else in order (this execution, agent, queue, gate,
    step), a memo whose shown proposal was rewritten ($5) is not the request attested."""
    record = GateRecord(gate="refund_review", node="issue_refund", when="before", visit=1,
                        step=4, role="manager", run_id="opened-in",
                        proposal={"amount_cents": 240000}, editable=["amount_cents"],
                        requested_at=AT, expires_at=AT)
    run = SimpleNamespace(id="refund-1", run_id="exec-2", workflow_type="refund",
                          task_queue="tower")
    claims = AttestClaims(tenant="t", run="refund-1", run_id="opened-in", gate="refund_review",
                          step=4, agent="refund", task_queue="tower", jti="j", iat=0, exp=1,
                          proposal=proposal_digest(record), execution="exec-2")
    shown = canonical_proposal(record)
    view = PendingView(gate="refund_review", node="issue_refund", when="before", step=4,
                       role="manager", requested_at=AT, expires_at=AT, agent="refund",
                       editable=["amount_cents"], proposal_digest=proposal_digest(record),
                       shown=shown)
    assert mismatch(run, view, claims) is None  # type: ignore[arg-type]
    five = view.model_copy(update={"shown": {**shown, "proposal": {"amount_cents": 500}}})
    assert mismatch(run, five, claims) == (  # type: ignore[arg-type]
        "the proposal its memo shows is not the one attested (digests differ)")
    again = SimpleNamespace(**{**vars(run), "run_id": "exec-3"})  # a new execution
    assert "execution differ" in str(mismatch(again, view, claims))  # type: ignore[arg-type]
    old = view.model_copy(update={"shown": {}})  # a memo from before `shown`
    assert "does not show the whole proposal" in str(mismatch(run, old, claims))  # type: ignore[arg-type]


def test_a_table_cell_is_never_markup_nor_a_raw_escape(capsys: Any) -> None:
    """`[/x]` in a run's text made rich raise MarkupError (exit 1 for every approver)."""
    table(["RUN", "ERROR"], [["r-1", "[/x] [bold]no[/bold] \x1b[2K\rok"]])
    out = capsys.readouterr().out
    assert "[/x] [bold]no[/bold] \\x1b[2K\\rok" in out and "\x1b" not in out


def test_a_memo_no_digest_can_be_made_of_is_refused_not_a_crash() -> None:
    """A forged memo whose shown proposal RFC 8785 cannot take (an integer past 2**53, a
    lone surrogate) is not listed; the listing goes on for every other run."""
    run = SimpleNamespace(id="r", run_id="e", workflow_type="refund", task_queue="tower")
    claims = AttestClaims(tenant="t", run="r", run_id="o", gate="g", step=1, agent="refund",
                          task_queue="tower", jti="j", iat=0, exp=1, execution="e",
                          proposal="sha256:" + "0" * 64)
    for bad in (2**60, "\ud800"):
        view = PendingView(gate="g", node="n", when="before", step=1, role="r",
                           requested_at=AT, expires_at=AT, agent="refund",
                           proposal_digest=claims.proposal,
                           shown={"v": 1, "gate": "g", "node": "n", "when": "before",
                                  "editable": [], "limits": {}, "proposal": {"x": bad}})
        assert "cannot be canonicalized" in str(mismatch(run, view, claims))  # type: ignore[arg-type]
