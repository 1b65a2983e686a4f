"""The message contract: parse_envelope, build_envelope and docs/envelope.schema.json agree."""

from __future__ import annotations

import json
import re
import sys
import unicodedata
from collections.abc import Iterator
from itertools import combinations
from pathlib import Path
from types import FrameType
from typing import Any, cast

import pytest
from jsonschema import Draft202012Validator

from functions.catalog import CATALOG
from sqs_jobs import envelope as envelope_module
from sqs_jobs.envelope import (
    MAX_ENVELOPE_BYTES,
    MAX_EXTRA_FIELDS,
    MAX_EXTRA_STRING_CHARS,
    MAX_ID_CHARS,
    MAX_TENANT_CHARS,
    RESERVED_FIELDS,
    Envelope,
    build_envelope,
    parse_envelope,
    tenant_of,
)
from sqs_jobs.visible import is_hidden
from sqs_jobs.worker.errors import (
    EnvelopeError,
    EnvelopeFieldError,
    EnvelopeNotJSONError,
    EnvelopeNotObjectError,
    EnvelopeTooLargeError,
    PermanentError,
    UnknownJobError,
)

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "docs" / "envelope.schema.json"

JOB = "order_confirmation"
# A queue's worker accepts only its own jobs; the second name proves messages list every accepted job.
ACCEPTED = (JOB, "resize_image")


def body(**fields: Any) -> str:
    """A message body with exactly these fields, in this order, as UTF-8 text."""
    return json.dumps(fields, ensure_ascii=False)


def escaped_body(**fields: Any) -> str:
    """The same, with every non-ASCII character as a \\u escape (how a lone surrogate can be sent at all)."""
    return json.dumps(fields, ensure_ascii=True)


def pad_to(text: str, size: int) -> str:
    """The same JSON, padded with insignificant trailing whitespace to exactly `size` UTF-8 bytes."""
    missing = size - len(text.encode("utf-8"))
    assert missing >= 0, "the body is already over the requested size"
    return text + " " * missing


def extras(count: int) -> dict[str, Any]:
    return {f"field_{n}": n for n in range(count)}


def nested_arrays(depth: int) -> str:
    return "[" * depth + "]" * depth


# --- accepted ---------------------------------------------------------------------------------------------


def test_minimal_envelope() -> None:
    envelope = parse_envelope(body(job=JOB, id="123"), ACCEPTED)

    assert envelope == Envelope(job=JOB, id="123")
    assert envelope.key is None
    assert dict(envelope.extra) == {}


def test_bytes_and_str_bodies_parse_the_same() -> None:
    text = body(job=JOB, id="注文-1", key="k")

    assert parse_envelope(text.encode("utf-8"), ACCEPTED) == parse_envelope(text, ACCEPTED)


def test_envelope_with_key() -> None:
    envelope = parse_envelope(body(job=JOB, id="123", key="order_confirmation:123:v2"), ACCEPTED)

    assert envelope.key == "order_confirmation:123:v2"
    assert dict(envelope.extra) == {}


def test_envelope_with_extras_keeps_types_and_order() -> None:
    fields = {"locale": "ja", "version": 3, "ratio": 0.5, "resend": True, "note": ""}

    envelope = parse_envelope(body(job=JOB, id="123", **fields), ACCEPTED)

    assert dict(envelope.extra) == fields
    assert list(envelope.extra) == list(fields)
    assert envelope.extra["resend"] is True  # a boolean stays a boolean, never 1
    assert type(envelope.extra["version"]) is int


@pytest.mark.parametrize(
    "entity_id",
    ["注文-123", "📦42", "Ωmega", "a b", " padded ", "\u00a0x", "x" * MAX_ID_CHARS, "€" * MAX_ID_CHARS],
    ids=["cjk", "emoji", "greek", "inner-space", "outer-spaces", "nbsp-then-text", "max-ascii", "max-multibyte"],
)
def test_unicode_and_edge_ids_are_accepted_verbatim(entity_id: str) -> None:
    envelope = parse_envelope(body(job=JOB, id=entity_id), ACCEPTED)

    assert envelope.id == entity_id  # no normalising, no stripping


def test_escaped_unicode_is_decoded() -> None:
    envelope = parse_envelope('{"job": "order_confirmation", "id": "\\ud83d\\udce6\\u0034\\u0032"}', ACCEPTED)

    assert envelope.id == "📦42"


def test_exactly_max_bytes_is_accepted_and_one_more_is_not() -> None:
    at_limit = pad_to(body(job=JOB, id="123"), MAX_ENVELOPE_BYTES)
    assert len(at_limit.encode("utf-8")) == MAX_ENVELOPE_BYTES

    assert parse_envelope(at_limit, ACCEPTED).id == "123"
    assert parse_envelope(at_limit.encode("utf-8"), ACCEPTED).id == "123"
    with pytest.raises(EnvelopeTooLargeError):
        parse_envelope(at_limit + " ", ACCEPTED)


def test_exactly_max_bytes_of_content_is_accepted() -> None:
    # 256 three-byte characters in id and key: the limit is met by data, not whitespace.
    text = body(job=JOB, id="€" * MAX_ID_CHARS, key="€" * 25)
    note_chars = MAX_ENVELOPE_BYTES - len(text.encode("utf-8")) - len(', "note": ""')
    assert 0 < note_chars <= MAX_EXTRA_STRING_CHARS
    text = text[:-1] + ', "note": "' + "n" * note_chars + '"}'
    assert len(text.encode("utf-8")) == MAX_ENVELOPE_BYTES

    envelope = parse_envelope(text, ACCEPTED)

    assert envelope.id == "€" * MAX_ID_CHARS


def test_size_counts_utf8_bytes_not_characters() -> None:
    text = body(job=JOB, id="€" * MAX_ID_CHARS, key="€" * MAX_ID_CHARS)
    assert len(text) < MAX_ENVELOPE_BYTES < len(text.encode("utf-8"))

    with pytest.raises(EnvelopeTooLargeError, match=str(MAX_ENVELOPE_BYTES)):
        parse_envelope(text, ACCEPTED)


