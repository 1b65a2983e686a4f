"""Sizes as SQS counts them, the producer's attributes packed within a known bound, and evidence fitted in order.

SQS counts a message's body and each attribute's name, data type and value, strings as UTF-8 and binary values
as raw bytes (AWS's SQS API Reference, MessageAttributeValue). The expected sizes below are worked out by hand.
"""

from __future__ import annotations

import base64
import json

import pytest

from sqs_jobs.envelope import Envelope
from sqs_jobs.limits import DEAD_LETTER_HEADROOM_BYTES, SQS_MAX_RETENTION_S
from sqs_jobs.worker import deadletter
from sqs_jobs.worker.attribute_store import STORED_FOR_S
from sqs_jobs.worker.deadletter import (
    ATTEMPTS,
    ERROR_MESSAGE,
    ERROR_TYPE,
    EVIDENCE_MAX_BYTES,
    FAILURE,
    FIRST_FAILED_AT,
    ID,
    JOB,
    LAST_FAILED_AT,
    SOURCE_QUEUE,
    TRACEBACK,
    Evidence,
    evidence_attributes,
    fit_evidence,
    message_size,
)
from sqs_jobs.worker.names import DeadLetterFailure
from sqs_jobs.worker.provenance import (
    ORIGINAL_ATTRIBUTES,
    PACKING_ATTRIBUTE_BYTES,
    PACKING_OVERHEAD_BYTES,
    Attributes,
    MessageAttributes,
    PackedAttributesError,
    packed_attribute,
    packed_size_bound,
    portable,
    unpack,
)
from tests.previous_runtime import legacy_packing

EMOJI = "\U0001f600"  # 4 bytes in UTF-8; 12 as the JSON escape "\ud83d\ude00"
CJK = "\u4e2d"  # 3 bytes in UTF-8; 6 as "\u4e2d"

MIXED: Attributes = {
    "emoji": {"DataType": "String", "StringValue": EMOJI * 3},
    "cjk": {"DataType": "String.utf8", "StringValue": CJK * 5},
    "count": {"DataType": "Number.int", "StringValue": "-0012"},
    "blob": {"DataType": "Binary", "BinaryValue": bytes(range(256))},
    "jobs.error_type": {"DataType": "String", "StringValue": "a producer's own jobs.* attribute"},
}


def test_a_body_counts_its_utf8_bytes() -> None:
    assert message_size("abc", {}) == 3
    assert message_size(EMOJI, {}) == 4
    assert message_size(CJK * 2, {}) == 6
    assert message_size("\u00e9", {}) == 2


def test_an_attribute_counts_its_name_data_type_and_value() -> None:
    # name 5 + "String" 6 + value 12 (three emoji)
    assert message_size("", {"emoji": MIXED["emoji"]}) == 5 + 6 + 12
    # name 3 + "String.utf8" 11 + five CJK characters 15
    assert message_size("", {"cjk": MIXED["cjk"]}) == 3 + 11 + 15
    # a binary value counts its raw bytes, never its base64 spelling (344 characters)
    assert message_size("", {"blob": MIXED["blob"]}) == 4 + 6 + 256
    # a non-ASCII name counts its UTF-8 bytes too
    assert message_size("x", {CJK: {"DataType": "Number", "StringValue": "7"}}) == 1 + 3 + 6 + 1


def test_a_body_at_the_limit_and_one_byte_over() -> None:
    limit = 256 * 1024
    body = "x" * (limit - 2) + "\u00e9"  # 2 bytes: exactly the limit, one character short of it
    assert message_size(body, {}) == limit
    assert message_size(body + "x", {}) == limit + 1


@pytest.mark.parametrize(
    "attributes",
    [
        MIXED,
        {"big": {"DataType": "String", "StringValue": EMOJI * 23_000}},
        {"raw": {"DataType": "Binary.gzip", "BinaryValue": bytes(200 * 1024)}},
        {f"a{i}": {"DataType": "String", "StringValue": CJK * i} for i in range(1, 11)},  # SQS's 10
    ],
    ids=["mixed", "emoji_90kib", "binary_200kib", "ten"],
)
def test_the_packing_round_trips_and_is_exactly_its_bound(attributes: Attributes) -> None:
    packed = packed_attribute(attributes)

    assert set(packed) == {ORIGINAL_ATTRIBUTES}
    assert packed[ORIGINAL_ATTRIBUTES]["DataType"] == "Binary"
    assert unpack(packed[ORIGINAL_ATTRIBUTES]["BinaryValue"]) == attributes
    # The bound is the attributes' own SQS size plus a fixed overhead and a few bytes each, and it is exact.
    own = message_size("", attributes)
    assert message_size("", packed) == packed_size_bound(attributes)
    assert packed_size_bound(attributes) == own + PACKING_OVERHEAD_BYTES + PACKING_ATTRIBUTE_BYTES * len(attributes)


