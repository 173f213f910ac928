"""Workflows only the benchmark runs: a Tower agent and the hand-written Temporal
workflow doing the same activities, a naive chat, and a run that parks at a gate."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

from pydantic import BaseModel, Field
from temporalio import workflow

from tower import ADD, DONE, AgentState, Graph, Message, NodeContext
from tower.contract.wire import ModelReply, ModelRequest, ToolCall
from tower.core.gates import Gate
from tower.temporal._context import TOOL_RETRY

with workflow.unsafe.imports_passed_through():
    from activities.tools import TOOLS
from tower.temporal._runtime import AgentWorkflow
from workflows.chat import RESPOND_PROMPT

LOOKUP = {"account_id": "ACC-1001"}
REVIEW_TIMEOUT = timedelta(days=7)  # the parked runs' gate
# Workflow tasks one bench worker runs at once: sized for 2 cores (see worker.build_worker).
WORKFLOW_TASKS = 16


class Steps(BaseModel):
    n: int = Field(10, ge=1, le=1000)


class StepsState(AgentState):
    n: int = 10
    done: Annotated[int, ADD] = 0


async def work(ctx: NodeContext, state: StepsState) -> dict[str, Any]:
    """One activity per step: the same tool call the baseline makes."""
    await ctx.tool(TOOLS["lookup_account"], LOOKUP)
    return {"done": 1}


def more(state: StepsState) -> str:
    return "work" if state.done < state.n else DONE


STEPS = (Graph("bench_steps", StepsState)
         .node("work", work, tools=[TOOLS["lookup_account"]],
               unbounded="the request's n ends it: a benchmark of that many steps")
         .entry("work").route("work", more, ["work", DONE]).compile())


@workflow.defn(name="bench_steps")
class StepsAgent(AgentWorkflow):
    machine = STEPS
    Input = Steps

    @workflow.run
    async def run(self, request: Steps) -> StepsState:
        return await self.drive(StepsState(n=request.n))


@workflow.defn(name="bench_steps_every")
class StepsEveryAgent(StepsAgent):
    """The same agent with the search attributes upserted at every step (the old way)."""

    publish_every_step = True

    @workflow.run
    async def run(self, request: Steps) -> StepsState:
        return await self.drive(StepsState(n=request.n))


@workflow.defn(name="bench_baseline")
class Baseline:
    """What an engineer would write by hand: a loop of the same activity."""

    @workflow.run
    async def run(self, request: Steps) -> int:
        info = workflow.info()
        for i in range(request.n):
            await workflow.execute_activity(
                "lookup_account", ToolCall(tool="lookup_account", arguments=LOOKUP,
                                           idempotency_key=f"{info.workflow_id}/{i}"),
                result_type=dict, start_to_close_timeout=timedelta(seconds=30),
                retry_policy=TOOL_RETRY)
        return request.n


class NaiveMessage(BaseModel):
    text: str


@workflow.defn(name="bench_naive_chat")
class NaiveChat:
    """How chat threads are usually built: the whole conversation in every model call."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.closed = False

    @workflow.run
    async def run(self) -> int:
        await workflow.wait_condition(lambda: self.closed and workflow.all_handlers_finished())
        return len(self.messages)

    # Bare decorator: the update is still named after the method, and temporalio's
    # async overload types execute_update's result (with name=, mypy sees a coroutine).
    @workflow.update
    async def send(self, message: NaiveMessage) -> str:
        self.messages.append(Message(role="user", content=message.text))
        reply: ModelReply = await workflow.execute_activity(
            # The same prompt and tools as Tower's chat: only the messages differ.
            "call_model", ModelRequest(agent="chat", node="respond", system=RESPOND_PROMPT,
                                       tools=[TOOLS["search_docs"].schema()],
                                       messages=list(self.messages)),
            result_type=ModelReply, start_to_close_timeout=timedelta(seconds=60))
        self.messages.append(Message(role="assistant", content=reply.content or ""))
        return reply.content or ""

    # Bare decorator: the update is still named after the method, and temporalio's
    # async overload types execute_update's result (with name=, mypy sees a coroutine).
    @workflow.update
    async def close(self) -> None:
        self.closed = True


class ParkRequest(BaseModel):
    pass


class ParkState(AgentState):
    acted: bool = False


async def act(ctx: NodeContext, state: ParkState) -> dict[str, Any]:
    """Never reached in the bench: the gate before it holds every run."""
    return {"acted": True}


PARK = (
    Graph("bench_parked", ParkState)
    .node("act", act)
    .node("declined", act)
    .entry("act")
    .gate("act", Gate(name="review", role="manager", timeout=REVIEW_TIMEOUT,
                      on_reject="declined", on_timeout="declined"))
    .edge("act", DONE)
    .edge("declined", DONE)
    .compile()
)


@workflow.defn(name="bench_parked")
class ParkedAgent(AgentWorkflow):
    machine = PARK
    Input = ParkRequest

    @workflow.run
    async def run(self, request: ParkRequest) -> ParkState:
        await self.admit(request)  # the bench's trust dir: a roster, unsigned allowed
        return await self.drive(ParkState())


BENCH_WORKFLOWS: list[type] = [StepsAgent, StepsEveryAgent, Baseline, NaiveChat, ParkedAgent]
