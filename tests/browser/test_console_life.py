"""The job's whole life in the console, in a real browser on the local engine: a job retrying (its error, when it
is due), one running (since when, which worker) and cancelled from its row (it stops at its next call and lands
in the DLQ as JobCancelledError), one not run yet cancelled from its own page (its copy never runs), the
schedules; and the overview's charts, read from their pixels."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Callable

import pytest
from PIL import Image
from playwright.sync_api import BrowserContext, Page, expect

from example.records import invoice_item
from example.standins.invoicing import FakeInvoicingApi
from sqs_jobs.cli.console.charts import HEIGHT, TOP
from sqs_jobs.cli.console.server import ConsoleServer
from sqs_jobs.local.engine import LocalEngine
from tests.e2e.jobctl_runs import publish, put_order

pytestmark = pytest.mark.e2e


def _until(page: Page, url: str, condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Reload `url` until `condition` holds (the lists are read on each page view)."""
    deadline = time.monotonic() + timeout_s
    while True:
        page.goto(url)
        if condition():
            return
        assert time.monotonic() < deadline, f"not seen in {timeout_s:.0f}s: {what}"
        time.sleep(0.5)


def _invoice(engine: LocalEngine, invoice_id: str) -> None:
    assert engine.deployment is not None
    engine.clients()("dynamodb").put_item(
        TableName=engine.deployment.resources["invoices_table"],
        Item=invoice_item(invoice_id),
    )


def _dead_letter_bodies(engine: LocalEngine, queue: str) -> list[dict[str, str]]:
    assert engine.deployment is not None
    sqs = engine.clients()("sqs")
    found = []
    for message in sqs.receive_message(
        QueueUrl=engine.deployment.queues[queue].dlq_url,
        MaxNumberOfMessages=10,
        MessageAttributeNames=["All"],
        VisibilityTimeout=0,  # a look, not a take
    ).get("Messages", []):
        attributes = {name: value["StringValue"] for name, value in message["MessageAttributes"].items()}
        found.append({**json.loads(message["Body"]), "error_type": attributes.get("jobs.error_type", "")})
    return found


