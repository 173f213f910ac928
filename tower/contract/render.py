"""The one rendering of a proposal: what every surface shows an approver. Pure.

Every surface shows ``render_proposal(canonical_proposal(record))``: the very object
``proposal_digest`` hashes, every value whole, never cut.

Text from a run is hostile, so it is shown inert: no control (C0, C1, DEL), bidi,
zero-width or other invisible character is emitted raw. C0/C1/DEL show as ``\\x1b``-style
escapes, others as ``⟨U+202E⟩``, and the rendering is marked ``hidden``; ``\\`` and ``⟨``
are escaped too, so every shown string reads back to the characters signed (``unescape``).
Non-ASCII spaces are escaped ("$5 000" is not "$5000"); in a proposal so is every digit
outside ASCII and every currency sign but ``$``, so an amount reads in ASCII digits only.
In a multi-line string value each ``\\n`` stays a line break; elsewhere it is an escape; a CR
always is. Markup is the surfaces' business (markup off, HTML autoescape on).

Width: no text may make a line that reads as a field or the heading, at any width, so
``lines`` wraps to the surface's width itself: a long or multi-line value is a block under
``name: |`` whose rows carry the gutter (``│`` where a line of the value starts, ``┆``
where the renderer wrapped it). Widths are counted high (wide and ambiguous characters as
two), so a terminal never wraps a line the renderer made.
"""

from __future__ import annotations

import json
import re
import textwrap
import unicodedata
from dataclasses import dataclass
from typing import Any

# Invisible though not "Cf": combining grapheme joiner, variation selectors, Hangul
# fillers, the braille blank, the Mongolian free variation selectors.
_INVISIBLE = frozenset([0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180B, 0x180C, 0x180D,
                        0x180F, 0x2800, 0x3164, 0xFFA0, *range(0xFE00, 0xFE10),
                        *range(0xE0100, 0xE01F0)])
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"})
_LOOKALIKE_CATEGORIES = frozenset({"Nd", "Nl", "No", "Sc"})  # digits, numerals, currency
_NAMED = {"\t": "\\t", "\r": "\\r", "\n": "\\n"}
WARNING = ("this proposal contains hidden or look-alike characters (control, bidi, "
           "invisible, or digits and currency signs outside ASCII): each is shown as an "
           "escape such as \\x1b or ⟨U+202E⟩")
WIDTH = 80  # columns, where the surface has no width of its own (a pipe, a notification)
LINE, MORE = "│ ", "┆ "  # a value's gutter: where its line starts, where it was wrapped
_ROOM = 12  # the fewest columns a value's row gets, however narrow the width


def _hidden_char(ch: str, lookalikes: bool) -> bool:
    if ch == " ":
        return False
    category = unicodedata.category(ch)
    if lookalikes and category in _LOOKALIKE_CATEGORIES and not ch.isascii():
        return True  # a digit or currency sign that could pass for part of an amount
    return category in _ESCAPED_CATEGORIES or ord(ch) in _INVISIBLE


def escape(text: str, *, multiline: bool = False,
           lookalikes: bool = False) -> tuple[str, bool]:
    """``text`` made inert: (the shown text, whether it held a hidden character). With
    ``multiline``, ``\\n`` stays a real line break (and is not "hidden"); with
    ``lookalikes`` (a proposal), digits and currency signs outside ASCII are escapes too."""
    if text.isascii() and text.isprintable() and "\\" not in text:
        return text, False  # nothing to escape (the common case: a run's own reasons)
    out: list[str] = []
    hidden = False
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif ch == "⟨":
            out.append("⟨U+27E8⟩")
        elif ch == "\n":
            out.append("\n" if multiline else "\\n")
        elif not _hidden_char(ch, lookalikes):
            out.append(ch)
        else:
            hidden = True
            code = ord(ch)
            if ch in _NAMED:
                out.append(_NAMED[ch])
            elif code < 0x20 or 0x7F <= code <= 0x9F:
                out.append(f"\\x{code:02x}")
            else:
                out.append(f"⟨U+{code:04X}⟩")
    return "".join(out), hidden


def inert(text: object) -> str:
    """Any other text a run chose (its id, its agent's name, a table cell) as one inert
    line: ``escape`` of it, without the flag."""
    return escape(str(text))[0]


def cells(text: str) -> int:
    """The columns ``text`` may take on a terminal, counted high where terminals differ:
    wide, fullwidth and ambiguous characters (a CJK terminal draws those wide) as two."""
    return sum(1 if ch.isascii() or unicodedata.east_asian_width(ch) not in "WFA" else 2
               for ch in text)


# One shown character or one whole escape: a row is never cut inside an escape.
ATOM = re.compile(r"\\(?:\\|n|r|t|x[0-9a-f]{2})|⟨U\+[0-9A-F]{4,6}⟩|.", re.S)


def _rows(text: str, room: int) -> list[str]:
    """``text`` (shown) cut into rows of at most ``room`` columns."""
    rows, row, used = [], "", 0
    for atom in ATOM.findall(text):
        width = cells(atom)
        if row and used + width > room:
            rows.append(row)
            row, used = "", 0
        row, used = row + atom, used + width
    return [*rows, row]