@pytest.mark.parametrize("with_key", [False, True])
def test_max_extra_fields_are_accepted(with_key: bool) -> None:
    key = {"key": "k"} if with_key else {}

    envelope = parse_envelope(body(job=JOB, id="1", **key, **extras(MAX_EXTRA_FIELDS)), ACCEPTED)

    assert len(envelope.extra) == MAX_EXTRA_FIELDS


@pytest.mark.parametrize(
    "value",
    [0, -1, 2**70, 1.5, -0.0, 1e308, True, False, "", "x" * MAX_EXTRA_STRING_CHARS, "日本語"],
)
def test_scalar_extra_values_are_accepted(value: Any) -> None:
    envelope = parse_envelope(body(job=JOB, id="1", extra_value=value), ACCEPTED)

    assert envelope.extra["extra_value"] == value


@pytest.mark.parametrize("name", ["a", "locale", "a1_b2", "a" * 40])
def test_extra_field_names_that_match_are_accepted(name: str) -> None:
    assert name in parse_envelope(body(job=JOB, id="1", **{name: 1}), ACCEPTED).extra


# Every character SQS takes in a MessageGroupId: the ASCII letters, digits and punctuation, U+0021..U+007E.
SQS_GROUP_CHARACTERS = "".join(chr(code) for code in range(0x21, 0x7F))


@pytest.mark.parametrize(
    "tenant",
    ["acme", "t", "acme-eu:42", SQS_GROUP_CHARACTERS, "x" * MAX_TENANT_CHARS],
    ids=["word", "one-char", "punctuated", "every-accepted-character", "max-length"],
)
def test_a_tenant_sqs_takes_as_a_message_group_is_accepted(tenant: str) -> None:
    envelope = parse_envelope(body(job=JOB, id="1", tenant=tenant), ACCEPTED)

    assert envelope.tenant == tenant
    assert dict(envelope.extra) == {}  # reserved: never an extra field
    assert envelope.to_dict()["tenant"] == tenant


def test_without_a_tenant_the_envelope_has_none_and_sends_none() -> None:
    envelope = parse_envelope(body(job=JOB, id="1"), ACCEPTED)

    assert envelope.tenant is None
    assert "tenant" not in envelope.to_dict()


@pytest.mark.parametrize("with_key", [False, True])
def test_a_tenant_leaves_room_for_every_extra_field(with_key: bool) -> None:
    key = {"key": "k"} if with_key else {}

    envelope = parse_envelope(body(job=JOB, id="1", tenant="acme", **key, **extras(MAX_EXTRA_FIELDS)), ACCEPTED)

    assert len(envelope.extra) == MAX_EXTRA_FIELDS


@pytest.mark.parametrize(
    ("raw", "tenant"),
    [
        (body(job=JOB, id="1", tenant="acme"), "acme"),
        (body(job="no_such_job", tenant="acme"), "acme"),  # only the tenant is read
        (body(job=JOB, id="1"), None),
        (body(job=JOB, id="1", tenant="acme eu"), None),
        (body(job=JOB, id="1", tenant=7), None),
        ("[1]", None),
        ("not json", None),
    ],
    ids=["tenant", "bad-envelope-good-tenant", "none", "refused", "integer", "array", "not-json"],
)
def test_tenant_of_reads_a_bodys_tenant_by_the_rule_and_never_raises(raw: str, tenant: str | None) -> None:
    assert tenant_of(raw) == tenant


def test_round_trip_through_to_json() -> None:
    envelope = parse_envelope(body(job=JOB, id="注文", key="k", locale="ja", n=2), ACCEPTED)

    assert parse_envelope(envelope.to_json(), ACCEPTED) == envelope
    assert envelope.to_dict() == {"job": JOB, "id": "注文", "key": "k", "locale": "ja", "n": 2}
    with_tenant = parse_envelope(body(job=JOB, id="1", tenant="acme", key="k", n=2), ACCEPTED)
    assert parse_envelope(with_tenant.to_json(), ACCEPTED) == with_tenant
    assert with_tenant.to_dict() == {"job": JOB, "id": "1", "key": "k", "tenant": "acme", "n": 2}
    assert "注文" in envelope.to_json()  # UTF-8 on the wire, not \\u escapes that cost 6 bytes each


# --- rejected ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        "not json",
        "",
        "   ",
        "{",
        '{"job": "order_confirmation", "id": "1"',
        "{'job': 'order_confirmation', 'id': '1'}",
        '{"job": "order_confirmation", "id": "1"} trailing',
        '{"job": "order_confirmation", "id": "1",}',
        '{"job": "order_confirmation", "id": "tab\there"}',  # a raw control character inside a string
        "\ufeff" + body(job=JOB, id="1"),  # a byte-order mark
    ],
)
def test_not_json_is_rejected(raw: str) -> None:
    with pytest.raises(EnvelopeNotJSONError, match="JSON"):
        parse_envelope(raw, ACCEPTED)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"job": "order_confirmation", "id": "\xff"}',
        b'{"job": "order_confirmation", "id": "\xc3"}',  # a truncated two-byte sequence
        b'{"job": "order_confirmation", "id": "\xed\xa0\x80"}',  # an encoded surrogate (CESU-8)
        '{"job": "order_confirmation", "id": "1"}'.encode("utf-16"),
    ],
    ids=["ff", "truncated", "cesu8-surrogate", "utf16"],
)
def test_invalid_utf8_bytes_are_rejected(raw: bytes) -> None:
    with pytest.raises(EnvelopeNotJSONError, match="UTF-8"):
        parse_envelope(raw, ACCEPTED)