def test_an_emoji_attribute_packs_to_its_own_size_where_json_escapes_tripled_it() -> None:
    attributes: Attributes = {"note": {"DataType": "String", "StringValue": EMOJI * 23_000}}  # ~90 KiB
    legacy = json.dumps(attributes, separators=(",", ":"), sort_keys=True)  # today's ensure_ascii=True packing

    assert len(legacy) > 3 * message_size("", attributes)
    assert message_size("", packed_attribute(attributes)) - message_size("", attributes) < 64


def test_the_older_json_packing_is_still_read() -> None:
    legacy = {ORIGINAL_ATTRIBUTES: {"DataType": "String", "StringValue": legacy_packing(MIXED)}}

    assert MessageAttributes.split(legacy, sent_by_runtime=True).producer == MIXED
    assert unpack(legacy[ORIGINAL_ATTRIBUTES]["StringValue"]) == MIXED


def test_both_packings_split_alike_and_only_on_the_runtimes_messages() -> None:
    new = MessageAttributes.split(packed_attribute(MIXED), sent_by_runtime=True)
    assert new.producer == MIXED and new.bookkeeping == {}
    # From anyone else, the packed attribute is just the producer's attribute of that name.
    stranger = MessageAttributes.split(packed_attribute(MIXED), sent_by_runtime=False)
    assert stranger.producer == packed_attribute(MIXED)


@pytest.mark.parametrize(
    "damaged",
    [
        {"DataType": "Binary", "BinaryValue": b"\x02whatever"},  # an unknown version
        {"DataType": "Binary", "BinaryValue": b"\x01\x00\x00\x00\x09"},  # cut short
        {"DataType": "String", "StringValue": "[1, 2]"},  # JSON, not an object
    ],
    ids=["version", "cut", "json"],
)
def test_a_damaged_packing_is_kept_as_it_came(damaged: dict[str, object]) -> None:
    value = damaged.get("BinaryValue", damaged.get("StringValue"))
    assert isinstance(value, bytes | str)
    with pytest.raises(PackedAttributesError):
        unpack(value)
    split = MessageAttributes.split({ORIGINAL_ATTRIBUTES: damaged}, sent_by_runtime=True)
    assert split.producer == {ORIGINAL_ATTRIBUTES: damaged}


def test_portable_values_are_json_ready() -> None:
    shown = portable(MIXED)
    assert json.loads(json.dumps(shown)) == shown
    assert base64.b64decode(shown["blob"]["BinaryValue"]) == bytes(range(256))
    assert shown["emoji"] == MIXED["emoji"]


def _evidence(**changes: object) -> Evidence:
    fields: dict[str, object] = {
        "error_type": "OrderNotFoundError",
        "error_message": "order 9999 " + "m" * 2000,
        "traceback": "Traceback (most recent call last):\n" + "  frame\n" * 2000 + "OrderNotFoundError: 9999",
        "failure": DeadLetterFailure.PERMANENT,
        "attempts": 1,
        "first_failed_at": "2026-01-01T00:00:00.000+00:00",
        "last_failed_at": "2026-01-01T00:00:01.000+00:00",
        "source_queue": "arn:aws:sqs:us-east-1:123456789012:SqsJobs-orders",
        "envelope": Envelope(job="order_confirmation", id="9999"),
    }
    fields.update(changes)
    return Evidence(**fields)  # type: ignore[arg-type]


def test_the_evidence_is_bounded_in_bytes_and_the_dlq_headroom_holds_it_and_the_packing() -> None:
    # The worst case: every text far over its limit, in 4-byte characters.
    worst = _evidence(
        error_type=EMOJI * 1000,
        error_message=EMOJI * 5000,
        traceback=EMOJI * 50_000,
        attempts=10**30,
        source_queue=EMOJI * 5000,
        envelope=Envelope(job=EMOJI * 5000, id=EMOJI * 5000),
    )
    evidence = evidence_attributes(worst, with_envelope=True)

    assert message_size("", evidence) <= EVIDENCE_MAX_BYTES
    assert len(evidence[ERROR_MESSAGE]["StringValue"].encode()) <= deadletter.MAX_ERROR_MESSAGE_BYTES
    assert len(evidence[TRACEBACK]["StringValue"].encode()) <= deadletter.MAX_TRACEBACK_BYTES
    # A dead letter is its original plus the evidence plus the packing's overhead for SQS's 10 attributes.
    assert EVIDENCE_MAX_BYTES + PACKING_OVERHEAD_BYTES + 10 * PACKING_ATTRIBUTE_BYTES <= DEAD_LETTER_HEADROOM_BYTES


