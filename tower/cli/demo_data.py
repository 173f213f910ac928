"""Where one `tower demo` keeps what it makes, so every demo starts from the same data: a
folder of its own, ``.tower/demo/<tag>/`` (the tools' database, messages, the shop database,
the SDK's log), and a task queue of its own, so no earlier demo's background worker
(``--keep-server``) serves its runs. Only the newest ``KEEP`` folders are kept."""

from __future__ import annotations

import logging
import shutil
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from tower.cli.devserver import DATA_DIR

DEMOS = DATA_DIR / "demo"
KEEP = 5  # the newest demos' folders kept: an older demo's --keep-server worker may still run


@dataclass(frozen=True)
class DemoData:
    tag: str

    @classmethod
    def new(cls) -> DemoData:
        return cls(f"{datetime.now():%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:4]}")

    @property
    def folder(self) -> Path:
        return DEMOS / self.tag

    @property
    def tools_db(self) -> Path:
        return self.folder / "tools.sqlite"

    @property
    def log(self) -> Path:
        return self.folder / "demo.log"

    @property
    def inbox_log(self) -> Path:
        return self.folder / "inbox.log"

    @property
    def task_queue(self) -> str:
        return f"tower-demo-{self.tag}"

    def make(self) -> DemoData:
        self.folder.mkdir(parents=True, exist_ok=True)
        prune(keep=KEEP, current=self.folder)
        return self


def prune(*, keep: int, current: Path) -> list[Path]:
    """Remove all but the newest ``keep`` demo folders, ``current`` among them (tags sort
    by time); the ones removed."""
    others = sorted(p for p in DEMOS.glob("*") if p.is_dir() and p != current)
    old = others[:max(len(others) - (keep - 1), 0)]
    for folder in old:
        shutil.rmtree(folder, ignore_errors=True)
    return old


def sdk_logs_to(path: Path) -> None:
    """The SDK's own logs (its core's retry warnings, a traceback for each activity a demo
    run fails on purpose) go to ``path``, not the terminal the demo tells its story on.
    Before any client connects: a runtime's logging is fixed when it is made."""
    from temporalio.runtime import (
        LogForwardingConfig,
        LoggingConfig,
        Runtime,
        TelemetryConfig,
        TelemetryFilter,
    )

    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    sdk = logging.getLogger("temporalio")
    sdk.addHandler(handler)
    sdk.setLevel(logging.INFO)
    sdk.propagate = False
    core = LoggingConfig(filter=TelemetryFilter(core_level="WARN", other_level="ERROR"),
                         forwarding=LogForwardingConfig(logger=logging.getLogger("temporalio.core")))
    Runtime.set_default(Runtime(telemetry=TelemetryConfig(logging=core)),
                        error_if_already_set=False)
