"""Every agent Tower ships, by its stable workflow name. Explicit: no discovery."""

from __future__ import annotations

from typing import Any

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

# Keyed by each agent's own graph name (written once, in its file).
AGENTS: dict[str, type[Any]] = {agent.machine.name: agent for agent in [
    AccountAgent, SupportAgent, OnboardingAgent, ResearchAgent, ChatAgent, RefundAgent,
    MigrationAgent, LifecycleAgent, CompanyAgent, FanOutAgent, OrderAgent,
]}
