"""Admission: what a run learns from its deployment before it takes a step.

At start a run loads its tenant's roster (who may decide or send events, with their
public keys) and policy (limits, unsigned mode) with the ``load_trust`` activity, and
refuses an input that tries to set either. Gated agents (``AgentWorkflow``) and
event-driven agents (``EventWorkflow``) both admit their input this way; a gate re-reads
the roster while it waits (tower/temporal/_gate.py).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from tower.contract import search
from tower.contract.failures import Code, TowerError, failure, types
from tower.contract.trust import TrustRequest, TrustSnapshot
from tower.core.graph import Machine
from tower.core.policy import effective
from tower.temporal._task_time import call_activity

# Retried until TRUST_DEADLINE, not a fixed number of times: workers killed one after
# another (a deploy, a crash loop) must not fail a run before its first step. A missing
# or invalid roster or policy (TrustMissing) is not retried: waiting cannot fix it.
TRUST_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(
    seconds=10), non_retryable_error_types=types(Code.TRUST_MISSING))
TRUST_DEADLINE = timedelta(minutes=5)


class _NothingAsked(BaseModel):
    """The input of a carried run, as far as its limits go: its state already holds them."""


class Trust:
    """A run's roster and policy snapshot (``snapshot``, None until admitted) and when it
    was read (``read_at``). Only its own methods change it: ``admit`` at start, ``read``
    when the run's gate re-reads it, ``take`` from the run's own continue-as-new."""

    def __init__(self, machine: Machine) -> None:
        self.machine = machine
        self.snapshot: TrustSnapshot | None = None
        self.read_at: datetime | None = None
        self.admitted = False

    def take(self, snapshot: TrustSnapshot) -> None:
        """The snapshot a run carried over (the run still re-reads it at once)."""
        self.snapshot = snapshot

    async def admit(self, policy: type[BaseModel] | None, request: BaseModel, *,
                    carried: bool) -> Any:
        """Bring the tenant's roster and policy into the run; return the agent's limits
        (``policy``'s, tightened by ``request``; None without a ``policy``).

        Refuses (the run fails at once, with the reason) an input that loosens a limit, a
        gated agent on a cron schedule, and a tenant without a roster and policy
        (``TrustMissing``). A ``carried`` run's state already holds its limits: its input
        tightens nothing.
        """
        if self.machine.gates and workflow.info().cron_schedule:
            # Every cron run repeats the requester's first input and counts as continued:
            # a gated agent starts only as a run of its own (`tower run`), never on a cron.
            raise failure(TowerError(
                f"agent {self.machine.name!r} has approval gates and refuses a cron schedule "
                f"({workflow.info().cron_schedule!r}): start each run on its own (a "
                "Temporal Schedule may start them); docs/approvals.md",
                code=Code.INPUT_REFUSED))
        snapshot = await self.read()
        limits = None if policy is None else effective(
            policy, snapshot.policy.agents.get(self.machine.name, {}),
            _NothingAsked() if carried else request)
        if snapshot.policy.unsigned_allowed:
            workflow.upsert_search_attributes([search.UNSIGNED_DECISIONS.value_set(True)])
        self.admitted = True
        return limits

    async def read(self) -> TrustSnapshot:
        """Read the roster and policy (again); raises the failure of ``Code.TRUST_MISSING``
        when they cannot be read, keeping the snapshot it had. Either way ``read_at`` is
        now: a failed re-read is not tried again at once."""
        try:  # in a task (``call_activity``): a parked run refreshes its roster, decisions may come
            snapshot = await call_activity(
                "load_trust", TrustRequest(tenant=workflow.info().namespace,
                                           agent=self.machine.name),
                result_type=TrustSnapshot, start_to_close_timeout=timedelta(seconds=30),
                schedule_to_close_timeout=TRUST_DEADLINE, retry_policy=TRUST_RETRY,
                summary="trust: the tenant's roster and policy")
        except ActivityError as exc:
            self.read_at = workflow.now()
            cause = exc.cause if exc.cause is not None else exc
            raise failure(TowerError(f"cannot load the tenant's roster and policy: "
                                     f"{getattr(cause, 'message', cause)}",
                                     code=Code.TRUST_MISSING)) from None
        self.snapshot, self.read_at = snapshot, workflow.now()
        return snapshot
