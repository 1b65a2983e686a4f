"""Screenshots of the console for the README (`make screenshots`): the overview and a queue's dead letters, on
the local engine with a few dead-lettered jobs, taken by the same headless chromium the browser tests drive."""

from __future__ import annotations

import io
import json
import sys
import tempfile
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

from jobctl.console.server import ConsoleServer
from jobctl.local.engine import LocalEngine
from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS

OUT = Path(__file__).resolve().parent.parent / "docs" / "images"


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    with LocalEngine(port=0, worker_output=io.StringIO()) as engine, tempfile.TemporaryDirectory() as scratch:
        assert engine.deployment is not None
        sqs, dynamodb = engine.clients()("sqs"), engine.clients()("dynamodb")
        orders = engine.deployment.queues["orders"]
        dynamodb.put_item(
            TableName=engine.deployment.resources["orders_table"],
            Item={"order_id": {"S": "1001"}, "email": {"S": "buyer@example.com"}},
        )
        bodies = [{"job": "order_confirmation", "id": order_id} for order_id in ("1001", "1002", "1003", "1004")]
        for body in bodies:
            sqs.send_message(QueueUrl=orders.url, MessageBody=json.dumps(body))
        sqs.send_message(QueueUrl=orders.url, MessageBody="not json")
        engine.wait_until_idle(timeout_s=60)
        time.sleep(6)  # one more sample of the queues for the charts
        console = ConsoleServer(engine.clients(), engine.stack_name, port=0, archive_dir=Path(scratch))
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
            context.close()
    print(f"wrote {OUT / 'console-overview.png'} and {OUT / 'console-dlq.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
