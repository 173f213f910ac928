"""Build and validate an agent's graph: nodes, edges, routes, guards, budgets.

Pure: no Temporal. ``Graph`` is the builder; ``Graph.compile()`` checks the
whole machine and returns an immutable ``Machine``. Every mistake in a graph is
an ``InvalidGraph`` raised when the agent's module is imported, never at run time.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from tower.contract.failures import IllegalTransition, InvalidGraph
from tower.core.state import PROTECTED_FIELDS, AgentState
from tower.core.tools import Tool, ToolSpec, is_external, own_tools

if TYPE_CHECKING:  # gates.py builds on the graph; a graph only names its gates
    from tower.core.gates import Gate
    from tower.core.proofs import Proof

START = "START"
DONE = "DONE"
FAILED = "FAILED"
TERMINALS = frozenset({DONE, FAILED})

Guard = Callable[[Any], bool]
RouteFn = Callable[[Any], str]
NodeFn = Callable[[Any, Any], Awaitable[Mapping[str, Any]]]


@dataclass(frozen=True)
class Node:
    name: str
    fn: NodeFn
    prompt: str = ""
    tools: tuple[str, ...] = ()  # what the node may call (and the model may ask for)
    description: str = ""
    # The tools' objects for ``tools`` and ``proposes`` (external ``server.tool``s aside):
    # what the node's context shows the model and checks arguments and timeouts against.
    specs: Mapping[str, ToolSpec] = field(default_factory=dict)
    proposes: tuple[str, ...] = ()  # the model may propose them; ``ctx.tool`` refuses them
    # Why its side effects need no gate, why its cycles need no budget (``Graph.node``).
    ungated: str | None = None
    unbounded: str | None = None


@dataclass(frozen=True)
class Transitions:
    """Where a node may go next: one static target, or a route with declared targets."""

    source: str
    targets: tuple[str, ...]
    route: RouteFn | None = None
    guards: Mapping[str, Guard] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Budget:
    """Limits a run cannot exceed. Exceeding one routes to ``escalate_to``."""

    escalate_to: str
    max_steps: int | None = None
    max_visits: Mapping[str, int] = field(default_factory=dict)
    # Model spend over the whole run: prompt + completion tokens, and estimated dollars.
    max_tokens: int | None = None
    max_cost_usd: float | None = None

    def limits(self) -> list[str]:
        """Each limit in words, for pictures and reports."""
        out = [f"{n} ≤ {v} visits" for n, v in self.max_visits.items()]
        if self.max_steps is not None:
            out.append(f"≤ {self.max_steps} steps")
        if self.max_tokens is not None:
            out.append(f"≤ {self.max_tokens} tokens")
        if self.max_cost_usd is not None:
            out.append(f"≤ ${self.max_cost_usd:g}")
        return out


@dataclass(frozen=True, eq=False)
class Machine:
    """A validated graph, made by ``Graph.compile``. Immutable; shared by every run of an
    agent."""

    name: str
    state_type: type[AgentState]
    entry: str
    nodes: Mapping[str, Node]
    transitions: Mapping[str, Transitions]
    budget: Budget | None
    gates: Mapping[str, Gate]  # by the node they guard
    recovery: Mapping[str, str]  # node -> the node its errors route to (Graph.on_error)
    requires: Mapping[str, tuple[str, ...]]  # node -> the gates every path to it must pass
    proof: Proof | None = None  # tower/core/proofs.py

    def external_tools(self) -> set[str]:
        """Tools named ``server.tool``: the worker checks they exist when it starts."""
        return {t for node in self.nodes.values() for t in node.tools if is_external(t)}

    def tools(self) -> dict[str, Tool]:
        """Every tool of the machine's nodes (external ``server.tool``s aside), by name."""
        found: dict[str, Tool] = {}
        for node in self.nodes.values():
            for name, spec in node.specs.items():
                if isinstance(spec, Tool) and found.setdefault(name, spec) is not spec:
                    raise InvalidGraph(self.name, f"two different tools are named {name!r} "
                                                  f"(node {node.name!r} has one)")
        return found

    def gate_named(self, name: str) -> Gate | None:
        return next((g for g in self.gates.values() if g.name == name), None)

    def declared(self, source: str, target: str) -> bool:
        """Whether the graph allows ``source -> target``. Any node may fail, and any
        node may escalate when the budget runs out."""
        if source == START:
            return target == self.entry
        if source in TERMINALS:
            return False
        if target == FAILED or (self.budget and target == self.budget.escalate_to):
            return True
        if self.recovery.get(source) == target:
            return True
        gate = self.gates.get(source)
        # A gate holds the run at its node (source == target) or routes a decision away.
        if gate is not None and (target == source or target in gate.targets):
            return True
        out = self.transitions.get(source)
        return out is not None and target in out.targets

    def choose(self, source: str, state: AgentState) -> tuple[str, str]:
        """The next node after ``source`` and why; IllegalTransition if undeclared or
        guarded off."""
        out = self.transitions[source]
        if out.route is None:
            target, reason = out.targets[0], "edge"
        else:
            target = out.route(state)
            reason = f"route {out.route.__name__} -> {target}"
            if target not in out.targets:
                raise IllegalTransition(source, target,
                                        f"route {out.route.__name__} returned an undeclared target")
        guard = out.guards.get(target)
        if guard is not None:
            if not guard(state):
                raise IllegalTransition(source, target, f"guard {guard.__name__} failed")
            reason += f", guard {guard.__name__} held"
        return target, reason


