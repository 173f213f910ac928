"""An agent is one file: its graph's name names the workflow, its nodes name their tools by
object (checked when the graph is built), and registry, worker and scripted model find it."""

from __future__ import annotations

import dataclasses

import pytest

from activities.tools import TOOLS
from tower import AgentState, AgentWorkflow, Graph, Tool, agent
from tower.core.errors import InvalidGraph
from tower.temporal._start import agents_by_name, load_agents, scripts_of
from tower.temporal.worker import check_external_tools
from workflows.refund import GRAPH as REFUND
from workflows.refund import RefundAgent
from workflows.registry import AGENTS


async def noop(ctx: object, state: AgentState) -> dict[str, object]:
    return {}


def one_node(*tools: Tool | str) -> Graph:
    return Graph("t", AgentState).node("a", noop, tools=tools).entry("a").edge("a", "DONE")


def test_a_node_names_its_tools_by_object_never_by_string() -> None:
    with pytest.raises(InvalidGraph, match="node 'a': 'lookup_account' is not a tool: pass "
                                           "the object @tool made"):
        one_node("lookup_account")
    twin = dataclasses.replace(TOOLS["lookup_account"])  # another object, the same name
    with pytest.raises(InvalidGraph, match="two different tools named 'lookup_account'"):
        one_node(TOOLS["lookup_account"], twin)
    machine = one_node(TOOLS["lookup_account"]).compile()
    assert machine.nodes["a"].specs == {"lookup_account": TOOLS["lookup_account"]}
    assert machine.tools() == {"lookup_account": TOOLS["lookup_account"]}


def test_server_tools_are_checked_when_the_worker_starts() -> None:
    machine = one_node(TOOLS["lookup_account"], "crm.find_customer").compile()  # compiles
    assert machine.external_tools() == {"crm.find_customer"}

    class Fake:
        pass

    Fake.machine = machine  # type: ignore[attr-defined]
    with pytest.raises(InvalidGraph, match="'crm.find_customer', which no server on this "
                                           "worker provides"):
        check_external_tools([Fake], available=set())
    check_external_tools([Fake], available={"crm.find_customer"})


def test_the_graph_name_is_the_workflow_name_and_the_registry_key() -> None:
    defn = getattr(RefundAgent, "__temporal_workflow_definition")  # what the SDK registers
    assert defn.cls is RefundAgent and defn.name == REFUND.name == "refund"
    assert RefundAgent.machine is REFUND and AGENTS["refund"] is RefundAgent
    assert all(cls.machine.name == name for name, cls in AGENTS.items())
    assert load_agents("workflows") == AGENTS  # found from the files, nothing typed twice
    table = scripts_of(AGENTS.values())
    assert ("refund", "reason") in table and ("lifecycle", "PLANNING") in table
    assert all(node in AGENTS[name].machine.nodes for name, node in table)


def test_scripts_for_a_node_the_agent_lacks_are_refused() -> None:
    with pytest.raises(InvalidGraph, match=r"scripts for unknown node\(s\): resaon"):
        agent(REFUND, scripts={"resaon": lambda request: "hi"})


def test_two_agents_with_one_name_are_refused() -> None:
    class Twin:
        machine = REFUND

    with pytest.raises(ValueError, match="two agents are named 'refund'"):
        agents_by_name([RefundAgent, Twin])


def test_each_agent_carries_only_the_handlers_its_steps_honour() -> None:
    from tower import EventWorkflow

    def handlers(cls: type) -> set[str]:
        defn = getattr(cls, "__temporal_workflow_definition")
        assert defn.cls is cls
        return {n or "*" for n in (*defn.signals, *defn.updates)}  # "*": any other signal

    lifecycle, refund = AGENTS["lifecycle"], AGENTS["refund"]
    assert issubclass(lifecycle, EventWorkflow) and not issubclass(lifecycle, AgentWorkflow)
    # Events (a signal, taken raw like every signal, or the validated update): no
    # approval it could not honour.
    assert handlers(lifecycle) == {"*", "send_event"}
    # Signals reach a gated agent raw, through one handler (a decision, refresh_trust); a
    # failed run is retried by a reset, so no agent has an operator's update.
    assert {"decide", "*"} <= handlers(refund)
    assert not {"retry", "abort"} & handlers(refund)
    assert "event" not in handlers(refund)
    # One loop, two kinds of step: only node-driven runs may continue-as-new between steps.
    assert (AgentWorkflow.carries_over, EventWorkflow.carries_over) == (True, False)
