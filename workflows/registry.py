"""Every agent Tower ships, by its stable workflow name. Explicit: no discovery."""

from __future__ import annotations

from tower.temporal.runtime import AgentWorkflow
from workflows.account import AccountAgent
from workflows.chat import ChatAgent
from workflows.company import CompanyAgent
from workflows.fanout import FanOutAgent
from workflows.lifecycle import LifecycleAgent
from workflows.migration import MigrationAgent
from workflows.onboarding import OnboardingAgent
from workflows.order import OrderAgent
from workflows.refund import RefundAgent
from workflows.research import ResearchAgent
from workflows.support import SupportAgent

AGENTS: dict[str, type[AgentWorkflow]] = {
    "account": AccountAgent,
    "support": SupportAgent,
    "onboarding": OnboardingAgent,
    "research": ResearchAgent,
    "chat": ChatAgent,
    "refund": RefundAgent,
    "migration": MigrationAgent,
    "lifecycle": LifecycleAgent,
    "company": CompanyAgent,
    "fanout": FanOutAgent,
    "order": OrderAgent,
}
