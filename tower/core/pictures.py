"""Pictures of a machine, made from the moves it declares (the real graph, never a
hand-drawn copy): a Mermaid state diagram, and an SVG drawn here in pure Python (no Graphviz,
no network: `tower graph AGENT --format svg`, the inbox's picture of a run waiting at a node,
the eval report's moves that gained or lost runs).

The SVG is a simple layered drawing: top to bottom from START; moves back up go round the
right-hand side. Deterministic: the same machine and node give the same SVG. Colours are
presentation attributes, not ``style``: the inbox's Content-Security-Policy forbids inline
styles.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from html import escape

from tower.core.gates import Gate
from tower.core.graph import DONE, FAILED, START, Machine


def moves(machine: Machine) -> Iterator[tuple[str, str, str, str]]:
    """(source, target, label, kind) for every move a run can make: the entry, the declared
    moves (the edge's label or its route's name, and the guard that checks it), the gates'
    exits, the error handlers and the budget's escalations; kind is move, gate or error."""
    yield START, machine.entry, "", "move"
    for source, out in machine.transitions.items():
        for target in out.targets:
            label = out.labels.get(target) or (out.route.__name__ if out.route else "")
            guard = out.guards.get(target)
            if guard is not None:
                label = f"{label} [{guard.__name__}]".strip()
            yield source, target, label, "move"
    for node, gate in machine.gates.items():
        for target, why in gate_exits(gate).items():
            yield node, target, "gate " + " / ".join(why), "gate"
    for source, handler in machine.recovery.items():
        yield source, handler, "error", "error"
    budget = machine.budget
    if budget is not None:
        # Entering a node past its visit limit escalates instead: that move is drawn too.
        # (A gate's exits count: a timeout or rejection can enter a node past its limit.)
        enters = [(source, out.targets) for source, out in machine.transitions.items()]
        enters += [(node, tuple(gate_exits(gate))) for node, gate in machine.gates.items()]
        for limited, limit in budget.max_visits.items():
            for source in dict.fromkeys(s for s, targets in enters if limited in targets):
                yield (source, budget.escalate_to, f"over budget ({limited} > {limit} visits)",
                       "error")


def gate_exits(gate: Gate) -> dict[str, list[str]]:
    """Where a gate sends a run other than on through its node: target -> why."""
    exits: dict[str, list[str]] = {}
    for target, why in ((gate.on_reject, "rejected"), (gate.on_timeout, "timeout"),
                        (gate.on_stale, "stale")):
        if target:
            exits.setdefault(target, []).append(why)
    return exits


def to_mermaid(machine: Machine) -> str:
    def ref(node: str) -> str:
        return "[*]" if node in (START, DONE) else node

    lines = ["stateDiagram-v2"]
    for source, target, label, _ in moves(machine):
        lines.append(f"    {ref(source)} --> {ref(target)}" + (f": {label}" if label else ""))
    for node, gate in machine.gates.items():
        lines.append(f"    note left of {node}: gate {gate.name} {gate.when} {node}, "
                     f"role {gate.role}")
    budget = machine.budget
    if budget is not None:
        if budget.max_steps is not None:
            lines.append(f"    note right of {machine.entry}: at most {budget.max_steps} "
                         f"steps, then {budget.escalate_to}")
        spend = [limit for limit in budget.limits() if "tokens" in limit or "$" in limit]
        if spend:
            lines.append(f"    note right of {budget.escalate_to}: spend budget: "
                         f"{', '.join(spend)}")
    if any(FAILED in out.targets for out in machine.transitions.values()):
        lines.append(f"    {FAILED} --> [*]")
    return "\n".join(lines) + "\n"


FONT = "DejaVu Sans, Verdana, Arial, sans-serif"
CHAR, SMALL = 7.2, 6.0  # average glyph widths at 12 px and 10 px
GAP_X, GAP_Y, MARGIN = 40, 84, 24
LEFT = 130  # room left of the nodes for the "waiting here" mark
COLOURS = {"move": "#555555", "gate": "#c77800", "error": "#b03030",
           # An eval's picture: moves that gained runs, and moves that lost them.
           "more": "#1b7f3b", "less": "#c62828"}


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    label: str
    kind: str  # move | gate | error


