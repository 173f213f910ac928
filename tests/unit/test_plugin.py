"""TowerPlugin: a plain Worker on a client connected with it, and a Replayer given it, get
the same settings by construction — the guarded converter (codec and payload store from
the environment), Tower's sandbox with the same pass-through modules, the failure types.
The client itself keeps the unguarded converter (a result it cannot open is the codec's
own error)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from replaykit import replay
from subclass_agents import SlowAccount
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RawValue
from temporalio.worker import Replayer, WorkerConfig

from activities.tools import TOOLS, ToolsDb
from tower import AgentState, Graph
from tower.cli.trust_files import enrol_worker
from tower.contract.failures import InvalidGraph
from tower.effects import ToolCall
from tower.temporal import TowerPlugin, WorkerSettings
from tower.temporal._interceptors import ScheduledByOwnAgents
from tower.temporal.codec import EncryptionCodec, NoKeys, new_key
from tower.temporal.payloads import TowerDataConverter
from tower.temporal.plugin import WORKFLOW_FAILURE_TYPES, WorkerMisconfigured, activity_name
from tower.temporal.replay import load
from tower.temporal.worker import TowerStoreCleanup
from workflows.registry import AGENTS

AGENT_CLASSES = list(AGENTS.values())


def _stub(name: str) -> Any:
    def tool(call: Any) -> dict[str, Any]:
        return {}

    tool.__name__ = name  # an activity is named by its function (the SDK's default)
    return activity.defn(tool)


TOOL_STUBS = [_stub(name) for name in TOOLS]  # every example tool, served (by a stub)


@pytest.fixture(autouse=True)
def _stores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Tower's own activities keep their stores beside TOWER_DB: the test's folder.
    monkeypatch.setenv("TOWER_DB", str(tmp_path / "tools.sqlite"))


async def _worker_config(client: Client, **options: Any) -> WorkerConfig:
    """What ``Worker(client, ...)`` configures: its client's plugins, in order."""
    config = WorkerConfig(client=client, task_queue="tq", workflows=AGENT_CLASSES,
                          activities=list(TOOL_STUBS))
    config.update(options)  # type: ignore[typeddict-item]
    for plugin in client.config()["plugins"]:
        config = plugin.configure_worker(config)  # type: ignore[attr-defined]
    return config


def _settings(converter: Any, runner: Any, failures: Any) -> tuple[Any, ...]:
    storage = converter.external_storage
    return (type(converter), converter.guard_inputs, type(converter.payload_codec),
            converter.failure_converter_class, converter.payload_converter_class,
            storage.payload_size_threshold, [(d.name(), str(d)) for d in storage.drivers],
            type(runner), runner.restrictions.passthrough_modules,
            list(failures))


@pytest.mark.parametrize("keys", [False, True], ids=["clear", "encrypted"])
async def test_a_plain_worker_and_a_replayer_get_the_same_settings(
    keys: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Any,
) -> None:
    monkeypatch.setenv("TOWER_PAYLOAD_DIR", str(tmp_path / "payloads"))
    if keys:
        monkeypatch.setenv("TOWER_CODEC_KEYS", f"k1={new_key()}")
    else:
        monkeypatch.delenv("TOWER_CODEC_KEYS", raising=False)
    client = await Client.connect("127.0.0.1:1", lazy=True, plugins=[TowerPlugin()])
    worker = await _worker_config(client)
    replayer = Replayer(workflows=AGENT_CLASSES, plugins=[TowerPlugin()]).config(
        active_config=True)
    worker_side = _settings(worker["client"].data_converter, worker["workflow_runner"],
                            worker["workflow_failure_exception_types"])
    replay_side = _settings(replayer["data_converter"], replayer["workflow_runner"],
                            replayer["workflow_failure_exception_types"])
    assert worker_side == replay_side
    assert worker_side[:3] == (TowerDataConverter, True, EncryptionCodec if keys else NoKeys)
    assert {"tower", "joserfc", "activities"} <= worker_side[8]
    assert worker_side[-1] == WORKFLOW_FAILURE_TYPES
    # The client's own converter is the same one, unguarded.
    assert client.data_converter.guard_inputs is False  # type: ignore[attr-defined]
    assert type(client.data_converter.payload_codec) is worker_side[2]


