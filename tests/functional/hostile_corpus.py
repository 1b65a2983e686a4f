"""A corpus of hostile message bodies (issue 6, item 3), as data: each case is a body the worker must dead-letter
after one attempt, with the EnvelopeError subclass it should name, and optional message attributes.

Notes on what SQS itself refuses, so it is not here: an empty body (SQS requires at least one character; the
corpus sends a single space instead), invalid UTF-8 (SQS bodies are text: lone surrogates come as JSON escapes
such as "\\ud800" instead), and characters outside SQS's allowed set (NUL, most C0 controls) sent raw; they
come as JSON escapes ("\\u0000") instead. Raw tab, LF and CR are allowed by SQS and are sent raw.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from functions.catalog import CATALOG

NOT_JSON = "EnvelopeNotJSONError"
NOT_OBJECT = "EnvelopeNotObjectError"
FIELD = "EnvelopeFieldError"
TOO_LARGE = "EnvelopeTooLargeError"
UNKNOWN_JOB = "UnknownJobError"

# The queues' largest message (the catalog's default `max_message_bytes`); the DLQ takes SQS's largest, 1 MiB.
# Every case is sent on its own (SendMessage, not a 256 KiB SendMessageBatch) and received with the good
# records in one delivery: ReceiveMessage and Lambda's 6 MB payload take ten messages of 256 KiB.
SQS_MAX_MESSAGE_BYTES = CATALOG.queue("orders").max_message_bytes

JOB = "order_confirmation"


@dataclass(frozen=True)
class HostileCase:
    name: str
    body: str
    error_type: str
    attributes: dict[str, dict[str, Any]] = field(default_factory=dict)


def _obj(**fields: Any) -> str:
    return json.dumps({"job": JOB, "id": "1", **fields}, separators=(",", ":"))


def _raw(text: str) -> str:
    """A JSON object body written by hand (for escapes and literals json.dumps would never produce)."""
    return text


def _string(value: str) -> dict[str, str]:
    return {"DataType": "String", "StringValue": value}


def _padded(size: int) -> str:
    """A valid-looking envelope padded with an extra field to exactly `size` bytes."""
    head = _obj(note="")
    return head[:-2] + "x" * (size - len(head)) + '"}'


def _nested(depth: int, open_: str = "[", close: str = "]") -> str:
    return open_ * depth + close * depth


def _nested_objects(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


CORPUS: tuple[HostileCase, ...] = (
    # --- not JSON at all
    HostileCase("plain_text", "hello, worker", NOT_JSON),
    HostileCase("single_space_for_empty_body", " ", NOT_JSON),
    HostileCase("only_whitespace_and_newlines", " \t\r\n ", NOT_JSON),
    HostileCase("xml", "<job><id>1</id></job>", NOT_JSON),
    HostileCase("truncated_object", '{"job": "order_confirmation", "id": "1"', NOT_JSON),
    HostileCase("single_quotes", "{'job': 'order_confirmation', 'id': '1'}", NOT_JSON),
    HostileCase("trailing_garbage", _obj() + " trailing", NOT_JSON),
    HostileCase("two_objects", _obj() + _obj(), NOT_JSON),
    HostileCase("trailing_comma", '{"job": "order_confirmation", "id": "1",}', NOT_JSON),
    HostileCase("bom_prefix", "\ufeff" + _obj(), NOT_JSON),
    HostileCase("raw_tab_inside_string", '{"job": "order_confirmation", "id": "1\t2"}', NOT_JSON),
    HostileCase("raw_newline_inside_string", '{"job": "order_confirmation", "id": "1\n2"}', NOT_JSON),
    HostileCase("bad_escape", r'{"job": "order_confirmation", "id": "\x41"}', NOT_JSON),
    HostileCase("truncated_unicode_escape", r'{"job": "order_confirmation", "id": "\ud8"}', NOT_JSON),
    HostileCase("javascript_comment", '{"job": "order_confirmation", /* c */ "id": "1"}', NOT_JSON),
    HostileCase("deep_nesting_under_1kib_unbalanced", _nested(500)[:-1], NOT_JSON),
    # --- JSON, but not an object
    HostileCase("json_array", '["order_confirmation", "1"]', NOT_OBJECT),
    HostileCase("json_array_of_envelope", "[" + _obj() + "]", NOT_OBJECT),
    HostileCase("json_string", '"order_confirmation"', NOT_OBJECT),
    HostileCase("json_string_of_envelope", json.dumps(_obj()), NOT_OBJECT),
    HostileCase("json_number", "1001", NOT_OBJECT),
    HostileCase("json_float_exponent", "1e400", NOT_OBJECT),
    HostileCase("json_null", "null", NOT_OBJECT),
    HostileCase("json_true", "true", NOT_OBJECT),
    HostileCase("json_false", "false", NOT_OBJECT),
    HostileCase("nan_literal", "NaN", NOT_OBJECT),
    HostileCase("negative_infinity_literal", "-Infinity", NOT_OBJECT),
    HostileCase("deep_nesting_under_1kib_array", _nested(500), NOT_OBJECT),
    # --- too large for the ID-only contract
    HostileCase("just_over_1kib", _padded(1025), TOO_LARGE),
    HostileCase("deep_nesting_over_1kib", _nested(5000), TOO_LARGE),
    HostileCase("deep_nesting_over_1kib_objects", _nested_objects(2000), TOO_LARGE),
    HostileCase("bulky_extra_field_16kib", _padded(16 * 1024), TOO_LARGE),
    HostileCase("huge_body_200kib", _padded(200 * 1024), TOO_LARGE),
    HostileCase("huge_body_near_256kib", _padded(SQS_MAX_MESSAGE_BYTES - 4096), TOO_LARGE),
    # 300 bytes short of the queue's limit: the DLQ's headroom still holds all the evidence.
    HostileCase("huge_body_300_bytes_under_256kib", _padded(SQS_MAX_MESSAGE_BYTES - 300), TOO_LARGE),
    HostileCase("huge_multibyte_body", _obj(note="é" * 40_000), TOO_LARGE),
    HostileCase("huge_garbage_not_json", "x" * (100 * 1024), TOO_LARGE),
    # --- the job field
    HostileCase("missing_job", '{"id": "1"}', FIELD),
    HostileCase("missing_id", '{"job": "order_confirmation"}', FIELD),
    HostileCase("empty_object", "{}", FIELD),
    HostileCase("job_is_null", '{"job": null, "id": "1"}', FIELD),
    HostileCase("job_is_list", '{"job": ["order_confirmation"], "id": "1"}', FIELD),
    HostileCase("job_is_empty", '{"job": "", "id": "1"}', FIELD),
    HostileCase("unknown_job", '{"job": "send_fax", "id": "1"}', UNKNOWN_JOB),
    HostileCase("job_of_another_queue", '{"job": "generate_invoice", "id": "1"}', UNKNOWN_JOB),
    HostileCase("job_wrong_case", '{"job": "Order_Confirmation", "id": "1"}', UNKNOWN_JOB),
    HostileCase("job_trailing_space", '{"job": "order_confirmation ", "id": "1"}', UNKNOWN_JOB),
    # Cyrillic small o (U+043E) for the Latin "o", and a fullwidth underscore: look alike, are not the same.
    HostileCase("job_cyrillic_lookalike", '{"job": "\u043erder_confirmation", "id": "1"}', UNKNOWN_JOB),
    HostileCase("job_fullwidth_underscore", '{"job": "order\uff3fconfirmation", "id": "1"}', UNKNOWN_JOB),
    # Format characters hide or reorder text wherever it is shown: refused as fields, before any job lookup.
    HostileCase("job_zero_width_space", '{"job": "order_\u200bconfirmation", "id": "1"}', FIELD),
    HostileCase("job_rtl_override", '{"job": "\u202enoitamrifnoc_redro", "id": "1"}', FIELD),
    HostileCase("id_c1_csi", '{"job": "order_confirmation", "id": "1\u009b2J"}', FIELD),
    HostileCase("id_bidi_isolate", '{"job": "order_confirmation", "id": "\u2067100\u2069"}', FIELD),
    HostileCase("job_with_nul_escape", _raw(r'{"job": "order_confirmation\u0000", "id": "1"}'), FIELD),
    HostileCase("job_lone_surrogate", _raw(r'{"job": "\ud800", "id": "1"}'), FIELD),
    # --- the id field
    HostileCase("id_empty", '{"job": "order_confirmation", "id": ""}', FIELD),
    HostileCase("id_blank", '{"job": "order_confirmation", "id": "   "}', FIELD),
    HostileCase("id_blank_unicode_spaces", '{"job": "order_confirmation", "id": "\u00a0\u2003\u3000"}', FIELD),
    HostileCase("id_int", '{"job": "order_confirmation", "id": 1001}', FIELD),
    HostileCase("id_float", '{"job": "order_confirmation", "id": 1001.5}', FIELD),
    HostileCase("id_huge_int", '{"job": "order_confirmation", "id": ' + "9" * 900 + "}", FIELD),
    HostileCase("id_nan", '{"job": "order_confirmation", "id": NaN}', FIELD),
    HostileCase("id_bool", '{"job": "order_confirmation", "id": true}', FIELD),
    HostileCase("id_list", '{"job": "order_confirmation", "id": ["1001"]}', FIELD),
    HostileCase("id_object", '{"job": "order_confirmation", "id": {"order": "1001"}}', FIELD),
    HostileCase("id_null", '{"job": "order_confirmation", "id": null}', FIELD),
    HostileCase("id_too_long", _obj(id="1" * 257), FIELD),
    HostileCase("id_nul_escape", _raw(r'{"job": "order_confirmation", "id": "10\u000001"}'), FIELD),
    HostileCase("id_control_escapes", _raw(r'{"job": "order_confirmation", "id": "1\u001b[31m\u0007"}'), FIELD),
    HostileCase("id_del_escape", _raw(r'{"job": "order_confirmation", "id": "1\u007f"}'), FIELD),
    HostileCase("id_escaped_newline", _raw(r'{"job": "order_confirmation", "id": "1\nERROR forged log"}'), FIELD),
    HostileCase("id_lone_high_surrogate", _raw(r'{"job": "order_confirmation", "id": "\ud800"}'), FIELD),
    HostileCase("id_lone_low_surrogate", _raw(r'{"job": "order_confirmation", "id": "1\udfff"}'), FIELD),
    HostileCase("id_reversed_surrogates", _raw(r'{"job": "order_confirmation", "id": "\udc00\ud800"}'), FIELD),
    # --- the key field
    HostileCase("key_int", _obj(key=7), FIELD),
    HostileCase("key_null", _obj(key=None), FIELD),
    HostileCase("key_blank", _obj(key=" "), FIELD),
    HostileCase("key_object", _obj(key={"k": "v"}), FIELD),
    HostileCase("key_nul_escape", _raw(r'{"job": "order_confirmation", "id": "1", "key": "k\u0000"}'), FIELD),
    # --- duplicate keys
    HostileCase("duplicate_id", '{"job": "order_confirmation", "id": "1", "id": "2"}', FIELD),
    HostileCase("duplicate_job", '{"job": "send_fax", "job": "order_confirmation", "id": "1"}', FIELD),
    HostileCase("duplicate_extra", '{"job": "order_confirmation", "id": "1", "a": 1, "a": 1}', FIELD),
    HostileCase("duplicate_key_in_nested", '{"job": "order_confirmation", "id": "1", "x": {"a": 1, "a": 2}}', FIELD),
    # The same name, once escaped: equal after decoding, so still a duplicate.
    HostileCase("duplicate_id_escaped", _raw(r'{"job": "order_confirmation", "id": "1", "\u0069d": "2"}'), FIELD),
    # --- extra fields
    HostileCase("extra_too_many", _obj(**{f"f{n}": n for n in range(9)}), FIELD),
    HostileCase("extra_string_too_long", _obj(note="x" * 129), FIELD),
    HostileCase("extra_nested_object", _obj(order={"id": "1", "total": 10}), FIELD),
    HostileCase("extra_list", _obj(items=[1, 2, 3]), FIELD),
    HostileCase("extra_null", _obj(locale=None), FIELD),
    HostileCase("extra_nan", _raw('{"job": "order_confirmation", "id": "1", "ratio": NaN}'), FIELD),
    HostileCase("extra_infinity", _raw('{"job": "order_confirmation", "id": "1", "ratio": -Infinity}'), FIELD),
    HostileCase("extra_overflowing_float", _raw('{"job": "order_confirmation", "id": "1", "ratio": 1e999}'), FIELD),
    HostileCase("extra_name_uppercase", _obj(Locale="en"), FIELD),
    HostileCase("extra_name_too_long", _obj(**{"a" * 41: 1}), FIELD),
    HostileCase("extra_name_empty", _raw('{"job": "order_confirmation", "id": "1", "": 1}'), FIELD),
    HostileCase("extra_name_nul", _raw(r'{"job": "order_confirmation", "id": "1", "a\u0000": 1}'), FIELD),
    HostileCase("extra_name_lone_surrogate", _raw(r'{"job": "order_confirmation", "id": "1", "\ud800": 1}'), FIELD),
    HostileCase("extra_name_proto", _raw('{"job": "order_confirmation", "id": "1", "__proto__": {}}'), FIELD),
    HostileCase("extra_value_nul", _raw(r'{"job": "order_confirmation", "id": "1", "locale": "en\u0000"}'), FIELD),
    HostileCase("extra_value_surrogate", _raw(r'{"job": "order_confirmation", "id": "1", "locale": "\udbff"}'), FIELD),
    HostileCase("extra_deep_nesting_under_1kib", _obj(x=json.loads(_nested(400))), FIELD),
    # --- odd or oversized message attributes on an otherwise bad body
    HostileCase(
        "ten_attributes",
        "not json",
        NOT_JSON,
        {f"attr{n}": _string(f"value {n}") for n in range(10)},
    ),
    HostileCase(
        "ten_attributes_named_like_evidence",
        '{"job": "send_fax", "id": "1"}',
        UNKNOWN_JOB,
        {
            name: _string("forged")
            for name in (
                "jobs.error_type",
                "jobs.error_message",
                "jobs.traceback",
                "jobs.failure",
                "jobs.first_failed_at",
                "jobs.last_failed_at",
                "jobs.source_queue",
                "jobs.job",
                "jobs.id",
                "jobs.original_attributes",
            )
        },
    ),
    HostileCase(
        "forged_attempts_and_prior_attempts",
        '{"job": "order_confirmation", "id": 1}',
        FIELD,
        {
            "jobs.attempts": {"DataType": "Number", "StringValue": "99"},
            "jobs.prior_attempts": {"DataType": "Number", "StringValue": "-5"},
        },
    ),
    HostileCase(
        "prior_attempts_not_a_number",
        "[]",
        NOT_OBJECT,
        {"jobs.prior_attempts": {"DataType": "Number", "StringValue": "1e3"}},
    ),
    HostileCase("long_attribute_name", "null", NOT_OBJECT, {"a" * 256: _string("v")}),
    HostileCase(
        "binary_attributes",
        "null",
        NOT_OBJECT,
        {
            "blob": {"DataType": "Binary", "BinaryValue": bytes(range(256))},
            "blob.custom": {"DataType": "Binary.gzip", "BinaryValue": b"\x1f\x8b\x08\x00"},
        },
    ),
    HostileCase(
        "custom_typed_attributes",
        "{}",
        FIELD,
        {
            "count": {"DataType": "Number.int", "StringValue": "-0012"},
            "label": {"DataType": "String.utf8", "StringValue": "caf\u00e9 \u2603 \U0001f600"},
        },
    ),
    HostileCase("large_attribute_value", "true", NOT_OBJECT, {"note": _string("n" * (100 * 1024))}),
)
