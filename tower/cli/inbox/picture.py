"""The agent's picture with the node a run waits at highlighted, drawn in pure Python
(tower.cli.inbox.drawing): the same on every machine, with or without Graphviz.

A run's memo is written by whoever started it: the agent, node and gate it names are
checked against this deployment's agents before anything is drawn or offered."""

from __future__ import annotations

import functools

from tower.cli.agents import agents
from tower.cli.inbox.drawing import machine_svg
from tower.contract.failures import Code, TowerError
from tower.contract.pending import PendingView


class NotOurRequest(TowerError, LookupError):  # a LookupError: a request not found here
    """A pending request that no agent of this deployment could have made; says why."""

    CODE = Code.NOT_GENUINE


def check_request(view: PendingView) -> None:
    """Refuse a request naming an agent, node or gate this deployment does not have."""
    agent = agents().get(view.agent)
    if agent is None:
        raise NotOurRequest(f"it names agent {view.agent!r}, which this deployment does not "
                            "have")
    machine = agent.machine
    if view.node not in machine.nodes:
        raise NotOurRequest(f"agent {view.agent!r} has no node {view.node!r}")
    gate = machine.gates.get(view.node)
    if gate is None or gate.name != view.gate:
        raise NotOurRequest(f"agent {view.agent!r} has no gate {view.gate!r} at node "
                            f"{view.node!r}")


@functools.lru_cache(maxsize=64)
def picture(agent: str, node: str) -> str:
    """The SVG of ``agent`` waiting at ``node`` (both checked by ``check_request``)."""
    return machine_svg(agents()[agent].machine, node)
