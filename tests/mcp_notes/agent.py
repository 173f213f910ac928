"""notes_cleanup and notes_purge — agents whose every tool comes from the notes MCP server.

START → find ⇄ read_note → archive → delete → DONE. ``find`` asks the model, which sees
only ``notes.lookup_note`` (read-only); ``archive`` copies the note with
``notes.save_note`` (idempotent); ``delete`` removes it with ``notes.delete_note``
(destructive), so a gate holds the run before it until an editor approves. Rejected:
the note is kept. ``notes_purge`` is the same machine without the gate: a worker starts
with it only where the tenant's policy says ``notes.delete_note`` needs none.
``notes_tidy`` calls ``notes.forget_note`` (which deletes, but claims to be read-only)
with no gate and no model: START → tidy → DONE.
"""

from __future__ import annotations

import json
from datetime import timedelta

from pydantic import BaseModel, Field
from temporalio import workflow

from tower import DONE, AgentState, AgentWorkflow, Gate, Graph, Message, NodeContext, agent
from tower.contract.wire import ModelRequest, ToolCallRequest


class CleanupRequest(BaseModel):
    note_id: str = Field(min_length=1, max_length=100)


class CleanupState(AgentState):
    note_id: str
    pending_call: ToolCallRequest | None = None
    text: str = ""
    shown_tools: list[str] = Field(default_factory=list)  # what the model was offered
    archived_as: str = ""
    outcome: str = ""


async def find(ctx: NodeContext, state: CleanupState) -> dict[str, object]:
    answer = await ctx.ask(state.messages)
    if answer.tool_calls:
        return {"pending_call": answer.tool_calls[0]}
    offered = json.loads(answer.text or "{}")
    return {"text": offered.get("text", ""), "shown_tools": offered.get("tools", [])}


async def read_note(ctx: NodeContext, state: CleanupState) -> dict[str, object]:
    assert state.pending_call is not None
    result = await ctx.tool(state.pending_call.name, state.pending_call.arguments)
    reply = Message(role="tool", name=state.pending_call.name, content=json.dumps(result))
    return {"pending_call": None, "messages": [reply]}


async def archive(ctx: NodeContext, state: CleanupState) -> dict[str, object]:
    copy = f"archive-{state.note_id}"
    await ctx.tool("notes.save_note", {"note_id": copy, "text": state.text})
    return {"archived_as": copy}


async def delete(ctx: NodeContext, state: CleanupState) -> dict[str, object]:
    result = await ctx.tool("notes.delete_note", {"note_id": state.note_id})
    return {"outcome": f"deleted (deletion #{result['deletion']})"}


async def keep(ctx: NodeContext, state: CleanupState) -> dict[str, object]:
    return {"outcome": "kept: deletion not approved"}


def after_find(state: CleanupState) -> str:
    return "read_note" if state.pending_call else "archive"


def machine(name: str, *, gated: bool) -> Graph:
    graph = (
        Graph(name, CleanupState)
        .node("find", find, prompt="Find the note with notes.lookup_note.",
              tools=["notes.lookup_note"])
        .node("read_note", read_note, tools=["notes.lookup_note"])
        .node("archive", archive, tools=["notes.save_note"])
        .node("delete", delete, tools=["notes.delete_note"])
        .node("keep", keep)
        .entry("find")
        .route("find", after_find, {"read_note": "tool call", "archive": "note read"})
        .edge("read_note", "find")
        .edge("archive", "delete")
        .edge("delete", DONE)
        .edge("keep", DONE)
        .budget(escalate_to="keep", max_visits={"find": 3})
    )
    if gated:
        graph = graph.gate("delete", Gate(
            name="delete_review", role="editor", timeout=timedelta(hours=1), on_reject="keep",
            on_timeout="keep", proposal=lambda s: {"action": "delete_note", "note_id": s.note_id}))
    return graph


def find_script(request: ModelRequest) -> str | ToolCallRequest:
    """The scripted model: look the note up once, then report what it read and which tools
    it was offered (so a test sees the model was shown only this node's tools)."""
    read = [json.loads(m.content) for m in request.messages if m.role == "tool"]
    if not read:
        note_id = request.messages[0].content.rsplit(" ", 1)[-1]
        return ToolCallRequest(name="notes.lookup_note", arguments={"note_id": note_id})
    return json.dumps({"text": read[-1].get("text", ""), "tools": [t.name for t in request.tools]})


def first_state(request: CleanupRequest) -> CleanupState:
    return CleanupState(note_id=request.note_id, messages=[
        Message(role="user", content=f"Clean up note {request.note_id}")])


@agent(machine("notes_cleanup", gated=True).compile(), scripts={"find": find_script})
class NotesCleanupAgent(AgentWorkflow):
    Input = CleanupRequest

    @workflow.run
    async def run(self, request: CleanupRequest) -> CleanupState:
        await self.admit(request)  # the tenant's roster: who may approve the delete
        return await self.drive(first_state(request))


@agent(machine("notes_purge", gated=False).compile(), scripts={"find": find_script})
class NotesPurgeAgent(AgentWorkflow):
    Input = CleanupRequest

    @workflow.run
    async def run(self, request: CleanupRequest) -> CleanupState:
        return await self.drive(first_state(request))


async def tidy(ctx: NodeContext, state: CleanupState) -> dict[str, object]:
    result = await ctx.tool("notes.forget_note", {"note_id": state.note_id})
    return {"outcome": f"forgotten (deletion #{result['deletion']})"}


TIDY = (Graph("notes_tidy", CleanupState).node("tidy", tidy, tools=["notes.forget_note"])
        .entry("tidy").edge("tidy", DONE).compile())


@agent(TIDY)
class NotesTidyAgent(AgentWorkflow):
    Input = CleanupRequest

    @workflow.run
    async def run(self, request: CleanupRequest) -> CleanupState:
        return await self.drive(first_state(request))
