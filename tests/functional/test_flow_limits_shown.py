"""What `jobctl status`, `jobctl job show` and the console say of flow limits, read from the items the runtime's own
limiter and key slots wrote in the idempotency table (moto): an unkeyed rate limit's free tokens, a key's slots and
their holders, escaped; no read where nothing can be read without a scan."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.exceptions import ClientError

from sqs_jobs.cli.commands.job import key_slot_lines
from sqs_jobs.cli.discovery import QueueLocation
from sqs_jobs.cli.dlq import DeadLetterQueue
from sqs_jobs.cli.flow_limits import LimitView, read_limits
from sqs_jobs.cli.job_lookup import JobLookup, find_job, idempotency_table
from sqs_jobs.cli.status import queue_status
from sqs_jobs.flow_control import DeclaredLimit, KeyConcurrency, RateLimit, job_rate_limit_name, key_concurrency_name
from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from sqs_jobs.worker.clients import ClientFactory
from sqs_jobs.worker.key_concurrency import KeySlots
from sqs_jobs.worker.provenance import Provenance
from sqs_jobs.worker.rate_limit import RateLimiter, TokenBucketStore
from tests.functional.conftest import Harness

T = 1_900_000_000.0  # the clock every limiter and read here runs on
HANDLER = "tests.functional.sample_jobs.gather"
# One token a second, 4 at once; a burst under 4 leases one token at a time, so the bucket holds every token.
PACED = RateLimit(per_second=1, burst=4)
# 10 a second, 20 at once: leases of 10 tokens, half the burst, which the bucket keeps back for them.
LEASED = RateLimit(per_second=10, burst=20)
RATED = QueueSpec(
    name="rated",
    function_timeout_s=20,
    jobs=(
        JobSpec(name="paced_job", handler=HANDLER, rate_limit=PACED),
        JobSpec(name="leased_job", handler=HANDLER, rate_limit=LEASED),
    ),
)
EXCLUSIVE = QueueSpec(
    name="exclusive",
    function_timeout_s=20,
    jobs=(
        JobSpec(name="per_customer", handler=HANDLER, concurrency=KeyConcurrency(limit=2, per="customer")),
        JobSpec(name="per_id", handler=HANDLER, concurrency=KeyConcurrency()),
    ),
)
CATALOG_UNDER_TEST = Catalog(queues=(RATED, EXCLUSIVE))
# A key value is a producer's text (an envelope field): markup that must stay text, and (defensively: the envelope
# refuses them, an item written by anything else might not) hidden characters.
HOSTILE_KEY = "[link=https://evil.example]c42[/link]<b>\u202e\u001b]52;c;ZXZpbA==\u0007"


@pytest.fixture
def harness(clients: ClientFactory) -> Harness:
    return Harness.provisioned(clients, CATALOG_UNDER_TEST)


def _limiter(harness: Harness) -> RateLimiter:
    """The runtime's limiter, as a worker runs it, on the shared table and a clock stopped at T."""
    dynamodb = harness.worker_clients("rated")("dynamodb")
    return RateLimiter(TokenBucketStore(lambda: dynamodb, harness.deployment.idempotency_table), clock=lambda: T)


def _views(harness: Harness, now: float) -> dict[str, LimitView]:
    views = read_limits(
        harness.clients("dynamodb"), harness.deployment.idempotency_table, CATALOG_UNDER_TEST.flow_limits("rated"), now
    )
    return {view.declared.name: view for view in views}


