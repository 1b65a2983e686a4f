"""`jobctl dlq show` prints a dead letter's producer attributes for a person: one `name (Type): value` line each,
what doesn't show as itself escaped; `--output json` keeps them exact."""

from __future__ import annotations

import base64
import json

from click.testing import CliRunner

from sqs_jobs.cli.cli import main as jobctl
from sqs_jobs.worker.provenance import Attributes
from tests.functional.conftest import Harness, envelope

# What SQS takes in a string attribute (its body's characters: tab, LF, CR, U+0020 and up), hidden ones included:
# a line break, a right-to-left override and a C1 control (CSI). A binary value, and a data type with a label.
PRODUCER: Attributes = {
    "tenant": {"DataType": "String", "StringValue": "acme"},
    "retries": {"DataType": "Number", "StringValue": "3"},
    "thumb": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xff"},
    "note": {"DataType": "String.utf8", "StringValue": "line one\nline two \u202egpj.exe \u009b2J"},
}
INDENT = " " * 18


def _dead_letter_id(harness: Harness, body: str, attributes: Attributes | None = None) -> str:
    if attributes:
        harness.send(body, MessageAttributes=attributes)
    else:
        harness.send(body)
    invocation = harness.deliver()  # the order doesn't exist: dead-lettered with evidence, attributes packed
    assert invocation is not None and invocation.failed_ids == []
    [dead] = harness.dead_letters()
    harness.clients("sqs").change_message_visibility(
        QueueUrl=harness.deployment.queues["orders"].dlq_url, ReceiptHandle=dead["ReceiptHandle"], VisibilityTimeout=0
    )
    return str(dead["MessageId"])


def test_dlq_show_prints_each_producer_attribute_as_a_readable_escaped_line(harness: Harness) -> None:
    message_id = _dead_letter_id(harness, envelope("order_confirmation", "404"), PRODUCER)

    shown = CliRunner().invoke(jobctl, ["dlq", "show", "orders", message_id])

    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith(f"{'attributes':>16}: "))
    assert lines[start : start + 4] == [
        f"{'attributes':>16}: note (String.utf8): line one\\x0aline two \\u202egpj.exe \\x9b2J",
        f"{INDENT}retries (Number): 3",
        f"{INDENT}tenant (String): acme",
        f"{INDENT}thumb (Binary): AAH/ (base64)",
    ]
    assert "'DataType'" not in shown.output and "{" not in "".join(lines[start : start + 4])
    assert "\u202e" not in shown.output and "\u009b" not in shown.output


def test_dlq_show_json_keeps_the_attributes_exact(harness: Harness) -> None:
    message_id = _dead_letter_id(harness, envelope("order_confirmation", "405"), PRODUCER)

    shown = CliRunner().invoke(jobctl, ["--output", "json", "dlq", "show", "orders", message_id])

    assert shown.exit_code == 0, shown.output
    attributes = json.loads(shown.stdout)["attributes"]
    assert attributes["note"] == PRODUCER["note"]
    assert attributes["thumb"] == {"DataType": "Binary", "BinaryValue": base64.b64encode(b"\x00\x01\xff").decode()}
    assert set(attributes) == set(PRODUCER)


def test_dlq_show_says_when_a_dead_letter_has_no_producer_attributes(harness: Harness) -> None:
    message_id = _dead_letter_id(harness, envelope("order_confirmation", "406"))

    shown = CliRunner().invoke(jobctl, ["dlq", "show", "orders", message_id])

    assert shown.exit_code == 0, shown.output
    assert f"{'attributes':>16}: (none)" in shown.output.splitlines()
