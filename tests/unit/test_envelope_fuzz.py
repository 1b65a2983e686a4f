"""Property-based fuzzing of the envelope parser (issue 6, item 3).

(a) any body, text or bytes, gives an Envelope or an EnvelopeError subclass, never another exception;
(b) valid envelopes from the contract round-trip through to_json and agree with build_envelope;
(c) a JSON value that is not an object is EnvelopeNotObjectError; (d) a body over 1 KiB is EnvelopeTooLargeError.
Deterministic (derandomized) and bounded, so CI runs it in seconds.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from functions.catalog import CATALOG
from sqs_jobs.envelope import (
    MAX_ENVELOPE_BYTES,
    MAX_EXTRA_FIELDS,
    MAX_EXTRA_STRING_CHARS,
    MAX_ID_CHARS,
    MAX_TENANT_CHARS,
    RESERVED_FIELDS,
    Envelope,
    Scalar,
    build_envelope,
    parse_envelope,
)
from sqs_jobs.worker.errors import EnvelopeError, EnvelopeNotObjectError, EnvelopeTooLargeError

ACCEPTED = CATALOG.job_names
JOB_NAMES = sorted(ACCEPTED)
FUZZ = settings(max_examples=300, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --- strategies

# Lone surrogates are not in st.characters(); they are what a "\ud800" escape decodes to.
surrogates = st.integers(0xD800, 0xDFFF).map(chr)
# Tokens of JSON and its escape tricks, so fuzzed text reaches the parser's deeper paths, not only its first check.
json_tokens = st.sampled_from(
    [
        *'{}[]":,\\ \t\n0123456789-+.eE',
        *("true", "false", "null", "NaN", "-Infinity", "\\u", "\\ud800", "\\u0000", "\ufeff"),
        *('"job"', '"id"', '"key"', '"tenant"', '"order_confirmation"'),
    ]
)
any_char = st.one_of(st.characters(), surrogates)
any_text = st.lists(st.one_of(any_char, json_tokens), max_size=120).map("".join)
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(any_char, max_size=20),  # may hold lone surrogates
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(
            st.one_of(st.sampled_from([*RESERVED_FIELDS, "note"]), st.text(max_size=8)), children, max_size=5
        ),
    ),
    max_leaves=12,
)


@st.composite
def near_envelopes(draw: st.DrawFn) -> str:
    """Objects shaped almost like an envelope: the right names, values of any kind, often valid, sometimes not."""
    body: dict[str, Any] = {}
    for name in RESERVED_FIELDS:
        if draw(st.integers(0, 9)) < 8:
            body[name] = draw(st.one_of(st.sampled_from(JOB_NAMES), st.text(max_size=10), json_values))
    body.update(draw(st.dictionaries(st.text(max_size=12), json_values, max_size=10)))
    text = json.dumps(body, ensure_ascii=draw(st.booleans()))
    # Sometimes cut or extend the text, as a broken or hostile publisher would.
    cut = draw(st.integers(0, len(text)))
    return draw(st.sampled_from([text, text[:cut], text + draw(any_text), text[:cut] + draw(any_text) + text[cut:]]))


bodies = st.one_of(
    any_text,
    st.binary(max_size=300),
    near_envelopes(),
    near_envelopes().map(lambda text: text.encode("utf-8", errors="surrogatepass")),
    json_values.map(json.dumps),
)

printable = st.characters(exclude_categories=("Cc", "Cf", "Zl", "Zp", "Cs"))
identifiers = st.text(printable, min_size=1, max_size=MAX_ID_CHARS).filter(lambda text: bool(text.strip()))
# What SQS takes as a MessageGroupId: ASCII letters, digits and punctuation.
tenants = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=MAX_TENANT_CHARS)
extra_names = st.from_regex(r"\A[a-z][a-z0-9_]{0,39}\Z").filter(lambda name: name not in RESERVED_FIELDS)
extra_values: st.SearchStrategy[Scalar] = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(printable, max_size=MAX_EXTRA_STRING_CHARS),
)


@st.composite
def valid_envelopes(draw: st.DrawFn) -> Envelope:
    envelope = Envelope(
        job=draw(st.sampled_from(JOB_NAMES)),
        id=draw(identifiers),
        key=draw(st.none() | identifiers),
        extra=draw(st.dictionaries(extra_names, extra_values, max_size=MAX_EXTRA_FIELDS)),
        tenant=draw(st.none() | tenants),
    )
    # The contract's size limit is in UTF-8 bytes; shorten the ID until the body fits.
    while len(envelope.to_json().encode("utf-8")) > MAX_ENVELOPE_BYTES:
        envelope = Envelope(job=envelope.job, id=envelope.id[: len(envelope.id) // 2] or "1", extra={})
    if not envelope.id.strip():
        envelope = Envelope(job=envelope.job, id="1", key=envelope.key, extra=envelope.extra, tenant=envelope.tenant)
    return envelope


# --- properties


@FUZZ
@given(bodies)
@pytest.mark.slow
def test_any_body_gives_an_envelope_or_an_envelope_error(body: str | bytes) -> None:
    try:
        result = parse_envelope(body, ACCEPTED)
    except EnvelopeError as error:
        event(type(error).__name__)
        # A clear, one-line reason for the dead-letter evidence.
        assert str(error).strip()
        assert "\n" not in str(error)
    else:
        event("accepted")
        assert isinstance(result, Envelope)
        assert result.job in ACCEPTED
        # What was accepted is within the contract, and serialises back to an accepted body.
        assert len(result.to_json().encode("utf-8")) <= MAX_ENVELOPE_BYTES
        assert parse_envelope(result.to_json(), ACCEPTED) == result


@FUZZ
@given(valid_envelopes())
def test_valid_envelopes_round_trip_and_build_envelope_agrees(envelope: Envelope) -> None:
    body = envelope.to_json()
    parsed = parse_envelope(body, ACCEPTED)
    assert parsed == envelope
    assert parse_envelope(body.encode("utf-8"), ACCEPTED) == envelope
    built = build_envelope(
        envelope.job, envelope.id, ACCEPTED, key=envelope.key, extra=dict(envelope.extra), tenant=envelope.tenant
    )
    assert built == envelope
    assert parse_envelope(built.to_json(), ACCEPTED) == envelope


@FUZZ
@given(json_values.filter(lambda value: not isinstance(value, dict)), st.booleans())
def test_json_that_is_not_an_object_is_rejected_as_not_an_object(value: Any, ensure_ascii: bool) -> None:
    body = json.dumps(value, ensure_ascii=ensure_ascii)
    if not _is_text(body):
        # A raw lone surrogate is not UTF-8 text, so not JSON text (RFC 8259); as an escape it is.
        body = json.dumps(value)
    if len(body.encode("utf-8", errors="surrogatepass")) > MAX_ENVELOPE_BYTES:
        body = json.dumps(None)
    try:
        parse_envelope(body, ACCEPTED)
    except EnvelopeNotObjectError:
        return
    raise AssertionError(f"accepted a JSON {type(value).__name__}: {body[:80]!r}")


@FUZZ
@given(st.one_of(any_text, st.binary(max_size=64), valid_envelopes().map(Envelope.to_json)), st.integers(1, 4096))
def test_bodies_over_one_kib_are_always_too_large(prefix: str | bytes, excess: int) -> None:
    raw = prefix.encode("utf-8", errors="surrogatepass") if isinstance(prefix, str) else prefix
    padding = MAX_ENVELOPE_BYTES + excess - len(raw)
    body = raw + b" " * max(0, padding)
    assert len(body) > MAX_ENVELOPE_BYTES
    for candidate in (body, body.decode("utf-8", errors="surrogatepass") if _decodes(body) else None):
        if candidate is None:
            continue
        try:
            parse_envelope(candidate, ACCEPTED)
        except EnvelopeTooLargeError:
            continue
        raise AssertionError(f"a {len(body)}-byte body was not rejected as too large")


def _is_text(body: str) -> bool:
    try:
        body.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _decodes(raw: bytes) -> bool:
    try:
        raw.decode("utf-8", errors="surrogatepass")
    except UnicodeDecodeError:
        return False
    return True


def test_float_extras_survive_the_round_trip_exactly() -> None:
    # repr-exact floats are what makes (b) hold; a spot check of the edges hypothesis may not reach.
    for value in (5e-324, 1.7976931348623157e308, -0.0, 0.1):
        envelope = Envelope(job=JOB_NAMES[0], id="1", extra={"ratio": value})
        parsed = parse_envelope(envelope.to_json(), ACCEPTED)
        assert math.copysign(1, float(parsed.extra["ratio"])) == math.copysign(1, value)
        assert parsed == envelope
