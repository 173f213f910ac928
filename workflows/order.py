"""order — a deterministic sub-flow inside an agent.

parse → check_stock → compute_tax → charge → ship → confirm → DONE. Only ``parse``
(free-form text → items, address) and ``confirm`` (the customer's e-mail) use the
model; stock, tax, total, payment and shipment are code and activities in a fixed
order with exact Decimal arithmetic. Out of stock and a declined payment end the
run FAILED with that reason (the stock of a declined order is released first). A
model step that still fails after its retries and corrections goes to ``recover``,
which gives it one fresh try; side-effecting steps never re-run on their own:
a failure there waits, FAILED, for an operator (`tower retry RUN --from NODE`).
"""

from __future__ import annotations

import json
from decimal import ROUND_HALF_UP, Decimal
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from activities.scripted import order as scripted
from activities.tools import orders
from tower import FAILED, AgentState, AgentWorkflow, Graph, Message, NodeContext, agent

TAX_RATES = {"US": Decimal("0.0725"), "GB": Decimal("0.20"), "DE": Decimal("0.19"),
             "FR": Decimal("0.20")}
CENT = Decimal("0.01")
MODEL_NODES = ("parse", "confirm")


class OrderRequest(BaseModel):
    # Unknown fields are refused, not ignored: a start can't smuggle settings in.
    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=2000,
                      examples=["2 x WIDGET-1 and 1 x GADGET-2 to 1 Main St, Springfield, US"])
    card: str = Field(default="tok_visa", pattern=r"^tok_[a-z0-9_]{1,40}$")


class OrderItem(BaseModel):
    sku: str = Field(pattern=r"^[A-Z]+-\d+$")
    quantity: int = Field(ge=1, le=100)


class ParsedOrder(BaseModel):
    """What ``parse`` must get out of the model, validated."""

    items: list[OrderItem] = Field(min_length=1, max_length=20)
    address: str = Field(min_length=5, max_length=300)
    country: Literal["US", "GB", "DE", "FR"]


class Line(BaseModel):
    sku: str
    name: str
    unit_price: Decimal
    quantity: int


class Confirmation(BaseModel):
    email: str = Field(min_length=20, max_length=4000)


class OrderState(AgentState):
    card: str = "tok_visa"
    order: ParsedOrder | None = None
    reservation_id: str = ""
    lines: list[Line] = Field(default_factory=list)
    subtotal: Decimal = Decimal("0.00")
    tax: Decimal = Decimal("0.00")
    total: Decimal = Decimal("0.00")
    charge_id: str = ""
    shipment_id: str = ""
    email: str = ""
    outcome: Literal["", "out_of_stock", "payment_declined", "shipped"] = ""


PARSE_PROMPT = (
    "Extract the order from the customer's text. Reply with JSON {\"items\": [{\"sku\": "
    "\"WIDGET-1\", \"quantity\": 2}], \"address\": \"...\", \"country\": \"US|GB|DE|FR\"}."
)
CONFIRM_PROMPT = (
    "Write the confirmation e-mail for the order given as JSON. Reply with JSON "
    "{\"email\": \"...\"}. Use the amounts exactly as given."
)


async def parse(ctx: NodeContext, state: OrderState) -> dict[str, object]:
    """The model turns free text into items, quantities and an address."""
    answer = await ctx.ask(state.messages, schema=ParsedOrder)
    assert answer.parsed is not None
    return {"order": answer.parsed}


async def check_stock(ctx: NodeContext, state: OrderState) -> dict[str, object]:
    """Reserve every item, or none: out of stock ends the run."""
    assert state.order is not None
    items = [i.model_dump() for i in state.order.items]
    result = await ctx.tool(orders.reserve_stock, {"items": items})
    if not result.get("ok"):
        short = ", ".join(f"{m['sku']} (asked {m['requested']}, {m['available']} left)"
                          for m in result.get("missing", []))
        return {"outcome": "out_of_stock", "errors": [f"out of stock: {short}"]}
    return {"reservation_id": result["reservation_id"], "lines": result["lines"]}


