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
    """A side-effecting tool refused the call because an invariant does not hold (more
    than is refundable, over the limit without an approval…). Nothing was done; a node
    may catch it and route on ``code`` instead of failing the run."""

    def __init__(self, tool: str, code: str, reason: str) -> None:
        super().__init__(f"{tool} refused ({code}): {reason}")
        self.tool = tool
        self.code = code
        self.reason = reason
