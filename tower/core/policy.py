"""A run's limits: the tenant's policy, tightened (never loosened) by the run's input. An
agent declares them as a pydantic model whose fields say which way is stricter
(``stricter("lower")``). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from tower.contract.failures import Code, TowerError

P = TypeVar("P", bound=BaseModel)


class PolicyRefused(TowerError):
    """The tenant's policy for this agent does not fit its limits, or a run's input asked
    for a weaker limit than the policy allows."""

    CODE = Code.BAD_POLICY


def stricter(direction: Literal["lower", "higher"]) -> dict[str, Any]:
    """``Field(..., json_schema_extra=stricter("lower"))``: a lower value is the stricter one."""
    return {"stricter": direction}


def effective(model: type[P], deployment: Mapping[str, Any], request: BaseModel) -> P:
    """The tenant's limits for this agent, tightened by the fields of ``request`` that
    name them (None: not asked). Raises ``PolicyRefused`` naming the field."""
    try:
        base = model.model_validate(dict(deployment))
    except ValidationError as exc:
        raise PolicyRefused(f"the tenant's policy for this agent is invalid: {exc}") from None
    values = base.model_dump()
    for name, field in model.model_fields.items():
        asked = getattr(request, name, None)
        if asked is None:
            continue
        extra = field.json_schema_extra
        direction = extra.get("stricter") if isinstance(extra, dict) else None
        have = values[name]
        if (direction == "lower" and asked > have) or (direction == "higher" and asked < have):
            raise PolicyRefused(
                f"{name}={asked} would loosen the tenant's policy ({name}={have}): a run's "
                f"input may only make it {direction}")
        if direction is None and asked != have:
            raise PolicyRefused(f"{name} is set by the tenant's policy ({have}); a run's input "
                                 "cannot change it")
        values[name] = asked
    return model.model_validate(values)
