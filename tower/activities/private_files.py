"""Secret files created with their final mode: every key, password file and session store
Tower writes goes through here.

Writing a file and then ``chmod 600`` leaves a moment when it has the umask's mode
(usually 0644): a local user polling the directory reads the secret then. Here a secret is
either created exclusively with mode 0600 (``os.open(O_CREAT | O_EXCL, 0o600)``) or
written to a private temporary file (``mkstemp``: 0600) in the same directory and renamed
into place, so whoever can see the file at all sees it 0600.
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
    """Write ``data`` to ``path``, readable and writable by its owner only from the first
    moment it exists. ``exclusive``: refuse (FileExistsError) when ``path`` exists — a key
    is never overwritten; otherwise replace it atomically (a reader sees the old file or
    the new one, whole). Makes missing parent directories."""
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
    """An empty file at ``path`` with mode 0600 (made now, exclusively), or the existing one
    tightened to 0600: for a store (e.g. SQLite) that then opens it and writes into it."""
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
