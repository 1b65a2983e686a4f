"""A producer that means harm can't reach the operator's terminal or browser: dead letters whose job and ID hold
terminal sequences (clipboard write, hyperlink, title, screen clear), C1 controls, bidi overrides, zero-width
characters and rich markup go through every jobctl view and the console, and the bytes shown hold none of them raw
and interpret none of them; JSON output stays exact."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from functions.catalog import CATALOG
from sqs_jobs.cli.console.server import ConsoleServer
from sqs_jobs.local.engine import LocalEngine
from tests.e2e.console_requests import console_request
from tests.e2e.jobctl_runs import as_json, run

pytestmark = pytest.mark.e2e

CLIPBOARD = "\u001b]52;c;ZXZpbA==\u0007"
HYPERLINK = "\u001b]8;;https://evil.example/login\u001b\\order 1001\u001b]8;;\u001b\\"
TITLE = "\u001b]0;pwned\u0007"
CLEAR = "\u001b[2J\u001b[H"
HOSTILE_IDS = {
    "clipboard": f"1{CLIPBOARD}",
    "hyperlink": HYPERLINK,
    "title": f"{TITLE}2",
    "clear": f"3{CLEAR}",
    "c1": "4\u009b2J",
    "bidi": "txt\u202egpj.exe",
    "zero_width": "10\u200b01",
    "carriage_return": "ok\rFORGED",
    "nul": "5\u00006",
}
MARKUP_JOBS = ("[/bold]", "[link=https://evil.example/login]order_confirmation[/link]", "[bold red on white]x")
# Nothing of these may leave jobctl or the console raw.
FORBIDDEN = ("\u001b", "\u0007", "\u009b", "\u202e", "\u200b", "\r", "\u0000")


@pytest.fixture(scope="module")
def engine() -> Iterator[LocalEngine]:
    with LocalEngine(port=0, worker_output=io.StringIO(), heartbeat_interval_s=3600, catalog=CATALOG) as running:
        assert running.deployment is not None
        sqs = running.clients()("sqs")
        url = running.deployment.queues["orders"].url
        bodies = [json.dumps({"job": "order_confirmation", "id": value}) for value in HOSTILE_IDS.values()]
        bodies += [json.dumps({"job": job, "id": "x"}) for job in MARKUP_JOBS]
        for body in bodies:
            sqs.send_message(QueueUrl=url, MessageBody=body)
        assert running.wait_until_idle(timeout_s=60)
        dlq = running.deployment.queues["orders"].dlq_url
        depth = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["ApproximateNumberOfMessages"])
        assert int(depth["Attributes"]["ApproximateNumberOfMessages"]) == len(bodies)
        yield running


def _raw(text: str) -> list[str]:
    return [char for char in FORBIDDEN if char in text]


def test_dlq_list_shows_every_group_as_text_and_never_interprets_markup(engine: LocalEngine) -> None:
    for output in ("table", "text"):
        listed = run(engine, "--output", output, "dlq", "list", "orders", "--group-by", "job")

        assert listed.exit_code == 0, listed.output
        assert _raw(listed.output) == []
        flat = " ".join(listed.output.split())
        # The markup is shown as the characters the producer sent, not as a link or a style.
        assert "[/bold]" in flat and "[link=https://evil.example/login]" in flat.replace("│ ", "").replace(" │", "")


def test_dlq_show_prints_each_hostile_message_with_its_escapes_visible(engine: LocalEngine) -> None:
    letters = as_json(run(engine, "--output", "json", "dlq", "list", "orders", "--group-by", "job"))
    assert letters["total"] == len(HOSTILE_IDS) + len(MARKUP_JOBS)
    scanned = run(
        engine, "--output", "json", "dlq", "redrive", "orders", "--all", "--dry-run", "--allow-non-idempotent"
    )
    assert scanned.exit_code == 0, scanned.output
    ids = [entry["message_id"] for entry in as_json(scanned)["would_move"]]
    every = ""
    for number, message_id in enumerate(ids):
        # Text output for a few (it flattens the same payload), the human view for all.
        for output in ("table", "text") if number < 3 else ("table",):
            shown = run(engine, "--output", output, "dlq", "show", "orders", message_id)
            assert shown.exit_code == 0, shown.output
            assert _raw(shown.output) == [], (message_id, shown.output)
            every += shown.output if output == "table" else ""
    # What the producer hid is there to see, as escapes.
    for escape in ("\\x1b]52;c;ZXZpbA==\\x07", "\\x1b]8;;https://evil.example/login", "\\u202e", "\\u200b", "\\x9b"):
        assert escape in every


def test_json_output_stays_exact(engine: LocalEngine) -> None:
    scanned = as_json(
        run(engine, "--output", "json", "dlq", "redrive", "orders", "--all", "--dry-run", "--allow-non-idempotent")
    )
    ids = {entry["id"] for entry in scanned["would_move"]}
    # json.dumps escapes the controls; decoded, each ID is byte for byte what the producer sent.
    assert set(HOSTILE_IDS.values()) <= ids


def test_redrive_refusals_dry_runs_and_errors_hold_nothing_raw(engine: LocalEngine) -> None:
    dry = run(engine, "dlq", "redrive", "orders", "--all", "--dry-run", "--allow-non-idempotent")
    assert dry.exit_code == 0, dry.output
    assert _raw(dry.output) == []
    assert "\\x1b]0;pwned\\x07" in dry.output
    missing = run(engine, "dlq", "show", "orders", f"no-such{CLEAR}")
    assert missing.exit_code == 1
    assert _raw(missing.output) == [] and "\\x1b[2J" in missing.output


def test_the_console_pages_show_the_escapes_never_the_characters(engine: LocalEngine, tmp_path: Path) -> None:
    scanned = as_json(
        run(engine, "--output", "json", "dlq", "redrive", "orders", "--all", "--dry-run", "--allow-non-idempotent")
    )
    with ConsoleServer(engine.clients(), engine.stack_name, port=0, archive_dir=tmp_path, catalog=CATALOG) as console:
        messages = [f"/queues/orders/messages/{m['message_id']}" for m in scanned["would_move"]]
        pages = ["/", "/queues/orders", "/life", *messages]
        for path in pages:
            response, page = console_request(console, "GET", path)
            assert response.status == 200, (path, page[:500])
            assert _raw(page) == [], path
            assert '<a href="https://evil.example' not in page


def test_schedules_list_shows_malformed_and_hostile_inputs_without_crashing(
    engine: LocalEngine, tmp_path: Path
) -> None:
    from sqs_jobs.stack_names import schedule_group_name

    assert engine.deployment is not None
    api = engine.clients()("scheduler")
    orders = engine.deployment.queues["orders"]
    inputs = {
        "once-hostile-list": "[1, 2]",
        "once-hostile-markup": json.dumps({"job": "[link=https://evil.example/login]x[/link]", "id": f"7{CLEAR}"}),
    }
    for name, input_ in inputs.items():
        api.create_schedule(
            Name=name,
            GroupName=schedule_group_name(engine.stack_name),
            ScheduleExpression="at(2030-01-01T00:00:00)",
            FlexibleTimeWindow={"Mode": "OFF"},
            Target={"Arn": orders.arn, "RoleArn": "arn:aws:iam::123456789012:role/r", "Input": input_},
        )

    for output in ("table", "text"):
        listed = run(engine, "--output", output, "schedules", "list")
        assert listed.exit_code == 0, listed.output
        assert _raw(listed.output) == []
        assert "once-hostile-list" in listed.output
    table = run(engine, "schedules", "list").output
    assert "[link=https://evil.example/login]x[/link]" in " ".join(table.split()).replace("│ ", "").replace(" │", "")
    scripted = as_json(run(engine, "--output", "json", "schedules", "list"))
    hostile = next(row for row in scripted["schedules"] if row["name"] == "once-hostile-markup")
    assert hostile["id"] == f"7{CLEAR}"  # exact in JSON
    # The console's jobs page lists the same schedules, and a search for what the producer hid, as text.
    with ConsoleServer(engine.clients(), engine.stack_name, port=0, archive_dir=tmp_path, catalog=CATALOG) as console:
        for path in ("/life", "/life?q=%1B%5B2J"):
            response, page = console_request(console, "GET", path)
            assert response.status == 200, page[:500]
            assert _raw(page) == [], path
        assert "\\x1b[2J" in page and "once-hostile-markup" in page
