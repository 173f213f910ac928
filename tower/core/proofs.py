"""Safety proven on the graph when it compiles (``prove``): a broken property is an
``InvalidGraph`` naming the path, at import. ``tower graph --check`` prints the proof; the
audit (tower/core/audit.py) checks it on every recorded run.

0. Every node is reachable from the entry, and has a way to DONE or FAILED.
1. Every cycle is bounded: it passes a node with ``max_visits``, or the graph has
   ``max_steps``, or a node declares ``unbounded="why"``. An escalation is no cycle.
2. Every node with a side-effecting tool is behind a gate: on the node itself, before it
   runs, or every path to it passes a gated node by a move an approval allows (not a
   reject, timeout or stale route, a recovery or an escalation); else it declares
   ``ungated="why"``. A gate whose ``applies`` finds no decision needed still counts.
3. ``Graph.require(node, after=gate)``: every path to ``node`` passes ``gate``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from tower.contract.failures import InvalidGraph
from tower.core.graph import START, TERMINALS, Machine

ARROW = " → "


@dataclass(frozen=True)
class Loop:
    """A strongly connected part of the graph (its nodes can reach each other)."""

    nodes: tuple[str, ...]
    bound: str  # what bounds every cycle in it


@dataclass(frozen=True)
class Effect:
    """A node with side-effecting tools and what guards it."""

    node: str
    tools: tuple[str, ...]
    behind: tuple[str, ...] = ()  # the gates it is behind (any one approves a run of it)
    ungated: str | None = None  # or why it needs none


@dataclass(frozen=True)
class Proof:
    """What ``prove`` established for a machine."""

    loops: tuple[Loop, ...]
    effects: tuple[Effect, ...]
    requires: tuple[tuple[str, str], ...]  # (node, gate): every path to node passes gate

    def effect(self, node: str) -> Effect | None:
        return next((e for e in self.effects if e.node == node), None)

    def lines(self) -> list[str]:
        """The proof in words, one property a line (``tower graph --check``)."""
        out = [f"cycles through {', '.join(loop.nodes)}: bounded by {loop.bound}"
               for loop in self.loops]
        out += ["no cycles"] if not self.loops else []
        for e in self.effects:
            what = f"{e.node} calls {', '.join(e.tools)}"
            out.append(f"{what}: ungated — {e.ungated}" if e.ungated is not None
                       else f"{what}: behind gate {' or '.join(e.behind)}")
        out += ["no side-effecting tools"] if not self.effects else []
        out += [f"{node} only after gate {gate}: holds" for node, gate in self.requires]
        return out


def prove(m: Machine) -> Proof:
    """The proof of ``m``'s safety properties; InvalidGraph naming the path that breaks one."""
    succ = successors(m)
    unreachable = sorted(set(m.nodes) - set(_search(succ, m.entry)))
    if unreachable:
        raise InvalidGraph(m.name, f"unreachable from {m.entry!r}: {', '.join(unreachable)}")
    stuck = [n for n in sorted(m.nodes) if not TERMINALS & set(_search(succ, n))]
    if stuck:
        raise InvalidGraph(m.name, f"no path to DONE or FAILED from: {', '.join(stuck)}")
    return Proof(_loops(m), _effects(m), _requires(m))


def successors(m: Machine, *, blocked: Collection[str] = (),
               escalations: bool = True) -> dict[str, set[str]]:
    """Where each node may go next (DONE and FAILED only when declared). A node in
    ``blocked`` keeps only the moves it makes without an approval: its gate's routes, its
    recovery and the escalation."""
    succ: dict[str, set[str]] = {}
    for name in m.nodes:
        out: set[str] = set()
        declared, gate = m.transitions.get(name), m.gates.get(name)
        if declared is not None and name not in blocked:
            out.update(declared.targets)
        if gate is not None:
            out.update(gate.targets)
        if name in m.recovery:
            out.add(m.recovery[name])
        if escalations and m.budget is not None:
            out.add(m.budget.escalate_to)
        succ[name] = out
    return succ


def path_to(succ: Mapping[str, Collection[str]], entry: str, goal: str) -> list[str] | None:
    """The shortest path START → entry → ... → goal in ``succ``, or None."""
    parents = _search(succ, entry)
    if goal not in parents:
        return None
    path: list[str] = []
    at: str | None = goal
    while at is not None:
        path.append(at)
        at = parents[at]
    return [START, *reversed(path)]


def _search(succ: Mapping[str, Collection[str]], start: str) -> dict[str, str | None]:
    """Every node reachable from ``start`` in ``succ``, each with its parent on a shortest
    path (breadth first, in name order: a path is the same on every run)."""
    parents: dict[str, str | None] = {start: None}
    todo = deque([start])
    while todo:
        node = todo.popleft()
        for nxt in sorted(succ.get(node, ())):
            if nxt not in parents:
                parents[nxt] = node
                todo.append(nxt)
    return parents


