"""The model calls of an eval, answered from the recording or by the candidate's model.

``RecordedModels`` is a worker interceptor, so it works with any project's worker: the
n-th ``call_model`` of a node gets the n-th recorded reply of that node, or goes to the
project's gateway when the mode says live (``recorded``: all from the recording;
``changed``: live where the node's prompt or models changed; ``live``: all live). A call
the recording cannot answer goes live and is counted. A recorded answer to a node whose
prompt changed is never silent: the run is ``changed``, naming the node (``hidden``).
Tools run again on the eval's data, except after a recorded re-check found the world
changed while the run waited (``Recording.world_changed_at``): from there they are
answered from the recording, call for call, and counted.
"""

from __future__ import annotations

from collections import Counter
from enum import StrEnum
from typing import Any

from temporalio import activity
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from tower.contract.wire import ModelReply, ModelRequest, ToolCall
from tower.testing.evals.compare import Change, Score
from tower.testing.evals.recording import ModelCall, Recording


class Mode(StrEnum):
    RECORDED = "recorded"
    CHANGED = "changed"
    LIVE = "live"


class RecordedModels(Interceptor):
    def __init__(self, recordings: dict[str, Recording], mode: Mode) -> None:
        self.recordings = recordings
        self.mode = mode
        # workflow id -> how its calls were answered: recorded | live | prompt changed | ...
        self.answered: dict[str, Counter[str]] = {}
        # workflow id -> node -> what of it changed, answered from the recording all the same
        self.unseen: dict[str, dict[str, str]] = {}
        self._seen: dict[tuple[str, ...], int] = {}  # an activity's retries: one call
        # (workflow id, node) of a model call, or (workflow id,) of a tool call -> calls so far
        self._next: Counter[tuple[str, ...]] = Counter()

    def begin(self, recording: Recording) -> None:
        """Answer ``recording``'s workflow id from it from now on (two recordings may share one)."""
        self.recordings[recording.workflow_id] = recording
        for key in [k for k in self._next if k[0] == recording.workflow_id]:
            del self._next[key]

    def _nth(self, *counted: str) -> tuple[str, int]:
        """The workflow id of this activity, and which of its calls counted by ``counted``
        (a node's model calls, or its tool calls) this is; a retry is the same call."""
        info = activity.info()
        run = info.workflow_id or ""
        key = (run, info.workflow_run_id or "", info.activity_id, *counted)
        if key not in self._seen:
            self._seen[key] = self._next[(run, *counted)]
            self._next[(run, *counted)] += 1
        return run, self._seen[key]

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Inbound(next, self)

    def answer(self, request: ModelRequest) -> ModelReply | None:
        """The recorded reply for this call, or None: let the live model answer it."""
        info = activity.info()
        run = info.workflow_id or ""
        calls = self.answered.setdefault(run, Counter())
        once = int(info.attempt == 1)  # a retried attempt is the same call: counted once
        recording = self.recordings.get(run)
        if self.mode is Mode.LIVE:
            calls["live"] += once
            return None
        if recording is None:
            calls["live: not recorded"] += once
            return None
        run, n = self._nth(request.node)
        recorded = [c for c in recording.model_calls if c.node == request.node]
        if request.history or request.keep or request.window or request.windowed:
            calls["live: message store"] += once
            return None
        if n >= len(recorded):
            calls["live: beyond the recording"] += once
            return None
        changed = _changed(request, recorded[n])
        if self.mode is Mode.CHANGED and changed:
            calls["live: prompt or model changed"] += once
            return None
        if changed:
            self.unseen.setdefault(run, {})[request.node] = changed
        calls["recorded"] += once
        return ModelReply.model_validate(recorded[n].reply)

    def tool_answer(self, call: ToolCall) -> tuple[bool, Any]:
        """(True, the recorded answer) for a tool call made after the recorded world changed
        where the recording made the same call; else (False, None): run the tool."""
        run, n = self._nth()
        recording = self.recordings.get(run)
        if (recording is None or recording.world_changed_at is None
                or not recording.world_changed_at <= n < len(recording.tool_calls)):
            return False, None
        recorded = recording.tool_calls[n]  # its result None: it failed, or never ended
        if (recorded.tool, recorded.arguments, recorded.result is None) != (
                call.tool, call.arguments, False):
            return False, None
        self.answered.setdefault(run, Counter())[
            "tools recorded: the world changed while it waited"] += 1
        return True, recorded.result

    def hidden(self, workflow_id: str) -> Score | None:
        """The changes of ``workflow_id``'s run that recorded answers hid, named (and forgotten)."""
        nodes = self.unseen.pop(workflow_id, {})
        if not nodes:
            return None
        named = "; ".join(f"{what} of node {node} changed" for node, what in nodes.items())
        return Score(scorer="prompt", verdict=Change.CHANGED,
                     detail=f"{named}; answers recorded (--models changed asks the model)")


def _changed(request: ModelRequest, recorded: ModelCall) -> str:
    """What of the node's call differs from the recorded one: prompt, models, or ""."""
    what = [name for name, differs in (
        ("prompt", request.system != recorded.request.get("system", "")),
        ("models", list(request.models) != list(recorded.request.get("models") or [])))
        if differs]
    return " and ".join(what)


class _Inbound(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, models: RecordedModels) -> None:
        super().__init__(next)
        self.models = models

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        if activity.info().activity_type == "call_model" and input.args:
            request = input.args[0]
            if isinstance(request, ModelRequest):
                reply = self.models.answer(request)
                if reply is not None:
                    return reply
        if input.args and isinstance(input.args[0], ToolCall):
            recorded, result = self.models.tool_answer(input.args[0])
            if recorded:
                return result
        return await super().execute_activity(input)