def test_an_unkeyed_rate_limits_free_tokens_follow_the_bucket_the_workers_spend(harness: Harness) -> None:
    paced = job_rate_limit_name("paced_job")
    assert _views(harness, T)[paced].tokens_free == 4.0, "no bucket yet: full"

    limiter = _limiter(harness)
    for _ in range(3):
        limiter.acquire(paced, "", PACED, wait_until=T)

    # tat is T + 3: one token left now, one more each second, never more than the burst.
    assert _views(harness, T)[paced].tokens_free == 1.0
    assert _views(harness, T)[paced].state() == "1 of 4 token(s) free now"
    assert _views(harness, T + 2)[paced].tokens_free == 3.0
    assert _views(harness, T + 60)[paced].tokens_free == 4.0
    assert _views(harness, T)[paced].to_dict() == {
        "name": "job:paced_job",
        "kind": "rate",
        "per_second": 1,
        "burst": 4,
        "per": None,
        "max_hold_s": 900,
        "declared": "1/s, burst 4; held at most 900s",
        "tokens_free": 1,
        "state": "1 of 4 token(s) free now",
    }


def test_tokens_a_worker_leased_and_has_not_spent_count_as_taken(harness: Harness) -> None:
    leased = job_rate_limit_name("leased_job")
    # Idle: the bucket keeps one lease (10 tokens) of the burst back for tokens leased but not spent yet.
    assert _views(harness, T)[leased].tokens_free == 10.0

    _limiter(harness).acquire(leased, "", LEASED, wait_until=T)  # one run; its worker leased 10

    assert _views(harness, T)[leased].tokens_free == 0.0
    assert _views(harness, T + 0.5)[leased].tokens_free == 5.0


class NoCalls:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"{name} called: a keyed limit is never read")


def test_keyed_limits_are_said_to_be_per_key_and_never_read() -> None:
    limits = (
        DeclaredLimit(job_rate_limit_name("x"), RateLimit(per_second=2, per="tenant")),
        DeclaredLimit(key_concurrency_name("x"), KeyConcurrency(per="customer")),
    )

    views = read_limits(NoCalls(), "table", limits, T)

    assert [view.state() for view in views] == [
        "one bucket per tenant value (not listed: that needs a scan)",
        "per customer value: `jobctl job show JOB ID` lists a key's slots",
    ]
    assert [view.to_dict()["tokens_free"] for view in views] == [None, None]


def test_status_lists_the_queues_limits_with_their_state_and_says_why_one_could_not_be_read(
    harness: Harness,
) -> None:
    local = harness.deployment.queues["rated"]
    where = QueueLocation(name="rated", url=local.url, dlq_url=local.dlq_url, arn=local.arn)
    limits = CATALOG_UNDER_TEST.flow_limits("rated")
    now = datetime.fromtimestamp(T, tz=UTC)
    _limiter(harness).acquire(job_rate_limit_name("paced_job"), "", PACED, wait_until=T)

    def status(lambda_client: Any) -> list[str]:
        found = queue_status(
            harness.clients("sqs"),
            harness.clients("cloudwatch"),
            RATED,
            where,
            now=now,
            lambda_client=lambda_client,
            limits=limits,
            dynamodb=harness.clients("dynamodb"),
        )
        assert found.to_dict()["limits"] == [view.to_dict() for view in found.limits]
        return [view.state() for view in found.limits]

    # The table from the worker's environment, as `job show` finds it.
    assert status(harness.clients("lambda")) == ["3 of 4 token(s) free now", "10 of 20 token(s) free now"]

    class Denied:
        def __getattr__(self, name: str) -> Any:
            def refuse(*_: Any, **__: Any) -> Any:
                raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, name)

            return refuse

    states = status(Denied())
    assert len(states) == 2 and all(state.startswith("not read: ClientError: ") for state in states), states


def _lookup(harness: Harness, job: str, entity_id: str, limit_key: str | None = None, at: float = T) -> JobLookup:
    local = harness.deployment.queues["exclusive"]
    dead = DeadLetterQueue(
        harness.clients("sqs"), local.dlq_url, local.url, Provenance.of([local.worker_role_id]), receive_wait_s=0
    )
    return find_job(
        spec=EXCLUSIVE,
        job=job,
        entity_id=entity_id,
        key=None,
        dynamodb=harness.clients("dynamodb"),
        table=idempotency_table(harness.clients("lambda"), local.arn),
        dead_letter_queue=dead,
        now=datetime.fromtimestamp(at, tz=UTC),
        limit_key=limit_key,
    )