@dataclass
class Box:
    name: str
    lines: list[str]
    kind: str  # start | node | gate | end | dummy (a point a long move passes through)
    x: float = 0.0  # centre
    y: float = 0.0  # top
    w: float = 0.0
    h: float = 0.0


def machine_svg(machine: Machine, waiting: str | None,
                moved: Mapping[tuple[str, str], int] | None = None) -> str:
    """The SVG markup of ``machine`` with ``waiting`` highlighted (KeyError: no such node);
    ``moved``: moves whose traffic changed (visits gained, or lost when negative), drawn
    thick, green or red, with the count (``tower eval``)."""
    if waiting is not None and waiting not in machine.nodes:
        raise KeyError(waiting)
    moved = {move: n for move, n in (moved or {}).items() if n}
    declared = _edges(machine)
    drawn = {(e.source, e.target) for e in declared}
    # Moves runs took that the machine's own moves do not show (a budget's escalation, a
    # failure, a node the candidate dropped) are drawn too: the picture must show them all.
    taken = [Edge(a, b, "", "move") for a, b in moved if (a, b) not in drawn]
    edges = [_moved(e, moved.get((e.source, e.target), 0)) for e in declared + taken]
    boxes = _boxes(machine, edges)
    layers = _layers(list(boxes), edges)
    rank = {name: i for i, layer in enumerate(layers) for name in layer}
    routes = _long_edges(edges, rank, boxes, layers)
    _place(boxes, _untangle(layers, edges, routes))
    drawing = Drawing()
    lane = max(b.x + b.w / 2 for b in boxes.values())  # moves back up go right of every node
    for edge in edges:
        a, b = boxes[edge.source], boxes[edge.target]
        if edge.source == edge.target:
            drawing.loop(a, edge)
        elif rank[edge.target] <= rank[edge.source]:
            lane += 34
            drawing.back(a, b, edge, lane)
        else:
            drawing.forward(_ends(a, b, edges, boxes), [boxes[d] for d in routes[edge]], edge)
    title = escape(f"agent {machine.name}" + (f", waiting at {waiting}" if waiting else ""))
    return drawing.svg([_box(b, b.name == waiting) for b in boxes.values()
                        if b.kind != "dummy"], title)


def _moved(edge: Edge, visits: int) -> Edge:
    if not visits:
        return edge
    label = f"{visits:+d} visit{'' if abs(visits) == 1 else 's'}" + (
        f" · {edge.label}" if edge.label else "")
    return Edge(edge.source, edge.target, label, "more" if visits > 0 else "less")


def _edges(machine: Machine) -> list[Edge]:
    found: dict[tuple[str, str], Edge] = {}
    for source, target, label, kind in moves(machine):
        old = found.get((source, target))
        if old is not None:  # one arrow, every reason for it, drawn as its gate's or error's
            label = " / ".join(x for x in (old.label, label) if x)
            kind = min(old.kind, kind, key=("gate", "error", "move").index)
        found[(source, target)] = Edge(source, target, label, kind)
    return list(found.values())


def _boxes(machine: Machine, edges: list[Edge]) -> dict[str, Box]:
    boxes = {START: Box(START, [], "start", w=16, h=16)}
    visits = machine.budget.max_visits if machine.budget else {}
    for name in machine.nodes:
        gate = machine.gates.get(name)
        lines = [name] + ([f"GATE {gate.name} · role {gate.role}"] if gate else []) + (
            [f"≤ {visits[name]} visits"] if name in visits else [])
        width = max(len(line) for line in lines) * CHAR + 28
        boxes[name] = Box(name, lines, "gate" if gate else "node", w=width, h=18 * len(lines) + 16)
    for end in (DONE, FAILED):
        if any(e.target == end for e in edges):
            boxes[end] = Box(end, [end], "end", w=64, h=40)
    for name in dict.fromkeys(n for e in edges for n in (e.source, e.target) if n not in boxes):
        boxes[name] = Box(name, [name], "node", w=len(name) * CHAR + 28, h=34)  # not declared
    return boxes


