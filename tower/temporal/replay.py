"""Replay and time travel, one module for the client, the CLI and ``tower.testing``: load
histories, replay them with a worker's settings (``TowerPlugin``, or a project's own), say
what went wrong in the agent's terms, and give the state after any step.

An interceptor keeps each replayed agent instance and has it keep the state after every
step, so the transition log is read from a history with no server. Each log is checked
against the graph's rules (``tower.core.audit``) and against the moves the original run
published (its AgentStep/AgentNode search attributes), so a change that takes another path
without changing any command is caught too. A run replays alike under any workflow id.
"""

from __future__ import annotations

import functools
import re
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from google.protobuf.message import Message
from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.api.failure.v1 import Failure
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory
from temporalio.converter import DataConverter
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
    FailureError,
    TerminatedError,
)
from temporalio.exceptions import TimeoutError as TemporalTimeout
from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter
from temporalio.worker import (
    ExecuteWorkflowInput,
    Interceptor,
    Replayer,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from tower.contract.failures import Code, TowerError
from tower.core.audit import check_log
from tower.core.engine import Transition
from tower.core.state import AgentState
from tower.temporal._divergence import describe_failure, diverged, recorded_moves
from tower.temporal._machine_run import MachineRun
from tower.temporal.plugin import TowerPlugin, workflow_name


class HistoryError(TowerError):
    """A history file or folder that cannot be read."""

    CODE = Code.BAD_HISTORY


@dataclass
class Replayed:
    """One history replayed against the current code."""

    source: str  # the file, or the run it was fetched from
    workflow_id: str
    workflow_type: str
    log: list[Transition] = field(default_factory=list)
    states: list[AgentState] = field(default_factory=list)  # states[i] is after log[i]
    failure: str | None = None  # why the Replayer failed: non-determinism or a task failure
    problems: list[str] = field(default_factory=list)  # transition-log rules broken

    @property
    def ok(self) -> bool:
        return self.failure is None and not self.problems

    def state_after(self, step: int) -> AgentState:
        for t, state in zip(self.log, self.states, strict=True):
            if t.step == step:
                return state
        steps = [t.step for t in self.log]
        raise HistoryError(f"{self.workflow_id} has no step {step} (steps "
                           f"{steps[0] if steps else '-'}..{steps[-1] if steps else '-'})")


def history_files(*paths: str | Path) -> list[Path]:
    """The history files of ``paths`` (a folder: every ``*.json`` under it, sorted); an empty
    folder is an error, so a misplaced path cannot turn the replay tests into zero tests."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(path.rglob("*.json"))
            if not found:
                raise HistoryError(f"{path}: no *.json history files in this folder")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise HistoryError(f"{path}: no such file or folder")
    return files


def load(paths: Iterable[str | Path]) -> list[tuple[str, WorkflowHistory]]:
    """Read history JSON files (``history_files``), each under the workflow id its file name
    says (``workflow_id_of``: the JSON does not carry it)."""
    loaded = []
    for file in history_files(*paths):
        try:
            history = WorkflowHistory.from_json(workflow_id_of(file), file.read_text())
        except Exception as exc:  # protobuf's parse errors share no useful base class
            raise HistoryError(f"{file}: not a Temporal history in JSON ({exc})") from None
        if not history.events:
            raise HistoryError(f"{file}: the history has no events")
        loaded.append((str(file), history))
    return loaded


_RUN_SUFFIX = re.compile(r"^(.+)@[0-9a-fA-F-]{36}$")


def workflow_id_of(file: Path) -> str:
    """``ID.json`` or ``ID@RUN-ID.json`` -> ID (percent-decoded: ``history_file_name``)."""
    named = _RUN_SUFFIX.match(file.stem)
    return unquote(named.group(1) if named else file.stem)


def history_file_name(run: str, run_id: str | None = None) -> str:
    """The file a run's history is exported to: the id (the starter's choice) percent-encoded
    into one plain name (no ``/``, no ``..``, no leading dot), never outside its folder."""
    name = quote(run, safe="@=+,;-_").replace(".", "%2E")  # no "..", no hidden files
    return f"{name}@{run_id}.json" if run_id else f"{name}.json"


def workflow_type(history: WorkflowHistory) -> str:
    first = history.events[0]
    if first.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
        raise HistoryError(
            f"{history.workflow_id}: the first event is not WorkflowExecutionStarted")
    return first.workflow_execution_started_event_attributes.workflow_type.name


class _Recorder(Interceptor):
    """Keeps the agent instance of the workflow being replayed."""

    def __init__(self) -> None:
        self.instance: MachineRun | None = None

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        recorder = self

        class Keep(WorkflowInboundInterceptor):
            async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
                instance = workflow.instance()
                if isinstance(instance, MachineRun):
                    instance.trace = []
                    recorder.instance = instance
                return await super().execute_workflow(input)

        return Keep


@functools.cache
def _quiet_runtime() -> Runtime:
    # The SDK core logs every failed workflow task as a warning; replay reports them itself.
    quiet = TelemetryFilter(core_level="ERROR", other_level="ERROR")
    return Runtime(telemetry=TelemetryConfig(logging=LoggingConfig(filter=quiet)))


DEFAULT_NAMESPACE = "default"


async def replay(
    histories: Sequence[tuple[str, WorkflowHistory]], *, workflows: Sequence[type],
    namespace: str = DEFAULT_NAMESPACE, plugin: TowerPlugin | None = None,
) -> list[Replayed]:
    """Replay each history against ``workflows`` with ``plugin``'s settings (default:
    ``TowerPlugin()``'s, as a worker's). ``namespace``: the one the runs were recorded in
    (gated runs check it against their tenant; the history does not say it)."""
    recorder = _Recorder()
    classes = list(workflows)
    # Only the agents these histories ran: each one registered costs a sandbox check.
    kinds = {workflow_type(h) for _, h in histories}
    used = [c for c in classes if workflow_name(c) in kinds] or classes
    rep = Replayer(workflows=used, runtime=_quiet_runtime(), namespace=namespace,
                   interceptors=[recorder], plugins=[plugin or TowerPlugin()])
    machines = {workflow_name(w): w.machine for w in classes if hasattr(w, "machine")}
    results: list[Replayed] = []
    async def feed() -> AsyncIterator[WorkflowHistory]:
        for _, history in histories:
            yield history

    async with rep.workflow_replay_iterator(feed()) as replays:
        async for outcome in replays:  # one per history, in order
            source, history = histories[len(results)]
            kind = workflow_type(history)
            done = Replayed(source, history.workflow_id, kind)
            instance, recorder.instance = recorder.instance, None
            if instance is not None:
                done.log, done.states = _completed(history, instance._log, instance.trace)
            if outcome.replay_failure is not None:
                done.failure = describe_failure(history, outcome.replay_failure, done.log)
                done.failure = f"replay of run {done.workflow_id} {done.failure}"
            # The graph the instance ran (a versioned agent may pick one per run).
            machine = getattr(instance, "machine", None) or machines.get(kind)
            if machine is None:
                done.failure = done.failure or f"workflow type {kind!r} is not a Tower agent"
            else:
                done.problems = check_log(machine, done.log, done.states)
                if done.failure is None:  # else the failure says where it left the path
                    done.problems += diverged(recorded_moves(history), done.log)
            results.append(done)
    return results


def _completed(
    history: WorkflowHistory, log: list[Transition], trace: list[AgentState] | None,
) -> tuple[list[Transition], list[AgentState]]:
    """The steps whose workflow task completed in the history (the Replayer also runs a
    last task still in progress, whose moves have not happened)."""
    last_completed = max((e.event_id for e in history.events
                          if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED),
                         default=0)
    keep = sum(1 for t in log if t.event_id < last_completed)
    return list(log[:keep]), list((trace or [])[:keep])


def task_completed_after(history: WorkflowHistory, event_id: int) -> HistoryEvent | None:
    """The WorkflowTaskCompleted event that closed the task a step was recorded in (a
    transition's ``event_id`` is its task's WorkflowTaskStarted event)."""
    return next((e for e in history.events if e.event_id > event_id
                 and e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED), None)


def report(result: Replayed, *, verbose: bool = False) -> str:
    """One history's result as ``tower replay`` prints it (and ``assert_replays`` fails)."""
    last = result.log[-1] if result.log else None
    where = f"{len(result.log)} steps, at {last.target}" if last else "no steps"
    lines = [f"{'ok  ' if result.ok else 'FAIL'}  {result.source}  workflow "
             f"{result.workflow_type} (id {result.workflow_id}): {where}"]
    lines += [f"      {problem}" for problem in filter(None, [result.failure, *result.problems])]
    if verbose:
        lines += [f"      step {t.step:>3}  {t.source} -> {t.target}  ({t.reason})"
                  for t in result.log]
    return "\n".join(lines)


