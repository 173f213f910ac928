"""Workflows that break determinism on purpose, in a plain module: the sandbox imports it
again for every run (see tests/test_sandbox_guard.py)."""

from __future__ import annotations

import datetime

from temporalio import workflow


@workflow.defn(name="probe_reads_the_clock")
class ReadsTheClock:
    @workflow.run
    async def run(self) -> str:
        return datetime.datetime.now().isoformat()  # forbidden: workflow.now() is the clock
