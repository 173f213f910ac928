"""chat — a thread that lives for days, at constant cost per turn.

One workflow id per thread. Each user message is an update (``send``) that returns
the reply; its validator refuses empty or oversized messages before they enter the
history. ``listen → respond → (reduce →) listen``, ``listen → DONE`` on ``close``
or after the thread has been idle for ``idle_days``.

Flat history: message content lives in the message store, and so does the window
(the summary and the recent messages); the state holds one ``WindowRef``. Each model
call is a local activity sent that ref and the new message, so the user's text enters
the history once (in the update) and a turn adds the same bytes however long the
thread; the reply's text is recorded once too (in the model call's result: the update
returns its ref, which ``tower.client`` resolves). The ``reduce`` node summarises older
turns and prunes large tool payloads; the run continues-as-new when Temporal suggests it
(or at ``continue_as_new_after`` events).
Threads started before windows keep their refs in ``summary``/``context`` (replayed as
they ran; their first new turn moves them into a window).
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

# Beyond the graph, a thread uses Temporal itself: each message is an update (``send``,
# validated before it enters the history), an idle timer closes it, and a turn waits for
# its reply (workflow.sleep, workflow.wait_condition).
from temporalio import workflow
from temporalio.exceptions import ApplicationError

from activities.scripted import chat as scripted
from activities.tools import helpdesk
from tower import (
    ADD,
    DONE,
    FAILED,
    AgentState,
    AgentWorkflow,
    Graph,
    Message,
    NodeContext,
    agent,
)
from tower import window as windowing  # the context window: policy, ref, reduction
from tower.temporal import StoredReply

MAX_MESSAGE_CHARS = 8000
MAX_TOOL_ROUNDS = 3


class ChatConfig(BaseModel):
    window: windowing.WindowPolicy = Field(default_factory=windowing.WindowPolicy)
    idle_days: float = Field(30.0, gt=0, le=3650)
    continue_as_new_after: int | None = Field(None, ge=40)  # history events


class ChatInput(BaseModel):
    # Unknown fields are refused, not ignored: a start can't smuggle settings in.
    model_config = ConfigDict(extra="forbid")

    config: ChatConfig = Field(default_factory=ChatConfig)


class UserMessage(BaseModel):
    text: str


class ChatReply(StoredReply):
    """The turn's reply: ``reply``, or (recorded once) ``reply_ref`` that
    ``tower.client.update_while_open`` resolves into ``reply``."""

    turn: int
    step: int
    context_messages: int  # refs the next model call will load, the summary included


class Turn(BaseModel):
    id: int
    text: str


class ChatState(AgentState):
    config: ChatConfig = Field(default_factory=ChatConfig)
    window: windowing.WindowRef | None = None  # the summary and the recent messages, in the store
    pending: Turn | None = None
    reply: str = ""
    answered: int = 0  # id of the last turn answered
    turns: Annotated[int, ADD] = 0
    reductions: Annotated[int, ADD] = 0
    closed: str = ""  # why the thread closed


RESPOND_PROMPT = (
    "You are a helpful assistant in a long-running chat. Earlier turns may be given as a "
    "summary. Use search_docs when the user asks about the product documentation.")
REDUCE_PROMPT = (
    "Summarise the conversation so far in at most 120 words, keeping names, numbers, "
    "decisions and open questions. Start with 'Summary:'.")
SUMMARISE = Message(role="user", content="Summarise the conversation above.")


def _thread(ctx: NodeContext) -> ChatAgent:
    # The inbox and the replies belong to the run that hosts the machine, not to the state.
    thread: ChatAgent = ctx.host
    return thread


async def listen(ctx: NodeContext, state: ChatState) -> dict[str, Any]:
    """Wait for the next user message (or close); continue-as-new while idle if due."""
    thread = _thread(ctx)
    thread.publish()
    while True:
        await ctx.wait(lambda: bool(thread.inbox or thread.closing or thread.carry_over_ready()))
        if thread.inbox:
            return {"pending": thread.inbox.pop(0)}
        if thread.closing:
            return {"closed": thread.closing}
        thread.carry_over()  # raises ContinueAsNewError, ending this run


async def respond(ctx: NodeContext, state: ChatState) -> dict[str, Any]:
    """Answer the pending message from the window (the summary and recent turns, one ref
    in the message store) and (maybe) the docs."""
    assert state.pending is not None
    window = state.window
    new = [Message(role="user", content=state.pending.text)]
    text, from_model = "Sorry, I could not finish looking that up.", False
    for _ in range(MAX_TOOL_ROUNDS):
        answer = await ctx.ask_window(new, window)
        window = answer.window
        if not answer.tool_calls:
            text, from_model = answer.text or "", True
            break
        new = [Message(role="tool", name=call.name, content=json.dumps(
            await ctx.tool(call), sort_keys=True))
            for call in answer.tool_calls]
    _thread(ctx).replies[state.pending.id] = (text, from_model)
    return {"window": window, "pending": None, "reply": text, "answered": state.pending.id,
            "turns": 1}


async def reduce(ctx: NodeContext, state: ChatState) -> dict[str, Any]:
    """Summarise the older part of the window; prune large tool payloads in the rest."""
    policy = state.config.window
    answer = await ctx.ask_window([SUMMARISE], state.window, summarise=windowing.Reduction(
        keep_recent=policy.keep_recent, prune_chars=policy.prune_chars))
    return {"window": answer.window, "reductions": 1}


def after_listen(state: ChatState) -> str:
    return DONE if state.closed else "respond"


def after_respond(state: ChatState) -> str:
    stored = state.window
    over = stored is not None and windowing.over_budget(state.config.window, stored.messages,
                                                     stored.tokens)
    return "reduce" if over else "listen"


GRAPH = (
    Graph("chat", ChatState)
    .node("listen", listen, unbounded="each turn waits for the user's next message; an idle "
          "thread closes after idle_days")
    .node("respond", respond, prompt=RESPOND_PROMPT, tools=[helpdesk.search_docs])
    .node("reduce", reduce, prompt=REDUCE_PROMPT)
    .entry("listen")
    .route("listen", after_listen, {"respond": "user message", DONE: "thread closed"})
    .route("respond", after_respond, {"reduce": "context over budget", "listen": "replied"})
    .edge("reduce", "listen")
    .compile()
)


@agent(GRAPH, scripts=scripted.SCRIPTS)
class ChatAgent(AgentWorkflow):
    """A chat thread: one workflow id, one update per user message, days long."""

    Input = ChatInput
    waits_for_messages = True  # `tower run` starts it and leaves: talk with `tower chat`
    task_timeout = timedelta(seconds=3)  # its replies are local calls: a lost one seen fast

    def __init__(self) -> None:
        super().__init__()
        self.inbox: list[Turn] = []
        self.replies: dict[int, tuple[str, bool]] = {}  # turn -> (text, a model's answer)
        self.closing = ""
        self._issued = 0

    if TYPE_CHECKING:  # the run @agent makes, typed for callers of ChatAgent's updates
        async def run(self, request: ChatInput) -> ChatState: ...

    def start(self, request: ChatInput) -> ChatState:
        return ChatState(config=request.config)

    async def run_from(self, state: AgentState, request: ChatInput) -> AgentState:
        final = await self.drive(state)
        self._idle.cancel()
        await workflow.wait_condition(workflow.all_handlers_finished)
        return final

    def on_start(self, state: ChatState) -> None:  # type: ignore[override]
        # The thread's first state, or the one it carried over: its settings and turn count.
        self.continue_as_new_after = state.config.continue_as_new_after
        self._issued = state.answered  # handlers all finished before the last run ended
        self._idle = asyncio.create_task(
            self._close_when_idle(timedelta(days=state.config.idle_days)))

    def carry_over_ready(self) -> bool:
        # Only once every handler finished: a handler cut off by continue-as-new loses its reply.
        return self.carry_over_due() and workflow.all_handlers_finished()

    async def _close_when_idle(self, idle: timedelta) -> None:
        # One timer per run, re-armed only when it fires: no timer events per turn.
        while True:
            seen = self._issued
            await workflow.sleep(idle)
            if self._issued == seen and not self.inbox:
                self.closing = f"idle for {idle}"
                return

    # Bare decorator: the update is still named after the method, and temporalio's
    # async overload types execute_update's result (with name=, mypy sees a coroutine).
    @workflow.update
    async def send(self, message: UserMessage) -> ChatReply:
        # Turn ids continue from the carried state: number them once the run has it.
        await workflow.wait_condition(lambda: self._state is not None)
        self._issued += 1
        turn = Turn(id=self._issued, text=message.text)
        self.inbox.append(turn)
        await workflow.wait_condition(lambda: turn.id in self.replies or self._ended())
        if turn.id not in self.replies:
            raise ApplicationError(f"the thread ended ({self.current.status.value}) before "
                                   f"turn {turn.id} was answered", type="ThreadEnded")
        state: ChatState = self.current  # type: ignore[assignment]
        shown = state.window.messages if state.window else 0
        # A model's reply is in its call's recorded result already: the update returns its
        # ref (StoredReply.of), so a turn records the text once.
        text, from_model = self.replies.pop(turn.id)
        return ChatReply.of(text, from_model=from_model, turn=turn.id, step=state.step,
                            context_messages=shown)

    @send.validator
    def check_send(self, message: UserMessage) -> None:
        # Raising here keeps the message out of the history; the caller gets the reason.
        if not message.text.strip():
            raise ValueError("message is empty")
        if len(message.text) > MAX_MESSAGE_CHARS:
            raise ValueError(f"message has {len(message.text)} characters; "
                             f"the limit is {MAX_MESSAGE_CHARS}")
        if self.closing or self._ended():
            raise ValueError("this thread is closed")

    def _ended(self) -> bool:
        # Updates can arrive in the first activation, before the run has a state.
        return self._state is not None and self._state.node in (DONE, FAILED)

    # Bare decorator: the update is still named after the method, and temporalio's
    # async overload types execute_update's result (with name=, mypy sees a coroutine).
    @workflow.update
    async def close(self) -> str:
        self.closing = self.closing or "closed by the user"
        return self.closing