def _layers(names: list[str], edges: list[Edge]) -> list[list[str]]:
    """Layers top to bottom: longest path from START over the moves that are not back
    edges of a depth-first walk; DONE and FAILED at the bottom."""
    out: dict[str, list[str]] = {n: [] for n in names}
    for e in edges:
        out[e.source].append(e.target)
    order: list[str] = []
    back: set[tuple[str, str]] = set()
    state: dict[str, int] = {}  # 1 on the walk's path, 2 done

    def walk(node: str) -> None:
        state[node] = 1
        for nxt in out[node]:
            if state.get(nxt) == 1:
                back.add((node, nxt))
            elif nxt not in state:
                walk(nxt)
        state[node] = 2
        order.append(node)

    for n in names:
        if n not in state:
            walk(n)
    rank = dict.fromkeys(names, 0)
    for node in reversed(order):  # a topological order of the forward moves
        for nxt in out[node]:
            if (node, nxt) not in back and nxt != node and nxt not in (DONE, FAILED):
                rank[nxt] = max(rank[nxt], rank[node] + 1)
    bottom = max([r for n, r in rank.items() if n not in (DONE, FAILED)], default=0) + 1
    for end in (DONE, FAILED):
        if end in rank:
            rank[end] = bottom
    first_seen = {n: i for i, n in enumerate(reversed(order))}
    return [sorted((n for n in names if rank[n] == r), key=first_seen.__getitem__)
            for r in range(max(rank.values()) + 1)]


def _long_edges(edges: list[Edge], rank: dict[str, int], boxes: dict[str, Box],
                layers: list[list[str]]) -> dict[Edge, list[str]]:
    """For each move down more than one layer, a point in each layer it crosses: the
    point takes room in its layer, so the move goes round the nodes, not through them."""
    routes: dict[Edge, list[str]] = {}
    for i, e in enumerate(edges):
        routes[e] = []
        if e.source == e.target or rank[e.target] <= rank[e.source]:
            continue
        for layer in range(rank[e.source] + 1, rank[e.target]):
            name = f"~{i}.{layer}"
            boxes[name] = Box(name, [], "dummy", w=14, h=0)
            layers[layer].append(name)
            routes[e].append(name)
    return routes


def _untangle(layers: list[list[str]], edges: list[Edge],
              routes: dict[Edge, list[str]]) -> list[list[str]]:
    """A few barycentre sweeps, down then up: each node moves toward the mean place of its
    neighbours in the layer above (below)."""
    links: list[tuple[str, str]] = []
    for e in edges:
        chain = [e.source, *routes[e], e.target]
        links.extend(zip(chain, chain[1:], strict=False))
    rank = {n: i for i, layer in enumerate(layers) for n in layer}
    links = [(a, b) for a, b in links if rank[b] == rank[a] + 1]
    for sweep in range(6):
        down = sweep % 2 == 0
        for layer in (layers[1:] if down else layers[-2::-1]):
            where = {n: i for row in layers for i, n in enumerate(row)}
            near = {n: [where[a] for a, b in links if b == n] if down else
                    [where[b] for a, b in links if a == n] for n in layer}
            layer.sort(key=lambda n: sum(near[n]) / len(near[n]) if near[n] else where[n])
    return layers


def _place(boxes: dict[str, Box], layers: list[list[str]]) -> None:
    widths = [sum(boxes[n].w for n in layer) + GAP_X * (len(layer) - 1) for layer in layers]
    widest = max(widths)
    y = MARGIN + 18.0
    for layer, used in zip(layers, widths, strict=True):
        x = LEFT + (widest - used) / 2
        tallest = max(boxes[n].h for n in layer)
        for n in layer:
            box = boxes[n]
            box.x, box.y = x + box.w / 2, y + (tallest - box.h) / 2
            x += box.w + GAP_X
        y += tallest + GAP_Y