class Graph:
    """Builder for a Machine, in the vocabulary of LangGraph's StateGraph."""

    def __init__(self, name: str, state_type: type[AgentState]) -> None:
        self.name = name
        self.state_type = state_type
        self._entry: str | None = None
        self._nodes: dict[str, Node] = {}
        self._out: dict[str, Transitions] = {}
        self._budget: Budget | None = None
        self._gates: dict[str, Gate] = {}
        self._on_error: tuple[str, tuple[str, ...] | None] | None = None
        self._requires: dict[str, tuple[str, ...]] = {}

    def node(
        self, name: str, fn: NodeFn, *, prompt: str = "", tools: Iterable[Tool | str] = (),
        description: str = "", proposes: Iterable[Tool | str] = (), ungated: str | None = None,
        unbounded: str | None = None,
    ) -> Graph:
        """A node. ``tools``: what it may call; ``proposes``: tools the model may ask for
        here that the node may not call (a gated node carries the plan out). ``ungated``:
        why its side-effecting tools need no approval gate; ``unbounded``: why cycles
        through it need no budget (each turn waits for a person, say). compile() proves
        the rest (docs/gates.md, "Proven on the graph")."""
        if name in self._nodes or name in TERMINALS or name == START:
            raise InvalidGraph(self.name, f"node {name!r} is defined twice or is reserved")
        for what, why in (("ungated", ungated), ("unbounded", unbounded)):
            if why is not None and not why.strip():
                raise InvalidGraph(self.name, f"node {name!r}: {what}= needs a reason")
        tools, proposes = list(tools), list(proposes)
        specs = own_tools(self.name, name, [*tools, *proposes])
        self._nodes[name] = Node(name, fn, prompt, _names(tools),
                                 description or (fn.__doc__ or ""), specs=specs,
                                 proposes=_names(proposes), ungated=ungated,
                                 unbounded=unbounded)
        return self

    def require(self, node: str, *, after: str) -> Graph:
        """Every path to ``node`` passes gate ``after`` (approved, or not needed by its
        ``applies``): compile() proves it, and the audit checks it on every recorded run."""
        self._requires[node] = (*self._requires.get(node, ()), after)
        return self

    def entry(self, name: str) -> Graph:
        self._entry = name
        return self

    def edge(self, source: str, target: str, *, guard: Guard | None = None) -> Graph:
        guards = {target: guard} if guard else {}
        return self._add(Transitions(source, (target,), None, guards))

    def route(
        self, source: str, fn: RouteFn, targets: Iterable[str] | Mapping[str, str],
        *, guards: Mapping[str, Guard] | None = None,
    ) -> Graph:
        """A conditional transition. ``targets`` lists every node ``fn`` may return
        (a mapping gives each one a label for the picture)."""
        labels = dict(targets) if isinstance(targets, Mapping) else {}
        return self._add(Transitions(source, tuple(targets), fn, dict(guards or {}), labels))

    def guard_rows(self, source: str, rows: Mapping[str, Guard]) -> Graph:
        """A row of a guard table (event-driven agents): the move from ``source`` goes to
        the first target (in order) whose guard holds once an event is applied."""
        def guards(state: Any) -> str:  # exactly one must hold: none or two never moves
            holding = [target for target, guard in rows.items() if guard(state)]
            if len(holding) != 1:
                names = ", ".join(f"{t} if {g.__name__}" for t, g in rows.items())
                why = "no guard admits the event" if not holding else (
                    f"ambiguous: {', '.join(holding)} all admit it")
                raise IllegalTransition(source, "?", f"{why} ({names})")
            return holding[0]

        return self.route(source, guards, dict.fromkeys(rows, "on event"), guards=rows)

    def budget(
        self, *, escalate_to: str, max_steps: int | None = None,
        max_visits: Mapping[str, int] | None = None, max_tokens: int | None = None,
        max_cost_usd: float | None = None,
    ) -> Graph:
        self._budget = Budget(escalate_to, max_steps, dict(max_visits or {}), max_tokens,
                              max_cost_usd)
        return self

    def gate(self, node: str, gate: Gate) -> Graph:
        """Require approval before (or after) ``node`` runs; see ``gates.Gate``."""
        if node in self._gates:
            raise InvalidGraph(self.name, f"node {node!r} already has a gate")
        self._gates[node] = replace(gate, node=node)
        return self

    def on_error(self, recovery: str, *, nodes: Iterable[str] | None = None) -> Graph:
        """Route node errors (a NodeFailed, an activity out of retries) to ``recovery``.

        ``nodes`` limits which nodes recover (default: every node but ``recovery``);
        the others, and ``recovery`` itself, go straight to FAILED. The error is in
        ``state.errors`` and ``state.last_error`` when ``recovery`` runs.
        """
        if self._on_error is not None:
            raise InvalidGraph(self.name, "on_error is already set")
        self._on_error = (recovery, tuple(nodes) if nodes is not None else None)
        return self

    def _recovery_map(self) -> dict[str, str]:
        if self._on_error is None:
            return {}
        recovery, listed = self._on_error
        if recovery not in self._nodes:
            raise InvalidGraph(self.name, f"on_error names unknown node {recovery!r}")
        sources = listed if listed is not None else tuple(self._nodes)
        for node in sources:
            if node not in self._nodes:
                raise InvalidGraph(self.name, f"on_error lists unknown node {node!r}")
            if node == recovery and listed is not None:
                raise InvalidGraph(self.name, f"recovery node {recovery!r} cannot recover "
                                              "its own errors")
        return {n: recovery for n in sources if n != recovery}

    def _add(self, out: Transitions) -> Graph:
        if out.source in self._out:
            raise InvalidGraph(self.name, f"node {out.source!r} already has its transitions")
        self._out[out.source] = out
        return self

    def compile(self) -> Machine:
        """The machine, checked whole: names, gates, one object per tool name, then the
        proof: every node reachable and able to end, and safe (tower/core/proofs.py)."""
        from tower.core.proofs import prove  # proofs read the Machine this module defines

        entry = self._entry
        if entry is None or entry not in self._nodes:
            raise InvalidGraph(self.name, f"entry {entry!r} is not a node" if entry else
                               "no entry node: call .entry(name)")
        f = _frozen
        machine = Machine(self.name, self.state_type, entry, f(self._nodes), f(self._out),
                          self._budget, f(self._gates), f(self._recovery_map()),
                          f(self._requires))
        _check(machine)
        machine.tools()  # one object per tool name
        return replace(machine, proof=prove(machine))


