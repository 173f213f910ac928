"""Secret files created with their final mode (0600) from the first moment they exist.

Writing and then ``chmod 600`` leaves a moment with the umask's mode; here a secret is
created exclusively with 0600, or written to a ``mkstemp`` file beside it and renamed.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

__all__ = ["create_private", "write_private"]

MODE = 0o600


def write_private(path: Path, data: str | bytes, *, exclusive: bool = False) -> Path:
    """Write ``data`` to ``path``, owner-only from the first moment. ``exclusive``: refuse
    an existing file (a key is never overwritten); otherwise replace it atomically."""
    raw = data.encode() if isinstance(data, str) else data
    path.parent.mkdir(parents=True, exist_ok=True)
    if exclusive:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, MODE)
        _fill(fd, raw)
        return path
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        _fill(fd, raw)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def create_private(path: Path) -> Path:
    """An empty 0600 file at ``path`` (made exclusively), or the existing one tightened to
    0600: for a store (SQLite) that then opens it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, MODE))
    except FileExistsError:
        if stat.S_IMODE(path.stat().st_mode) & 0o077:
            path.chmod(MODE)  # a file made looser elsewhere, before: at least from now on
    return path


def _fill(fd: int, raw: bytes) -> None:
    with os.fdopen(fd, "wb") as f:
        f.write(raw)
        f.flush()
        os.fsync(f.fileno())
