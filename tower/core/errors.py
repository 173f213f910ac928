"""The engine's error family, small and precise (after python-statemachine)."""

from __future__ import annotations


class TowerError(Exception):
    """Base of every error the engine raises on purpose."""


class InvalidGraph(TowerError):
    """A graph was built wrong; raised when the agent's module is imported."""

    def __init__(self, graph: str, problem: str) -> None:
        super().__init__(f"graph {graph!r} is invalid: {problem}")
        self.graph = graph
        self.problem = problem


class IllegalTransition(TowerError):
    """A move that is not declared or whose guard failed; it never happens."""

    def __init__(self, source: str, target: str, why: str) -> None:
        super().__init__(f"illegal transition {source} -> {target}: {why}")
        self.source = source
        self.target = target
        self.why = why


class NodeFailed(TowerError):
    """A node could not do its work (a tool refused, model output stayed invalid).

    The run records the reason and moves to FAILED instead of retrying forever.
    """


class EffectRefused(NodeFailed):
    """A side effect refused because an invariant does not hold (more than is refundable,
    over the limit without an approval…). Nothing was done, and retrying the same call
    cannot change that.

    A tool raises it (``raise EffectRefused("over_limit", "...")``, ``tower.effects``); the
    node that called the tool gets it back, with ``tool`` filled in, and may route on
    ``code`` instead of failing the run."""

    # The failure type an effect's activity fails with (non-retryable); Tower reads it back.
    TYPE = "EffectRefused"

    def __init__(self, code: str, reason: str, *, tool: str = "") -> None:
        super().__init__(f"{tool + ' ' if tool else ''}refused ({code}): {reason}")
        self.tool = tool
        self.code = code
        self.reason = reason


# Failure types that say a tool's effect was certainly not made (nothing to reconcile):
# its arguments did not fit, or it refused.
BAD_ARGUMENTS = "BadToolArguments"
NOT_MADE = (BAD_ARGUMENTS, EffectRefused.TYPE)
# A reconcile call refused because the tool's activity is not a ``tower.effects`` tool
# (tower/effects/_guard.py): the run fails the step rather than call it again.
NOT_AN_EFFECT = "NotAnEffect"
