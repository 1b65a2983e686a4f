"""The batch member field of the envelope and the batch's definition: what is accepted, and what each refusal
says."""

from __future__ import annotations

import json

import pytest

from sqs_jobs.batches import (
    MAX_BATCH_MEMBERS,
    BatchDefinitionError,
    BatchMember,
    callback_key,
    definition_items,
    parse_member_field,
)
from sqs_jobs.catalog import CATALOG
from sqs_jobs.envelope import parse_envelope
from sqs_jobs.errors import EnvelopeFieldError

BATCH_ID = "0123456789abcdef0123456789abcdef"
JOB = CATALOG.job_names[0]


def test_a_member_field_round_trips_through_the_envelope() -> None:
    body = json.dumps({"job": JOB, "id": "1", "batch": f"{BATCH_ID}.17"})
    envelope = parse_envelope(body, CATALOG.job_names)
    assert envelope.batch == BatchMember(BATCH_ID, 17)
    assert envelope.extra == {}
    assert json.loads(envelope.to_json())["batch"] == f"{BATCH_ID}.17"


@pytest.mark.parametrize(
    "value",
    [
        17,
        None,
        "",
        BATCH_ID,
        f"{BATCH_ID}.",
        f"{BATCH_ID}.-1",
        f"{BATCH_ID}.01",
        f"{BATCH_ID}.{MAX_BATCH_MEMBERS}",
        f"{BATCH_ID.upper()}.1",
        f"{BATCH_ID[:-1]}.1",
        f"{BATCH_ID}.1\n",
        f"{BATCH_ID}.1.2",
        ["x"],
    ],
)
def test_a_malformed_member_field_is_an_envelope_error_naming_the_accepted_form(value: object) -> None:
    body = json.dumps({"job": JOB, "id": "1", "batch": value})
    with pytest.raises(EnvelopeFieldError, match="'batch'"):
        parse_envelope(body, CATALOG.job_names)


def test_the_last_index_is_accepted() -> None:
    assert parse_member_field(f"{BATCH_ID}.{MAX_BATCH_MEMBERS - 1}").index == MAX_BATCH_MEMBERS - 1


def test_a_callback_key_is_one_per_batch_and_kind() -> None:
    assert callback_key(BATCH_ID, "success") != callback_key(BATCH_ID, "complete")
    assert BATCH_ID in callback_key(BATCH_ID, "complete")


def test_the_largest_batch_of_the_longest_ids_fits_its_item() -> None:
    members = [("j" * 40, f"{n:03d}" + "x" * 253) for n in range(MAX_BATCH_MEMBERS)]
    counting, listed = definition_items(BATCH_ID, members, {}, "", 0)
    assert len(listed["members"]["L"]) == MAX_BATCH_MEMBERS
    assert len(json.dumps(counting)) < 1024  # the item each member's count updates stays small


def test_a_definition_too_big_for_its_item_is_refused() -> None:
    members = [("job", "y" * 400 + str(n)) for n in range(MAX_BATCH_MEMBERS)]
    with pytest.raises(BatchDefinitionError, match="fit their item"):
        definition_items(BATCH_ID, members, {}, "", 0)