def _names(tools: list[Tool | str]) -> tuple[str, ...]:
    return tuple(t.name if isinstance(t, Tool) else t for t in tools)


def _frozen(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping))


def _check(m: Machine) -> None:
    """Every name a move, budget or gate uses is a node (or a terminal); gates are whole."""
    def fail(msg: str) -> None:
        raise InvalidGraph(m.name, msg)

    known = set(m.nodes) | TERMINALS
    for source, declared in m.transitions.items():
        if source in TERMINALS:
            fail(f"terminal {source} cannot have outgoing transitions")
        if source not in m.nodes:
            fail(f"transition from unknown node {source!r}")
        if not declared.targets:
            fail(f"route from {source!r} declares no targets")
        for target in declared.targets:
            if target not in known:
                fail(f"{source!r} -> unknown node {target!r}")
        for target in declared.guards:
            if target not in declared.targets:
                fail(f"guard on {source!r} -> {target!r}, which is not a declared target")
    for node in m.nodes:
        if node not in m.transitions:
            fail(f"node {node!r} has no outgoing transition (add an edge to DONE or FAILED)")
    budget = m.budget
    if budget is not None:
        if budget.escalate_to not in known:
            fail(f"budget escalates to unknown node {budget.escalate_to!r}")
        for node in budget.max_visits:
            if node not in m.nodes:
                fail(f"budget limits visits of unknown node {node!r}")
        for what, limit in (("max_tokens", budget.max_tokens),
                            ("max_cost_usd", budget.max_cost_usd)):
            if limit is not None and limit <= 0:
                fail(f"budget {what} must be positive, got {limit!r}")
    names = [g.name for g in m.gates.values()]
    for node, gate in m.gates.items():
        where = f"gate {gate.name!r}"
        if node not in m.nodes:
            fail(f"{where} on unknown node {node!r}")
        for target in gate.targets:
            if target not in known:
                fail(f"{where} routes to unknown node {target!r}")
        if not gate.name or names.count(gate.name) > 1:
            fail(f"{where}: gate names must be non-empty and unique")
        if not gate.role:
            fail(f"{where} names no role")
        if not callable(gate.timeout) and gate.timeout.total_seconds() <= 0:
            fail(f"{where}: timeout must be positive")
        if (gate.recheck is None) != (gate.on_stale is None):
            fail(f"{where}: recheck and on_stale go together")
        for field_name in gate.editable:
            if field_name not in m.state_type.model_fields or field_name in PROTECTED_FIELDS:
                fail(f"{where}: {field_name!r} is not an editable field of "
                     f"{m.state_type.__name__}")
