"""Order tools: reserve stock, release it, charge a card, create a shipment.

Every one of them changes the world, so each is ``side_effect=True``: the ToolsDb
records its idempotency key in the same transaction, and a retried or replayed
call returns the first result instead of reserving, charging or shipping twice.
Money is Decimal end to end (stored as text), never float.
"""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal
from typing import Any, Literal

from pydantic import BaseModel, Field

from .spec import Db, EffectCall, NoEffect, tool

SCHEMA = """
CREATE TABLE IF NOT EXISTS products (
    sku TEXT PRIMARY KEY, name TEXT NOT NULL, price TEXT NOT NULL,
    stock INTEGER NOT NULL CHECK (stock >= 0));
CREATE TABLE IF NOT EXISTS cards (
    token TEXT PRIMARY KEY, status TEXT NOT NULL, limit_amount TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS reservations (
    id TEXT PRIMARY KEY, items TEXT NOT NULL, status TEXT NOT NULL,
    idempotency_key TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS charges (
    id TEXT PRIMARY KEY, card TEXT NOT NULL, amount TEXT NOT NULL, currency TEXT NOT NULL,
    status TEXT NOT NULL, reason TEXT NOT NULL, idempotency_key TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS shipments (
    id TEXT PRIMARY KEY, reservation_id TEXT NOT NULL, address TEXT NOT NULL,
    idempotency_key TEXT NOT NULL UNIQUE);
"""
SEED_PRODUCTS = [
    ("WIDGET-1", "Widget", "19.99", 5000),
    ("GADGET-2", "Gadget", "249.00", 2000),
    ("GIZMO-3", "Gizmo", "5.25", 0),
]
SEED_CARDS = [
    ("tok_visa", "active", "100000.00"),
    ("tok_low", "active", "50.00"),
    ("tok_declined", "blocked", "0.00"),
]


def seed(db: Db) -> None:
    """The shop's products and cards, once (in the caller's transaction, on SCHEMA)."""
    if db.execute("SELECT COUNT(*) FROM products").fetchone()[0] == 0:
        db.executemany("INSERT INTO products VALUES (?,?,?,?) ON CONFLICT DO NOTHING",
                       SEED_PRODUCTS)
        db.executemany("INSERT INTO cards VALUES (?,?,?) ON CONFLICT DO NOTHING", SEED_CARDS)


class Item(BaseModel):
    sku: str = Field(pattern=r"^[A-Z]+-\d+$")
    quantity: int = Field(ge=1, le=100)


class ReserveStock(BaseModel):
    items: list[Item] = Field(min_length=1, max_length=20)


class ReleaseStock(BaseModel):
    reservation_id: str = Field(pattern=r"^rs_[0-9a-f]{12}$")


class ChargePayment(BaseModel):
    card: str = Field(pattern=r"^tok_[a-z0-9_]{1,40}$")
    amount: Decimal = Field(gt=0, max_digits=12, decimal_places=2)
    currency: Literal["USD"] = "USD"


class CreateShipment(BaseModel):
    reservation_id: str = Field(pattern=r"^rs_[0-9a-f]{12}$")
    address: str = Field(min_length=5, max_length=300)


def _id(prefix: str, key: str) -> str:
    return f"{prefix}_{hashlib.sha256(key.encode()).hexdigest()[:12]}"


@tool(side_effect=True, description="Reserve stock for every item of an order, or none.")
def reserve_stock(db: Db, args: ReserveStock, call: EffectCall) -> dict[str, Any]:
    lines, missing = [], []
    for item in args.items:
        row = db.execute("SELECT * FROM products WHERE sku=?", (item.sku,)).fetchone()
        if row is None or row["stock"] < item.quantity:
            missing.append({"sku": item.sku, "requested": item.quantity,
                            "available": row["stock"] if row else 0})
        else:
            lines.append({"sku": item.sku, "name": row["name"], "unit_price": row["price"],
                          "quantity": item.quantity})
    if missing:
        raise NoEffect({"ok": False, "missing": missing})  # nothing reserved
    for item in args.items:
        db.execute("UPDATE products SET stock = stock - ? WHERE sku=?", (item.quantity, item.sku))
    reservation = _id("rs", call.key)
    db.execute("INSERT INTO reservations VALUES (?,?,?,?)",
               (reservation, json.dumps([i.model_dump() for i in args.items]), "held", call.key))
    return {"ok": True, "reservation_id": reservation, "lines": lines}


@tool(side_effect=True, description="Put a held reservation back in stock.")
def release_stock(db: Db, args: ReleaseStock) -> dict[str, Any]:
    row = db.execute("SELECT * FROM reservations WHERE id=?", (args.reservation_id,)).fetchone()
    if row is None or row["status"] != "held":
        raise NoEffect({"released": False, "why": "no held reservation " + args.reservation_id})
    for item in json.loads(row["items"]):
        db.execute("UPDATE products SET stock = stock + ? WHERE sku=?",
                   (item["quantity"], item["sku"]))
    db.execute("UPDATE reservations SET status='released' WHERE id=?", (args.reservation_id,))
    return {"released": True}


@tool(side_effect=True, description="Charge a card once.")
def charge_payment(db: Db, args: ChargePayment, call: EffectCall) -> dict[str, Any]:
    card = db.execute("SELECT * FROM cards WHERE token=?", (args.card,)).fetchone()
    if card is None or card["status"] != "active":
        status, reason = "declined", "card not accepted"
    elif args.amount > Decimal(card["limit_amount"]):
        status, reason = "declined", "insufficient funds"
    else:
        status, reason = "paid", ""
    charge = _id("ch", call.key)
    db.execute("INSERT INTO charges VALUES (?,?,?,?,?,?,?)",
               (charge, args.card, str(args.amount), args.currency, status, reason, call.key))
    return {"charge_id": charge, "status": status, "reason": reason}


@tool(side_effect=True, description="Ship a reservation to an address.")
def create_shipment(db: Db, args: CreateShipment, call: EffectCall) -> dict[str, Any]:
    shipment = _id("sh", call.key)
    db.execute("INSERT INTO shipments VALUES (?,?,?,?)",
               (shipment, args.reservation_id, args.address, call.key))
    db.execute("UPDATE reservations SET status='shipped' WHERE id=?", (args.reservation_id,))
    return {"shipment_id": shipment}


TOOLS = [reserve_stock, release_stock, charge_payment, create_shipment]
