"""The `tower` command line called in this process, in the test's event loop: the same
click commands and error handling as the installed `tower`, without a new interpreter
importing Temporal for every call. Use a real subprocess (tests/test_cli.py's
``tower``) only where it proves something: the entry point, exit codes, pipes."""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator, Mapping

from starter.cli import amain

# What a developer's shell may have set that must not leak into a test's command.
_CLEARED = ("OPENAI_", "TEMPORAL_", "TOWER_APPROVAL", "TOWER_CODEC", "TOWER_UI", "TOWER_ROLE")


@contextlib.contextmanager
def environment(values: Mapping[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    for name in [n for n in os.environ if n.startswith(_CLEARED)]:
        del os.environ[name]
    os.environ.update(values)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


async def tower(address: str, *args: str, namespace: str | None = None,
                **env: str) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of ``tower ARGS`` against the server at ``address``."""
    values = {"TEMPORAL_ADDRESS": address, **env}
    if namespace:
        values["TEMPORAL_NAMESPACE"] = namespace
    out, err = io.StringIO(), io.StringIO()
    with environment(values), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = await amain(list(args))
    return code, out.getvalue(), err.getvalue()