def _ends(a: Box, b: Box, edges: list[Edge],
          boxes: dict[str, Box]) -> tuple[float, float, float, float]:
    """Where a move leaves ``a`` and enters ``b``: spread over their widths, so that
    several moves from (or into) one node do not start (or end) at one point."""
    def spread(box: Box, others: list[str], other: str) -> float:
        if box.kind in ("start", "end") or len(others) < 2:
            return box.x
        others = sorted(others, key=lambda n: boxes[n].x)
        step = box.w * 0.6 / (len(others) - 1)
        return box.x - box.w * 0.3 + step * others.index(other)

    down = [e for e in edges if e.source != e.target and boxes[e.target].y > boxes[e.source].y]
    outs = [e.target for e in down if e.source == a.name]
    ins = [e.source for e in down if e.target == b.name]
    return spread(a, outs, b.name), a.y + a.h, spread(b, ins, a.name), b.y


class Drawing:
    """The moves and their labels, then the nodes on top; the picture's size follows
    from what was drawn."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.labels: list[str] = []
        self.placed: list[tuple[float, float, float]] = []  # left, top, width of each label
        self.right = 0.0
        self.bottom = 0.0

    def extend(self, x: float, y: float) -> None:
        self.right, self.bottom = max(self.right, x), max(self.bottom, y)

    def forward(self, ends: tuple[float, float, float, float], via: list[Box], edge: Edge) -> None:
        x1, y1, x2, y2 = ends
        points = [(x1, y1), *[(d.x, d.y) for d in via], (x2, y2)]
        d = f"M{x1:.1f},{y1:.1f}"
        for (ax, ay), (bx, by) in zip(points, points[1:], strict=False):
            bend = (by - ay) / 2
            d += f" C{ax:.1f},{ay + bend:.1f} {bx:.1f},{by - bend:.1f} {bx:.1f},{by:.1f}"
        self.parts.append(f'<path class="edge" d="{d}" {_stroke(edge)}/>')
        (ax, ay), (bx, by) = points[0], points[1]
        self.label(ax + (bx - ax) * 0.55, ay + (by - ay) * 0.55, edge)

    def back(self, a: Box, b: Box, edge: Edge, lane: float) -> None:
        x1, y1 = a.x + a.w / 2, a.y + a.h / 2
        x2, y2 = b.x + b.w / 2, b.y + b.h / 2
        self.parts.append(f'<path class="edge" d="M{x1:.1f},{y1:.1f} C{lane:.1f},{y1:.1f} '
                          f'{lane:.1f},{y2:.1f} {x2:.1f},{y2:.1f}" {_stroke(edge)}/>')
        self.extend(lane, y1)
        self.label(lane - 4, (y1 + y2) / 2, edge, anchor="start")

    def loop(self, a: Box, edge: Edge) -> None:
        x, top, bottom = a.x + a.w / 2, a.y + 6, a.y + a.h - 6
        self.parts.append(f'<path class="edge" d="M{x:.1f},{top:.1f} C{x + 40:.1f},'
                          f'{top - 8:.1f} {x + 40:.1f},{bottom + 8:.1f} {x:.1f},{bottom:.1f}" '
                          f'{_stroke(edge)}/>')
        self.label(x + 34, (top + bottom) / 2, edge, anchor="start")

    def label(self, x: float, y: float, edge: Edge, anchor: str = "middle") -> None:
        if not edge.label:
            return
        w = len(edge.label) * SMALL + 6
        left = x - w / 2 if anchor == "middle" else x - 3
        if left < MARGIN / 2:  # a long label stays whole inside the picture
            x, left = x + MARGIN / 2 - left, MARGIN / 2
        # Labels near one another would overprint: move this one down until it is clear.
        while any(left < pl + pw and pl < left + w and abs(y - py) < 13
                  for pl, py, pw in self.placed):
            y += 13
        self.placed.append((left, y, w))
        self.extend(left + w, y + 6)
        self.labels.append(
            f'<rect x="{left:.1f}" y="{y - 9:.1f}" width="{w:.1f}" height="13" fill="#ffffff" '
            f'fill-opacity="0.85"/><text x="{x:.1f}" y="{y + 1:.1f}" font-size="10" '
            f'text-anchor="{anchor}" fill="{COLOURS[edge.kind]}">{escape(edge.label)}</text>')

    def svg(self, nodes: list[tuple[str, float, float]], title: str) -> str:
        for _, right, bottom in nodes:
            self.extend(right, bottom)
        width, height = self.right + MARGIN, self.bottom + MARGIN
        return "\n".join([
            f'<svg xmlns="http://www.w3.org/2000/svg" class="machine" width="{width:.0f}" '
            f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" role="img" '
            f'aria-label="{title}" font-family="{FONT}" font-size="12">',
            f"<title>{title}</title>", _markers(), *self.parts, *self.labels,
            *(markup for markup, _, _ in nodes), "</svg>"])


def _markers() -> str:
    return "<defs>" + "".join(
        f'<marker id="arrow-{kind}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        f'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
        f'fill="{colour}"/></marker>' for kind, colour in COLOURS.items()) + "</defs>"


def _stroke(edge: Edge) -> str:
    dash = ' stroke-dasharray="6 4"' if edge.kind in ("gate", "error") else ""
    width = 3.2 if edge.kind in ("more", "less") else 1.4
    return (f'fill="none" stroke="{COLOURS[edge.kind]}" stroke-width="{width}"{dash} '
            f'marker-end="url(#arrow-{edge.kind})"')


def _box(box: Box, waiting: bool) -> tuple[str, float, float]:
    """A node's markup, and how far right and down it reaches."""
    name = escape(box.name)
    attrs = f'class="node{" waiting" if waiting else ""}" data-node="{name}"'
    fill, stroke, width = {"start": ("#000000", "#000000", 1), "end": (
        "#f8d8d8" if box.name == FAILED else "#d8f0d8",
        "#b03030" if box.name == FAILED else "#3c8c3c", 1.5),
        "gate": ("#fde9c8", "#c77800", 2), "node": ("#eef3fb", "#4a6fa5", 1.2)}[box.kind]
    if waiting:
        fill, stroke, width = "#ffd54f", "#c62828", 4
    left, top = box.x - box.w / 2, box.y
    paint = f'fill="{fill}" stroke="{stroke}" stroke-width="{width}"'
    if box.kind == "start":
        shape = f'<circle cx="{box.x:.1f}" cy="{top + 8:.1f}" r="8" {paint}/>'
    elif box.kind == "end":
        cy = top + box.h / 2
        shape = (f'<ellipse cx="{box.x:.1f}" cy="{cy:.1f}" rx="32" ry="20" {paint}/>'
                 f'<ellipse cx="{box.x:.1f}" cy="{cy:.1f}" rx="28" ry="16" fill="none" '
                 f'stroke="{stroke}"/>')
    elif box.kind == "gate":
        c, right, low = 10, left + box.w, top + box.h
        points = (f"{left + c},{top} {right - c},{top} {right},{top + c} {right},{low - c} "
                  f"{right - c},{low} {left + c},{low} {left},{low - c} {left},{top + c}")
        shape = f'<polygon points="{points}" {paint}/>'
    else:
        shape = (f'<rect x="{left:.1f}" y="{top:.1f}" width="{box.w:.1f}" height="{box.h:.1f}" '
                 f'rx="8" {paint}/>')
    heading = ' font-weight="bold"' if waiting else ""
    small = ' font-size="10"'
    texts = "".join(
        f'<text x="{box.x:.1f}" y="{top + 21 + 18 * i:.1f}" text-anchor="middle" '
        f'fill="#000000"{small if i else heading}>{escape(line)}</text>'
        for i, line in enumerate(box.lines))
    if box.kind == "end":
        texts = (f'<text x="{box.x:.1f}" y="{top + box.h / 2 + 4:.1f}" text-anchor="middle" '
                 f'font-size="10" fill="#000000">{name}</text>')
    mark = ""
    if waiting:
        mark = (f'<text x="{left - 8:.1f}" y="{top + box.h / 2 + 4:.1f}" text-anchor="end" '
                f'font-weight="bold" fill="#c62828">waiting here ▶</text>')
    return f"<g {attrs}>{shape}{texts}{mark}</g>", left + box.w, top + box.h
