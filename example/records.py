"""The example app's records as its demos, screenshots and tests seed them (DynamoDB's attribute-value form)."""

from __future__ import annotations

from typing import Any


def invoice_item(invoice_id: str, amount: str = "42.00") -> dict[str, Any]:
    """An invoice `generate_invoice` can render: a customer, an amount (a string, exact) and a currency."""
    return {
        "invoice_id": {"S": invoice_id},
        "customer": {"S": "Aiko"},
        "amount": {"N": amount},
        "currency": {"S": "EUR"},
    }
