"""Compare a candidate run with its baseline: a scorer is ``(baseline, candidate) -> Score
| None``, sync or async, and the run's verdict is the worst score (``regressed`` beats
``changed`` beats ``same``). The built-in scorers compare status, path, tool calls, gates
and the answer (similar, not equal); ``gateway_judge`` asks a model.
"""

from __future__ import annotations

import difflib
import inspect
import json
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from tower.contract.messages import Message
from tower.contract.wire import ModelRequest
from tower.testing.evals.recording import RunSummary

if TYPE_CHECKING:
    from tower.activities.model import ModelSettings


class Change(StrEnum):
    """How a run compares with its recording: an eval's verdict on it."""

    SAME = "same"
    CHANGED = "changed"
    REGRESSED = "regressed"


RANK = {Change.SAME: 0, Change.CHANGED: 1, Change.REGRESSED: 2}


class Score(BaseModel):
    scorer: str
    verdict: Change
    detail: str = ""


Scorer = Callable[[RunSummary, RunSummary], "Score | None | Awaitable[Score | None]"]


class RunResult(BaseModel):
    source: str
    workflow_id: str
    agent: str
    verdict: Change
    scores: list[Score] = Field(default_factory=list)
    baseline: RunSummary
    candidate: RunSummary
    answered: dict[str, int] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
    seconds: float = 0.0
OK_ENDS = ("DONE", "AWAITING_APPROVAL")


def status_equal(base: RunSummary, cand: RunSummary) -> Score | None:
    """A run that ended well and now fails (or times out) regressed; any other change of
    final status or node changed."""
    if (base.status, base.node) == (cand.status, cand.node) and not cand.error.startswith(
            "timed out"):
        return None
    worse = base.status in OK_ENDS and cand.status not in OK_ENDS
    why = f"{base.status} at {base.node} -> {cand.status} at {cand.node}"
    if cand.error:
        why += f" ({cand.error[:200]})"
    return Score(scorer="status", verdict=Change.REGRESSED if worse else Change.CHANGED,
                 detail=why)


def path_equal(base: RunSummary, cand: RunSummary) -> Score | None:
    if base.trail == cand.trail:
        return None
    return Score(scorer="path", verdict=Change.CHANGED, detail=transition_diff(base, cand))


def tools_equal(base: RunSummary, cand: RunSummary) -> Score | None:
    if base.tool_calls == cand.tool_calls:
        return None
    lines = difflib.unified_diff([str(t) for t in base.tool_calls],
                                 [str(t) for t in cand.tool_calls], lineterm="", n=0)
    return Score(scorer="tools", verdict=Change.CHANGED,
                 detail="; ".join(x for x in lines if x[:1] in "+-" and x[:3] not in
                                  ("---", "+++")))


def gates_equal(base: RunSummary, cand: RunSummary) -> Score | None:
    if (base.gates, base.decisions) == (cand.gates, cand.decisions):
        return None
    return Score(scorer="gates", verdict=Change.CHANGED,
                 detail=f"gates {base.gates or '-'} ({base.decisions} decided) -> "
                        f"{cand.gates or '-'} ({cand.decisions} decided)")


ALIKE = 0.8  # difflib's ratio two answers must reach to be the same


def answer_similar(base: RunSummary, cand: RunSummary) -> Score | None:
    """The final answers are alike (``ALIKE``), not equal."""
    made = {**base.made, **cand.made}
    ratio = difflib.SequenceMatcher(None, _named(base.answer, made),
                                    _named(cand.answer, made)).ratio()
    if ratio >= ALIKE:
        return None
    return Score(scorer="answer", verdict=Change.CHANGED,
                 detail=f"{ratio:.0%} alike: {cand.answer[:160]!r}")


def _named(answer: str, made: dict[str, str]) -> str:
    """``answer`` with each id a tool made up, in either run, read as where it came from: a
    tool's fresh id ("Paid ACME (pay_…)") is no change, nor a recorded model reply that
    repeats the id the recorded run's tool made."""
    for made_id, origin in made.items():
        answer = answer.replace(made_id, origin)
    return answer


BUILT_IN: list[Scorer] = [status_equal, path_equal, tools_equal, gates_equal, answer_similar]

JUDGE_PROMPT = (
    "You compare two answers an AI agent gave to the same request: the baseline and the "
    "candidate. Reply with JSON {\"verdict\": \"same\" | \"changed\" | \"regressed\", "
    "\"why\": \"...\"}: same if they mean the same, regressed if the candidate is worse for "
    "the customer, else changed.")


def gateway_judge(settings: ModelSettings) -> Scorer:
    """A model judge (``tower eval --judge``): ``settings``' models, asked as agent ``eval``,
    node ``judge``. An answer it cannot read is a change, never a silent pass (the scripted
    model has no script for it: offline, every changed answer is a change)."""
    from tower.activities.model import ModelActivities

    gateway = ModelActivities(settings)

    async def judged(base: RunSummary, cand: RunSummary) -> Score | None:
        if base.answer == cand.answer:
            return None
        asked = json.dumps({"request": base.workflow_id, "baseline": base.answer,
                            "candidate": cand.answer})
        reply = await gateway.complete(ModelRequest(
            agent="eval", node="judge", system=JUDGE_PROMPT,
            messages=[Message(role="user", content=asked)]))
        text = reply.content or ""
        try:
            said = json.loads(text)
            verdict, why = Change(said["verdict"]), str(said.get("why", ""))
        except (ValueError, KeyError, TypeError):
            return Score(scorer="judge", verdict=Change.CHANGED,
                         detail=f"unreadable verdict: {text[:120]!r}")
        return None if verdict is Change.SAME else Score(scorer="judge", verdict=verdict,
                                                           detail=why)

    return judged


async def score(base: RunSummary, cand: RunSummary,
                scorers: Sequence[Scorer]) -> tuple[Change, list[Score]]:
    found: list[Score] = []
    for scorer in scorers:
        result: Any = scorer(base, cand)
        if inspect.isawaitable(result):
            result = await result
        if result is not None:
            found.append(result)
    return max((s.verdict for s in found), key=RANK.__getitem__, default=Change.SAME), found


def transition_diff(base: RunSummary, cand: RunSummary) -> str:
    """The moves the two runs took a different number of times (``-a->b`` only the
    baseline's, ``+a->b`` only the candidate's, ``a->b: 4 fewer visits (5 -> 1)``), then the
    two paths."""
    old, new = Counter(base.moves), Counter(cand.moves)
    parts = []
    for a, b in dict.fromkeys([*base.moves, *cand.moves]):  # in the order first taken
        was, now = old[(a, b)], new[(a, b)]
        if was == now:
            continue
        if not now or not was:
            times = f" ({plural(was or now, 'visit')})" if max(was, now) > 1 else ""
            parts.append(f"{'-' if not now else '+'}{a}->{b}{times}")
        else:
            more = "more" if now > was else "fewer"
            parts.append(f"{a}->{b}: {plural(abs(now - was), 'visit', more)} ({was} -> {now})")
    path = f"{' > '.join(base.trail)}  =>  {' > '.join(cand.trail)}"
    return f"{'; '.join(parts)} ({path})" if parts else path


def plural(n: int, noun: str, adjective: str = "") -> str:
    """``1 visit``, ``4 fewer visits``: the plural only when ``n`` is not 1."""
    return " ".join(x for x in (str(n), adjective, noun if n == 1 else f"{noun}s") if x)
