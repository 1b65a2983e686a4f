"""The batch member field of the envelope and the batch's definition: what is accepted, and what each refusal
says."""

from __future__ import annotations

import json

import pytest

from functions.catalog import CATALOG
from sqs_jobs.batches import (
    MAX_BATCH_MEMBERS,
    MEMBER_DIGEST_BYTES,
    BatchDefinitionError,
    BatchMember,
    callback_key,
    definition_items,
    listed_digest,
    member_digest,
    parse_member_field,
)
from sqs_jobs.envelope import Envelope, parse_envelope
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
    digests = [member_digest(Envelope(job, entity_id)) for job, entity_id in members]
    counting, listed = definition_items(BATCH_ID, members, {}, "", 0, digests=digests)
    assert len(listed["members"]["L"]) == MAX_BATCH_MEMBERS
    assert listed_digest(listed, MAX_BATCH_MEMBERS - 1) == digests[-1]
    assert len(json.dumps(counting)) < 1024  # the item each member's count updates stays small


def test_a_definition_too_big_for_its_item_is_refused() -> None:
    members = [("job", "y" * 400 + str(n)) for n in range(MAX_BATCH_MEMBERS)]
    with pytest.raises(BatchDefinitionError, match="fit their item"):
        definition_items(BATCH_ID, members, {}, "", 0)


def test_a_catalog_job_that_publishes_an_unknown_job_is_refused_and_routes_follow_publishes() -> None:
    from sqs_jobs.specs import Catalog, CatalogError, JobSpec, QueueSpec

    with pytest.raises(CatalogError, match="publishes unknown job 'nowhere'"):
        Catalog(queues=(QueueSpec(name="a", jobs=(JobSpec(name="x", handler="jobs.m", publishes=("nowhere",)),)),))
    catalog = Catalog(
        queues=(
            QueueSpec(name="a", jobs=(JobSpec(name="x", handler="jobs.m", publishes=("y",)),)),
            QueueSpec(name="b", jobs=(JobSpec(name="y", handler="jobs.m"),)),
            QueueSpec(name="c", jobs=(JobSpec(name="z", handler="jobs.m"),)),
        )
    )
    assert (catalog.publish_routes("a"), catalog.publish_routes("b")) == (("b",), ())


def test_a_members_digest_is_its_envelope_but_its_batch_field() -> None:
    body = {"job": JOB, "id": "1", "key": "1-v2", "tenant": "acme", "locale": "de", "version": 2}
    member = parse_envelope(json.dumps({**body, "batch": f"{BATCH_ID}.3"}), CATALOG.job_names)
    # The same envelope, its fields in another order and without its batch field: the same digest.
    same = parse_envelope(json.dumps(dict(reversed(body.items()))), CATALOG.job_names)
    assert member_digest(member) == member_digest(same)
    assert len(member_digest(member)) == MEMBER_DIGEST_BYTES
    # Anything a job's idempotency key may be computed from changes it.
    for changed in ({"key": "1-v3"}, {"tenant": "other"}, {"locale": "fr"}, {"version": 2.5}, {"id": "2"}):
        other = parse_envelope(json.dumps({**body, **changed}), CATALOG.job_names)
        assert member_digest(other) != member_digest(member), changed
    without_key = {name: value for name, value in body.items() if name != "key"}
    assert member_digest(parse_envelope(json.dumps(without_key), CATALOG.job_names)) != member_digest(member)


def test_a_members_item_without_digests_lists_none() -> None:
    _, listed = definition_items(BATCH_ID, [(JOB, "1")], {}, "", 0)
    assert "member_digests" not in listed and listed_digest(listed, 0) is None
    with pytest.raises(BatchDefinitionError, match="one 16-byte digest per member"):
        definition_items(BATCH_ID, [(JOB, "1"), (JOB, "2")], {}, "", 0, digests=[b"x" * 16])
