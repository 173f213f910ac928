"""Every secret Tower writes exists only with mode 0600 (issue 30, attack 7): approvers' and
the inbox's signing keys, the worker's attestation key, the inbox's development accounts
and their passwords, the inbox's session store, an eval's keys.

Written and then chmod-ed, a file has the umask's mode (0644) for a moment, and a local
user polling the directory reads it then. Two readers race every writer here, under a
0022 umask: a thread polling the directory (``os.stat`` of everything it lists, as an
attacker would), and an audit hook that looks at every secret on disk each time the writer
opens, renames, chmods a file or opens a database — the moments a secret appears or
changes. Neither may ever see a secret readable by group or others.
"""

from __future__ import annotations

import os
import stat
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tower.cli.inbox.identity import InboxStore, dev_accounts
from tower.cli.trust_files import enrol, enrol_worker
from tower.client.keys import create_key
from tower.testing.evals.runner import EvalTrust

ROUNDS = 5  # each writer, each in a fresh directory (the audit hook sees every moment)
SECRET = ("jwk", "accounts", "passwords", "sqlite")  # in a secret's (or its temp file's) name
EVENTS = {"open", "os.rename", "os.replace", "os.chmod", "sqlite3.connect", "os.mkdir"}


def loose_secrets(root: Path) -> list[str]:
    """The secrets under ``root`` that group or others may read, as they are now."""
    found = []
    for folder, _, files in os.walk(root):
        for name in files:
            if not any(word in name for word in SECRET):
                continue
            try:
                mode = stat.S_IMODE(os.stat(os.path.join(folder, name)).st_mode)
            except FileNotFoundError:  # a temporary file renamed meanwhile
                continue
            if mode & 0o077:
                found.append(f"{name} {mode:o}")
    return found


class Readers:
    """The polling thread and the audit hook, both watching ``root`` while active."""

    hooked: Readers | None = None  # audit hooks cannot be removed: one, switched per test
    installed = False

    def __init__(self, root: Path) -> None:
        self.root, self.seen = root, set[str]()
        self.checks = 0
        self.stop = threading.Event()
        self.poller = threading.Thread(target=self.poll, daemon=True)
        self.busy = threading.local()

    def poll(self) -> None:
        while not self.stop.is_set():
            self.seen.update(loose_secrets(self.root))
            self.checks += 1

    def audit(self, event: str, args: tuple[object, ...]) -> None:
        if event not in EVENTS or getattr(self.busy, "on", False):
            return
        self.busy.on = True  # os.walk inside the hook raises events of its own
        try:
            self.seen.update(loose_secrets(self.root))
        finally:
            self.busy.on = False


def _audit(event: str, args: tuple[object, ...]) -> None:
    if Readers.hooked is not None:
        Readers.hooked.audit(event, args)


@pytest.fixture
def readers(tmp_path: Path) -> Iterator[Readers]:
    # Added on first use, not at import: every xdist worker imports this module, and a
    # Python hook then runs on every audited event of every test on that worker.
    if not Readers.installed:
        sys.addaudithook(_audit)
        Readers.installed = True
    old = os.umask(0o022)  # the usual umask: a plain write makes a file 0644
    watching = Readers(tmp_path)
    Readers.hooked = watching
    watching.poller.start()
    try:
        yield watching
    finally:
        watching.stop.set()
        watching.poller.join()
        Readers.hooked = None
        os.umask(old)


def inbox_store(folder: Path) -> None:
    store = InboxStore(folder / "inbox.sqlite")
    sid = store.open_session("acme", "alice", 3600)
    store.keep_receipt("acme", "alice", {"run": "r-1", "sid": sid})


WRITERS: dict[str, Callable[[Path], object]] = {
    "tower keys new (approver, inbox issuer)": lambda d: create_key("alice", d / "config"),
    "tower keys enrol / demo trust data": lambda d: enrol(
        d / "trust", "acme", "dana", config=d / "config", roles=["manager"]),
    "the worker's attestation key": lambda d: enrol_worker(d / "trust", "acme"),
    "the inbox's development accounts and passwords": lambda d: dev_accounts(
        d / ".tower" / "inbox-accounts.json"),
    "the inbox's session store": lambda d: inbox_store(d / ".tower"),
    "an eval's trust directory": lambda d: EvalTrust(d / "trust", "acme", {"alice": ["manager"]}),
}


@pytest.mark.parametrize("what", WRITERS)
def test_no_reader_ever_sees_a_secret_readable_by_others(readers: Readers, what: str) -> None:
    for i in range(ROUNDS):
        WRITERS[what](readers.root / str(i))
    readers.stop.set()
    readers.poller.join()
    assert readers.seen == set(), f"{what}: readable by others at some moment: {readers.seen}"
    # The readers did look, and the secrets were there to see, all 0600 now.
    written = [p for p in readers.root.rglob("*") if p.is_file()
               and any(word in p.name for word in SECRET)]
    assert len(written) >= ROUNDS and readers.checks > 0
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in written), written
