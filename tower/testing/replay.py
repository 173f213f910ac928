"""Replay recorded histories against the current code and read back every step.

The SDK's Replayer runs the agents with ``TowerPlugin``, which gives it a Tower worker's
sandbox, converter and failure types (a project with its own passes ``plugin=``), so a
history that replays here replays on that worker.
A workflow interceptor keeps a reference to each replayed agent instance and
asks it to keep the state after every step; that is how the transition log and
the state at any step are read from a history with no server and no query.
Each replayed log is then checked twice: against the rules of the agent's
graph (``tower.core.audit``) and against the moves the original run
recorded in its history (the AgentStep/AgentNode search-attribute upserts), so a
code change that takes a different path without changing any command is caught
as well as one Temporal itself calls non-deterministic.
"""

from __future__ import annotations

import functools
import re
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.converter import DataConverter, decode_typed_search_attributes
from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter
from temporalio.worker import (
    ExecuteWorkflowInput,
    Interceptor,
    Replayer,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowRunner,
)

from tower.contract import search
from tower.core.audit import check_log
from tower.core.state import AgentState
from tower.core.transition import Transition
from tower.temporal import _names
from tower.temporal._machine_run import MachineRun
from tower.temporal.plugin import TowerPlugin
from tower.testing._replay_report import describe_failure, diverged


class HistoryError(Exception):
    """A history file or folder that cannot be read."""


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


def load(paths: Iterable[str | Path]) -> list[tuple[str, WorkflowHistory]]:
    """Read history JSON files; a folder means every ``*.json`` under it, sorted.

    The workflow id is the file's name without ``.json`` (the JSON that the Web UI
    and ``temporal workflow show --output json`` produce does not carry it), and
    without an ``@RUN-ID`` suffix, which tells apart several runs of one workflow.
    """
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
    loaded = []
    for file in files:
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
    """``ID.json`` or ``ID@RUN-ID.json`` -> ID, the id reports name (a run replays alike
    under any id). ``history_file_name`` percent-encodes an id's unsafe characters; this
    decodes them."""
    named = _RUN_SUFFIX.match(file.stem)
    return unquote(named.group(1) if named else file.stem)


def history_file_name(run: str, run_id: str | None = None) -> str:
    """The file a run's history is exported to: the run id (chosen by whoever started the
    run) percent-encoded so that it is one plain file name — no ``/``, no ``..`` path, no
    leading dot — and can never point outside the folder it is written to."""
    name = quote(run, safe="@=+,;-_").replace(".", "%2E")  # no "..", no hidden files
    return f"{name}@{run_id}.json" if run_id else f"{name}.json"


def workflow_type(history: WorkflowHistory) -> str:
    first = history.events[0]
    if first.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
        raise HistoryError(
            f"{history.workflow_id}: the first event is not WorkflowExecutionStarted")
    return first.workflow_execution_started_event_attributes.workflow_type.name


def recorded_moves(history: WorkflowHistory) -> list[tuple[int, str]]:
    """(step, node) each time the original run published where it stood.

    The runtime upserts only the search attributes that changed, and not at every
    step, so the attributes are accumulated event by event as the server does.
    """
    moves: list[tuple[int, str]] = []
    step: int | None = None
    node: str | None = None
    for event in history.events:
        if event.event_type != EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            continue
        attrs = decode_typed_search_attributes(
            event.upsert_workflow_search_attributes_event_attributes.search_attributes)
        new_step, new_node = attrs.get(search.AGENT_STEP), attrs.get(search.AGENT_NODE)
        step = step if new_step is None else new_step
        node = node if new_node is None else new_node
        if (new_step is not None or new_node is not None) and step is not None and node:
            moves.append((step, node))
    return moves


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


def replayer(
    workflows: Sequence[type], interceptors: Sequence[Interceptor] = (), *,
    namespace: str = DEFAULT_NAMESPACE, runner: WorkflowRunner | None = None,
    data_converter: DataConverter | None = None, plugin: TowerPlugin | None = None,
) -> Replayer:
    """A Replayer for ``workflows`` with a worker's sandbox, converter and failure types:
    ``plugin``'s, by default ``TowerPlugin()``'s (the converter from the environment, as
    a worker's: codec, payload store), as a worker connected with it has them.

    ``namespace`` must be the one the runs were recorded in: workflow code may read it
    (gated runs check it against their tenant), and the history does not say it.
    ``data_converter`` replaces the plugin's converter; ``runner``'s pass-through modules
    are added to Tower's sandbox.
    """
    options: dict[str, Any] = {"workflow_runner": runner} if runner is not None else {}
    if plugin is None:
        plugin = TowerPlugin(data_converter=data_converter)
    elif data_converter is not None:
        raise ValueError("give the converter to the plugin, not beside it")
    return Replayer(
        workflows=list(workflows), runtime=_quiet_runtime(), namespace=namespace,
        interceptors=list(interceptors), plugins=[plugin], **options)


