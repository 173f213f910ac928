"""Scripts for the order agent: read items and an address out of the text, then write
the confirmation from the figures the workflow computed."""

from __future__ import annotations

import json
import re
from typing import Any

from activities.scripted import first_user_text
from tower.testing import ModelRequest, Script

ITEM = re.compile(r"(\d+)\s*(?:x|×|of)?\s*([A-Z]+-\d+)")
COUNTRIES = ("US", "GB", "DE", "FR")


def parse(request: ModelRequest) -> str:
    text = first_user_text(request)
    items = [{"sku": sku, "quantity": int(qty)} for qty, sku in ITEM.findall(text)]
    _, _, address = text.partition(" to ")
    address = address.strip().rstrip(".")
    country = next((c for c in COUNTRIES if address.endswith(c)), "US")
    return json.dumps({"items": items, "address": address, "country": country})


def confirm(request: ModelRequest) -> str:
    # The newest user message that is JSON holds the figures: after an invalid answer the
    # newest one is the engine's correction.
    facts: dict[str, Any] = next((json.loads(m.content) for m in reversed(request.messages)
                                  if m.role == "user" and m.content.startswith("{")), {})
    lines = "\n".join(f"  {i['quantity']} x {i['name']} ({i['sku']}) at {i['unit_price']}"
                      for i in facts.get("items", []))
    email = (f"Thank you for your order.\n{lines}\nSubtotal {facts.get('subtotal')}, "
             f"tax {facts.get('tax')}, total {facts.get('total')} USD, charged as "
             f"{facts.get('charge_id')}. Shipment {facts.get('shipment_id')} goes to "
             f"{facts.get('address')}.")
    return json.dumps({"email": email})


# node -> script; the agent's file names the agent (@agent(GRAPH, scripts=SCRIPTS)).
SCRIPTS: dict[str, Script] = {"parse": parse, "confirm": confirm}
