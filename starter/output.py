"""`--json` on every command, for scripts.

A command that prints its own JSON declares a ``--json`` option itself (run, watch,
state, list, graph, dev, cost, ...). Every other command gets the flag here, and its
printed lines are wrapped in one JSON object, so a script never has to parse prose:
``{"command": ..., "exit_code": ..., "output": [lines], "error": ...}``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from collections.abc import Callable


def add_json_flags(parser: argparse.ArgumentParser) -> None:
    """Give every (sub)command a ``--json`` flag; remember which ones handle it natively."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in set(action.choices.values()):
                add_json_flags(sub)
            return
    native = any("--json" in a.option_strings for a in parser._actions)
    if not native:
        parser.add_argument("--json", action="store_true",
                            help="print the outcome as one JSON object")
    parser.set_defaults(json_native=native)


def wrapped(command: str, run: Callable[[], int]) -> int:
    """Run a command whose output is text, and print it as one JSON object."""
    buffer = io.StringIO()
    error = None
    with contextlib.redirect_stdout(buffer):
        try:
            code = run()
        except Exception as exc:  # reported in the JSON, then re-raised for the exit code
            error = exc
            code = 2
    print(json.dumps({"command": command, "exit_code": code,
                      "output": buffer.getvalue().splitlines(),
                      "error": str(error) if error else None}), flush=True)
    if error is not None:
        raise error
    return code


def error_json(exc: BaseException, code: int) -> str:
    return json.dumps({"error": str(exc), "exit_code": code})
