"""``TowerPlugin``: every setting a Tower client, worker and replayer needs, in one place.

    client = await Client.connect("localhost:7233", plugins=[TowerPlugin()])
    worker = Worker(client, task_queue="tower", workflows=[MyAgent])
    replayer = Replayer(workflows=[MyAgent], plugins=[TowerPlugin()])

A client with it writes and reads Tower's payloads (``tower.temporal.payloads``), and loads
no more of Tower's runtime. A worker made from that client and a replayer given it also get
the same settings by construction: the converter guarded against inputs it cannot open, the
sandbox with the engine and the project's packages passed through, Tower's failure types,
tracing when a replay-safe tracer provider is installed, and sync activities on threads.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import ValidationError
from temporalio.client import Client, ClientConfig, ScheduleActionStartWorkflow
from temporalio.client import Interceptor as ClientInterceptor
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.converter import DataConverter, DefaultFailureConverter, DefaultPayloadConverter
from temporalio.plugin import SimplePlugin
from temporalio.worker import Interceptor as WorkerInterceptor
from temporalio.worker import ReplayerConfig, Worker, WorkerConfig, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from tower.activities.stores import StoreSettings
from tower.contract.failures import Code, IllegalTransition, InvalidGraph, NodeFailed, TowerError
from tower.core.events import EventRejected
from tower.core.policy import PolicyRefused
from tower.core.tools import ToolSpec, register_external
from tower.temporal._process import code_version, frozen_heap
from tower.temporal._sandbox import project_packages, sandbox_runner
from tower.temporal._task_time import QueryAskedAgain
from tower.temporal.payloads import (
    TowerDataConverter,
    UnopenablePayload,
    driver_for,
    guarded,
    tower_data_converter,
)
from tower.temporal.telemetry import replay_safe

if TYPE_CHECKING:
    from tower.activities.own import WorkerSettings

__all__ = ["WORKFLOW_FAILURE_TYPES", "TowerPlugin", "WorkerMisconfigured"]

log = logging.getLogger("tower.worker")
# The objects whose bound methods a TowerPlugin registered as Tower's own activities: a
# worker-level plugin's settings replace a client-level one's, never both registered.
_OWN: weakref.WeakSet[Any] = weakref.WeakSet()
# Sync activities (tools are often blocking code: SQLite) run on this many threads, and
# as many activities run at once, unless the worker says otherwise.
DEFAULT_ACTIVITIES = 50
HEARTBEAT_SENT_WITHIN = timedelta(seconds=1)

# A domain error, or a start that does not fit the agent's input model, fails the run
# instead of retrying its task forever. Named one by one, not as TowerError: a store that
# does not answer (PayloadMissing) or a query's activation ahead of its task (AheadOfItsTask)
# fails the task, to be tried again.
WORKFLOW_FAILURE_TYPES: list[type[BaseException]] = [
    InvalidGraph, IllegalTransition, NodeFailed, EventRejected, PolicyRefused,
    UnopenablePayload, ValidationError]

T = TypeVar("T")


class WorkerMisconfigured(TowerError, ValueError):  # a ValueError: a setting's bad value
    """A worker that could not run its agents' runs: it refuses to start, saying why."""

    CODE = Code.BAD_SETTINGS