async def compute_tax(ctx: NodeContext, state: OrderState) -> dict[str, object]:
    """Subtotal, tax and total in exact decimal cents: code, not the model."""
    assert state.order is not None
    subtotal = sum((line.unit_price * line.quantity for line in state.lines), Decimal("0"))
    tax = (subtotal * TAX_RATES[state.order.country]).quantize(CENT, rounding=ROUND_HALF_UP)
    return {"subtotal": subtotal.quantize(CENT), "tax": tax,
            "total": (subtotal + tax).quantize(CENT)}


async def charge(ctx: NodeContext, state: OrderState) -> dict[str, object]:
    """Charge the card once; a decline releases the stock and ends the run."""
    result = await ctx.tool(orders.charge_payment, {"card": state.card, "amount": str(state.total)})
    if result["status"] != "paid":
        await ctx.tool(orders.release_stock, {"reservation_id": state.reservation_id})
        return {"outcome": "payment_declined",
                "errors": [f"payment declined: {result.get('reason') or 'no reason given'}"]}
    return {"charge_id": result["charge_id"]}


async def ship(ctx: NodeContext, state: OrderState) -> dict[str, object]:
    assert state.order is not None
    result = await ctx.tool(orders.create_shipment, {"reservation_id": state.reservation_id,
                                                "address": state.order.address})
    return {"shipment_id": result["shipment_id"], "outcome": "shipped"}


async def confirm(ctx: NodeContext, state: OrderState) -> dict[str, object]:
    """The model writes the e-mail from the exact figures, which code computed."""
    facts = {"items": [line.model_dump(mode="json") for line in state.lines],
             "subtotal": str(state.subtotal), "tax": str(state.tax), "total": str(state.total),
             "charge_id": state.charge_id, "shipment_id": state.shipment_id,
             "address": state.order.address if state.order else ""}
    ask = Message(role="user", content=json.dumps(facts, sort_keys=True))
    answer = await ctx.ask([*state.messages, ask], schema=Confirmation)
    assert answer.parsed is not None
    email = answer.parsed.email
    return {"email": email, "messages": [Message(role="assistant", content=email)]}


async def recover(ctx: NodeContext, state: OrderState) -> dict[str, object]:
    """A model step failed after its retries and corrections: give it one fresh try."""
    return {}


def after_stock(state: OrderState) -> str:
    return "compute_tax" if state.reservation_id else FAILED


def after_charge(state: OrderState) -> str:
    return "ship" if state.charge_id else FAILED


def retry_model_step(state: OrderState) -> str:
    failed = state.last_error.node if state.last_error else ""
    return failed if failed in MODEL_NODES else FAILED


# Why the order's effects need no approval: no model picks them (docs/machines.md).
IN_CODE = ("code, not the model, makes each call in a fixed order, with amounts computed "
           "exactly from the parsed order; each is idempotent by its key")

GRAPH = (
    Graph("order", OrderState)
    .node("parse", parse, prompt=PARSE_PROMPT)
    .node("check_stock", check_stock, tools=[orders.reserve_stock], ungated=IN_CODE)
    .node("compute_tax", compute_tax)
    .node("charge", charge, tools=[orders.charge_payment, orders.release_stock], ungated=IN_CODE)
    .node("ship", ship, tools=[orders.create_shipment], ungated=IN_CODE)
    .node("confirm", confirm, prompt=CONFIRM_PROMPT)
    .node("recover", recover)
    .entry("parse")
    .edge("parse", "check_stock")
    .route("check_stock", after_stock, {"compute_tax": "reserved", FAILED: "out of stock"})
    .edge("compute_tax", "charge")
    .route("charge", after_charge, {"ship": "paid", FAILED: "payment declined"})
    .edge("ship", "confirm")
    .edge("confirm", "DONE")
    .route("recover", retry_model_step, {"parse": "retry", "confirm": "retry",
                                          FAILED: "not a model step"})
    .on_error("recover", nodes=MODEL_NODES)
    # One fresh try per model step; a second failure waits FAILED for an operator.
    .budget(escalate_to=FAILED, max_visits={"recover": 2})
    .compile()
)


@agent(GRAPH, scripts=scripted.SCRIPTS)
class OrderAgent(AgentWorkflow):
    """Parses a free-form order, then stock, tax, payment and shipment in code."""

    Input = OrderRequest

    def start(self, request: OrderRequest) -> OrderState:
        return OrderState(card=request.card,
                          messages=[Message(role="user", content=request.text)])
