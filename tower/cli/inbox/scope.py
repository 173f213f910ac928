"""Who may see which run in the inbox: the one rule every route asks (docs/inbox.md,
"Who sees what").

A signed-in user sees a run only when one of their roles may decide its open gate, or
decided (or could have decided) a gate the run has passed, or when they hold a watcher
role the deployment configured (read-only: watching decides nothing). For everyone else
the run does not exist: every route answers the same 404 as for a run id nobody ever
started, so the answer confirms nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from temporalio.client import WorkflowExecutionStatus

from tower.cli.inbox.identity import Approver
from tower.cli.inbox.runs import RunStory, run_story
from tower.contract.pending import PendingView

if TYPE_CHECKING:
    from tower.cli.inbox.pages import Inbox


@dataclass(frozen=True)
class Scope:
    """The inbox's visibility rule. ``watchers``: roles that may read every run of the
    tenant and decide none (empty unless the deployment configures one)."""

    watchers: frozenset[str] = frozenset()

    def watches(self, approver: Approver) -> bool:
        return bool(self.watchers & set(approver.roles))

    def list_roles(self, approver: Approver) -> set[str]:
        """The gate roles whose waiting runs the user's list shows: their own roles, or
        every gate role of the deployment's agents for a watcher."""
        roles = set(approver.roles)
        return roles | gate_roles() if self.watches(approver) else roles

    def may_see(self, approver: Approver, status: WorkflowExecutionStatus | None,
                view: PendingView | None, past_roles: Iterable[str] = ()) -> bool:
        """May ``approver`` see this run: ``view`` its open request (None if nothing
        waits), ``past_roles`` the roles of the gates it recorded (its state's
        approvals). A run that does not exist (``status`` None) is seen by nobody."""
        if status is None:
            return False
        if self.watches(approver):
            return True
        mine = set(approver.roles)
        if view is not None and view.role in mine:
            return True
        # Only roles some gate of this deployment's agents needs: a state that names a
        # made-up role grants nothing.
        return bool(mine & set(past_roles) & gate_roles())

    def needs_past_roles(self, approver: Approver, view: PendingView | None) -> bool:
        """Whether ``may_see`` needs the run's recorded gates (a query) to decide."""
        return not self.watches(approver) and not (view is not None
                                                   and view.role in approver.roles)


def not_found(run: str, tenant: str) -> str:
    """The one answer for a run that is not there or not the user's to see."""
    return f"No run {run!r} in tenant {tenant!r}."


def gate_roles() -> frozenset[str]:
    """Every role a gate of this deployment's agents needs (``agents()`` is cached)."""
    from tower.cli.agents import agents

    return frozenset(gate.role for agent in agents().values()
                     for gate in agent.machine.gates.values())


async def visible_run(inbox: Inbox, approver: Approver, run: str, fresh: bool = False,
                      ) -> tuple[WorkflowExecutionStatus, PendingView | None] | None:
    """``run``'s status and open request when ``approver`` may see it, else None (answer
    ``not_found``). Raises NotOurRequest as ``Inbox._run`` does."""
    status, view = await inbox._run(run, fresh=fresh)
    past: frozenset[str] = frozenset()
    if status is not None and inbox.scope.needs_past_roles(approver, view):
        async def story() -> RunStory:
            return await run_story(inbox.client, run, status)
        past = (await inbox._cached(("story", run), story)).gate_roles
    if status is None or not inbox.scope.may_see(approver, status, view, past):
        return None
    return status, view