def test_lone_surrogate_in_a_str_body_is_rejected() -> None:
    with pytest.raises(EnvelopeNotJSONError):
        parse_envelope('{"job": "order_confirmation", "id": "\ud800"}', ACCEPTED)


@pytest.mark.parametrize(
    ("raw", "json_type"),
    [
        ("[]", "array"),
        ('[{"job": "order_confirmation", "id": "1"}]', "array"),
        ('"order_confirmation:1"', "string"),
        ("123", "integer"),
        ("1.5", "number"),
        ("null", "null"),
        ("true", "boolean"),
        ("false", "boolean"),
    ],
)
def test_json_that_is_not_an_object_is_rejected(raw: str, json_type: str) -> None:
    with pytest.raises(EnvelopeNotObjectError) as caught:
        parse_envelope(raw, ACCEPTED)

    assert f"JSON {json_type}" in str(caught.value)
    assert "object" in str(caught.value)


@pytest.mark.parametrize(
    ("fields", "missing"),
    [({"id": "1"}, "job"), ({"job": JOB}, "id"), ({}, "job"), ({"key": "k", "note": "x"}, "job")],
)
def test_missing_required_field_is_rejected(fields: dict[str, Any], missing: str) -> None:
    with pytest.raises(EnvelopeFieldError) as caught:
        parse_envelope(body(**fields), ACCEPTED)

    assert f"missing field {missing!r}" in str(caught.value)


@pytest.mark.parametrize("field_name", ["job", "id", "key", "tenant"])
@pytest.mark.parametrize("value", ["", " ", "   \t", "\u3000", "\u00a0", "\u2003\u2028"])
def test_empty_or_blank_identifier_is_rejected(field_name: str, value: str) -> None:
    fields = {"job": JOB, "id": "1", field_name: value}

    with pytest.raises(EnvelopeFieldError) as caught:
        parse_envelope(body(**fields), ACCEPTED)

    assert repr(field_name) in str(caught.value)


@pytest.mark.parametrize("value", [123, 0, -7, 1.5])
def test_numeric_id_is_rejected_with_a_hint_to_send_a_string(value: int | float) -> None:
    with pytest.raises(EnvelopeFieldError) as caught:
        parse_envelope(body(job=JOB, id=value), ACCEPTED)

    message = str(caught.value)
    assert "'id'" in message
    assert "string" in message
    assert f'"{value}"' in message  # the hint shows the value as it should be sent


@pytest.mark.parametrize("field_name", ["job", "id", "key", "tenant"])
@pytest.mark.parametrize(
    ("value", "json_type"),
    [(None, "null"), (True, "boolean"), (["1"], "array"), ({"id": "1"}, "object"), (5, "integer")],
)
def test_identifier_of_the_wrong_type_is_rejected(field_name: str, value: Any, json_type: str) -> None:
    fields = {"job": JOB, "id": "1", field_name: value}

    with pytest.raises(EnvelopeFieldError) as caught:
        parse_envelope(body(**fields), ACCEPTED)

    message = str(caught.value)
    assert repr(field_name) in message
    assert f"must be a string, got {json_type}" in message


def test_boolean_id_gets_no_misleading_hint() -> None:
    with pytest.raises(EnvelopeFieldError) as caught:
        parse_envelope(body(job=JOB, id=True), ACCEPTED)

    assert "e.g." not in str(caught.value)


@pytest.mark.parametrize("field_name", ["job", "id", "key"])
def test_identifier_over_max_chars_is_rejected(field_name: str) -> None:
    fields = {"job": JOB, "id": "1", field_name: "x" * (MAX_ID_CHARS + 1)}

    with pytest.raises(EnvelopeFieldError) as caught:
        parse_envelope(body(**fields), ACCEPTED)

    assert str(MAX_ID_CHARS) in str(caught.value)


@pytest.mark.parametrize(
    ("tenant", "message"),
    [
        ("", "field 'tenant' is empty; it must be a non-blank string"),
        ("   ", "field 'tenant' is empty; it must be a non-blank string"),
        (7, "field 'tenant' must be a string, got integer; send it as a string, e.g. \"7\""),
        (None, "field 'tenant' must be a string, got null"),
        ("x" * (MAX_TENANT_CHARS + 1), "field 'tenant' is 129 characters; at most 128 are accepted"),
        (
            "acme eu",
            "field 'tenant' contains U+0020 (SPACE) at position 4; accepted are a-z, A-Z, 0-9 and ASCII punctuation "
            "(what SQS takes as a MessageGroupId)",
        ),
        (
            "café",
            "field 'tenant' contains U+00E9 (LATIN SMALL LETTER E WITH ACUTE) at position 3; accepted are a-z, A-Z, "
            "0-9 and ASCII punctuation (what SQS takes as a MessageGroupId)",
        ),
        (
            "acme\u202e",
            "field 'tenant' contains U+202E (RIGHT-TO-LEFT OVERRIDE) at position 4; printable text only (no control, "
            "format or line-separator characters)",
        ),
        (
            "a\tb",
            "field 'tenant' contains U+0009 (a control character) at position 1; printable text only (no control, "
            "format or line-separator characters)",
        ),
    ],
    ids=["empty", "blank", "integer", "null", "too-long", "space", "non-ascii", "bidi-override", "tab"],
)
def test_a_tenant_sqs_would_not_take_as_a_message_group_is_refused_saying_which_rule(tenant: Any, message: str) -> None:
    with pytest.raises(EnvelopeFieldError) as caught:
        parse_envelope(escaped_body(job=JOB, id="1", tenant=tenant), ACCEPTED)

    assert str(caught.value) == message


@pytest.mark.parametrize("job", ["send_invoice", "ORDER_CONFIRMATION", "order_confirmation ", "order"])
def test_unknown_job_is_rejected_and_the_message_lists_accepted_jobs(job: str) -> None:
    with pytest.raises(UnknownJobError) as caught:
        parse_envelope(body(job=job, id="1"), ACCEPTED)

    message = str(caught.value)
    assert repr(job) in message
    assert all(accepted in message for accepted in ACCEPTED)