def test_an_unknown_value_is_left_out_rather_than_sent_empty() -> None:
    evidence = evidence_attributes(_evidence(first_failed_at="", source_queue=""), with_envelope=False)
    assert FIRST_FAILED_AT not in evidence and SOURCE_QUEUE not in evidence
    assert all(value["StringValue"] for value in evidence.values())
    assert JOB not in evidence  # the producer's packed attributes take its place


BODY = "b" * 1000
ESSENTIAL = {ERROR_TYPE, FAILURE, ATTEMPTS}


def _fitted(limit: int, carried: Attributes | None = None) -> Attributes | None:
    return fit_evidence(BODY, evidence_attributes(_evidence(), with_envelope=True), carried or {}, limit)


def _full_size(carried: Attributes | None = None) -> int:
    return message_size(BODY, {**evidence_attributes(_evidence(), with_envelope=True), **(carried or {})})


def test_evidence_that_fits_is_left_whole() -> None:
    assert _fitted(_full_size()) == evidence_attributes(_evidence(), with_envelope=True)


def test_the_traceback_is_shortened_first_keeping_its_last_frames() -> None:
    fitted = _fitted(_full_size() - 1000)
    assert fitted is not None
    assert message_size(BODY, fitted) <= _full_size() - 1000
    whole = evidence_attributes(_evidence(), with_envelope=True)
    assert fitted[TRACEBACK]["StringValue"].endswith("OrderNotFoundError: 9999")
    assert fitted[TRACEBACK]["StringValue"].startswith("...[truncated]...")
    assert {name: value for name, value in fitted.items() if name != TRACEBACK} == {
        name: value for name, value in whole.items() if name != TRACEBACK
    }


def test_then_the_error_message_keeping_its_start() -> None:
    whole = evidence_attributes(_evidence(), with_envelope=True)
    traceback_size = message_size("", {TRACEBACK: whole[TRACEBACK]})
    fitted = _fitted(_full_size() - traceback_size - 500)
    assert fitted is not None
    assert TRACEBACK not in fitted
    assert fitted[ERROR_MESSAGE]["StringValue"].startswith("order 9999 ")
    assert fitted[ERROR_MESSAGE]["StringValue"].endswith("...[truncated]...")
    assert {FIRST_FAILED_AT, LAST_FAILED_AT, SOURCE_QUEUE, JOB, ID} <= set(fitted)


def test_then_the_timestamps_source_and_job_go_and_the_essentials_stay_whatever_happens() -> None:
    essentials_only = message_size(
        BODY, {name: value for name, value in evidence_attributes(_evidence(), True).items() if name in ESSENTIAL}
    )
    fitted = _fitted(essentials_only)
    assert fitted is not None
    assert set(fitted) == ESSENTIAL
    assert fitted[ERROR_TYPE]["StringValue"] == "OrderNotFoundError"
    assert fitted[ATTEMPTS] == {"DataType": "Number", "StringValue": "1"}
    # One byte less and not even they fit: the caller must find another way, never drop them.
    assert _fitted(essentials_only - 1) is None


def test_the_producers_packed_attributes_are_never_cut_to_make_room() -> None:
    carried = packed_attribute({"note": {"DataType": "String", "StringValue": EMOJI * 1000}})
    fitted = _fitted(_full_size(carried) - 2000, carried)
    assert fitted is not None
    assert fitted[ORIGINAL_ATTRIBUTES] == carried[ORIGINAL_ATTRIBUTES]
    assert _fitted(message_size(BODY, carried), carried) is None  # no room for the essentials beside them


def test_stored_attributes_outlive_any_dlq() -> None:
    assert STORED_FOR_S > SQS_MAX_RETENTION_S


def test_a_failed_http_call_keeps_its_status_and_excerpt_in_one_attribute_within_sqs_limit_of_ten() -> None:
    from sqs_jobs.worker.deadletter import HTTP
    from sqs_jobs.worker.provenance import SQS_MAX_ATTRIBUTES

    failed = _evidence(http_status=404, http_body='{"error": "no such image"}')
    with_envelope = evidence_attributes(failed, with_envelope=True)
    with_producers = evidence_attributes(failed, with_envelope=False)

    assert with_envelope[HTTP]["StringValue"] == '404 {"error": "no such image"}'
    # jobs.http takes the place of jobs.job and jobs.id (the body holds them): one more for the packed producer's.
    assert JOB not in with_envelope
    assert len(with_envelope) + 1 <= SQS_MAX_ATTRIBUTES and len(with_producers) + 1 <= SQS_MAX_ATTRIBUTES
    huge = evidence_attributes(_evidence(http_status=500, http_body=EMOJI * 5000), with_envelope=True)
    assert len(huge[HTTP]["StringValue"].encode()) <= deadletter.MAX_HTTP_BYTES
    assert message_size("", huge) <= EVIDENCE_MAX_BYTES
    assert HTTP not in evidence_attributes(_evidence(), with_envelope=True)  # no HTTP call, no attribute
