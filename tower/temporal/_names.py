"""The names Temporal registers a workflow class or an activity under, from what the
SDK's decorators attach (the attribute its own worker reads), never its private classes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["activity_name", "workflow_name"]


def workflow_name(cls: type) -> str | None:
    """The workflow type ``cls`` is registered as (None: a dynamic workflow, or not a
    workflow class at all)."""
    defn = getattr(cls, "__temporal_workflow_definition", None)
    if getattr(defn, "cls", None) is cls:  # the class's own @workflow.defn says
        return getattr(defn, "name", None)
    machine = getattr(cls, "machine", None)  # an @agent: named after its graph
    return str(machine.name) if machine is not None else None


def activity_name(fn: Callable[..., Any]) -> str | None:
    """The activity type ``fn`` runs as (None: dynamic, or not an activity)."""
    defn = getattr(fn, "__temporal_activity_definition", None)
    return getattr(defn, "name", None)