def test_catalog_job_not_accepted_by_this_queue_is_rejected() -> None:
    assert JOB in CATALOG.job_names

    with pytest.raises(UnknownJobError) as caught:
        parse_envelope(body(job=JOB, id="1"), ["resize_image"])

    assert "resize_image" in str(caught.value)


def test_no_accepted_jobs_rejects_every_job() -> None:
    with pytest.raises(UnknownJobError):
        parse_envelope(body(job=JOB, id="1"), ())


def test_unknown_job_message_is_bounded() -> None:
    with pytest.raises(UnknownJobError) as caught:
        parse_envelope(body(job="j" * MAX_ID_CHARS, id="1"), ACCEPTED)

    assert len(str(caught.value)) < 200


@pytest.mark.parametrize(
    "raw",
    [
        '{"job": "order_confirmation", "id": "1", "id": "2"}',
        '{"job": "order_confirmation", "job": "order_confirmation", "id": "1"}',
        '{"job": "order_confirmation", "id": "1", "key": "a", "key": "a"}',
        '{"job": "order_confirmation", "id": "1", "note": 1, "note": 1}',
        '{"job": "order_confirmation", "id": "1", "data": {"x": 1, "x": 2}}',
    ],
    ids=["id", "job-same-value", "key-same-value", "extra", "nested"],
)
def test_duplicate_fields_are_rejected(raw: str) -> None:
    with pytest.raises(EnvelopeFieldError, match="appears twice"):
        parse_envelope(raw, ACCEPTED)


