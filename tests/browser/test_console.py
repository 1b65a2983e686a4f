"""The operator's path through the console in a real browser, on the local engine: from the overview to a
queue's dead letters, redrive a group once its cause is fixed, see the result, and check the messages moved."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import BrowserContext, expect

from sqs_jobs.cli.console.server import ConsoleServer
from sqs_jobs.local.engine import LocalEngine

pytestmark = pytest.mark.e2e

MISSING_ORDERS = ("501", "502", "503")


def _dead_letter_jobs(engine: LocalEngine) -> None:
    """Three confirmations for orders that don't exist yet (a permanent failure each) and one malformed message."""
    assert engine.deployment is not None
    sqs = engine.clients()("sqs")
    orders = engine.deployment.queues["orders"]
    for order_id in MISSING_ORDERS:
        sqs.send_message(QueueUrl=orders.url, MessageBody=json.dumps({"job": "order_confirmation", "id": order_id}))
    sqs.send_message(QueueUrl=orders.url, MessageBody="not json")
    assert engine.wait_until_idle(timeout_s=60)


def _dlq_count(engine: LocalEngine) -> int:
    assert engine.deployment is not None
    attributes = engine.clients()("sqs").get_queue_attributes(
        QueueUrl=engine.deployment.queues["orders"].dlq_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return sum(int(value) for value in attributes.values())


def test_redrive_a_group_from_the_browser(engine: LocalEngine, console: ConsoleServer, browser: BrowserContext) -> None:
    _dead_letter_jobs(engine)
    assert _dlq_count(engine) == 4
    page = browser.new_page()

    page.goto(console.url)
    assert page.url == console.base_url  # the token left the address bar for a cookie at once
    orders_row = page.locator("tr[data-queue=orders]")
    expect(orders_row).to_contain_text("unhealthy")
    expect(orders_row.locator("td").nth(4)).to_have_text("4")  # DLQ depth
    page.get_by_role("link", name="orders", exact=True).first.click()

    expect(page.get_by_role("heading", name=re.compile("Dead letters: 4"))).to_be_visible()
    group = page.locator("tr", has_text="OrderNotFoundError").first
    expect(group.locator("td").first).to_have_text("3")

    # The cause is fixed: the orders exist now.
    assert engine.deployment is not None
    for order_id in MISSING_ORDERS:
        engine.clients()("dynamodb").put_item(
            TableName=engine.deployment.resources["orders_table"],
            Item={"order_id": {"S": order_id}, "email": {"S": f"buyer-{order_id}@example.com"}},
        )
    group.get_by_role("link", name=re.compile("^Redrive")).click()

    expect(
        page.get_by_role("heading", name=re.compile(r"Redrive 3 message\(s\) from the DLQ of orders"))
    ).to_be_visible()
    page.get_by_role("button", name="Redrive", exact=True).click()

    result = page.get_by_role("status")
    expect(result).to_contain_text("Moved 3 of 3 message(s) back to orders", timeout=90_000)
    expect(result).to_contain_text("All were processed; 0 came back to the DLQ")

    assert _dlq_count(engine) == 1  # only the malformed message is left
    mailed = {address for mail in engine.sent_mail() for address in mail["destinations"].get("ToAddresses", [])}
    assert {f"buyer-{order_id}@example.com" for order_id in MISSING_ORDERS} <= mailed

    page.get_by_role("link", name="Back to orders").click()
    expect(page.get_by_role("heading", name=re.compile("Dead letters: 1"))).to_be_visible()


def test_pause_and_resume_from_the_browser(
    engine: LocalEngine, console: ConsoleServer, browser: BrowserContext
) -> None:
    page = browser.new_page()
    page.goto(console.url_for("queues/orders"))
    page.get_by_role("link", name="Pause…").click()
    page.get_by_role("button", name="Pause").click()
    expect(page.locator("h1 .badge.paused")).to_have_text("paused")
    page.get_by_role("link", name="Resume…").click()
    page.get_by_role("button", name="Resume").click()
    expect(page.get_by_role("link", name="Pause…")).to_be_visible()


def test_discard_offers_the_archive_as_a_download(
    engine: LocalEngine, console: ConsoleServer, browser: BrowserContext
) -> None:
    _dead_letter_jobs(engine)
    page = browser.new_page()
    page.goto(console.url_for("queues/orders"))
    page.locator("tr", has_text="EnvelopeNotJSONError").first.get_by_role("link", name=re.compile("^Discard")).click()
    page.get_by_role("button", name="Discard", exact=True).click()
    expect(page.get_by_role("status")).to_contain_text("Discarded 1 of 1 message(s)")
    with page.expect_download() as download:
        page.get_by_role("link", name="Download the archive").click()
    [archived] = [json.loads(line) for line in download.value.path().read_text(encoding="utf-8").splitlines()]
    assert archived["body"] == "not json" and archived["error_type"] == "EnvelopeNotJSONError"
    assert _dlq_count(engine) == 3


def test_find_a_job_in_the_browser(engine: LocalEngine, console: ConsoleServer, browser: BrowserContext) -> None:
    _dead_letter_jobs(engine)
    page = browser.new_page()
    page.goto(console.url_for("jobs"))
    page.get_by_label("ID").fill("502")
    page.get_by_role("button", name="Find").click()
    expect(page.get_by_role("heading", name="order_confirmation:502: dead-lettered")).to_be_visible()
    page.get_by_role("link", name=re.compile("Dead letter")).click()
    expect(page.get_by_role("heading", name=re.compile("order_confirmation:502"))).to_be_visible()
    expect(page.locator("pre").first).to_contain_text('"id": "502"')
