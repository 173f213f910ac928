"""Research tools: find sources one page at a time, and the control tool that ends a step.

``advance_to_next_step`` is a *control* tool: the model calls it to say "this step is
done", the node reads the call (and its summary), and no activity ever runs for it.
It is a tool all the same so that its arguments are validated like every tool's.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from .spec import Db, tool


class SearchSources(BaseModel):
    query: str = Field(min_length=1, max_length=200)
    page: int = Field(default=1, ge=1, le=20, description="1 = best match, 2 = next, ...")


class AdvanceToNextStep(BaseModel):
    summary: str = Field(min_length=1, max_length=2000,
                         description="what this step produced, in a sentence or two")


@tool(description="Search the source library; returns one source per page.")
def search_sources(db: Db, args: SearchSources) -> dict[str, Any]:
    """One source per page, best match first: the model has to ask for more."""
    words = [w for w in args.query.lower().split() if len(w) > 2][:10]
    rows = db.execute("SELECT id, title, url, summary FROM sources ORDER BY id").fetchall()
    scored = [(sum(w in (r["title"] + " " + r["summary"]).lower() for w in words), dict(r))
              for r in rows]
    hits = [src for score, src in sorted(scored, key=lambda s: -s[0]) if score > 0]
    if args.page > len(hits):
        return {"results": [], "total": len(hits)}
    return {"results": [hits[args.page - 1]], "total": len(hits)}


@tool(control=True, description="Call when you judge the current step complete, with a "
      "summary of what it produced.")
def advance_to_next_step(args: AdvanceToNextStep) -> dict[str, Any]:
    # Never scheduled (see module docstring); kept total so the registry stays uniform.
    return {"summary": args.summary}


TOOLS = [search_sources, advance_to_next_step]