@pytest.mark.parametrize("field_name", ["job", "id", "key", "tenant"])
@pytest.mark.parametrize(
    "value",
    [
        "\u0000",
        "12\u00003",
        "\u0001",
        "line\nbreak",
        "tab\t",
        "\r",
        "\u001b[31m",
        "\u001f",
        "del\u007f",
        "\ud800",
        "csi\u009b2J",
        "txt.exe\u202egpj",
        "isolate\u2067",
        "zero\u200bwidth",
        "bom\ufeff",
        "line\u2028sep",
        "tag\U000e0041",
        "soft\u00adhyphen",
    ],
    ids=[
        "nul",
        "inner-nul",
        "soh",
        "newline",
        "tab",
        "cr",
        "escape",
        "us",
        "del",
        "lone-surrogate",
        "c1-csi",
        "bidi-override",
        "bidi-isolate",
        "zero-width-space",
        "byte-order-mark",
        "line-separator",
        "tag-character",
        "soft-hyphen",
    ],
)
def test_hidden_characters_in_identifiers_are_rejected(field_name: str, value: str) -> None:
    # json.dumps escapes them (\u0000, \n, \ud800): valid JSON that decodes to a control character.
    fields = {"job": JOB, "id": "1", field_name: "x" + value}

    with pytest.raises(EnvelopeFieldError) as caught:
        parse_envelope(escaped_body(**fields), ACCEPTED)

    assert repr(field_name) in str(caught.value)
    # One line naming the character, so a producer knows which to drop.
    hidden = next(char for char in value if unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp", "Cs"))
    assert f"contains U+{ord(hidden):04X} (" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_bidi_override_is_named_with_its_position() -> None:
    with pytest.raises(EnvelopeFieldError) as caught:
        parse_envelope(escaped_body(job=JOB, id="invoice\u202eFDP.exe"), ACCEPTED)

    assert str(caught.value) == (
        "field 'id' contains U+202E (RIGHT-TO-LEFT OVERRIDE) at position 7; printable text only (no control, format "
        "or line-separator characters)"
    )


@pytest.mark.parametrize("value", ["\u0000", "a\nb", "\u007f", "\ud800", "\u009b", "\u202e", "\u200b"])
def test_hidden_characters_in_extra_strings_are_rejected(value: str) -> None:
    with pytest.raises(EnvelopeFieldError, match="'note'"):
        parse_envelope(escaped_body(job=JOB, id="1", note=value), ACCEPTED)


def test_extra_string_over_max_chars_is_rejected() -> None:
    with pytest.raises(EnvelopeFieldError) as caught:
        parse_envelope(body(job=JOB, id="1", note="x" * (MAX_EXTRA_STRING_CHARS + 1)), ACCEPTED)

    assert str(MAX_EXTRA_STRING_CHARS) in str(caught.value)


@pytest.mark.parametrize(
    ("value", "json_type"),
    [({"sku": "A1"}, "object"), ({}, "object"), ([1, 2], "array"), ([], "array"), (None, "null")],
)
def test_non_scalar_extra_field_is_rejected(value: Any, json_type: str) -> None:
    with pytest.raises(EnvelopeFieldError) as caught:
        parse_envelope(body(job=JOB, id="1", order=value), ACCEPTED)

    message = str(caught.value)
    assert f"'order' is {json_type}" in message
    assert "IDs only" in message


@pytest.mark.parametrize("with_key", [False, True])
def test_too_many_extra_fields_are_rejected(with_key: bool) -> None:
    key = {"key": "k"} if with_key else {}

    with pytest.raises(EnvelopeFieldError) as caught:
        parse_envelope(body(job=JOB, id="1", **key, **extras(MAX_EXTRA_FIELDS + 1)), ACCEPTED)

    assert f"at most {MAX_EXTRA_FIELDS}" in str(caught.value)


@pytest.mark.parametrize(
    "name",
    ["Locale", "1st", "_private", "a-b", "a.b", "a b", "", "a" * 41, "é", "a\n", "\na", "a\u0000", "JOB", "Id"],
)
def test_bad_extra_field_names_are_rejected(name: str) -> None:
    with pytest.raises(EnvelopeFieldError) as caught:
        parse_envelope(body(job=JOB, id="1", **{name: 1}), ACCEPTED)

    assert "^[a-z][a-z0-9_]{0,39}$" in str(caught.value)


@pytest.mark.parametrize(
    "raw",
    [
        '{"job": "order_confirmation", "id": "1", "n": NaN}',
        '{"job": "order_confirmation", "id": "1", "n": Infinity}',
        '{"job": "order_confirmation", "id": "1", "n": -Infinity}',
        '{"job": "order_confirmation", "id": "1", "n": 1e400}',
        '{"job": "order_confirmation", "id": "1", "n": -1e400}',
    ],
    ids=["nan", "inf", "-inf", "overflow", "-overflow"],
)
def test_non_finite_numbers_are_rejected(raw: str) -> None:
    with pytest.raises(EnvelopeFieldError, match="finite"):
        parse_envelope(raw, ACCEPTED)


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_id_is_rejected(token: str) -> None:
    with pytest.raises(EnvelopeFieldError, match="'id' must be a string"):
        parse_envelope('{"job": "order_confirmation", "id": ' + token + "}", ACCEPTED)


def test_deeply_nested_body_is_a_clean_envelope_error() -> None:
    # 100,000 levels: the size limit stops it before the JSON parser can recurse.
    with pytest.raises(EnvelopeTooLargeError):
        parse_envelope(nested_arrays(100_000), ACCEPTED)
    with pytest.raises(EnvelopeTooLargeError):
        parse_envelope('{"job": "order_confirmation", "id": "1", "n": ' + nested_arrays(100_000) + "}", ACCEPTED)


def test_deep_nesting_under_the_size_limit_is_a_clean_envelope_error() -> None:
    top_level = nested_arrays(MAX_ENVELOPE_BYTES // 2)
    assert len(top_level) == MAX_ENVELOPE_BYTES
    as_extra = '{"job": "order_confirmation", "id": "1", "n": ' + nested_arrays(480) + "}"
    objects = '{"a":' * 150 + "1" + "}" * 150
    assert len(as_extra) <= MAX_ENVELOPE_BYTES
    assert len(objects) <= MAX_ENVELOPE_BYTES

    with pytest.raises(EnvelopeNotObjectError):
        parse_envelope(top_level, ACCEPTED)
    with pytest.raises(EnvelopeFieldError, match="'n' is array"):
        parse_envelope(as_extra, ACCEPTED)
    with pytest.raises(EnvelopeFieldError, match="missing field 'job'"):
        parse_envelope(objects, ACCEPTED)


def _stack_depth() -> int:
    frame: FrameType | None = sys._getframe()
    depth = 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1
    return depth


@pytest.fixture
def low_recursion_limit() -> Iterator[None]:
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(_stack_depth() + 60)
    try:
        yield
    finally:
        sys.setrecursionlimit(previous)


@pytest.mark.usefixtures("low_recursion_limit")
def test_nesting_past_the_recursion_limit_is_a_clean_envelope_error() -> None:
    # Where the parser honours the recursion limit (CPython 3.11) this hits it; never a bare RecursionError.
    with pytest.raises(EnvelopeError):
        parse_envelope(nested_arrays(300), ACCEPTED)


def test_recursion_error_from_the_json_parser_becomes_not_json(monkeypatch: pytest.MonkeyPatch) -> None:
    def exhausted(*_args: object, **_kwargs: object) -> object:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(json, "loads", exhausted)  # the module parse_envelope calls

    with pytest.raises(EnvelopeNotJSONError):
        parse_envelope(nested_arrays(10), ACCEPTED)


@pytest.mark.parametrize(
    "error_type",
    [EnvelopeNotJSONError, EnvelopeNotObjectError, EnvelopeFieldError, EnvelopeTooLargeError, UnknownJobError],
)
def test_every_envelope_error_is_permanent(error_type: type[Exception]) -> None:
    # A bad message never gets better: the runtime dead-letters it at once instead of retrying.
    assert issubclass(error_type, EnvelopeError)
    assert issubclass(error_type, PermanentError)


# --- build_envelope ---------------------------------------------------------------------------------------


def test_build_minimal_envelope() -> None:
    assert build_envelope(JOB, "123", ACCEPTED) == Envelope(job=JOB, id="123")


def test_build_with_a_tenant_puts_it_in_the_body_not_the_extras() -> None:
    envelope = build_envelope(JOB, "123", ACCEPTED, tenant="acme", extra={"locale": "ja"})

    assert envelope == Envelope(job=JOB, id="123", tenant="acme", extra={"locale": "ja"})
    assert json.loads(envelope.to_json()) == {"job": JOB, "id": "123", "tenant": "acme", "locale": "ja"}


def test_build_refuses_a_tenant_by_the_parsers_rule() -> None:
    with pytest.raises(EnvelopeFieldError, match="MessageGroupId"):
        build_envelope(JOB, "123", ACCEPTED, tenant="acme eu")


def test_build_with_key_and_extras() -> None:
    envelope = build_envelope(JOB, "123", ACCEPTED, key="k1", extra={"locale": "ja", "version": 2})

    assert envelope == Envelope(job=JOB, id="123", key="k1", extra={"locale": "ja", "version": 2})
    assert json.loads(envelope.to_json()) == {"job": JOB, "id": "123", "key": "k1", "locale": "ja", "version": 2}


@pytest.mark.parametrize(
    ("entity_id", "key", "extra"),
    [("1", None, None), ("注文", "k", {"a": True}), ("x" * MAX_ID_CHARS, None, {"n": 1.25, "s": "é"})],
)
def test_build_and_parse_agree(entity_id: str, key: str | None, extra: dict[str, Any] | None) -> None:
    built = build_envelope(JOB, entity_id, ACCEPTED, key=key, extra=extra)

    assert parse_envelope(built.to_json(), ACCEPTED) == built
    assert parse_envelope(built.to_json().encode("utf-8"), ACCEPTED) == built


@pytest.mark.parametrize("reserved", RESERVED_FIELDS)
def test_build_rejects_reserved_extra_names(reserved: str) -> None:
    with pytest.raises(EnvelopeFieldError) as caught:
        build_envelope(JOB, "1", ACCEPTED, extra={reserved: "x", "fine": 1})

    assert reserved in str(caught.value)
    assert "reserved" in str(caught.value)


def test_build_lists_every_clashing_reserved_name() -> None:
    with pytest.raises(EnvelopeFieldError) as caught:
        build_envelope(JOB, "1", ACCEPTED, extra={"key": "x", "id": "2"})

    assert "id, key" in str(caught.value)


@pytest.mark.parametrize(
    "value",
    [object(), b"bytes", {1, 2}, 1 + 2j, float("nan"), float("inf"), float("-inf")],
    ids=["object", "bytes", "set", "complex", "nan", "inf", "-inf"],
)
def test_build_rejects_values_that_are_not_json(value: object) -> None:
    with pytest.raises(EnvelopeFieldError, match="JSON-serialisable"):
        build_envelope(JOB, "1", ACCEPTED, extra={"bad": cast(Any, value)})


@pytest.mark.parametrize(
    ("extra", "error_type"),
    [
        ({"items": [1, 2]}, EnvelopeFieldError),
        ({"order": {"total": 5}}, EnvelopeFieldError),
        ({"note": None}, EnvelopeFieldError),
        ({"Bad": 1}, EnvelopeFieldError),
        (extras(MAX_EXTRA_FIELDS + 1), EnvelopeFieldError),
        ({f"s{n}": "x" * MAX_EXTRA_STRING_CHARS for n in range(MAX_EXTRA_FIELDS)}, EnvelopeTooLargeError),
    ],
    ids=["array", "object", "null", "bad-name", "too-many", "too-large"],
)
def test_build_applies_the_workers_rules(extra: dict[str, Any], error_type: type[EnvelopeError]) -> None:
    with pytest.raises(error_type):
        build_envelope(JOB, "1", ACCEPTED, extra=extra)


@pytest.mark.parametrize(
    ("job", "entity_id", "key", "error_type"),
    [
        ("send_invoice", "1", None, UnknownJobError),
        (JOB, "", None, EnvelopeFieldError),
        (JOB, "  ", None, EnvelopeFieldError),
        (JOB, "a\u0000b", None, EnvelopeFieldError),
        (JOB, "x" * (MAX_ID_CHARS + 1), None, EnvelopeFieldError),
        (JOB, "1", "", EnvelopeFieldError),
        (JOB, "1", "k\n", EnvelopeFieldError),
        (JOB, "\ud800", None, EnvelopeError),
    ],
    ids=["unknown-job", "empty-id", "blank-id", "nul-id", "long-id", "empty-key", "newline-key", "surrogate-id"],
)
def test_build_rejects_bad_identifiers(
    job: str, entity_id: str, key: str | None, error_type: type[EnvelopeError]
) -> None:
    with pytest.raises(error_type):
        build_envelope(job, entity_id, ACCEPTED, key=key)


def test_build_with_integer_id_suggests_a_string() -> None:
    with pytest.raises(EnvelopeFieldError) as caught:
        build_envelope(JOB, cast(Any, 123), ACCEPTED)

    assert 'send it as a string, e.g. "123"' in str(caught.value)


# --- docs/envelope.schema.json ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return loaded


@pytest.fixture(scope="module")
def validator(schema: dict[str, Any]) -> Any:
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def _reject_non_finite(token: str) -> float:
    raise ValueError(f"{token} is not JSON")


def schema_accepts(validator: Any, raw: str | bytes) -> bool:
    """What a publisher in another language gets: a standard JSON parser, then the schema.

    The parse is RFC 8259 strict (UTF-8, no BOM, no NaN/Infinity), but keeps the last of duplicate keys like
    most parsers do, and knows nothing of the byte limit: those are the gaps the schema documents.
    """
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        text.encode("utf-8")  # a str with a lone surrogate can't be sent at all
        document = json.loads(text, parse_constant=_reject_non_finite)
    except ValueError:
        return False
    return bool(validator.is_valid(document))


def parser_accepts(raw: str | bytes) -> bool:
    try:
        parse_envelope(raw, CATALOG.job_names)
    except EnvelopeError:
        return False
    return True


def _long_body_under_limit() -> str:
    return body(job=JOB, id="i" * MAX_ID_CHARS, key="k" * MAX_ID_CHARS, note="n" * MAX_EXTRA_STRING_CHARS)


# (name, body, accepted by parse_envelope)
CORPUS: list[tuple[str, str | bytes, bool]] = [
    ("minimal", body(job=JOB, id="123"), True),
    ("minimal-bytes", body(job=JOB, id="123").encode("utf-8"), True),
    ("with-key", body(job=JOB, id="123", key="order_confirmation:123:v2"), True),
    ("extras", body(job=JOB, id="1", locale="ja", version=3, ratio=0.5, resend=False, note=""), True),
    ("unicode-id", body(job=JOB, id="注文-📦"), True),
    ("escaped-pair", '{"job": "order_confirmation", "id": "\\ud83d\\udce6"}', True),
    ("nbsp-then-text", body(job=JOB, id="\u00a0x"), True),
    ("nel-then-text", body(job=JOB, id="\u0085x"), False),  # NEL is a C1 control
    ("c1-csi-id", body(job=JOB, id="x\u009b2J"), False),
    ("bidi-override-id", body(job=JOB, id="txt\u202egpj.exe"), False),
    ("zero-width-key", body(job=JOB, id="1", key="k\u200b"), False),
    ("line-separator-id", body(job=JOB, id="a\u2028b"), False),
    ("bidi-extra-string", body(job=JOB, id="1", note="\u2066x"), False),
    ("max-id", body(job=JOB, id="x" * MAX_ID_CHARS), True),
    ("max-extras", body(job=JOB, id="1", **extras(MAX_EXTRA_FIELDS)), True),
    ("max-extras-and-key", body(job=JOB, id="1", key="k", **extras(MAX_EXTRA_FIELDS)), True),
    ("max-extras-and-tenant", body(job=JOB, id="1", tenant="acme", **extras(MAX_EXTRA_FIELDS)), True),
    ("max-extras-key-tenant", body(job=JOB, id="1", key="k", tenant="t", **extras(MAX_EXTRA_FIELDS)), True),
    ("tenant", body(job=JOB, id="1", tenant="acme-eu:42"), True),
    ("tenant-every-character", body(job=JOB, id="1", tenant=SQS_GROUP_CHARACTERS), True),
    ("tenant-max-length", body(job=JOB, id="1", tenant="t" * MAX_TENANT_CHARS), True),
    ("max-name", body(job=JOB, id="1", **{"a" * 40: 1}), True),
    ("max-extra-string", body(job=JOB, id="1", note="x" * MAX_EXTRA_STRING_CHARS), True),
    ("big-integer", '{"job": "order_confirmation", "id": "1", "n": 123456789012345678901234567890}', True),
    ("largest-double", '{"job": "order_confirmation", "id": "1", "n": 1.7976931348623157e308}', True),
    ("whitespace", '  \n{ "job" : "order_confirmation" ,\t"id" : "1" }\r\n', True),
    ("long-under-limit", _long_body_under_limit(), True),
    ("not-json", "job=order_confirmation&id=1", False),
    ("empty", "", False),
    ("invalid-utf8", b'{"job": "order_confirmation", "id": "\xff"}', False),
    ("bom", "\ufeff" + body(job=JOB, id="1"), False),
    ("array", "[]", False),
    ("string", '"order_confirmation"', False),
    ("number", "1", False),
    ("null", "null", False),
    ("true", "true", False),
    ("missing-job", body(id="1"), False),
    ("missing-id", body(job=JOB), False),
    ("empty-id", body(job=JOB, id=""), False),
    ("blank-id", body(job=JOB, id=" \t "), False),
    ("ideographic-space-id", body(job=JOB, id="\u3000"), False),
    ("nel-id", body(job=JOB, id="\u0085"), False),
    ("integer-id", body(job=JOB, id=123), False),
    ("null-key", body(job=JOB, id="1", key=None), False),
    ("integer-key", body(job=JOB, id="1", key=7), False),
    ("unknown-job", body(job="send_invoice", id="1"), False),
    ("long-id", body(job=JOB, id="x" * (MAX_ID_CHARS + 1)), False),
    ("nul-id", body(job=JOB, id="a\u0000b"), False),
    ("newline-id", body(job=JOB, id="1\n"), False),
    ("del-key", body(job=JOB, id="1", key="k\u007f"), False),
    ("object-extra", body(job=JOB, id="1", order={"total": 5}), False),
    ("array-extra", body(job=JOB, id="1", items=[1]), False),
    ("null-extra", body(job=JOB, id="1", note=None), False),
    ("long-extra-string", body(job=JOB, id="1", note="x" * (MAX_EXTRA_STRING_CHARS + 1)), False),
    ("control-extra-string", body(job=JOB, id="1", note="a\tb"), False),
    ("too-many-extras", body(job=JOB, id="1", **extras(MAX_EXTRA_FIELDS + 1)), False),
    ("too-many-extras-and-key", body(job=JOB, id="1", key="k", **extras(MAX_EXTRA_FIELDS + 1)), False),
    ("too-many-extras-and-tenant", body(job=JOB, id="1", tenant="t", **extras(MAX_EXTRA_FIELDS + 1)), False),
    ("too-many-extras-key-tenant", body(job=JOB, id="1", key="k", tenant="t", **extras(MAX_EXTRA_FIELDS + 1)), False),
    ("tenant-too-long", body(job=JOB, id="1", tenant="t" * (MAX_TENANT_CHARS + 1)), False),
    ("tenant-space", body(job=JOB, id="1", tenant="acme eu"), False),
    ("tenant-non-ascii", body(job=JOB, id="1", tenant="café"), False),
    ("tenant-newline-last", body(job=JOB, id="1", tenant="acme\n"), False),
    ("tenant-empty", body(job=JOB, id="1", tenant=""), False),
    ("tenant-integer", body(job=JOB, id="1", tenant=42), False),
    ("upper-name", body(job=JOB, id="1", Locale="ja"), False),
    ("long-name", body(job=JOB, id="1", **{"a" * 41: 1}), False),
    ("newline-name", body(job=JOB, id="1", **{"a\n": 1}), False),
    ("nan", '{"job": "order_confirmation", "id": "1", "n": NaN}', False),
    ("infinity", '{"job": "order_confirmation", "id": "1", "n": -Infinity}', False),
    ("overflow", '{"job": "order_confirmation", "id": "1", "n": 1e400}', False),
    ("nested-arrays", nested_arrays(400), False),
    ("lone-surrogate-str", '{"job": "order_confirmation", "id": "\ud800"}', False),
]

# Bodies the schema accepts although parse_envelope rejects them: what JSON Schema cannot express, each also
# stated in the schema's description and in docs/envelope.md.
SCHEMA_CANNOT_EXPRESS: list[tuple[str, str | bytes]] = [
    ("over-1024-bytes", pad_to(body(job=JOB, id="1"), MAX_ENVELOPE_BYTES + 1)),
    ("over-1024-bytes-multibyte", body(job=JOB, id="€" * MAX_ID_CHARS, key="€" * MAX_ID_CHARS)),
    ("duplicate-id", '{"job": "order_confirmation", "id": "1", "id": "2"}'),
    ("duplicate-extra", '{"job": "order_confirmation", "id": "1", "note": "a", "note": "b"}'),
    ("lone-surrogate-escape", '{"job": "order_confirmation", "id": "\\ud800"}'),
    ("lone-surrogate-escape-extra", '{"job": "order_confirmation", "id": "1", "note": "\\udfff"}'),
]


def test_corpus_covers_both_verdicts() -> None:
    verdicts = [accepted for _, _, accepted in CORPUS]
    assert len(CORPUS) >= 30
    assert verdicts.count(True) >= 10
    assert verdicts.count(False) >= 20
    assert len({name for name, _, _ in CORPUS}) == len(CORPUS)


@pytest.mark.parametrize(("raw", "accepted"), [(raw, ok) for _, raw, ok in CORPUS], ids=[n for n, _, _ in CORPUS])
def test_schema_and_parser_agree(validator: Any, raw: str | bytes, accepted: bool) -> None:
    assert parser_accepts(raw) is accepted
    assert schema_accepts(validator, raw) is accepted


@pytest.mark.parametrize("raw", [raw for _, raw in SCHEMA_CANNOT_EXPRESS], ids=[n for n, _ in SCHEMA_CANNOT_EXPRESS])
def test_schema_gaps_are_exactly_the_documented_ones(validator: Any, schema: dict[str, Any], raw: str | bytes) -> None:
    assert schema_accepts(validator, raw) is True
    assert parser_accepts(raw) is False
    for documented in ("1024 bytes", "appears twice", "surrogate"):
        assert documented in schema["description"]


def test_schema_job_enum_is_the_catalog(schema: dict[str, Any]) -> None:
    assert sorted(schema["properties"]["job"]["enum"]) == sorted(CATALOG.job_names), "run `make schema`"


def test_the_schemas_hidden_class_is_the_one_make_schema_writes() -> None:
    from scripts.envelope_schema import with_hidden_class

    text = SCHEMA_PATH.read_text()
    assert with_hidden_class(text) == text, "run `make schema`"


def test_make_schema_writes_the_catalogs_jobs_into_the_enum_and_nothing_else() -> None:
    from scripts.envelope_schema import with_job_enum

    text = SCHEMA_PATH.read_text()
    updated = with_job_enum(text, ("make_thumbnail", "order_confirmation"))

    assert json.loads(updated)["properties"]["job"]["enum"] == ["make_thumbnail", "order_confirmation"]
    assert with_job_enum(updated, CATALOG.job_names) == text


def test_schema_limits_match_the_code(schema: dict[str, Any]) -> None:
    defs = schema["$defs"]
    extra_string = defs["extraFieldValue"]["anyOf"][3]

    assert defs["identifier"]["maxLength"] == MAX_ID_CHARS
    assert schema["properties"]["tenant"]["maxLength"] == MAX_TENANT_CHARS
    assert extra_string["maxLength"] == MAX_EXTRA_STRING_CHARS
    assert defs["extraFieldName"]["pattern"] == envelope_module._FIELD_NAME.pattern
    assert sorted(schema["propertyNames"]["anyOf"][0]["enum"]) == sorted(RESERVED_FIELDS)
    assert sorted(schema["properties"]) == sorted(RESERVED_FIELDS)
    assert sorted(schema["required"]) == ["id", "job"]
    assert str(MAX_ENVELOPE_BYTES) in schema["description"]


RESERVED_SAMPLES = {"batch": f"{'a' * 32}.7"}
OPTIONAL_RESERVED = [name for name in RESERVED_FIELDS if name not in ("job", "id")]
RESERVED_COMBINATIONS = [
    combination for size in range(len(OPTIONAL_RESERVED) + 1) for combination in combinations(OPTIONAL_RESERVED, size)
]


@pytest.mark.parametrize(
    "present",
    RESERVED_COMBINATIONS,
    ids=lambda present: "+".join(present) or "none",
)
def test_schema_counts_extra_fields_as_the_parser_does_whichever_reserved_fields_are_there(
    validator: Any, present: tuple[str, ...]
) -> None:
    # The schema can't count "properties other than these", so it spells out a maxProperties per case: each case
    # must still allow exactly MAX_EXTRA_FIELDS extras, as the parser does.
    # Each reserved field with a value its own rule accepts.
    reserved = {name: RESERVED_SAMPLES.get(name, "t") for name in present}
    at_limit = body(job=JOB, id="1", **reserved, **extras(MAX_EXTRA_FIELDS))
    over = body(job=JOB, id="1", **reserved, **extras(MAX_EXTRA_FIELDS + 1))

    assert parser_accepts(at_limit) and schema_accepts(validator, at_limit)
    assert not parser_accepts(over) and not schema_accepts(validator, over)


def test_schema_examples_are_accepted_by_both(validator: Any, schema: dict[str, Any]) -> None:
    assert len(schema["examples"]) >= 2
    for example in schema["examples"]:
        assert validator.is_valid(example)
        assert parse_envelope(json.dumps(example), CATALOG.job_names).to_dict() == example


def test_schema_blank_and_hidden_classes_match_python_for_every_code_point(schema: dict[str, Any]) -> None:
    # The parser's "blank" is str.strip()/str.isspace(); the schema spells the same set out for other languages.
    # Its hidden class is the parser's (sqs_jobs.visible) in the BMP; above it the parser alone refuses them.
    not_blank = re.compile(schema["$defs"]["notBlank"]["pattern"])
    hidden_class = re.compile(schema["$defs"]["noHiddenCharacters"]["not"]["pattern"])
    mismatched = []
    for code_point in range(sys.maxunicode + 1):
        if 0xD800 <= code_point <= 0xDFFF:
            continue
        char = chr(code_point)
        is_control = code_point < 0x20 or code_point == 0x7F
        if code_point <= 0xFFFF and bool(hidden_class.search(char)) is not is_hidden(char):
            mismatched.append(code_point)
        if bool(not_blank.search(char)) is not (not char.isspace() and not is_control):
            mismatched.append(code_point)
    assert mismatched == []
