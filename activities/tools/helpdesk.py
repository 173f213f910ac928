"""Technical-support tools: search the docs, open a ticket."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from .spec import Db, EffectCall, tool


class SearchDocs(BaseModel):
    query: str = Field(min_length=1, max_length=200)


class CreateTicket(BaseModel):
    subject: str = Field(min_length=1, max_length=200)
    body: str = Field(min_length=1, max_length=5000)


@tool(description="Search the product documentation.")
def search_docs(db: Db, args: SearchDocs) -> dict[str, Any]:
    words = [w for w in args.query.lower().split() if len(w) > 2][:8]
    rows = db.execute("SELECT id, title, body FROM docs ORDER BY id").fetchall()
    scored = [(sum(w in (r["title"] + " " + r["body"]).lower() for w in words), dict(r))
              for r in rows]
    hits = [doc for score, doc in sorted(scored, key=lambda s: -s[0]) if score > 0][:3]
    return {"results": hits}


@tool(side_effect=True, description="Open a support ticket for the engineering team.")
def create_ticket(db: Db, args: CreateTicket, call: EffectCall) -> dict[str, Any]:
    # RETURNING, not lastrowid: PostgreSQL has no lastrowid. fetchall() finishes the insert.
    row = db.execute("INSERT INTO tickets (subject, body, idempotency_key) VALUES (?,?,?) "
                     "RETURNING id", (args.subject, args.body, call.key)).fetchall()[0]
    return {"ticket_id": f"T-{row[0]}"}


TOOLS = [search_docs, create_ticket]
