"""Property tests of the pure engine: random graphs, routes, budgets and updates.

No server. Hypothesis draws a valid graph (every node reachable and able to end),
routes that sometimes return undeclared targets, guards that sometimes refuse, and a
run of random updates (with random operator retries); the transition log must keep
the engine's promises whatever happens.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tower import ADD, APPEND, DONE, FAILED, AgentState, Graph, custom
from tower.contract.failures import IllegalTransition, InvalidGraph
from tower.core.engine import Kind, Transition, advance, start
from tower.core.graph import START, TERMINALS, Machine
from tower.core.state import UpdateError, apply_update

T0 = datetime(2026, 1, 1, tzinfo=UTC)
UNDECLARED = "nowhere"


class Prop(AgentState):
    pick: int = 0  # which declared target a route returns (one past the end: undeclared)
    allow: bool = True  # what every guard says
    trace: Annotated[list[int], APPEND] = []
    total: Annotated[int, ADD] = 0
    last: int = 0
    high: Annotated[int, custom(max, "max")] = 0


async def noop(ctx: object, state: Prop) -> dict[str, Any]:
    return {}


def allowed(state: Prop) -> bool:
    return state.allow


def route_over(targets: tuple[str, ...]) -> Any:
    def pick(state: Prop) -> str:
        i = state.pick % (len(targets) + 1)
        return targets[i] if i < len(targets) else UNDECLARED
    return pick


@st.composite
def machines(draw: st.DrawFn) -> Machine:
    names = [f"n{i}" for i in range(draw(st.integers(1, 5)))]
    g = Graph("prop", Prop)
    for name in names:
        g.node(name, noop)
    g.entry(names[0])
    for i, name in enumerate(names):
        # A chain n0 -> n1 -> ... -> DONE keeps every node reachable and able to end.
        chain = names[i + 1] if i + 1 < len(names) else DONE
        extra = draw(st.lists(st.sampled_from([*names, DONE, FAILED]), max_size=3))
        targets = tuple(dict.fromkeys([chain, *extra]))
        guarded = draw(st.sets(st.sampled_from(targets)))
        guards = {t: allowed for t in guarded}
        if len(targets) == 1 and draw(st.booleans()):
            g.edge(name, chain, guard=guards.get(chain))
        else:
            g.route(name, route_over(targets), targets, guards=guards)
    budget: dict[str, Any] = {"escalate_to": FAILED}
    if draw(st.booleans()):
        budget = {"escalate_to": draw(st.sampled_from([*names, FAILED])),
                  "max_visits": draw(st.dictionaries(st.sampled_from(names), st.integers(1, 4))),
                  "max_steps": draw(st.none() | st.integers(2, 30))}
        g.budget(**budget)
    try:
        return g.compile()
    except InvalidGraph as exc:  # Tower refuses an unbounded cycle: bound it by steps
        assert "unbounded cycle" in exc.problem, exc
        return g.budget(**{**budget, "max_steps": 60}).compile()


updates: st.SearchStrategy[dict[str, Any]] = st.fixed_dictionaries({
    "pick": st.integers(0, 4), "allow": st.booleans(),
    "trace": st.lists(st.integers(-9, 9), max_size=2), "total": st.integers(-5, 5),
    "last": st.integers(0, 99), "high": st.integers(0, 99),
})


def check_log(m: Machine, log: list[Transition], states: list[Prop]) -> None:
    """Everything a transition log must satisfy."""
    assert [t.step for t in log] == list(range(1, len(log) + 1))  # strictly increasing
    assert [s.step for s in states] == [t.step for t in log]
    assert (log[0].source, log[0].target) == (START, m.entry)
    budget = m.budget
    for before, t, after in zip(log, log[1:], states[1:], strict=False):
        assert t.source == before.target  # no jump: each move starts where the last ended
        assert after.node == t.target
        if t.source in (DONE, FAILED):
            raise AssertionError(f"{t.source} was left: {t}")
        escalated = budget is not None and t.target == budget.escalate_to and t.kind == Kind.BUDGET
        if t.target != FAILED and not escalated:
            out = m.transitions[t.source]
            assert t.target in out.targets, f"undeclared move {t.source} -> {t.target}"
            if t.target in out.guards:
                assert after.allow, f"guarded move taken with the guard false: {t}"


@given(st.data())
def test_random_runs_keep_the_log_promises(data: st.DataObject) -> None:
    m = data.draw(machines())
    state, first = start(m, Prop(), at=T0, event_id=1)
    log, states, sent = [first], [state], []
    for i in range(data.draw(st.integers(0, 40))):
        if state.node in TERMINALS:
            with pytest.raises(IllegalTransition):  # no update moves a terminal run
                advance(m, state, state.node, {}, at=T0, event_id=i)
            break
        update = data.draw(updates)
        sent.append(update)
        state, t = advance(m, state, state.node, update, at=T0, event_id=i)
        log.append(t)
        states.append(state)
    check_log(m, log, states)
    # No update is lost, whichever way the run went.
    assert state.trace == [x for u in sent for x in u["trace"]]
    assert state.total == sum(u["total"] for u in sent)
    if sent:
        assert state.last == sent[-1]["last"]
        assert state.high == max(u["high"] for u in sent)


@given(st.data())
def test_budgets_always_end_a_cycle(data: st.DataObject) -> None:
    m = data.draw(machines())
    if m.budget is None or (m.budget.max_steps is None and len(m.budget.max_visits) < len(
            m.nodes)):
        # A cycle only the budget can end, whose escalation node (a bad design) loops back.
        limits: dict[str, Any] = data.draw(st.fixed_dictionaries({
            "max_steps": st.none() | st.integers(2, 30), "max_visits": st.just({"a": 3, "b": 3})}))
        m = (Graph("bounded", Prop).node("a", noop).node("b", noop).node("stop", noop)
             .entry("a")
             .route("a", route_over(("b", DONE)), ["b", DONE], guards={DONE: allowed})
             .edge("b", "a").edge("stop", "a")
             .budget(escalate_to="stop", **limits).compile())
    assert m.budget is not None
    bound = (m.budget.max_steps or sum(m.budget.max_visits.values())) + 3
    state, _ = start(m, Prop(), at=T0, event_id=1)
    moves = 1
    while state.node not in TERMINALS:
        # The adversary keeps the run in its loop: a declared, non-terminal target, guards off.
        targets = m.transitions[state.node].targets
        stay = [i for i, t in enumerate(targets) if t not in TERMINALS] or [0]
        update = {"pick": data.draw(st.sampled_from(stay)), "allow": False}
        state, _ = advance(m, state, state.node, update, at=T0, event_id=moves)
        moves += 1
        assert moves <= bound, f"the budget did not end the cycle after {moves} moves"


@given(st.lists(updates, max_size=30), st.data())
def test_reducers_never_lose_an_update(sent: list[dict[str, Any]], data: st.DataObject) -> None:
    state = Prop()
    for update in sent:
        before = state.model_copy(deep=True)
        # A bad update between good ones is refused whole and changes nothing.
        if data.draw(st.booleans()):
            bad = {**update, data.draw(st.sampled_from(["step", "node", "nope"])): 1}
            with pytest.raises(UpdateError):
                apply_update(state, bad)
            assert state == before
        state = apply_update(state, update)
    assert state.trace == [x for u in sent for x in u["trace"]]
    assert state.total == sum(u["total"] for u in sent)
    assert state.last == (sent[-1]["last"] if sent else 0)
    assert state.high == max([0, *(u["high"] for u in sent)])
