"""What several commands share: agent lookup, input validation, printing a run."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
from collections.abc import Callable, Iterator
from typing import Any

from pydantic import BaseModel, ValidationError
from temporalio.client import WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from tower import Transition
from tower.temporal.runtime import AgentWorkflow
from workflows.registry import AGENTS

STOP_STATUSES = {"DONE", "FAILED", "AWAITING_APPROVAL"}


class CliError(Exception):
    """A user-facing error: printed as `error: ...` with exit code 2."""


@contextlib.contextmanager
def not_found_is(message: str) -> Iterator[None]:
    """The server's NOT_FOUND for a run becomes ``error: MESSAGE``; other errors pass."""
    try:
        yield
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise CliError(message) from None
        raise


def add_run_arguments(parser: argparse.ArgumentParser, what: str = "workflow id") -> None:
    """RUN and --run-id: how every command that reads one run's history names it."""
    parser.add_argument("run", metavar="RUN", help=what)
    parser.add_argument("--run-id", help="a particular run of RUN (default: the latest)")


def agent_class(name: str) -> type[AgentWorkflow]:
    try:
        return AGENTS[name]
    except KeyError:
        raise CliError(
            f"unknown agent {name!r}; known agents: {', '.join(sorted(AGENTS))}") from None


def parse_input(agent: type[AgentWorkflow], raw: str) -> BaseModel:
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise CliError(f"--input is not valid JSON: {exc}") from None
    try:
        return agent.Input.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"field {'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}" for e in exc.errors())
        example = agent.Input.model_json_schema().get("properties", {})
        raise CliError(
            f"input for {agent.machine.name!r} is invalid: {problems}\n"
            f"expected fields: {', '.join(example) or '(none)'}") from None


def describe(t: Transition) -> str:
    calls = f"  [{', '.join(t.calls)}]" if t.calls else ""
    return f"  step {t.step:>3}  {t.source:>16} → {t.target:<16} {t.reason}{calls}"


async def follow(
    handle: WorkflowHandle[Any, Any], show: Callable[[Transition], None] | None = None,
    poll_seconds: float = 0.25, skip: int = 0,
) -> str:
    """Print each transition as it happens until the run ends or pauses; return the status.

    ``skip`` transitions already shown are not printed again."""
    show = show or (lambda t: print(describe(t), flush=True))
    seen = skip
    while True:
        try:
            # Status first: a log read after it holds every move up to that status, so
            # the last transition (e.g. -> DONE) is printed before we stop.
            status = await handle.query("status", result_type=str)
            log = await handle.query("transitions", result_type=list[Transition])
        except RPCError as exc:
            if "workflow" in str(exc).lower() and "not" in str(exc).lower():
                raise CliError(f"run {handle.id!r} not found") from None
            raise
        for t in log[seen:]:
            show(t)
        seen = len(log)
        if status in STOP_STATUSES:
            return status
        await asyncio.sleep(poll_seconds)


def ui_link(address: str, namespace: str, workflow_id: str, ui_port: int = 8233) -> str:
    host = address.rsplit(":", 1)[0] or "localhost"
    return f"http://{host}:{ui_port}/namespaces/{namespace}/workflows/{workflow_id}"