def fit(line: str, more: str, width: int) -> list[str]:
    """``line`` as rows of at most ``width`` columns: the first as it starts, every other
    one after ``more``, a gutter (a surface's own lines: a run id is the requester's text)."""
    if cells(line) <= width:
        return [line]
    first = _rows(line, width)[0]
    rest = _rows(line[len(first):], max(width - cells(more), _ROOM))
    return [first, *(more + row for row in rest)]


_ESCAPE = re.compile(r"\\(\\|n|r|t|x[0-9a-f]{2})|⟨U\+([0-9A-F]{4,6})⟩")


def unescape(shown: str) -> str:
    """The characters ``escape`` showed as ``shown`` (its inverse)."""
    def back(m: re.Match[str]) -> str:
        if m.group(2):
            return chr(int(m.group(2), 16))
        code = m.group(1)
        return {"\\": "\\", "n": "\n", "r": "\r", "t": "\t"}.get(code) or chr(int(code[1:], 16))
    return _ESCAPE.sub(back, shown)


@dataclass(frozen=True)
class Field:
    """One proposal value as shown: ``name`` and ``text`` already inert. ``block`` when
    the text is several lines (shown as an indented block); ``note`` a reading aid (an
    amount in cents as currency), not part of what is signed."""

    name: str
    text: str
    block: bool = False
    note: str = ""


@dataclass(frozen=True)
class Rendered:
    """A proposal as every surface shows it. ``hidden``: it holds characters shown as
    escapes (surfaces show ``WARNING``). ``lines()`` is the whole text for a terminal."""

    gate: str
    node: str
    when: str
    fields: tuple[Field, ...]
    editable: tuple[str, ...]
    limits: tuple[str, ...]
    hidden: bool

    @property
    def heading(self) -> str:
        return f"gate {self.gate} ({self.when} {self.node})"

    def lines(self, indent: str = "", width: int = WIDTH) -> list[str]:
        """Rows of at most ``width`` columns; the fields at ``indent`` plus two spaces, and
        no other row has a name there (a value's rows start with its gutter)."""
        gutter = f"{indent}    "
        more = gutter + MORE  # any row goes on in the values' gutter, never at a name's column
        out = [*fit(f"{indent}{self.heading}", more, width), f"{indent}proposal:"]
        if not self.fields:
            out.append(f"{indent}  (nothing)")
        room = max(width - cells(gutter + LINE), _ROOM)
        for f in self.fields:
            note = f"  ({f.note})" if f.note else ""
            line = f"{indent}  {f.name}: {f.text}{note}"
            if not f.block and cells(line) <= width:
                out.append(line)
                continue
            out += fit(f"{indent}  {f.name}: |{note}", more, width)
            for source in f.text.split("\n"):
                first, *rest = _rows(source, room)
                out += [gutter + LINE + first, *(gutter + MORE + row for row in rest)]
        out += fit(f"{indent}editable: {', '.join(self.editable) or '-'}", more, width)
        for limit in self.limits:
            out += fit(f"{indent}limit {limit}", more, width)
        if self.hidden:
            out += textwrap.wrap(f"WARNING: {WARNING}", max(width, 40),
                                 initial_indent=indent, subsequent_indent=indent + " " * 9,
                                 break_on_hyphens=False)
        return out

    def text(self, indent: str = "", width: int = WIDTH) -> str:
        return "\n".join(self.lines(indent, width))


def render_proposal(canonical: dict[str, Any]) -> Rendered:
    """Render the canonical proposal (``tower.contract.decisions.canonical_proposal``):
    every key and value whole and inert."""
    hidden = False

    def shown(value: Any, multiline: bool = False) -> str:
        nonlocal hidden
        text, was = escape(value if isinstance(value, str) else _json(value),
                           multiline=multiline, lookalikes=True)
        hidden = hidden or was
        return text

    fields = []
    # In key order, as the digest is: an order of its own would be a freedom the signed
    # object does not have (a memo could reorder it to mislead).
    for key, value in sorted(dict(canonical.get("proposal") or {}).items()):
        block = isinstance(value, str) and "\n" in value
        fields.append(Field(name=shown(str(key)), text=shown(value, multiline=block),
                            block=block, note=_note(str(key), value)))
    limits = tuple(f"{shown(str(name))}: {shown(limit)}"
                   for name, limit in sorted(dict(canonical.get("limits") or {}).items()))
    return Rendered(gate=shown(str(canonical.get("gate", "?"))),
                    node=shown(str(canonical.get("node", "?"))),
                    when=shown(str(canonical.get("when", "?"))), fields=tuple(fields),
                    editable=tuple(shown(str(e)) for e in canonical.get("editable") or []),
                    limits=limits, hidden=hidden)


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _note(key: str, value: Any) -> str:
    """``amount_cents: 240000`` reads as ``$2,400.00`` too (integers only: exact)."""
    if key.endswith("_cents") and isinstance(value, int) and not isinstance(value, bool):
        sign = "-" if value < 0 else ""
        return f"{sign}${abs(value) // 100:,}.{abs(value) % 100:02d}"
    return ""
