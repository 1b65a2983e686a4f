"""Order CSV files for import_orders (functions/jobs/import_orders.py): the demo's, the benchmark's and the tests'."""

from __future__ import annotations


def order_id(import_id: str, row: int) -> str:
    return f"o-{import_id}-{row:06d}"


def row_amount(row: int) -> str:
    return f"{row % 500}.25"


def orders_csv(import_id: str, rows: int, bad_row: int | None = None) -> bytes:
    """A header and `rows` orders; row `bad_row` (0-based), if given, has an amount that is not a number."""
    lines = ["order_id,customer,amount"]
    for row in range(rows):
        amount = "not-a-number" if row == bad_row else row_amount(row)
        lines.append(f"{order_id(import_id, row)},customer {row % 97},{amount}")
    return ("\n".join(lines) + "\n").encode()
