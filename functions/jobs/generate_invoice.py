"""The article's incident as a job: render an invoice PDF through an external HTTP API and store it in S3.

The message carries only the invoice ID; the job re-reads the invoice. The API call goes through the job's
HTTP client: connect 10 s / read 30 s, no retries of its own, and the job's idempotency key
(`generate_invoice:<id>`) as `Idempotency-Key`, so a retry after a lost answer gets the same invoice back
instead of a second one. The client turns statuses into types (429/503 transient with Retry-After, 422
permanent); the queue retries with backoff and the job's time limit cuts a call that never answers.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from functions.catalog import INVOICES_PREFIX
from functions.jobs.records import load_item
from sqs_jobs.envelope import Envelope
from sqs_jobs.worker.errors import PermanentError, RecordNotFoundError
from sqs_jobs.worker.jobs import JobContext

PDF_MAGIC = b"%PDF"
PDF_CONTENT_TYPE = "application/pdf"
# The bucket resource's prefix: the only keys the worker's grant allows it to write.
KEY_PREFIX = INVOICES_PREFIX


class InvoiceNotFoundError(RecordNotFoundError):
    """No invoice with this ID in the invoices table."""


class InvoiceDataError(PermanentError):
    """The invoice exists but lacks what the invoicing API needs (customer, amount, currency)."""


class InvoicingResponseError(PermanentError):
    """The invoicing API answered with success but not with a PDF: its contract is broken, a retry won't help."""


def pdf_key(invoice_id: str) -> str:
    """Where the invoice's PDF is stored in the bucket; the worker may write under `invoices/` only."""
    return f"{KEY_PREFIX}{invoice_id}.pdf"


def _text(item: dict[str, Any], name: str) -> str | None:
    value = item.get(name, {}).get("S")
    return value.strip() if isinstance(value, str) and value.strip() else None


def _amount(item: dict[str, Any]) -> str | None:
    raw = item.get("amount", {}).get("N")
    try:
        # A string, never a float: money must reach the API exactly as stored.
        return str(Decimal(raw)) if raw is not None else None
    except InvalidOperation:
        return None


def invoice_request(invoice_id: str, invoice: dict[str, Any]) -> dict[str, str]:
    """The API's request body from the invoice item; InvoiceDataError names every field missing or invalid."""
    fields = {
        "customer": _text(invoice, "customer"),
        "amount": _amount(invoice),
        "currency": _text(invoice, "currency"),
    }
    missing = sorted(name for name, value in fields.items() if value is None)
    if missing:
        raise InvoiceDataError(f"invoice {invoice_id!r} has no valid {', '.join(missing)}")
    return {"invoice_id": invoice_id, **{name: str(value) for name, value in fields.items()}}


def run(envelope: Envelope, context: JobContext) -> dict[str, Any]:
    invoice = load_item(context, "invoices_table", "invoice_id", envelope.id, InvoiceNotFoundError)

    url = context.resource("invoicing_api_url").rstrip("/") + "/invoices"
    # The call that may hang (the article's incident): an operator sees where a long run waits.
    context.progress(1, 2, "waiting for the invoicing API's PDF")
    answer = context.http.post(url, json=invoice_request(envelope.id, invoice), headers={"Accept": PDF_CONTENT_TYPE})
    content_type = answer.headers.get("Content-Type", "")  # header names are case-insensitive here
    if answer.status not in (200, 201) or not answer.data.startswith(PDF_MAGIC):
        raise InvoicingResponseError(
            f"POST {url} answered {answer.status} with {content_type or 'no content type'} "
            f"({len(answer.data)} bytes), not a PDF"
        )

    key = pdf_key(envelope.id)
    # The bucket's default encryption applies; a rerun overwrites the object with the same PDF (same key).
    context.client("s3").put_object(
        Bucket=context.resource("invoices_bucket"), Key=key, Body=answer.data, ContentType=PDF_CONTENT_TYPE
    )
    context.logger.info("invoice stored", extra={"s3_key": key, "bytes": len(answer.data)})
    return {"s3_key": key, "bytes": len(answer.data)}