async def test_the_plugin_on_client_and_worker_registers_nothing_twice() -> None:
    client = await Client.connect("127.0.0.1:1", lazy=True,
                                  plugins=[TowerPlugin(agents=AGENT_CLASSES[:1])])
    config = await _worker_config(client)
    config = TowerPlugin(agents=AGENT_CLASSES).configure_worker(config)
    # Tower's own retention workflow rides along with the agents, once.
    assert config["workflows"] == [*AGENT_CLASSES, TowerStoreCleanup]
    assert config["workflow_failure_exception_types"] == WORKFLOW_FAILURE_TYPES


async def test_an_agent_naming_a_tool_no_activity_serves_is_refused() -> None:
    class NamesServerTool:  # the checks read the agent's compiled graph, nothing else
        machine = (Graph("t", AgentState)
                   .node("a", _noop, tools=["notes.find"]).entry("a").edge("a", "DONE")
                   .compile())

    client = await Client.connect("127.0.0.1:1", lazy=True, plugins=[TowerPlugin()])
    with pytest.raises(InvalidGraph, match="'notes.find', which no server on this worker"):
        await _worker_config(client, workflows=[NamesServerTool])

    config = await _worker_config(client, workflows=[NamesServerTool],
                                  activities=[_stub("notes.find")])
    assert config["workflows"] == [NamesServerTool, TowerStoreCleanup]


async def _noop(ctx: object, state: AgentState) -> dict[str, object]:
    return {}


async def test_the_cli_replays_what_the_worker_ran() -> None:
    # `tower replay`, tower.testing and the worker share TowerPlugin's defaults.
    folder = Path(__file__).parent.parent / "histories"
    results = await replay(load([folder / "account-1.json"]))
    assert [r.ok for r in results] == [True]


async def test_a_worker_with_a_tool_left_unbound_refuses_to_start() -> None:
    # Built the way a project builds it: a plain Worker (its constructor runs the plugins).
    client = await Client.connect("127.0.0.1:1", lazy=True, plugins=[TowerPlugin()])
    served = [t for t in TOOL_STUBS if activity_name(t) not in ("issue_refund", "send_email")]
    with pytest.raises(WorkerMisconfigured) as refused:
        await _worker_config(client, activities=served)
    assert str(refused.value).startswith(
        "this worker cannot run its agents' tools: 'issue_refund' needs 'db' (used by "
        "support.billing, refund.reason, refund.issue_refund).")
    # Whatever the worker's activities: none at all is no way around the check, and every
    # tool unbound is named, not only the first.
    for activities in ([], [t for t in TOOL_STUBS if activity_name(t) not in (
            "lookup_invoice", "create_ticket")]):
        with pytest.raises(WorkerMisconfigured) as refused:
            await _worker_config(client, activities=activities)
        assert "'lookup_invoice'" in str(refused.value)
        assert "'create_ticket'" in str(refused.value)


async def test_the_plugin_registers_every_tool_of_its_agents_bound_once(tmp_path: Path
                                                                       ) -> None:
    db = ToolsDb(tmp_path / "tools.sqlite")
    client = await Client.connect("127.0.0.1:1", lazy=True,
                                  plugins=[TowerPlugin(bind={"db": db})])
    config = await _worker_config(client, activities=[])
    names = {activity_name(a) for a in config["activities"]}
    used = {n for cls in AGENT_CLASSES for n in cls.machine.tools()
            if not TOOLS[n].control}
    assert used and used <= names and "advance_to_next_step" not in names
    # The activity is the tool's implementation on the bound database.
    balance = next(a for a in config["activities"] if activity_name(a) == "invoice_balance")
    got = balance(ToolCall(tool="invoice_balance", arguments={"invoice_id": "INV-2004"},
                           idempotency_key="k"))
    assert got["invoice"]["id"] == "INV-2004" and "refundable_cents" in got
    # A worker of the client's plugin alone, made with its own plugin, binds there instead.
    worker_level = TowerPlugin(bind={"db": db})
    bare = await Client.connect("127.0.0.1:1", lazy=True, plugins=[TowerPlugin()])
    config = await _worker_config(bare, activities=[], plugins=[worker_level])
    config = worker_level.configure_worker(config)
    assert used <= {activity_name(a) for a in config["activities"]}


async def test_a_worker_that_serves_no_tools_says_so() -> None:
    client = await Client.connect("127.0.0.1:1", lazy=True,
                                  plugins=[TowerPlugin(tools=False)])
    config = await _worker_config(client, activities=[])
    assert not {activity_name(a) for a in config["activities"]} & set(TOOLS)


