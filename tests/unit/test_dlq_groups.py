"""Dead letters grouped by error: one failed HTTP call's status splits what its message blanks together."""

from __future__ import annotations

from datetime import UTC, datetime

from sqs_jobs.cli.dlq import DeadLetter, group
from sqs_jobs.worker import deadletter


def _letter(message_id: str, error_message: str, http: str | None) -> DeadLetter:
    evidence = {deadletter.ERROR_TYPE: "HttpPermanentError", deadletter.ERROR_MESSAGE: error_message}
    if http is not None:
        evidence[deadletter.HTTP] = http
    return DeadLetter(
        message_id=message_id,
        receipt_handle="r",
        body='{"job": "make_thumbnail", "id": "1"}',
        sent_at=datetime(2026, 12, 3, tzinfo=UTC),
        evidence=evidence,
        publisher_attributes={},
    )


def test_a_404_and_a_401_that_read_alike_are_two_groups_each_with_its_status() -> None:
    letters = [
        _letter("a", "GET https://api.example/images/17 answered 404", '404 {"error": "no such image"}'),
        _letter("b", "GET https://api.example/images/18 answered 404", '404 {"error": "no such image"}'),
        _letter("c", "GET https://api.example/images/19 answered 401", '401 {"error": "key expired"}'),
        _letter("d", "the job's own error 7", None),
    ]

    groups = group(letters, "error")

    by_status = {entry["http_status"]: entry["count"] for entry in groups}
    assert by_status == {404: 2, 401: 1, None: 1}
    assert letters[2].http_status == 401 and letters[2].http_body == '{"error": "key expired"}'
    assert letters[3].to_dict()["http_status"] is None


def test_whole_numbers_are_blanked_but_a_code_point_is_kept_whole() -> None:
    from sqs_jobs.cli.dlq import error_pattern

    assert error_pattern("order 9999 not found, 'INV-7' rejected") == "order … not found, … rejected"
    assert error_pattern("field 'id' contains U+001B (a control character) at position 0") == (
        "field … contains U+001B (a control character) at position …"
    )
    assert error_pattern("contains U+009B at position 3") != error_pattern("contains U+001B at position 3")
