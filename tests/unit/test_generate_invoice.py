"""generate_invoice's catalog entry (the incident's settings) and its pure parts. The job end to end:
tests/functional/test_generate_invoice.py and tests/e2e/test_invoice_incident.py."""

from __future__ import annotations

import pytest

from functions.catalog import CATALOG
from functions.jobs.generate_invoice import InvoiceDataError, invoice_request, pdf_key
from sqs_jobs.worker.http import HttpClient


def test_the_shipped_catalog_has_the_invoice_queue_set_for_the_incident() -> None:
    invoices = CATALOG.queue("invoices")

    assert invoices.job_names == ("generate_invoice",)
    assert CATALOG.queue_for_job("generate_invoice") is invoices
    assert invoices.job("generate_invoice").handler == "functions.jobs.generate_invoice"
    assert invoices.resources == ("invoices_table", "invoices_bucket", "invoicing_api_url")
    assert all(CATALOG.resource(name).description.strip() for name in invoices.resources)
    assert invoices.function_timeout_s == 120
    assert invoices.max_concurrency == 2  # a small downstream
    limit = invoices.time_limit_s("generate_invoice")
    assert limit == 60
    # One whole HTTP call fits in a run (the client's whole-call timeout fires first), and a cut run leaves time
    # to settle.
    assert HttpClient().total_timeout_s < limit < invoices.function_timeout_s


def test_the_pdf_key_is_under_the_prefix_the_worker_may_write() -> None:
    assert pdf_key("INV-1") == "invoices/INV-1.pdf"


def item(**fields: dict[str, str]) -> dict[str, dict[str, str]]:
    base = {"customer": {"S": "Aiko"}, "amount": {"N": "42.50"}, "currency": {"S": "EUR"}}
    return {**base, **fields}


def test_the_request_carries_the_invoice_as_stored_and_money_as_a_string() -> None:
    assert invoice_request("INV-1", item()) == {
        "invoice_id": "INV-1",
        "customer": "Aiko",
        "amount": "42.50",  # exact, never a float
        "currency": "EUR",
    }


@pytest.mark.parametrize(
    ("fields", "missing"),
    [
        ({"customer": {"S": "  "}}, "customer"),
        ({"amount": {"N": "forty"}}, "amount"),
        ({"amount": {"S": "42"}}, "amount"),
        ({"currency": {"N": "978"}}, "currency"),
    ],
)
def test_an_incomplete_invoice_is_a_permanent_data_error(fields: dict[str, dict[str, str]], missing: str) -> None:
    with pytest.raises(InvoiceDataError, match=f"has no valid {missing}"):
        invoice_request("INV-1", item(**fields))
