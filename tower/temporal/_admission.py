"""Admission: what a run learns from its deployment before it takes a step.

At start a run loads its tenant's roster (who may decide or send events, with their
public keys) and policy (limits, unsigned mode) with the ``load_trust`` activity, and
refuses an input that tries to set either. Gated agents (``AgentWorkflow``) and
event-driven agents (``EventWorkflow``) both admit their input this way; a gate re-reads
them while it waits (tower/temporal/_gate.py).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, ClassVar

from pydantic import BaseModel
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from tower.contract import search
from tower.contract.failures import Code, TowerError, failure, types
from tower.contract.trust import TrustRequest, TrustSnapshot
from tower.core.graph import Machine
from tower.core.policy import effective
from tower.temporal._task_time import in_a_task

# Retried until TRUST_DEADLINE, not a fixed number of times: workers killed one after
# another (a deploy, a crash loop) must not fail a run before its first step. A missing
# or invalid roster or policy (TrustMissing) is not retried: waiting cannot fix it.
TRUST_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(
    seconds=10), non_retryable_error_types=types(Code.TRUST_MISSING))
TRUST_DEADLINE = timedelta(minutes=5)


class _NothingAsked(BaseModel):
    """The input of a carried run, as far as its limits go: its state already holds them."""


_NOTHING_ASKED = _NothingAsked()


class Admission:
    """The run's roster and policy snapshot (``_trust``) and how it gets it."""

    machine: ClassVar[Machine]
    # The agent's limits (a model whose fields say which way is stricter), or None.
    Policy: ClassVar[type[BaseModel] | None] = None
    # Does the runtime admit every run's input before the agent's own code (tower/temporal/
    # _start.py)? None: when the agent has gates or a Policy.
    admits: ClassVar[bool | None] = None

    def _init_trust(self) -> None:
        self._trust: TrustSnapshot | None = None  # None: not admitted (an agent with no gates)
        self._refreshed_at: Any = None
        self._admitted = False
        # The agent's limits: the tenant's policy, tightened by the run's input (None for
        # an agent without a Policy). Set by admission, before the agent's run code.
        self.limits: Any = None

    def _admits(self) -> bool:
        if self.admits is not None:
            return self.admits
        return bool(self.machine.gates) or self.Policy is not None

    async def admit(self, request: BaseModel, *, carried: bool = False) -> Any:
        """Bring the tenant's roster and policy into the run; return the agent's limits
        (the policy's, tightened by ``request``), or None for an agent without limits.

        Refuses (the run fails at once, with the reason) an input that loosens a limit, a
        gated agent on a cron schedule, and a tenant without a roster and policy
        (``TrustMissing``). Once admitted, the run's limits are returned again. A
        ``carried`` run's state already holds its limits: its input tightens nothing.
        """
        if self._admitted:
            return self.limits
        if self.machine.gates and workflow.info().cron_schedule:
            # Every cron run repeats the requester's first input and counts as continued:
            # a gated agent starts only as a run of its own (`tower run`), never on a cron.
            raise failure(TowerError(
                f"agent {self.machine.name!r} has approval gates and refuses a cron schedule "
                f"({workflow.info().cron_schedule!r}): start each run on its own (a "
                "Temporal Schedule may start them); docs/approvals.md",
                code=Code.INPUT_REFUSED))
        self._trust = await self._load_trust()
        self._refreshed_at = workflow.now()
        if self.Policy is not None:
            self.limits = effective(self.Policy,
                                    self._trust.policy.agents.get(self.machine.name, {}),
                                    _NOTHING_ASKED if carried else request)
        if self._trust.policy.unsigned_allowed:
            workflow.upsert_search_attributes([search.UNSIGNED_DECISIONS.value_set(True)])
        self._admitted = True
        return self.limits

    async def _load_trust(self) -> TrustSnapshot:
        since = workflow.now()
        try:
            snapshot: TrustSnapshot = await workflow.execute_activity(
                "load_trust", TrustRequest(tenant=workflow.info().namespace,
                                           agent=self.machine.name),
                result_type=TrustSnapshot, start_to_close_timeout=timedelta(seconds=30),
                schedule_to_close_timeout=TRUST_DEADLINE, retry_policy=TRUST_RETRY,
                summary="trust: the tenant's roster and policy")
        except ActivityError as exc:
            await in_a_task(since)  # a parked run refreshes its roster: decisions may come
            cause = exc.cause if exc.cause is not None else exc
            raise failure(TowerError(f"cannot load the tenant's roster and policy: "
                                     f"{getattr(cause, 'message', cause)}",
                                     code=Code.TRUST_MISSING)) from None
        await in_a_task(since)
        return snapshot
