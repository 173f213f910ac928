"""TowerPlugin: a plain Worker on a client connected with it, and a Replayer given it, get
the same settings by construction — the guarded converter (codec and payload store from
the environment), Tower's sandbox with the same pass-through modules, the failure types.
The client itself keeps the unguarded converter (a result it cannot open is the codec's
own error)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Replayer, WorkerConfig

from activities.tools import TOOLS
from tower import AgentState, Graph
from tower.cli.histories import load, replay
from tower.core.errors import InvalidGraph
from tower.temporal import TowerPlugin
from tower.temporal._sandbox import RunSandbox
from tower.temporal._unopenable import TowerDataConverter
from tower.temporal.codec import EncryptionCodec, NoKeys, new_key
from tower.temporal.plugin import WORKFLOW_FAILURE_TYPES
from workflows.registry import AGENTS

AGENT_CLASSES = list(AGENTS.values())


async def _worker_config(client: Client, **options: Any) -> WorkerConfig:
    """What ``Worker(client, ...)`` configures: its client's plugins, in order."""
    config = WorkerConfig(client=client, task_queue="tq", workflows=AGENT_CLASSES,
                          activities=[])
    config.update(options)  # type: ignore[typeddict-item]
    for plugin in client.config()["plugins"]:
        config = plugin.configure_worker(config)  # type: ignore[attr-defined]
    return config


def _settings(converter: Any, runner: Any, failures: Any) -> tuple[Any, ...]:
    storage = converter.external_storage
    return (type(converter), converter.guard_inputs, type(converter.payload_codec),
            converter.failure_converter_class, converter.payload_converter_class,
            storage.payload_size_threshold, [(d.name(), str(d)) for d in storage.drivers],
            type(runner), runner.instance_class, runner.restrictions.passthrough_modules,
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
    assert worker_side[8] is RunSandbox and {"tower", "activities"} <= worker_side[9]
    assert worker_side[-1] == WORKFLOW_FAILURE_TYPES
    # The client's own converter is the same one, unguarded.
    assert client.data_converter.guard_inputs is False  # type: ignore[attr-defined]
    assert type(client.data_converter.payload_codec) is worker_side[2]


async def test_the_plugin_on_client_and_worker_registers_nothing_twice() -> None:
    client = await Client.connect("127.0.0.1:1", lazy=True,
                                  plugins=[TowerPlugin(agents=AGENT_CLASSES[:1])])
    config = await _worker_config(client)
    config = TowerPlugin(agents=AGENT_CLASSES).configure_worker(config)
    assert config["workflows"] == AGENT_CLASSES
    assert config["workflow_failure_exception_types"] == WORKFLOW_FAILURE_TYPES


async def test_an_agent_naming_a_tool_no_activity_serves_is_refused() -> None:
    class NamesServerTool:  # the checks read the agent's compiled graph, nothing else
        machine = (Graph("t", AgentState, tools=TOOLS)
                   .node("a", _noop, tools=["notes.find"]).entry("a").edge("a", "DONE")
                   .compile())

    client = await Client.connect("127.0.0.1:1", lazy=True, plugins=[TowerPlugin()])
    with pytest.raises(InvalidGraph, match="'notes.find', which no server on this worker"):
        await _worker_config(client, workflows=[NamesServerTool])

    @activity.defn(name="notes.find")
    async def find(call: Any) -> dict[str, Any]:
        return {}

    config = await _worker_config(client, workflows=[NamesServerTool], activities=[find])
    assert config["workflows"] == [NamesServerTool]


async def _noop(ctx: object, state: AgentState) -> dict[str, object]:
    return {}


async def test_the_cli_replays_what_the_worker_ran() -> None:
    # `tower replay`, tower.testing and the worker share TowerPlugin's defaults.
    folder = Path(__file__).parent.parent / "histories"
    results = await replay(load([folder / "account-1.json"]))
    assert [r.ok for r in results] == [True]
