"""The model judge on the project's model gateway (``tower eval --judge``)."""

from __future__ import annotations

from tower.activities.model import ModelActivities, ModelSettings
from tower.contract.messages import Message
from tower.contract.wire import ModelRequest
from tower.testing.evals.compare import Scorer, judge


def gateway_judge(settings: ModelSettings) -> Scorer:
    """``compare.judge`` asking ``settings``' models as agent ``eval``, node ``judge``; the
    scripted model has no script for it, so offline its answer is unreadable: a change."""
    gateway = ModelActivities(settings)

    async def ask(system: str, user: str) -> str:
        reply = await gateway.complete(ModelRequest(
            agent="eval", node="judge", system=system,
            messages=[Message(role="user", content=user)]))
        return reply.content or ""

    return judge(ask)
