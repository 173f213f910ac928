"""The engine's error family, small and precise (after python-statemachine); every class
derives from ``TowerError`` (tower/contract/failures.py).
"""

from __future__ import annotations

from typing import Any, Self

from tower.contract.failures import Code, TowerError

__all__ = ["AgentFailed", "Code", "DecisionRefused", "EffectRefused", "IllegalTransition",
           "InvalidGraph", "NodeFailed", "TowerError"]


class InvalidGraph(TowerError):
    """A graph was built wrong; raised when the agent's module is imported."""

    CODE = Code.INVALID_GRAPH

    def __init__(self, graph: str, problem: str) -> None:
        super().__init__(f"graph {graph!r} is invalid: {problem}")
        self.graph = graph
        self.problem = problem


class IllegalTransition(TowerError):
    """A move that is not declared or whose guard failed; it never happens."""

    CODE = Code.ILLEGAL_TRANSITION

    def __init__(self, source: str, target: str, why: str) -> None:
        super().__init__(f"illegal transition {source} -> {target}: {why}")
        self.source = source
        self.target = target
        self.why = why


class NodeFailed(TowerError):
    """A node could not do its work (a tool refused, model output stayed invalid): the run
    records why and moves to FAILED instead of retrying forever."""

    CODE = Code.NODE_FAILED


class EffectRefused(NodeFailed):
    """A side effect refused: an invariant does not hold, nothing was done, and retrying
    cannot change that. A tool raises it (``tower.effects``); the calling node gets it back
    with ``tool`` filled in and may route on ``code`` (the tool's own word)."""

    CODE = Code.EFFECT_REFUSED
    FIELDS = ("code", "tool")

    def __init__(self, code: str, reason: str, *, tool: str = "") -> None:
        super().__init__(f"{tool + ' ' if tool else ''}refused ({code}): {reason}")
        self.tool = tool
        self.code = code
        self.reason = reason

    @property
    def message(self) -> str:
        return self.reason

    @classmethod
    def rebuild(cls, message: str, code: Code, fields: dict[str, Any]) -> Self:
        return cls(str(fields.get("code") or ""), message, tool=str(fields.get("tool") or ""))


class DecisionRefused(TowerError):
    """The run refused the decision; nothing changed. ``code`` says why (never read the
    words); None only from a run too old to send one."""

    CODE = Code.DECISION_REFUSED
    code: Code | None  # type: ignore[assignment]  # a refusal code; None: the run gave none

    def __init__(self, reason: str, *, code: Code | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code

    @property
    def unknown_key(self) -> bool:
        """Signed with a key the run's roster did not have when it judged it."""
        return self.code == Code.UNKNOWN_KEY

    @classmethod
    def rebuild(cls, message: str, code: Code, fields: dict[str, Any]) -> Self:
        # Its code rides alone in the details (the registry reads it): never the words.
        return cls(message, code=fields.get("code"))


class AgentFailed(TowerError):
    """A run ended FAILED: its execution fails with this (final), naming agent, node, step."""

    CODE = Code.AGENT_FAILED
    FIELDS = ("agent", "node", "step", "reason")

    def __init__(self, reason: str, *, agent: str = "", node: str = "", step: int = 0) -> None:
        super().__init__(reason)
        self.reason, self.agent, self.node, self.step = reason, agent, node, step

    @classmethod
    def rebuild(cls, message: str, code: Code, fields: dict[str, Any]) -> Self:
        step = fields.get("step")
        return cls(message, agent=str(fields.get("agent", "")),
                   node=str(fields.get("node", "")), step=step if isinstance(step, int) else 0)
