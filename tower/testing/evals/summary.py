"""The figures an eval compares of one run (``recording`` reads them from its history).

``trail`` is the path of states as the history shows it (the nodes the run published or
worked in, repeats folded), so a recording made by code that no longer exists reads as
the candidate's new run does.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

GATE_MARK = "notify approvers · gate "


class ToolCall(BaseModel):
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)

    def __str__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in sorted(self.arguments.items()))
        return f"{self.name}({args})"


class RunSummary(BaseModel):
    """One run as an eval sees it."""

    workflow_id: str
    agent: str
    status: str  # DONE | FAILED | AWAITING_APPROVAL | RUNNING | TERMINATED ...
    node: str
    trail: list[str] = Field(default_factory=list)
    tool_calls: list[ToolCall] = Field(default_factory=list)
    model_calls: int = 0
    models: list[str] = Field(default_factory=list)
    gates: list[str] = Field(default_factory=list)  # gates opened, in order
    decisions: int = 0  # decisions the run took (refused ones are not counted)
    tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0
    answer: str = ""
    error: str = ""
    made: dict[str, str] = Field(default_factory=dict)  # an id its tools made -> <tool.field>

    @property
    def moves(self) -> list[tuple[str, str]]:
        """The trail's transitions, START first."""
        path = ["START", *self.trail]
        return list(zip(path, path[1:], strict=False))

    def follow(self, node: str) -> None:
        """The run worked in (or published) ``node``: the trail's next state, unless repeated."""
        if node and (not self.trail or self.trail[-1] != node):
            self.trail.append(node)

    def failed_in(self, node: str) -> None:
        """The node a run failed in (AgentFailed's details), before the FAILED it published."""
        end = len(self.trail) - 1 if self.trail and self.trail[-1] == "FAILED" else len(self.trail)
        if end == 0 or self.trail[end - 1] != node:
            self.trail.insert(end, node)


def produced(tool: str, result: Any, out: dict[str, str], path: str = "") -> None:
    """Remember the ids a tool made up by where they came from, so a later call passing one
    on reads the same in every run."""
    if isinstance(result, dict):
        for key, item in result.items():
            produced(tool, item, out, f"{path}.{key}" if path else key)
    elif isinstance(result, str) and len(result) >= 6 and path.endswith(("id", "fingerprint")):
        out.setdefault(result, f"<{tool}.{path}>")


def derived(arguments: Any, made: dict[str, str]) -> Any:
    """``arguments`` with each id a tool made up named by where it came from (``produced``)."""
    if isinstance(arguments, dict):
        return {k: derived(v, made) for k, v in arguments.items()}
    if isinstance(arguments, list):
        return [derived(v, made) for v in arguments]
    return made.get(arguments, arguments) if isinstance(arguments, str) else arguments


def answer(state: dict[str, Any]) -> str:
    """What the run answered: its ``reply`` field, else its last assistant message."""
    if isinstance(state.get("reply"), str) and state["reply"]:
        return str(state["reply"])
    said = [m.get("content", "") for m in state.get("messages", [])
            if isinstance(m, dict) and m.get("role") == "assistant"]
    return str(said[-1]) if said else ""