def test_retrying_running_and_cancelled_jobs_from_the_browser(
    engine: LocalEngine, console: ConsoleServer, browser: BrowserContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The worker runs in this process: a running job reads whether it was cancelled before each call (every 10 s
    # in production, at every call here).
    monkeypatch.setattr("sqs_jobs.worker.progress.CANCEL_CHECK_INTERVAL_S", 0.0)
    invoicing = engine.standins["invoicing_api_url"]
    assert isinstance(invoicing, FakeInvoicingApi)
    for invoice_id in ("inv-retry", "inv-run"):
        _invoice(engine, invoice_id)
    page = browser.new_page()
    page.goto(console.url)
    life = console.url_for("life")

    # Retrying: the API refuses one invoice with 503.
    invoicing.set_mode("503", only_ids=["inv-retry"], retry_after="30")
    publish(engine, "invoices", "generate_invoice", "inv-retry")
    retrying = page.locator("table.retrying tr[data-id=inv-retry]")
    _until(page, life, lambda: retrying.count() == 1, 30, "inv-retry listed as retrying")
    expect(retrying).to_contain_text("HttpTransientError")
    expect(retrying.locator("td").nth(3)).to_have_text("1")  # runs so far
    expect(retrying).to_contain_text("UTC")  # due when

    # Running: the API hangs on another; it is listed with since when and which worker, and cancelled from its row.
    invoicing.set_mode("hang", only_ids=["inv-run"])
    publish(engine, "invoices", "generate_invoice", "inv-run")
    running = page.locator("table.running tr[data-id=inv-run]")
    progress = "1 of 2 (50%): waiting for the invoicing API's PDF"
    # Listed as running from its claim; its progress follows a moment later (a loaded machine's page saw none yet).
    _until(page, life, lambda: running.count() == 1 and progress in running.inner_text(), 30, "inv-run's progress")
    expect(running.locator("td").nth(5)).to_contain_text("local/")  # the worker: its log stream
    expect(running).to_contain_text(progress)
    running.get_by_role("link", name="Cancel…").click()
    expect(page.get_by_role("heading", name="Cancel generate_invoice:inv-run?")).to_be_visible()
    page.get_by_role("button", name="Cancel the job").click()
    expect(page.get_by_role("status").first).to_contain_text("Cancel: requested")
    # The API answers at last: the job's next call (storing the PDF) is where it stops.
    invoicing.set_mode("ok")
    letters: list[dict[str, str]] = []
    deadline = time.monotonic() + 30
    while not letters:
        assert time.monotonic() < deadline, "the cancelled run never reached the DLQ"
        time.sleep(0.5)
        letters = [body for body in _dead_letter_bodies(engine, "invoices") if body["id"] == "inv-run"]
    assert [letter["error_type"] for letter in letters] == ["JobCancelledError"]
    cancelled = page.locator("table.cancelled tr[data-id=inv-run]")
    _until(page, life, lambda: cancelled.count() == 1, 30, "inv-run listed as cancelled")
    expect(page.locator("table.running tr[data-id=inv-run]")).to_have_count(0)

    _cancel_a_waiting_job_from_its_page(engine, console, page)

    # Search: by job, and by ID; the schedules are listed with their next run.
    page.goto(life + "?job=order_confirmation&q=2001")
    expect(page.locator("table.cancelled tr[data-id='2001']")).to_have_count(1)
    expect(page.locator("table.cancelled tr[data-id=inv-run]")).to_have_count(0)
    # A search reads the dead letters too: the cancelled run's is there, with its error type.
    page.goto(life + "?job=generate_invoice&q=INV-RUN")
    expect(page.locator("table.dead tr[data-id=inv-run]")).to_contain_text("JobCancelledError")
    expect(page.locator("table.cancelled tr[data-id=inv-run]")).to_have_count(1)
    page.goto(life)
    expect(page.locator("table.dead")).to_have_count(0)  # no search, no DLQ scan
    expect(page.locator("table.scheduled")).to_contain_text("dlq_review")


def _cancel_a_waiting_job_from_its_page(engine: LocalEngine, console: ConsoleServer, page: Page) -> None:
    """A job not run yet (here: not even published; a queued or delayed copy meets the same record) is cancelled
    from its own page, and its copy is acknowledged without running."""
    put_order(engine, "2001", "waiting@example.com")
    page.goto(console.url_for("jobs"))
    page.get_by_label("Job").select_option("order_confirmation")
    page.get_by_label("ID", exact=True).fill("2001")
    page.get_by_role("button", name="Find").click()
    expect(page.get_by_role("heading", name=re.compile("order_confirmation:2001: not found"))).to_be_visible()
    page.get_by_role("link", name="Cancel this job…").click()
    page.get_by_role("button", name="Cancel the job").click()
    expect(page.get_by_role("status").first).to_contain_text("Cancel: cancelled")
    expect(page.get_by_role("heading", name=re.compile("order_confirmation:2001: cancelled"))).to_be_visible()
    publish(engine, "orders", "order_confirmation", "2001")
    assert engine.wait_until_idle(timeout_s=60)
    mailed = {address for mail in engine.sent_mail() for address in mail["destinations"].get("ToAddresses", [])}
    assert "waiting@example.com" not in mailed


def test_the_overview_charts_show_a_flat_series_inside_the_frame(
    engine: LocalEngine, console: ConsoleServer, browser: BrowserContext
) -> None:
    publish(engine, "orders", "order_confirmation", "601", "602", "603", "604")  # no such orders: 4 dead letters
    assert engine.wait_until_idle(timeout_s=60)
    page = browser.new_page()
    page.goto(console.url)
    chart = page.locator("tr[data-charts=orders] figure", has_text="DLQ depth").first
    if "4 now" not in chart.inner_text():  # the engine samples the queues every few seconds
        _until(page, console.base_url, lambda: "4 now" in chart.inner_text(), 30, "DLQ depth 4 charted")
    expect(chart.locator("figcaption")).to_contain_text("DLQ depth: 4 now")
    svg = chart.locator("svg")

    # Look at it: the line's blue pixels are inside the frame, at 4 of a 0..5 scale, not on an edge.
    path = console.archive_dir.parent / "dlq-chart.png"
    svg.screenshot(path=str(path))
    image = Image.open(path).convert("RGB")
    width, height = image.size
    blue_per_row = Counter(y for y in range(height) for x in range(width) if _line_blue(image.getpixel((x, y))))
    assert blue_per_row, "no line drawn"
    box = svg.bounding_box()
    assert box is not None
    scale = height / box["height"]
    top_of_plot, axis = TOP * scale, (TOP + HEIGHT) * scale
    [(line, _)] = blue_per_row.most_common(1)  # the flat line's row (the latest point's dot is a few pixels)
    assert top_of_plot + 2 < line < axis - 2
    assert abs(line - (axis - 0.8 * (axis - top_of_plot))) <= 2 * scale
    # And for a screen reader: the same facts.
    expect(svg).to_have_attribute("aria-label", re.compile("now 4, peak 4, scale 0 to 5"))


def _line_blue(pixel: object) -> bool:
    """The line's colour (#0972d3, console.css), give or take antialiasing."""
    assert isinstance(pixel, tuple)
    red, green, blue = (int(channel) for channel in pixel[:3])
    return blue > 150 and red < 80 and 60 < green < 160
