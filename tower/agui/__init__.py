"""An AG-UI endpoint for Tower agents (docs/agui.md): ``app(client, agents=...)`` is an ASGI
app a team mounts in its own; ``tower inbox`` serves it at ``/agui`` for signed-in users.

One POST per AG-UI run, answered with the protocol's own events (``ag-ui-protocol``'s
types and encoder) over server-sent events. The AG-UI thread is the workflow id and
nothing is kept between requests: any replica serves any request, reading what the run
recorded (its state and history) and its live stream (tower.client.stream). Each frame's
SSE ``id`` is the stream offset it came from; a client that lost the connection sends it
back (``Last-Event-ID``) and the stream goes on from there, nothing repeated.

A run that parks at a gate finishes with an ``interrupt`` outcome: the request as the
library's one renderer shows it, its digest and a JSON Schema of the allowed edits. The
next AG-UI run answers it with a resume entry: signed by the endpoint for a signed-in
approver (as the inbox's issuer signs), or carrying the client's own JWS in its
``metadata.token``. Either way the run's gate judges it as any decision; a refusal ends
the AG-UI run with RUN_ERROR and the refusal's code, and nothing moves.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import jsonpatch
from ag_ui.core import (
    AssistantMessage,
    BaseEvent,
    FunctionCall,
    Interrupt,
    MessagesSnapshotEvent,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    SystemMessage,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCall,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    ToolMessage,
    UserMessage,
)
from ag_ui.encoder import EventEncoder
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowQueryFailedError
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from tower.activities.streams import StreamStore, open_streams
from tower.client._decisions import send_decision
from tower.client._pending import Deployment, NotGenuine, pending_of
from tower.client._runs import start_run
from tower.client._stream import stream
from tower.client.connection import TASK_QUEUE
from tower.client.errors import DecisionRefused, RunNotFound
from tower.contract.decisions import (
    GateRecord,
    Verdict,
    canonical_proposal,
    proposal_digest,
    same_request,
)
from tower.contract.failures import Code
from tower.contract.messages import Status
from tower.contract.pending import PendingView
from tower.contract.render import render_proposal
from tower.contract.stream import (
    DELTA,
    DISCARD,
    GATE_OPENED,
    MODEL_FINISHED,
    MODEL_STARTED,
    RUN_END,
    TOOL_FINISHED,
    TRANSITION,
)
from tower.core.graph import TERMINALS
from tower.core.signing import decision_claims, sign

ClientSource = Client | Callable[[], Awaitable[Client]]
# Who sent the request: (name, roles), or None when not signed in.
Who = Callable[[Request], tuple[str, tuple[str, ...]] | None]
LIFETIME_SECONDS = 300  # a decision the endpoint signs is sent at once
WAIT_SECONDS = 30.0  # for a worker's first answer, or a parked run's published request
JSON_TYPES = {"int": "integer", "float": "number", "str": "string", "bool": "boolean"}


def app(client: ClientSource, *, agents: Mapping[str, Any] | Callable[[], Mapping[str, Any]],
        task_queue: str = TASK_QUEUE, issuer: Mapping[str, Any] | None = None,
        who: Who | None = None, streams: StreamStore | str | None = None,
        deployment: Deployment | None = None) -> Starlette:
    """The AG-UI endpoint: ``POST /{agent}`` (a name of ``agents``: ``{name: agent class}``,
    or a callable giving them) with a RunAgentInput; a new thread starts a run on
    ``task_queue``. ``client`` is a Temporal client, or an async callable making one (on
    first use). ``who`` names the request's signed-in user and roles; with ``issuer`` (a
    private JWK the tenant's roster lets vouch for roles) the endpoint signs that user's
    answers. ``streams``: the runs' stream store (default: the settings',
    ``TOWER_STREAMS``). ``deployment``: interrupts only for requests its worker attested."""
    made: list[Client] = []

    async def connected() -> Client:
        if not made:
            made.append(client if isinstance(client, Client) else await client())
        return made[0]

    async def run(request: Request) -> Response:
        user = who(request) if who is not None else None
        if who is not None and user is None:
            return JSONResponse({"error": "not signed in"}, 401)
        agent = (agents if isinstance(agents, Mapping) else agents()).get(
            request.path_params["agent"])
        if agent is None:
            return JSONResponse({"error": f"no agent {request.path_params['agent']!r}"}, 404)
        if "json" not in request.headers.get("content-type", ""):
            return JSONResponse({"error": "send the RunAgentInput as application/json"}, 415)
        try:
            given = RunAgentInput.model_validate_json(await request.body())
        except ValidationError as exc:
            return JSONResponse({"error": f"not a RunAgentInput: {exc.errors()[0]['msg']} at "
                                 f"{'.'.join(map(str, exc.errors()[0]['loc']))}"}, 422)
        c = await connected()
        if streams is None or isinstance(streams, str):  # one per request: any thread
            store, own = open_streams(streams, create=False), True
        else:
            store, own = streams, False
        run = Run(c, agent, given, store, user, issuer, deployment, own=own)
        try:
            refused = await run.open(task_queue, request.headers.get("last-event-id"))
        except BaseException:
            run.close()
            raise
        if refused is not None:
            run.close()
            return refused
        return StreamingResponse(run.events(), media_type=EventEncoder().get_content_type(),
                                 headers={"Cache-Control": "no-store"})

    return Starlette(routes=[Route("/{agent}", run, methods=["POST"])])


class Run:
    """One AG-UI run over one Tower run (the thread): its events, from ``after``."""

    def __init__(self, client: Client, agent: Any, given: RunAgentInput, store: StreamStore,
                 user: tuple[str, tuple[str, ...]] | None, issuer: Mapping[str, Any] | None,
                 deployment: Deployment | None, own: bool = True) -> None:
        self.own = own
        self.client, self.agent, self.given, self.store = client, agent, given, store
        self.user, self.issuer, self.deployment = user, issuer, deployment
        self.thread, self.handle = given.thread_id, client.get_workflow_handle(given.thread_id)
        self.after, self.seen_history, self.resuming, self.started = 0, 0, False, False
        self.continued = False
        self.state: dict[str, Any] = {}
        self.step: str | None = None
        self.text: str | None = None  # the message open (an attempt that has said words)
        self.attempt = ""

    def close(self) -> None:
        if self.own:
            self.store.close()

    async def open(self, task_queue: str, last_event_id: str | None) -> Response | None:
        """Start the thread's run, or find it; a Response when the request goes no further."""
        try:
            described = await self.handle.describe()
            status = described.status
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
            status = None  # a new thread
        if status is not None and described.workflow_type != self.agent.machine.name:
            return JSONResponse({"error": f"no thread {self.thread!r}"}, 404)  # another agent's
        if status is None:
            if self.given.resume:
                return JSONResponse({"error": f"no thread {self.thread!r} to resume"}, 404)
            try:
                request = self.agent.Input.model_validate(self.input())
            except ValidationError as exc:
                return JSONResponse({"error": f"the agent's input: {exc.errors()[0]['msg']} "
                                     f"at {'.'.join(map(str, exc.errors()[0]['loc']))}"}, 422)
            try:
                await start_run(self.client, self.agent, request, id=self.thread,
                                task_queue=task_queue)
                return None
            except WorkflowAlreadyStartedError:  # another request started it meanwhile
                pass
        roles = set(self.user[1]) if self.user else None
        gate_roles = {gate.role for gate in self.agent.machine.gates.values()}
        if roles is not None and not roles & gate_roles:
            # As in the inbox: a run the user may not decide does not exist for them.
            return JSONResponse({"error": f"no thread {self.thread!r}"}, 404)
        self.started = True
        position = last_event_id.split(":", 3) if last_event_id else []
        if len(position) == 4 and position[0].isdigit() and position[1].isdigit():
            # A dropped stream, taken up where it was: its answer was sent already.
            self.continued, self.after, self.seen_history = True, int(position[0]), int(
                position[1])
            self.step, self.text = position[2] or None, position[3] or None
            self.attempt = self.text or ""
            return None
        self.resuming = bool(self.given.resume)
        self.after = self.store.last(stream_of(self.client, self.thread))
        self.seen_history = await self.history_length()
        return None

    def input(self) -> Any:
        forwarded = self.given.forwarded_props
        if isinstance(forwarded, dict) and "input" in forwarded:
            return forwarded["input"]
        users = [m for m in self.given.messages if m.role == "user"]
        content = users[-1].content if users else ""
        return {"message": content if isinstance(content, str) else
                "".join(getattr(p, "text", "") for p in content)}

    async def events(self) -> AsyncIterator[str]:
        encoder, ended = EventEncoder(), False
        try:
            async for offset, event in self.produce():
                event.timestamp = int(time.time() * 1000)
                ended = isinstance(event, (RunFinishedEvent, RunErrorEvent))
                frame = encoder.encode(event)
                # Where a reader that lost the connection goes on from (Last-Event-ID).
                yield (f"id: {offset}:{self.seen_history}:{self.step or ''}:{self.text or ''}"
                       f"\n{frame}") if offset else frame
        except Exception as exc:  # the run still ends, saying why
            if not ended:
                yield encoder.encode(RunErrorEvent(message=f"{type(exc).__name__}: {exc}",
                                                   code="endpoint_error"))
        finally:
            self.close()

    async def produce(self) -> AsyncIterator[tuple[int, BaseEvent]]:
        if not self.continued:
            yield 0, RunStartedEvent(thread_id=self.thread, run_id=self.given.run_id,
                                     input=self.given)
        if self.resuming:
            refused = await self.answer()
            if refused is not None:
                yield 0, RunErrorEvent(message=refused[1], code=refused[0])
                return
        self.state = await self.read_state()
        yield 0, StateSnapshotEvent(snapshot=self.state)
        parked = (self.started and not self.resuming
                  and self.state.get("status") == Status.AWAITING_APPROVAL)
        if parked and (not self.continued or self.store.last(
                stream_of(self.client, self.thread)) <= self.after):
            async for ended in self.finish(interrupted=True):
                yield ended
            return
        end: str | None = None
        async for event in stream(self.client, self.thread, after=self.after,
                                  store=self.store):
            group = await self.translate(event)
            for n, out in enumerate(group):  # the last of them names where to go on from
                yield event.offset if n == len(group) - 1 else 0, out
            if event.kind == GATE_OPENED:
                end = "interrupt"
                break
            if event.kind == RUN_END:
                end = str(event.data.get("status"))
                break
        if end is None:  # closed without its end event (terminated, timed out)
            info = await self.handle.describe()
            done = info.status == WorkflowExecutionStatus.COMPLETED
            end = Status.DONE if done else f"the run {info.status.name if info.status else ''}"
        if end != Status.DONE and end != "interrupt":
            async for ended in self.close_open():
                yield ended
            errors = (await self.read_state()).get("errors") or [end]
            yield 0, RunErrorEvent(message=str(errors[-1]), code="run_failed")
            return
        async for ended in self.finish(interrupted=end == "interrupt"):
            yield ended

    async def translate(self, event: Any) -> list[BaseEvent]:
        """The AG-UI events of one stream event."""
        out: list[BaseEvent] = []
        kind, data = event.kind, event.data
        attempt = f"{self.thread}/{data.get('attempt', '')}"
        if kind == MODEL_STARTED:
            out += self.end_text()
            self.attempt = attempt
        elif kind == DELTA and attempt == self.attempt and data.get("text"):
            if self.text != attempt:  # a message opens with its first words
                self.text = attempt
                out.append(TextMessageStartEvent(message_id=attempt, role="assistant"))
            out.append(TextMessageContentEvent(message_id=attempt, delta=str(data["text"])))
        elif kind in (MODEL_FINISHED, DISCARD) and attempt == self.text:
            out += self.end_text()
        elif kind == TOOL_FINISHED:
            out += await self.tool_calls()
        elif kind == TRANSITION:
            out += self.end_text()
            if self.step is not None:
                out.append(StepFinishedEvent(step_name=self.step))
                self.step = None
            target = str(data.get("target", ""))
            out += await self.state_delta()
            if target and target not in TERMINALS:
                self.step = target
                out.append(StepStartedEvent(step_name=target))
        return out

    def end_text(self) -> list[BaseEvent]:
        if self.text is None:
            return []
        ended, self.text = self.text, None
        return [TextMessageEndEvent(message_id=ended)]

    async def close_open(self) -> AsyncIterator[tuple[int, BaseEvent]]:
        for event in self.end_text():
            yield 0, event
        if self.step is not None:
            yield 0, StepFinishedEvent(step_name=self.step)
            self.step = None

    async def state_delta(self) -> list[BaseEvent]:
        now = await self.read_state()
        patch = jsonpatch.make_patch(self.state, now).patch
        self.state = now
        return [StateDeltaEvent.model_validate({"delta": patch})] if patch else []

    async def finish(self, interrupted: bool) -> AsyncIterator[tuple[int, BaseEvent]]:
        async for out in self.close_open():
            yield out
        for event in await self.tool_calls():
            yield 0, event
        for event in await self.state_delta():
            yield 0, event
        yield 0, MessagesSnapshotEvent(messages=await self.messages())
        if not interrupted:
            yield 0, RunFinishedEvent(thread_id=self.thread, run_id=self.given.run_id,
                                      outcome=RunFinishedSuccessOutcome(),
                                      result={"reply": self.state.get("reply", "")})
            return
        try:
            interrupt = await self.interrupt()
        except (NotGenuine, TimeoutError) as exc:
            yield 0, RunErrorEvent(message=f"the run's request is not shown: {exc}",
                                   code="not_genuine")
            return
        yield 0, RunFinishedEvent(thread_id=self.thread, run_id=self.given.run_id,
                                  outcome=RunFinishedInterruptOutcome(interrupts=[interrupt]))

    async def interrupt(self) -> Interrupt:
        """The open request as an AG-UI interrupt, once its worker published (and, with a
        deployment, attested) it and the run's own query shows the same request."""
        async with asyncio.timeout(WAIT_SECONDS):
            while True:
                _, view = await pending_of(self.client, self.thread, self.deployment)
                record = await self.pending() if view is not None else None
                if view is not None and record is not None and same_request(record, view):
                    break
                await asyncio.sleep(0.2)
        shown, digest = canonical_proposal(record), proposal_digest(record)
        rendered = render_proposal(shown)
        return Interrupt(
            id=f"{record.run_id}/{record.step}/{record.gate}/{digest}", reason="approval",
            message=rendered.text(), expires_at=record.expires_at.isoformat(),
            response_schema=answer_schema(view),
            metadata={"tower": {
                "gate": record.gate, "node": record.node, "role": record.role,
                "step": record.step, "run_id": record.run_id, "digest": digest,
                "proposal": shown, "rendered": [
                    {"name": f.name, "text": f.text, "note": f.note} for f in rendered.fields],
                "hidden": rendered.hidden}})

    async def pending(self) -> GateRecord | None:
        approvals: dict[str, Any] = await self.handle.query("approvals", result_type=dict)
        raw = approvals.get("pending")
        return GateRecord.model_validate(raw) if raw else None

    async def answer(self) -> tuple[str, str] | None:
        """Send the resume entry's decision; (code, reason) when it is refused."""
        entries = self.given.resume or []
        if len(entries) != 1:
            return Code.MALFORMED, "send one resume entry: the run has one request"
        entry = entries[0]
        token = (entry.metadata or {}).get("token")
        if isinstance(token, str):
            message = {"token": token}
        else:
            signed = await self.sign(entry)
            if isinstance(signed, tuple):
                return signed
            message = signed
        try:
            await send_decision(self.client, self.thread, message)
        except DecisionRefused as exc:
            return str(exc.code or Code.MALFORMED), exc.reason
        except (RunNotFound, RPCError) as exc:
            if isinstance(exc, RPCError) and exc.status != RPCStatusCode.NOT_FOUND:
                raise
            # The run closed: no request of it is open any more.
            return Code.NOT_PENDING, f"run {self.thread!r} has no open request"
        return None

    async def sign(self, entry: Any) -> dict[str, Any] | tuple[str, str]:
        """The signed-in user's answer, signed under the endpoint's issuer key for the
        request the interrupt named (run id, step, gate, digest): the gate judges it."""
        if self.issuer is None or self.user is None:
            return (Code.MALFORMED, "no token in the resume entry's metadata, and "
                    "this endpoint signs for no one")
        try:
            run_id, step, gate, digest = entry.interrupt_id.split("/", 3)
            answer = entry.payload if isinstance(entry.payload, dict) else {}
            verdict = (Verdict.REJECT if entry.status == "cancelled"
                       else Verdict(answer.get("verdict", "approve")))
            record = await self.pending()
            role = record.role if record is not None else next(
                g.role for g in self.agent.machine.gates.values() if g.name == gate)
            if role not in self.user[1]:
                return Code.NOT_AUTHORIZED, f"{self.user[0]} does not hold role {role}"
            claims = decision_claims(
                tenant=self.client.namespace, run=self.thread, run_id=run_id, gate=gate,
                request=int(step), proposal=digest, verdict=verdict.value, sub=self.user[0],
                role=role, edits=answer.get("edits") or {}, note=str(answer.get("note", "")),
                jti=f"agui-{uuid.uuid4().hex[:16]}", lifetime=LIFETIME_SECONDS,
                now=time.time())
        except (ValueError, StopIteration, ValidationError, TypeError) as exc:
            return Code.MALFORMED, f"not an answer to a Tower interrupt: {exc}"
        return {"token": sign(claims, dict(self.issuer))}

    async def read_state(self) -> dict[str, Any]:
        """The run's state now (its ``state`` query), waiting for a worker's first answer."""
        async with asyncio.timeout(WAIT_SECONDS):
            while True:
                try:
                    state: dict[str, Any] = await self.handle.query("state", result_type=dict)
                    if state:  # empty until the run's first task made it
                        return json.loads(json.dumps(state, default=str))
                except (RPCError, WorkflowQueryFailedError):  # no worker yet, or ahead of it
                    pass
                await asyncio.sleep(0.2)

    async def history_length(self) -> int:
        return len((await self.handle.fetch_history()).events)

    async def tool_calls(self) -> list[BaseEvent]:
        """The tool calls the history completed since this AG-UI run's last look: each with
        its arguments and result."""
        out: list[BaseEvent] = []
        calls = await self.history_calls()
        for call_id, name, arguments, result, at in calls:
            if at <= self.seen_history:
                continue
            out += [ToolCallStartEvent(tool_call_id=call_id, tool_call_name=name),
                    ToolCallArgsEvent(tool_call_id=call_id, delta=arguments),
                    ToolCallEndEvent(tool_call_id=call_id),
                    ToolCallResultEvent(message_id=f"{call_id}-result", tool_call_id=call_id,
                                        content=result)]
            self.seen_history = max(self.seen_history, at)
        return out

    async def history_calls(self) -> list[tuple[str, str, str, str, int]]:
        """Every tool call of the run's history that completed: (id, tool, arguments as
        JSON, result as JSON, the completion's event id)."""
        history = await self.handle.fetch_history()
        converter = self.client.data_converter
        scheduled: dict[int, tuple[str, str]] = {}
        calls = []
        for e in history.events:
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                a = e.activity_task_scheduled_event_attributes
                try:
                    (given,) = await converter.decode(a.input.payloads, [dict])
                except Exception:
                    continue
                if (isinstance(given, dict) and given.get("tool") == a.activity_type.name
                        and "idempotency_key" in given and not given.get("reconcile")):
                    scheduled[e.event_id] = (a.activity_type.name, json.dumps(
                        given.get("arguments", {}), sort_keys=True))
            elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                a2 = e.activity_task_completed_event_attributes
                if a2.scheduled_event_id in scheduled:
                    name, arguments = scheduled[a2.scheduled_event_id]
                    (result,) = await converter.decode(a2.result.payloads, [dict])
                    calls.append((f"{self.thread}/call-{a2.scheduled_event_id}", name,
                                  arguments, json.dumps(result, sort_keys=True), e.event_id))
        return calls

    async def messages(self) -> list[Any]:
        """The run's messages (its state's), as AG-UI messages: a tool's result follows the
        assistant's call it answers (matched by tool, in order, from the history)."""
        calls = await self.history_calls()
        out: list[Any] = []
        for n, m in enumerate(self.state.get("messages", [])):
            role, content, mid = m.get("role"), str(m.get("content", "")), f"{self.thread}/m{n}"
            if role == "user":
                out.append(UserMessage(id=mid, content=content))
            elif role == "system":
                out.append(SystemMessage(id=mid, content=content))
            elif role == "assistant":
                out.append(AssistantMessage(id=mid, content=content))
            elif role == "tool":
                found = next((c for c in calls if c[1] == m.get("name")), None)
                if found is not None:
                    calls.remove(found)
                call_id = found[0] if found else f"{mid}-call"
                out.append(AssistantMessage(id=f"{mid}-call", tool_calls=[ToolCall(
                    id=call_id, function=FunctionCall(name=str(m.get("name")),
                                                      arguments=found[2] if found else "{}"))]))
                out.append(ToolMessage(id=mid, content=content, tool_call_id=call_id))
        return out


def answer_schema(view: PendingView) -> dict[str, Any]:
    """What a resume entry's payload may hold: a verdict, a note, the allowed edits within
    their limits (the gate checks them again)."""
    edits: dict[str, Any] = {}
    for f in view.fields:
        field: dict[str, Any] = {"type": JSON_TYPES[f.type], "default": f.value}
        if f.limit.min is not None:
            field["minimum"] = f.limit.min
        if f.limit.max is not None:
            field["maximum"] = f.limit.max
        if f.limit.rule:
            field["description"] = f.limit.rule
        edits[f.name] = field
    return {"type": "object", "additionalProperties": False, "required": ["verdict"],
            "properties": {
                "verdict": {"enum": [v.value for v in Verdict]},
                "note": {"type": "string", "maxLength": 1000},
                "edits": {"type": "object", "additionalProperties": False,
                          "properties": edits}}}


def stream_of(client: Client, thread: str) -> str:
    from tower.contract.stream import stream_name

    return stream_name(client.namespace, thread)

