"""Screenshots of the console for the README (`make screenshots`): the overview, a queue's dead letters and the
jobs in flight, on the local engine with a few dead-lettered jobs of two tenants, one retrying, one running and one
cancelled, taken by the same headless chromium the browser tests drive."""

from __future__ import annotations

import io
import json
import sys
import tempfile
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

from example.records import invoice_item
from example.standins.invoicing import FakeInvoicingApi
from functions.catalog import CATALOG
from sqs_jobs.cli.console.server import ConsoleServer
from sqs_jobs.cli.job_cancel import cancel_job, target_for
from sqs_jobs.local.engine import LocalEngine
from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS

OUT = Path(__file__).resolve().parent.parent / "docs" / "images"


def _invoice_job(invoice_id: str) -> str:
    return json.dumps({"job": "generate_invoice", "id": invoice_id})


def _jobs_in_flight(engine: LocalEngine) -> None:
    """An invoice the API refuses (retrying), one it hangs on (running, with its progress), one cancelled."""
    assert engine.deployment is not None
    clients = engine.clients()
    invoicing = engine.standins["invoicing_api_url"]
    assert isinstance(invoicing, FakeInvoicingApi)
    invoices = engine.deployment.queues["invoices"].url
    for invoice_id in ("INV-2041", "INV-2042"):
        clients("dynamodb").put_item(
            TableName=engine.deployment.resources["invoices_table"],
            Item=invoice_item(invoice_id),
        )
    invoicing.set_mode("503", only_ids=["INV-2041"], retry_after="600")
    clients("sqs").send_message(
        QueueUrl=invoices, MessageBody=json.dumps({"job": "generate_invoice", "id": "INV-2041"})
    )
    time.sleep(3)
    invoicing.set_mode("hang", only_ids=["INV-2042"])
    clients("sqs").send_message(
        QueueUrl=invoices, MessageBody=json.dumps({"job": "generate_invoice", "id": "INV-2042"})
    )
    spec = CATALOG.queue_for_job("order_confirmation")
    cancel_job(
        clients("dynamodb"),
        engine.deployment.idempotency_table,
        target_for(spec, "order_confirmation", "1005", None),
        "arn:aws:sts::000000000000:assumed-role/operator/night-shift",
    )
    time.sleep(3)


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    with (
        LocalEngine(port=0, worker_output=io.StringIO(), catalog=CATALOG) as engine,
        tempfile.TemporaryDirectory() as scratch,
    ):
        assert engine.deployment is not None
        sqs, dynamodb = engine.clients()("sqs"), engine.clients()("dynamodb")
        orders = engine.deployment.queues["orders"]
        dynamodb.put_item(
            TableName=engine.deployment.resources["orders_table"],
            Item={"order_id": {"S": "1001"}, "email": {"S": "buyer@example.com"}},
        )
        # Two tenants' orders, as a publisher sends them (the tenant is the message group: fair queues).
        for order_id, tenant in (("1001", "acme-eu"), ("1002", "acme-eu"), ("1003", "acme-eu"), ("1004", "globex")):
            sqs.send_message(
                QueueUrl=orders.url,
                MessageBody=json.dumps({"job": "order_confirmation", "id": order_id, "tenant": tenant}),
                MessageGroupId=tenant,
            )
        sqs.send_message(QueueUrl=orders.url, MessageBody="not json")
        engine.wait_until_idle(timeout_s=60)
        _jobs_in_flight(engine)
        time.sleep(6)  # one more sample of the queues for the charts
        console = ConsoleServer(engine.clients(), engine.stack_name, port=0, archive_dir=Path(scratch), catalog=CATALOG)
        with console, sync_playwright() as driver:
            context = driver.chromium.launch_persistent_context(
                str(Path(scratch) / "profile"),
                executable_path=str(CHROMIUM),
                headless=True,
                args=CHROMIUM_ARGS,
                viewport={"width": 1200, "height": 760},
            )
            page = context.new_page()
            page.goto(console.url)
            page.screenshot(path=str(OUT / "console-overview.png"), full_page=True)
            page.goto(console.url_for("queues/orders"))
            page.screenshot(path=str(OUT / "console-dlq.png"), full_page=True)
            page.goto(console.url_for("life"))
            page.screenshot(path=str(OUT / "console-jobs.png"), full_page=True)
            context.close()
    names = ("console-overview.png", "console-dlq.png", "console-jobs.png")
    print("wrote " + ", ".join(str(OUT / name) for name in names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