async def assert_replays(
    *paths: str | Path, workflows: Sequence[type], namespace: str = DEFAULT_NAMESPACE,
    plugin: TowerPlugin | None = None,
) -> list[Replayed]:
    """Replay ``paths`` (files or folders) against ``workflows``; AssertionError naming
    every history that fails, as ``tower replay`` reports it (``tower.testing``'s)."""
    results = await replay(load(paths), workflows=workflows, namespace=namespace,
                           plugin=plugin)
    failures = [report(r) for r in results if not r.ok]
    assert not failures, "histories do not replay:\n" + "\n".join(failures)
    return results


# --- time travel: one run's steps and states ------------------------------------------------

async def replay_run(
    source: str, history: WorkflowHistory, *, workflows: Sequence[type],
    namespace: str = DEFAULT_NAMESPACE,
) -> Replayed:
    """One run's transition log and states, or a HistoryError saying why they cannot be
    read: keys or a payload store this process lacks, or code that no longer replays it."""
    await readable(source, history)
    result, = await replay([(source, history)], workflows=workflows, namespace=namespace)
    if result.failure:
        why = await _unopened(p for e in history.events for p in payloads_in(e))
        if why is not None:  # not the code: the payload store this process reads
            raise HistoryError(f"cannot read {source}: {why}")
        raise HistoryError(f"{source} does not replay against the current code, so its "
                           f"steps cannot be read: {result.failure}")
    return result


