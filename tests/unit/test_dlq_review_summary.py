"""The DLQ review's summary text (lib/sqs_jobs/maintenance/dlq_summary.py) and its resource parsing, without AWS."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from sqs_jobs.maintenance.dlq_review import DeadLetterQueuesResourceError, WatchedQueue, watched_queues
from sqs_jobs.maintenance.dlq_summary import (
    MAX_ERROR_TYPES,
    MESSAGE_MAX_BYTES,
    SUBJECT_MAX_CHARS,
    QueueReview,
    age_text,
    stack_of,
    summarize,
)
from sqs_jobs.worker.errors import PermanentError
from sqs_jobs.worker.names import NO_EVIDENCE
from sqs_jobs.worker.names import NO_EVIDENCE as JOBCTL_NO_EVIDENCE

NOW = datetime(2026, 12, 7, 9, 0, 5, tzinfo=UTC)
URL = "https://sqs.eu-west-1.amazonaws.com/123456789012/"


def holding(queue: str, *types: str, depth: int | None = None, age: timedelta = timedelta(hours=3)) -> QueueReview:
    review = QueueReview(queue=queue, depth=len(types) if depth is None else depth)
    for number, error_type in enumerate(types):
        review.add(f"m-{queue}-{number}", error_type, NOW - age + timedelta(minutes=number))
    return review


def test_the_no_evidence_label_is_jobctls_so_its_error_type_filter_matches() -> None:
    assert NO_EVIDENCE == JOBCTL_NO_EVIDENCE


def test_a_summary_counts_per_queue_and_in_all() -> None:
    reviews = [
        holding("orders", "OrderNotFoundError", "OrderNotFoundError", "EnvelopeNotJSONError", age=timedelta(days=2)),
        QueueReview(queue="invoices"),
        holding("maintenance", "SummaryNotPublishedError"),
    ]
    summary = summarize(reviews, "2026-12-07T09:00:00Z", NOW, stack="SqsJobs")
    assert summary.subject == "[SqsJobs] DLQ review: 4 dead letters in 2 of 3 queues"
    lines = summary.message.splitlines()
    assert lines[0] == "DLQ review 2026-12-07T09:00:00Z: 4 dead letters in 2 of 3 queues."
    # the fullest queue first, its error types most frequent first, each with the commands to triage it
    assert lines[3:10] == [
        "orders: 3 dead letters (DLQ depth 3)",
        "      2  OrderNotFoundError",
        "         jobctl dlq show orders m-orders-0 --stack SqsJobs",
        "         jobctl dlq redrive orders --error-type OrderNotFoundError --dry-run --stack SqsJobs",
        "      1  EnvelopeNotJSONError",
        "         jobctl dlq show orders m-orders-2 --stack SqsJobs",
        "         jobctl dlq redrive orders --error-type EnvelopeNotJSONError --dry-run --stack SqsJobs",
    ]
    assert "  oldest: 2 d 0 h old (sent 2026-12-05T09:00:05Z)" in lines
    assert "  list them: jobctl dlq list orders --stack SqsJobs" in lines
    assert lines.index("maintenance: 1 dead letter (DLQ depth 1)") > lines.index("orders: 3 dead letters (DLQ depth 3)")
    assert "Empty: invoices." in lines


def test_all_empty_is_said_in_the_subject() -> None:
    summary = summarize([QueueReview(queue="orders"), QueueReview(queue="invoices")], "x", NOW, stack=None)
    assert summary.subject == "DLQ review: all empty (2 queues)"
    assert "Empty: orders, invoices." in summary.message
    assert "if it stops arriving, it did not run" in summary.message


def test_without_a_stack_the_commands_go_without_it() -> None:
    summary = summarize([holding("orders", "OrderNotFoundError")], "x", NOW, stack=None)
    assert "         jobctl dlq show orders m-orders-0\n" in summary.message
    assert "--stack" not in summary.message


def test_a_capped_scan_says_at_least() -> None:
    review = holding("orders", "OrderNotFoundError", "OrderNotFoundError", depth=1500)
    review.complete = False
    summary = summarize([review, QueueReview(queue="invoices")], "x", NOW, stack="SqsJobs")
    assert summary.subject == "[SqsJobs] DLQ review: at least 1500 dead letters in 1 of 2 queues"
    assert "orders: at least 1500 dead letters (DLQ depth 1500; read the first 2)" in summary.message
    assert "   1498  not read (in flight, or past the scan's limit)" in summary.message
    assert "  oldest of those read: 3 h 0 min old" in summary.message


def test_an_unreadable_dlq_is_named_first_and_in_the_subject() -> None:
    unreadable = QueueReview(queue="invoices", unreadable="An error occurred (AccessDenied) ...")
    summary = summarize([QueueReview(queue="orders"), unreadable], "x", NOW, stack=None)
    assert summary.subject == "DLQ review: no dead letters read, 1 DLQ NOT READ"
    assert summary.message.splitlines()[3] == "invoices: DLQ NOT READ: An error occurred (AccessDenied) ..."
    assert "Empty: orders." in summary.message


def test_many_error_types_are_cut_to_the_most_frequent() -> None:
    types = [f"Error{number:02d}" for number in range(MAX_ERROR_TYPES + 3)]
    summary = summarize([holding("orders", *types, "Error00")], "x", NOW, stack=None)
    assert "      2  Error00" in summary.message
    assert f"Error{MAX_ERROR_TYPES + 2:02d}" not in summary.message
    assert "      3  in 3 more error types" in summary.message


def test_error_types_and_ids_are_quoted_for_the_shell() -> None:
    summary = summarize([holding("orders", "Bad; rm -rf /", NO_EVIDENCE)], "x", NOW, stack=None)
    assert "--error-type 'Bad; rm -rf /' --dry-run" in summary.message
    assert "--error-type '(no evidence: not dead-lettered by the runtime)' --dry-run" in summary.message


def test_the_subject_fits_sns() -> None:
    many = [holding(f"queue_{number:02d}", "E") for number in range(40)]
    summary = summarize(
        [*many, QueueReview(queue="x", unreadable="gone")], "x", NOW, stack="A" + "-very-long-stack-name" * 5
    )
    assert len(summary.subject) <= SUBJECT_MAX_CHARS
    assert summary.subject.endswith("...")
    assert summary.subject.isascii() and summary.subject.isprintable()


@pytest.mark.parametrize(
    ("urls", "stack"),
    [
        ({"orders": URL + "SqsJobs-orders-dlq", "invoices": URL + "SqsJobs-invoices-dlq"}, "SqsJobs"),
        ({"events": URL + "Shop-Prod-events-dlq.fifo"}, "Shop-Prod"),
        # names that don't follow lib/sqs_jobs/cdk/naming.py, or disagree: no guess
        ({"orders": URL + "orders-dead-letters"}, None),
        ({"orders": URL + "A-orders-dlq", "invoices": URL + "B-invoices-dlq"}, None),
        ({"orders": URL + "-orders-dlq"}, None),
        ({"orders": URL + "x$(reboot)-orders-dlq"}, None),
    ],
)
def test_the_stack_is_named_only_when_every_dlq_name_agrees(urls: dict[str, str], stack: str | None) -> None:
    assert stack_of(urls) == stack


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (5, "under a minute"),
        (61, "1 min"),
        (3 * 3600 + 5 * 60, "3 h 5 min"),
        (13 * 86400 + 7200, "13 d 2 h"),
        (-3, "under a minute"),
    ],
)
def test_ages_read_as_days_hours_minutes(seconds: float, text: str) -> None:
    assert age_text(seconds) == text


def test_the_dead_letter_queues_resource_is_parsed() -> None:
    resource = json.dumps({"orders": {"dlq_url": URL + "S-orders-dlq", "worker_role_id": "AROAEXAMPLE"}})
    assert watched_queues(resource) == [WatchedQueue("orders", URL + "S-orders-dlq", "AROAEXAMPLE")]


@pytest.mark.parametrize("resource", ["", "[]", "{}", '{"orders": {"dlq_url": "u"}}', '{"orders": "u"}'])
def test_a_malformed_dead_letter_queues_resource_is_a_permanent_error(resource: str) -> None:
    with pytest.raises(DeadLetterQueuesResourceError, match="resource dead_letter_queues must be") as raised:
        watched_queues(resource)
    assert isinstance(raised.value, PermanentError)


def test_a_huge_summary_is_cut_to_what_sns_takes() -> None:
    reviews = [holding(f"q{number:03d}", *(f"E{'x' * 250}{n}" for n in range(12))) for number in range(100)]
    message = summarize(reviews, "x", NOW, stack=None).message
    assert len(message.encode("utf-8")) <= MESSAGE_MAX_BYTES
    assert message.endswith("see jobctl dlq list]\n")