async def test_the_plugin_registers_tower_s_own_activities_once(tmp_path: Path) -> None:
    client = await Client.connect("127.0.0.1:1", lazy=True, plugins=[TowerPlugin()])
    config = await _worker_config(client)
    # A worker-level plugin (its own settings) replaces the client's, never adds twice.
    config = TowerPlugin(settings=WorkerSettings(trust_dir=tmp_path)).configure_worker(config)
    names = [activity_name(a) for a in config["activities"]]
    own = ["call_model", "load_trust", "notify_gate", "tower_attest"]
    assert sorted(n for n in names if n in own) == own
    trust = next(a for a in config["activities"] if activity_name(a) == "load_trust")
    assert trust.__self__.root == tmp_path  # type: ignore[attr-defined]
    # A project's own activity of one of those names wins over Tower's.
    @activity.defn
    async def call_model(request: Any) -> Any:
        return None

    config = await _worker_config(client, activities=[*TOOL_STUBS, call_model])
    assert [a for a in config["activities"] if activity_name(a) == "call_model"] == [call_model]


async def test_a_worker_that_cannot_attest_says_so(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    client = await Client.connect("127.0.0.1:1", lazy=True, plugins=[
        TowerPlugin(settings=WorkerSettings(trust_dir=tmp_path / "empty"))])
    with caplog.at_level(logging.WARNING, logger="tower.worker"):
        await _worker_config(client)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "gated agents (refund, migration" in warned[0]
    assert "no attestation key" in warned[0] and "tower keys worker" in warned[0]
    caplog.clear()
    enrol_worker(tmp_path / "keyed", "default")
    client = await Client.connect("127.0.0.1:1", lazy=True, plugins=[
        TowerPlugin(settings=WorkerSettings(trust_dir=tmp_path / "keyed"))])
    with caplog.at_level(logging.WARNING, logger="tower.worker"):
        await _worker_config(client)
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


@pytest.mark.parametrize("given", [None, timedelta(seconds=60), timedelta(milliseconds=300)])
async def test_heartbeats_are_sent_within_a_second(given: timedelta | None) -> None:
    # Tower's heartbeat timeouts are 3 s; the SDK would hold a heartbeat back for 2.4 s.
    client = await Client.connect("127.0.0.1:1", lazy=True, plugins=[TowerPlugin()])
    options = {} if given is None else {"max_heartbeat_throttle_interval": given}
    config = await _worker_config(client, **options)
    assert config["max_heartbeat_throttle_interval"] == min(
        given or timedelta(seconds=1), timedelta(seconds=1))


@workflow.defn(name="plain-named")
class PlainNamed:  # a plain workflow riding along, its run method not named ``run``
    @workflow.run
    async def execute(self) -> None:
        return None


@workflow.defn(dynamic=True)
class AnyType:
    @workflow.run
    async def run(self, args: Sequence[RawValue]) -> None:
        return None


def _hosted(config: WorkerConfig) -> frozenset[str]:
    guard = next(i for i in config["interceptors"] if isinstance(i, ScheduledByOwnAgents))
    return guard.hosted


async def test_the_scheduler_guard_knows_each_workflow_by_its_registered_name() -> None:
    # Only a run of a type this worker hosts may schedule its activities: an agent under
    # its graph's name, a Temporal-way subclass and a plain workflow under the names their
    # @workflow.defn gave, Tower's retention workflow under its own.
    client = await Client.connect("127.0.0.1:1", lazy=True, plugins=[TowerPlugin()])
    config = await _worker_config(client, workflows=[*AGENT_CLASSES, SlowAccount, PlainNamed])
    assert _hosted(config) == {*(cls.machine.name for cls in AGENT_CLASSES), "account-slow",
                               "plain-named", "tower_store_cleanup"}
    # A dynamic workflow runs any type: the task queue alone decides then.
    config = await _worker_config(client, workflows=[*AGENT_CLASSES, AnyType])
    assert _hosted(config) == frozenset()


async def test_tower_names_each_activity_as_the_sdk_registers_it(tmp_path: Path) -> None:
    # The plugin knows an activity by its function's name (the SDK's default): Tower's own
    # and its tools' activities are made so; here the SDK's own record says what it runs.
    client = await Client.connect("127.0.0.1:1", lazy=True, plugins=[
        TowerPlugin(bind={"db": ToolsDb(tmp_path / "tools.sqlite")})])
    config = await _worker_config(client, activities=[])
    registered = {a: getattr(a, "__temporal_activity_definition").name
                  for a in config["activities"]}
    assert len(registered) > 10
    assert [(activity_name(a), name) for a, name in registered.items()
            if activity_name(a) != name] == []