async def readable(source: str, history: WorkflowHistory) -> None:
    """A HistoryError naming the keys when this process cannot decrypt the history (a
    replay would fail as if the code had changed)."""
    from tower.temporal.codec import ENCODING

    sealed = next((p for e in history.events for p in payloads_in(e)
                   if p.metadata.get("encoding") == ENCODING), None)
    why = await _unopened([sealed] if sealed else [])
    if why is not None:
        raise HistoryError(f"cannot read {source}: {why}")


async def _unopened(payloads: Iterable[Payload]) -> str | None:
    """Why one of ``payloads`` cannot be opened with this process's keys and payload store
    (None: each opens, or fails for a reason that is the replay's to say)."""
    from tower.temporal.codec import CodecError
    from tower.temporal.payloads import PayloadMissing, tower_data_converter

    converter = tower_data_converter()
    for payload in payloads:
        try:
            await converter.decode([payload])
        except Exception as exc:  # noqa: BLE001
            seen: BaseException | None = exc  # the SDK may wrap the driver's error
            while seen is not None and not isinstance(seen, PayloadMissing | CodecError):
                seen = seen.__cause__ or seen.__context__
            if seen is not None:
                return str(seen)
    return None


def payloads_in(message: Message) -> Iterator[Payload]:
    """Every Payload inside a protobuf message (an event and all it holds)."""
    for fd, value in message.ListFields():
        if fd.message_type is None:
            continue
        if fd.message_type.GetOptions().map_entry:
            items = list(value.values())
        elif isinstance(value, Message):
            items = [value]
        else:  # a repeated field
            items = list(value)
        for item in items:
            if isinstance(item, Payload):
                yield item
            elif isinstance(item, Message):
                yield from payloads_in(item)


async def history_end(history: WorkflowHistory, converter: DataConverter | None = None
                      ) -> tuple[str, str] | None:
    """How a recorded run ended when it did not complete: (status, reason) from its close
    event, also for a history file; None when it completed, continued, or is open.
    ``converter`` opens the failure (default: Tower's)."""
    last = history.events[-1] if history.events else None
    if last is None:
        return None
    failure = await history_failure(history, converter)
    if failure is not None:
        return "FAILED", failure if isinstance(failure, str) else reason_of(failure)
    if last.HasField("workflow_execution_terminated_event_attributes"):
        why = last.workflow_execution_terminated_event_attributes.reason
        return "TERMINATED", f"terminated: {why}" if why else "terminated"
    if last.HasField("workflow_execution_timed_out_event_attributes"):
        return "TIMED_OUT", "timed out: the run's execution timeout passed"
    if last.HasField("workflow_execution_canceled_event_attributes"):
        return "CANCELED", "canceled"
    return None


async def history_failure(history: WorkflowHistory, converter: DataConverter | None = None
                          ) -> BaseException | str | None:
    """A recorded run's failure from its close event, opened, or its text when it cannot
    be; None unless it failed."""
    last = history.events[-1] if history.events else None
    if last is None or not last.HasField("workflow_execution_failed_event_attributes"):
        return None
    failure = Failure()
    failure.CopyFrom(last.workflow_execution_failed_event_attributes.failure)
    if converter is None:
        from tower.temporal.payloads import tower_data_converter

        converter = tower_data_converter()
    try:
        return await converter.decode_failure(failure)
    except Exception:  # noqa: BLE001  (a failure this process cannot open: its text)
        return failure.message


def reason_of(error: BaseException) -> str:
    """One line from a failure chain: the innermost cause's type and message, and the
    activity or child it came from."""
    where = ""
    while True:
        if isinstance(error, ActivityError):
            where = f" (activity {error.activity_type})"
        elif isinstance(error, ChildWorkflowError):
            where = f" (child run {error.workflow_id})"
        cause = error.__cause__
        if cause is None or not isinstance(error, ActivityError | ChildWorkflowError):
            break
        error = cause
    return _said(error) + where


def _said(error: BaseException) -> str:
    if isinstance(error, ApplicationError):
        return f"{error.type}: {error.message}" if error.type else error.message
    if isinstance(error, TerminatedError):
        return f"terminated: {error.message}" if error.message else "terminated"
    if isinstance(error, TemporalTimeout):
        return f"timed out: {error.message}"
    if isinstance(error, CancelledError):
        return f"canceled: {error.message}" if error.message else "canceled"
    if isinstance(error, FailureError):
        return error.message
    return str(error) or type(error).__name__