async def replay(
    histories: Sequence[tuple[str, WorkflowHistory]], *, workflows: Sequence[type],
    namespace: str = DEFAULT_NAMESPACE, runner: WorkflowRunner | None = None,
    data_converter: DataConverter | None = None, plugin: TowerPlugin | None = None,
) -> list[Replayed]:
    """Replay each history against ``workflows`` (the project's agents)."""
    recorder = _Recorder()
    classes = list(workflows)
    # Only the agents these histories ran: each one registered costs a sandbox check.
    kinds = {workflow_type(h) for _, h in histories}
    used = [c for c in classes if workflow_name(c) in kinds] or classes
    rep = replayer(used, [recorder], namespace=namespace, runner=runner,
                   data_converter=data_converter, plugin=plugin)
    machines = {workflow_name(w): w.machine for w in classes if hasattr(w, "machine")}
    results: list[Replayed] = []
    async def feed() -> AsyncIterator[WorkflowHistory]:
        for _, history in histories:
            yield history

    async with rep.workflow_replay_iterator(feed()) as replays:
        index = 0
        async for outcome in replays:
            source, history = histories[index]
            index += 1
            kind = workflow_type(history)
            done = Replayed(source, history.workflow_id, kind)
            instance, recorder.instance = recorder.instance, None
            if instance is not None:
                done.log, done.states = _completed(history, instance._log, instance.trace)
            if outcome.replay_failure is not None:
                done.failure = describe_failure(history, outcome.replay_failure, done.log)
            # A versioned agent may pick its graph per run (workflow.patched): check the log
            # against the graph the instance ran, not the class's current one.
            machine = getattr(instance, "machine", None) or machines.get(kind)
            if machine is None:
                done.failure = done.failure or f"workflow type {kind!r} is not a Tower agent"
            else:
                done.problems = check_log(machine, done.log, done.states)
                done.problems += diverged(recorded_moves(history), done.log)
            results.append(done)
    return results


def _completed(
    history: WorkflowHistory, log: list[Transition], trace: list[AgentState] | None,
) -> tuple[list[Transition], list[AgentState]]:
    """The steps whose workflow task completed in the history. A history that ends on a
    task still in progress (scheduled or started) makes the Replayer run that task too;
    its moves have not happened yet, so they are left out."""
    last_completed = max((e.event_id for e in history.events
                          if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED),
                         default=0)
    keep = sum(1 for t in log if t.event_id < last_completed)
    return list(log[:keep]), list((trace or [])[:keep])


def workflow_name(cls: type) -> str:
    return _names.workflow_name(cls) or cls.__name__


def history_files(*folders: str | Path) -> list[Path]:
    """Every ``*.json`` history under ``folders``, sorted; an empty folder is an error,
    so a misplaced path cannot turn the replay tests into zero tests."""
    files: list[Path] = []
    for folder in folders:
        found = sorted(Path(folder).rglob("*.json"))
        if not found:
            raise FileNotFoundError(f"no *.json histories under {folder}")
        files += found
    return files


async def assert_replays(
    *paths: str | Path, workflows: Sequence[type], namespace: str = DEFAULT_NAMESPACE,
    runner: WorkflowRunner | None = None, data_converter: DataConverter | None = None,
    plugin: TowerPlugin | None = None,
) -> list[Replayed]:
    """Replay ``paths`` (files or folders) against ``workflows``; AssertionError naming
    every history that fails: non-deterministic against the current code (named by
    workflow, event and cause), or a transition log that breaks a rule (steps not
    strictly increasing, an undeclared move, DONE or FAILED left, a path other than the
    one the original run recorded)."""
    results = await replay(load(paths), workflows=workflows, namespace=namespace,
                           runner=runner, data_converter=data_converter, plugin=plugin)
    failures = []
    for r in results:
        where = f"{r.source} (workflow {r.workflow_type}, id {r.workflow_id})"
        if r.failure:
            failures.append(f"{where}: replay failed {r.failure}")
        failures += [f"{where}: {p}" for p in r.problems]
    assert not failures, "histories do not replay:\n" + "\n".join(failures)
    return results