class TowerPlugin(SimplePlugin):
    """Tower's converter, sandbox, failure types and interceptors for clients, workers and
    replayers; on a worker hosting agents, Tower's own activities and the agents' tools.

    Args:
        data_converter: None is Tower's from the environment (TOWER_PAYLOAD_DIR,
            TOWER_PAYLOAD_THRESHOLD, TOWER_CODEC_KEYS), or the client's when it is a Tower
            converter already; a client's converter of another kind is refused
            (``WorkerMisconfigured``), never silently replaced.
        passthrough: more modules to load once outside the sandbox.
        external_tools: the ``server.tool`` specs (MCP) this worker serves.
        tracing: None traces when a replay-safe tracer provider is installed.
        settings: Tower's own activities' (the model gateway, trust loader, notifier,
            attester: ``tower.activities.own``); None: the environment's.
        own_activities: False registers none of them.
        bind: what each tool's resource gets (``{"db": SQLite(path)}``). Every tool of the
            hosted agents is an activity named after it; one left unbound refuses the start,
            whatever the worker's activities (an activity of the worker's serves it when its
            function has the tool's name: ``activity_name``).
        tools: False for a worker that deliberately serves no tools.

    A worker-level plugin's activities and tools replace a client-level one's.
    """

    def __init__(
        self, *, data_converter: DataConverter | None = None,
        agents: Sequence[type] = (), activities: Sequence[Callable[..., Any]] = (),
        passthrough: Sequence[str] = (), external_tools: Mapping[str, ToolSpec] | None = None,
        interceptors: Sequence[ClientInterceptor | WorkerInterceptor] = (),
        tracing: bool | None = None, settings: WorkerSettings | None = None,
        own_activities: bool = True, bind: Mapping[str, Any] | None = None,
        tools: bool = True,
    ) -> None:
        self._converter = data_converter
        self.settings = settings
        self.own_activities = own_activities
        self.bind = dict(bind or {})
        self.serves_tools = tools
        self._from_env: DataConverter | None = None
        self.traced = replay_safe() is not None if tracing is None else tracing
        self.passthrough = (*passthrough, *(("opentelemetry",) if self.traced else ()))
        self.external_tools = dict(external_tools or {})
        super().__init__(
            "tower.TowerPlugin", data_converter=self.converter_for,
            interceptors=[QueryAskedAgain(), *_tracing(self.traced), *interceptors],
            activities=_adding(activities),
            workflows=_adding(agents),
            workflow_failure_exception_types=_adding(WORKFLOW_FAILURE_TYPES),
            run_context=frozen_heap)  # a flood of signals in one task stays within 2 s

    def converter_for(self, existing: DataConverter | None) -> DataConverter:
        """What a client uses (a worker and a replayer: this, guarded)."""
        if self._converter is not None:
            return self._converter
        if isinstance(existing, TowerDataConverter):
            return existing
        if existing is not None and (why := _foreign(existing)):
            raise WorkerMisconfigured(
                f"the client's data converter is not Tower's ({why}); replacing it would "
                "write and read payloads another way than its other clients do. Build it with "
                "tower.temporal.tower_data_converter(...) (encryption: TOWER_CODEC_KEYS), or "
                "give it as TowerPlugin(data_converter=...) to keep it as it is")
        if self._from_env is None:
            self._from_env = tower_data_converter()
        return self._from_env

    def runner_for(self, existing: WorkflowRunner | None, workflows: Iterable[type] = ()
                   ) -> WorkflowRunner:
        """Tower's sandbox, with the project's own packages beside ``workflows`` and what
        another plugin passed through (a runner that is no sandbox at all was chosen on
        purpose, and is kept)."""
        if existing is not None and not isinstance(existing, SandboxedWorkflowRunner):
            return existing
        kept = existing.restrictions.passthrough_modules if existing is not None else ()
        return sandbox_runner(*self.passthrough, *sorted(kept), *project_packages(workflows))

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        # The runtime, loaded only here: a client of this plugin needs only its converter.
        from tower.effects._tool import OnlyEffectsReconcile
        from tower.temporal import _interceptors as guard
        from tower.temporal.worker import TowerStoreCleanup, check_external_tools, tool_activities

        config = super().configure_worker(config)
        if not any(config.get(k) for k in ("build_id", "use_worker_versioning",
                                           "deployment_config")):
            config["build_id"] = code_version()  # the SDK's default costs ~0.3 CPU-s
        # The SDK's worker converts with its client's converter: give it a guarded copy.
        client = config["client"]
        converter = guarded(self.converter_for(client.data_converter))
        if converter is not client.data_converter:
            config["client"] = _with_converter(client, converter)
        workflows = list(config.get("workflows") or ())
        config["workflow_runner"] = self.runner_for(config.get("workflow_runner"), workflows)
        activities = self._with_own_activities(config, workflows)
        if self._hosts_agents(workflows) and TowerStoreCleanup not in workflows:
            workflows.append(TowerStoreCleanup)  # the stores' retention, on the agents' queue
            config["workflows"] = workflows
        # Every ``server.tool`` an agent names is served here: listed, or an activity.
        served = set(self.external_tools) | {n for n in map(activity_name, activities) if n}
        check_external_tools(workflows, served)
        # A client's plugin leaves the tools to a TowerPlugin of the worker's own (its bind).
        mine = list(config.get("plugins") or ())
        deferring = self not in mine and any(isinstance(p, TowerPlugin) for p in mine)
        if self.serves_tools and not deferring:
            activities += tool_activities(workflows, self.bind, served)
        config["activities"] = activities
        register_external(self.external_tools)
        # Every activity runs only for this worker's own runs on its queue (a dynamic
        # workflow could be any type: then the queue alone is checked). A reconcile call
        # reaches only a tower.effects tool. A store's or a late attempt's failure is one
        # line (outermost: its failure carries few frames).
        names = [workflow_name(cls) for cls in workflows]
        hosted = [] if None in names else [str(n) for n in names]
        guard.quiet_store_tracebacks()
        config["interceptors"] = [guard.AttemptsEndQuietly(),
                                  guard.ScheduledByOwnAgents(config["client"], hosted),
                                  OnlyEffectsReconcile(),
                                  *(config.get("interceptors") or ())]
        # Tower's heartbeat timeouts are a few seconds: send each beat within a second, not
        # at the SDK's 80% of the timeout, so a loaded host's attempt is not timed out.
        throttle = config.get("max_heartbeat_throttle_interval") or HEARTBEAT_SENT_WITHIN
        config["max_heartbeat_throttle_interval"] = min(throttle, HEARTBEAT_SENT_WITHIN)
        if activities and config.get("activity_executor") is None:
            if config.get("max_concurrent_activities") is None and config.get("tuner") is None:
                config["max_concurrent_activities"] = DEFAULT_ACTIVITIES
            threads = config.get("max_concurrent_activities") or DEFAULT_ACTIVITIES
            config["activity_executor"] = ThreadPoolExecutor(threads)
        return config

    def _with_own_activities(self, config: WorkerConfig, workflows: list[type],
                             ) -> list[Callable[..., Any]]:
        """The worker's activities with Tower's own in place of any an earlier TowerPlugin
        added; one the project registered under the same name wins."""
        from tower.activities.own import WorkerSettings, attestation_missing, tower_activities
        from tower.temporal._gate import tower_run_id
        from tower.temporal._machine_run import tower_continued_from
        from tower.temporal._start import scripts_of
        from tower.temporal._stream_sink import publish_steps

        activities = [a for a in config.get("activities") or ()
                      if getattr(a, "__self__", None) not in _OWN]
        # The runtime's own: the run id a gate's request opens in, a carry's origin.
        activities += [a for a in (tower_run_id, tower_continued_from) if a not in activities]
        if not self._hosts_agents(workflows):
            return activities

        agents = [cls for cls in workflows if hasattr(cls, "machine")]
        settings = self.settings or WorkerSettings()
        namespace = config["client"].namespace
        have = {activity_name(a) for a in activities}
        own, streams = tower_activities(settings, scripts_of(agents),
                                        driver_for(StoreSettings.from_env().payloads))
        publish_steps(namespace, config["task_queue"], streams)
        for fn in own:
            _OWN.add(fn.__self__)  # type: ignore[attr-defined]
        gated = [cls.machine.name for cls in agents if cls.machine.gates]
        if gated and (why := attestation_missing(settings, namespace)):
            log.warning("WARNING: this worker hosts gated agents (%s), but %s",
                        ", ".join(gated), why)
        return [*activities, *(a for a in own if activity_name(a) not in have)]

    def _hosts_agents(self, workflows: Iterable[type]) -> bool:
        """Whether this plugin brings Tower's own activities to a worker of ``workflows``."""
        return self.own_activities and any(hasattr(cls, "machine") for cls in workflows)

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]],
                         ) -> None:
        """A worker bringing Tower's own activities says which store each is and ensures the
        stores' retention schedule."""
        from tower.activities.stores import announce
        from tower.temporal.worker import EVERY, ensure_cleanup

        config = worker.config()
        if self._hosts_agents(config.get("workflows") or ()):
            client = config["client"]
            await announce(StoreSettings.from_env(), client)
            # The first pass an interval after the first worker: nothing is old enough to
            # go before then, and a short-lived server (a test's) never runs one.
            await ensure_cleanup(client, config["task_queue"],
                                 first=datetime.now(UTC) + EVERY)
        await super().run_worker(worker, next)

    def configure_replayer(self, config: ReplayerConfig) -> ReplayerConfig:
        config = super().configure_replayer(config)
        config["build_id"] = config.get("build_id") or code_version()  # as a worker's
        config["workflow_runner"] = self.runner_for(config.get("workflow_runner"),
                                                    config.get("workflows") or ())
        config["data_converter"] = guarded(self.converter_for(config.get("data_converter")))
        return config


