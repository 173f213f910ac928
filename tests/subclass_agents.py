"""A plain Temporal subclass of an agent (not an ``@agent``): a timer before its first step."""

from __future__ import annotations

from temporalio import workflow

from workflows.account import AccountAgent, AccountRequest, AccountState


@workflow.defn(name="account-slow")
class SlowAccount(AccountAgent):
    @workflow.run
    async def run(self, request: AccountRequest) -> AccountState:
        await workflow.sleep(0.1)
        return await super().run(request)