def _loops(m: Machine) -> tuple[Loop, ...]:
    succ = successors(m, escalations=False)
    budget = m.budget
    visits = dict(budget.max_visits) if budget is not None else {}
    steps = budget.max_steps if budget is not None else None
    outside = {n: node.unbounded for n, node in m.nodes.items() if node.unbounded is not None}
    if steps is None:
        bounded = set(visits) | set(outside)
        rest = {n: {t for t in succ[n] if t not in bounded} for n in succ if n not in bounded}
        cycle = _cycle(rest)
        if cycle is not None:
            raise InvalidGraph(m.name, f"unbounded cycle {ARROW.join(cycle)}: give one of its "
                               "nodes a visit budget (.budget(max_visits={...})) or the graph a "
                               "max_steps, or declare .node(..., unbounded=\"why\")")
    loops = []
    order = list(m.nodes)
    for part in _cyclic_parts(succ):
        nodes = tuple(sorted(part, key=order.index))
        bounds = [f"{n} ≤ {visits[n]} visits" for n in nodes if n in visits]
        bounds += [f"{n} (unbounded: {outside[n]})" for n in nodes if n in outside]
        bounds += [f"≤ {steps} steps"] if steps is not None else []
        loops.append(Loop(nodes, ", ".join(bounds)))
    in_loops = {n for loop in loops for n in loop.nodes}
    for n in sorted(set(outside) - in_loops):
        raise InvalidGraph(m.name, f"node {n!r} declares unbounded= but is on no cycle")
    return tuple(loops)


def _effects(m: Machine) -> tuple[Effect, ...]:
    everywhere = successors(m, blocked=set(m.gates))
    effects = []
    for name, node in m.nodes.items():
        tools = tuple(t for t in node.tools if getattr(node.specs.get(t), "side_effect", False))
        if not tools:
            if node.ungated is not None and not m.external_tools() & set(node.tools):
                raise InvalidGraph(m.name, f"node {name!r} declares ungated= but calls no "
                                           "side-effecting tool")
            continue
        own = m.gates.get(name)
        exposed = (None if own is not None and own.when == "before"
                   else path_to(everywhere, m.entry, name))
        if exposed is None:
            if node.ungated is not None:
                raise InvalidGraph(m.name, f"node {name!r} declares ungated= but is behind a "
                                           "gate: remove the declaration")
            effects.append(Effect(name, tools, _behind(m, name)))
        elif node.ungated is None:
            raise InvalidGraph(m.name, (
                f"node {name!r} calls side-effecting {', '.join(tools)} on a path with no "
                f"approval gate: {ARROW.join(exposed)}. Gate it (.gate({name!r}, Gate(...)) "
                "or a gate on every path to it), let the model only propose the tool in an "
                f"earlier node (proposes=[...]), or declare .node({name!r}, ..., "
                "ungated=\"why\")"))
        else:
            effects.append(Effect(name, tools, (), node.ungated))
    return tuple(effects)


def _behind(m: Machine, node: str) -> tuple[str, ...]:
    """The gates ``node`` is behind: each one alone, or every gate on some path to it."""
    alone = [g.name for g in m.gates.values() if covers(m, g.name, node)]
    if alone:
        return tuple(alone)
    succ = successors(m)
    return tuple(g.name for g in m.gates.values()
                 if g.node == node or path_to(succ, g.node, node) is not None)


def covers(m: Machine, gate_name: str, node: str) -> bool:
    """Whether every path from the entry to ``node`` passes gate ``gate_name``."""
    gate = m.gate_named(gate_name)
    assert gate is not None
    if gate.node == node:
        return gate.when == "before"
    return path_to(successors(m, blocked={gate.node}), m.entry, node) is None


def _requires(m: Machine) -> tuple[tuple[str, str], ...]:
    held = []
    for node, gates in m.requires.items():
        if node not in m.nodes:
            raise InvalidGraph(m.name, f"require names unknown node {node!r}")
        for name in gates:
            gate = m.gate_named(name)
            if gate is None:
                known = ", ".join(g.name for g in m.gates.values()) or "none"
                raise InvalidGraph(m.name, f"require: {node!r} after unknown gate {name!r} "
                                           f"(gates: {known})")
            if not covers(m, name, node):
                path = path_to(successors(m, blocked={gate.node}), m.entry, node) or []
                where = ("its gate approves after it runs" if gate.node == node
                         else f"the path {ARROW.join(path)} does not pass it")
                raise InvalidGraph(m.name, f"node {node!r} must come after gate {name!r}, "
                                           f"but {where}")
            held.append((node, name))
    return tuple(held)


def _cycle(succ: Mapping[str, Collection[str]]) -> list[str] | None:
    """A cycle in ``succ`` as a path that ends where it began (through the smallest node on
    one), or None."""
    cyclic = _cyclic_parts(succ)
    if not cyclic:
        return None
    part = set(min(cyclic, key=min))
    start = min(part)
    inner = {n: {t for t in succ.get(n, ()) if t in part} for n in part}
    path = path_to(inner, min(inner[start]), start)
    assert path is not None  # a strongly connected part: every node reaches every other
    return [start, *path[1:]]


def _cyclic_parts(succ: Mapping[str, Collection[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of ``succ`` that hold a cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    parts: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(succ.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part: list[str] = []
            while not part or part[-1] != v:
                part.append(stack.pop())
            parts.append(part)

    for v in sorted(succ):
        if v not in index:
            visit(v)
    return [part for part in parts if len(part) > 1 or part[0] in succ.get(part[0], ())]
