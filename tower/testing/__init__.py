"""Test helpers for a project's agents.

In-process (no server, milliseconds): ``run_agent`` runs a whole machine, ``run_node``
one node, with scripted model and tool answers and the engine's own transition log.
Against recorded histories: ``assert_replays`` (see ``tower.temporal.replay``), which
loads the Temporal SDK on first use. Over real HTTP:
``tower.testing.model_server.LoopbackModelServer``, an OpenAI-compatible server on
127.0.0.1 that answers with your scripted replies and injects faults on demand (429,
500, slow replies, malformed JSON, schema-violating output, unknown tools), so the real
``openai`` SDK path of your agents is tested.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tower.testing._inprocess import approve, reject, run_agent, run_node

if TYPE_CHECKING:
    from tower.activities.scripted import Script
    from tower.contract.wire import ModelRequest
    from tower.core.audit import check_log
    from tower.temporal.replay import assert_replays
    from tower.testing import evals, live

_LAZY = {"Script": "tower.activities.scripted",  # the offline model's answers
         "ModelRequest": "tower.contract.wire",
         "check_log": "tower.core.audit",
         "assert_replays": "tower.temporal.replay",
         "live": "tower.testing.live",  # the module: a live run in a project's tests
         # The module: evals from recorded runs (run_eval, assert_verdicts, Change, Score).
         "evals": "tower.testing.evals"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tower.testing' has no attribute {name!r}")
    loaded = importlib.import_module(module)
    return loaded if module.endswith(f".{name}") else getattr(loaded, name)


__all__ = ["ModelRequest", "Script", "approve", "assert_replays", "check_log", "evals", "live",
           "reject", "run_agent", "run_node"]