def _foreign(converter: DataConverter) -> str:
    """What a client's converter does that Tower's would not ("": the SDK's default or
    pydantic's, whose payloads Tower's converter writes and reads byte for byte)."""
    if converter.payload_codec is not None:
        return f"payload codec {type(converter.payload_codec).__name__}"
    if converter.external_storage is not None:
        return "external storage"
    if converter.failure_converter_class is not DefaultFailureConverter:
        return f"failure converter {converter.failure_converter_class.__name__}"
    kind = converter.payload_converter_class
    if kind is not DefaultPayloadConverter and not issubclass(kind, PydanticPayloadConverter):
        return f"payload converter {kind.__name__}"
    return ""


def workflow_name(cls: type) -> str | None:
    """The workflow type ``cls`` is registered as (None: a dynamic workflow), as the SDK's
    public API resolves it: a start action given the class's run method (which the SDK
    requires defined on the class itself) names the type it starts."""
    for fn in vars(cls).values():
        if inspect.isfunction(fn):
            with contextlib.suppress(ValueError):  # not the run method, or a dynamic one
                return ScheduleActionStartWorkflow(fn, id="-", task_queue="-").workflow
    return None


def activity_name(fn: Callable[..., Any]) -> str | None:
    """The activity type ``fn`` runs as, by the SDK's rule for ``@activity.defn`` without a
    name: its function's name. Tower's own activities and tools are made so; an activity
    of the project's serves a tool, or replaces one of Tower's, when its function has that
    name (one given another name with ``@activity.defn(name=...)`` is not seen as such)."""
    return getattr(fn, "__name__", None)


def _with_converter(client: Client, converter: DataConverter) -> Client:
    # The client as its plugins configured it (interceptors included), with another
    # converter; its plugins are not applied again (they would put the first one back).
    config: ClientConfig = client.config(active_config=True)
    config["data_converter"] = converter
    config["plugins"] = []
    return Client(**config)


def _adding(items: Sequence[T]) -> Callable[[Sequence[T] | None], Sequence[T]] | None:
    """Append ``items`` that are not there yet (a plugin on both a client and its worker,
    or an agent passed to the Worker too, is not registered twice)."""
    if not items:
        return None

    def add(existing: Sequence[T] | None) -> Sequence[T]:
        have = list(existing or ())
        return [*have, *(i for i in items if i not in have)]

    return add


def _tracing(on: bool) -> list[ClientInterceptor | WorkerInterceptor]:
    """Spans for starting runs, running workflows and activities, the trace context carried
    in headers; in front of the tracer, a guard against headers it cannot read."""
    if not on:
        return []
    from temporalio.contrib.opentelemetry import OpenTelemetryInterceptor

    from tower.temporal._interceptors import TraceHeaderGuard

    return [TraceHeaderGuard(), OpenTelemetryInterceptor(add_temporal_spans=True)]