def _take_slot(harness: Harness, job: str, spec: KeyConcurrency, key: str, holder: str, until: float) -> None:
    """A run holding one of the key's slots, taken by the runtime's own key slots as a worker takes it."""
    dynamodb = harness.worker_clients("exclusive")("dynamodb")
    slots = KeySlots(lambda: dynamodb, harness.deployment.idempotency_table, clock=lambda: T)
    slots.acquire(key_concurrency_name(job), key, spec, holder=holder, until=until, held_s=0.0)


def test_job_show_lists_who_holds_its_keys_slots_and_shows_a_producers_text_escaped(harness: Harness) -> None:
    declared = EXCLUSIVE.job("per_customer").concurrency
    assert declared is not None
    # A holder is its run's record, run and request: the record holds the job's ID, a producer's text.
    holder = "per_customer:<i>91</i>\u200b#1#req-1"
    until = datetime.fromtimestamp(T + 60, tz=UTC)
    _take_slot(harness, "per_customer", declared, HOSTILE_KEY, holder, until=T + 60)

    found = _lookup(harness, "per_customer", "91", limit_key=HOSTILE_KEY)

    assert found.key_slots is not None
    [taken] = [slot.index for slot in found.key_slots.slots if slot.holder is not None]
    assert found.to_dict()["key_slots"] == {
        "limit": "key:per_customer",
        "per": "customer",
        "key": HOSTILE_KEY,
        "capacity": 2,
        "slots": [
            {"slot": index, "held": True, "holder": holder, "until": until}
            if index == taken
            else {"slot": index, "held": False, "holder": None, "until": None}
            for index in range(2)
        ],
    }
    # What `jobctl job show` prints.
    lines = [line.removeprefix("  ") for line in key_slot_lines(found)]
    assert lines[0].startswith("key:per_customer (customer ") and lines[0].endswith("1 of 2 slot(s) held")
    assert "[link=https://evil.example]c42[/link]<b>" in lines[0], "markup stays text"
    assert lines[1 + taken] == (
        f"  slot {taken}: held by per_customer:<i>91</i>\\u200b#1#req-1 until {until.isoformat(timespec='seconds')}"
    )
    assert lines[2 - taken] == f"  slot {1 - taken}: free"
    for line in lines:
        for raw in ("\u202e", "\u200b", "\u001b", "\u0007"):
            assert raw not in line, line
    # Once the holder's lease has ended (its invocation's deadline), the slot is free: no run holds it.
    later = _lookup(harness, "per_customer", "91", limit_key=HOSTILE_KEY, at=T + 61)
    assert later.key_slots is not None and not any(slot.held(later.looked_at) for slot in later.key_slots.slots)
    assert later.key_slots.describe(later.looked_at)[0].endswith("0 of 2 slot(s) held")


def test_job_show_needs_the_fields_value_when_an_id_doesnt_give_the_key(harness: Harness) -> None:
    found = _lookup(harness, "per_customer", "91")

    assert found.key_slots is not None and found.key_slots.key is None
    assert found.to_dict()["key_slots"]["slots"] is None
    assert "pass its value with --limit-key" in found.key_slots.describe(found.looked_at)[0]


def test_a_job_whose_key_is_its_id_shows_that_keys_slots(harness: Harness) -> None:
    declared = EXCLUSIVE.job("per_id").concurrency
    assert declared is not None
    _take_slot(harness, "per_id", declared, "77", "per_id:77#2#req-2", until=T + 30)

    found = _lookup(harness, "per_id", "77")
    other = _lookup(harness, "per_id", "78")

    assert found.key_slots is not None and found.key_slots.key == "77"
    assert [(slot.holder, slot.held(found.looked_at)) for slot in found.key_slots.slots] == [
        ("per_id:77#2#req-2", True)
    ]
    assert other.key_slots is not None and [slot.holder for slot in other.key_slots.slots] == [None]
