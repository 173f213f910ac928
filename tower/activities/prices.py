"""The price table: model name -> dollars per 1,000 prompt and completion tokens.

``TOWER_PRICES`` is a JSON file's path or the JSON itself:
``{"gpt-4o-mini": {"prompt": 0.00015, "completion": 0.0006}}``. A model not in it costs 0;
a dated name (``gpt-4o-mini-2024-07-18``) is priced by the longest entry it starts with.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tower.contract.failures import Code, TowerError
from tower.core.state import Usage


class PriceError(TowerError, ValueError):  # a ValueError: a price file's bad value
    """The price table is unreadable or malformed; the message says where."""

    CODE = Code.BAD_SETTINGS


class Price(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt: float = Field(ge=0, description="dollars per 1,000 prompt tokens")
    completion: float = Field(ge=0, description="dollars per 1,000 completion tokens")


class PriceTable(BaseModel):
    model_config = ConfigDict(frozen=True)

    prices: dict[str, Price] = Field(default_factory=dict)

    @classmethod
    def parse(cls, text: str, where: str = "TOWER_PRICES") -> PriceTable:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PriceError(f"{where} is not valid JSON: {exc}") from None
        if not isinstance(raw, dict):
            raise PriceError(f"{where} must be a JSON object of model -> price")
        try:
            return cls(prices=raw)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'][1:]))}: {e['msg']}"
                                 for e in exc.errors())
            raise PriceError(f"{where}: {problems}") from None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> PriceTable:
        env = os.environ if env is None else env
        value = env.get("TOWER_PRICES", "").strip()
        if not value:
            return cls()
        if value.startswith(("{", "[")):
            return cls.parse(value)
        path = Path(value)
        try:
            return cls.parse(path.read_text(), where=str(path))
        except OSError as exc:
            raise PriceError(f"TOWER_PRICES names {path}, which cannot be read: {exc}") from None

    def priced(self, model: str, usage: Usage) -> Usage:
        """``usage`` with its estimated cost filled in from this table."""
        names = [name for name in self.prices if model.startswith(name)]  # its own too
        if not names:
            return usage
        price = self.prices[max(names, key=len)]
        cost = (usage.prompt_tokens * price.prompt + usage.completion_tokens * price.completion)
        return usage.model_copy(update={"cost_usd": round(cost / 1000, 8)})
