"""Failure semantics on real SQS semantics (moto): backoff, time limits, deferral, classification, FIFO order."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from sqs_jobs.cli.dlq import DeadLetterQueue, Filter
from sqs_jobs.local.emulator import Invocation
from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from sqs_jobs.worker import deadletter
from sqs_jobs.worker.backoff import backoff_ceiling_s, backoff_delay_s
from sqs_jobs.worker.clients import ClientFactory
from sqs_jobs.worker.names import DeadLetterFailure
from sqs_jobs.worker.observability import Observability
from sqs_jobs.worker.provenance import PRIOR_ATTEMPTS, MessageAttributes, Provenance
from sqs_jobs.worker.runtime import Worker
from tests.functional.conftest import Harness, attributes_of, envelope
from tests.functional.sample_jobs import flaky, nap, sleepy, stubborn

SEED = 20261129
BASE = QueueSpec(name="x", jobs=(JobSpec(name="x", handler="x.y"),))

TESTING = QueueSpec(
    name="testing",
    max_attempts=5,
    function_timeout_s=10,
    backoff_base_s=4,
    backoff_cap_s=40,
    jobs=(
        JobSpec(name="flaky", handler="tests.functional.sample_jobs.flaky"),
        JobSpec(name="sleepy", handler="tests.functional.sample_jobs.sleepy", time_limit_s=1),
        JobSpec(name="strict", handler="tests.functional.sample_jobs.strict"),
        JobSpec(name="stubborn", handler="tests.functional.sample_jobs.stubborn", time_limit_s=1),
    ),
)
ORDERED = QueueSpec(
    name="ordered",
    fifo=True,
    max_attempts=5,
    jobs=(JobSpec(name="ordered_flaky", handler="tests.functional.sample_jobs.flaky"),),
)
# Short invocations: a 2.5 s nap leaves the records after it less than their 3 s limit plus the settle margin,
# when they run after it (one record at a time). A record at the head of a batch has 2 s to spare beyond its limit
# and the margin (7 - 3 - 2), so a loaded machine's slow start never hands it back; a record after the nap is handed
# back whatever the load (a slower start only leaves it less time).
TIGHT = QueueSpec(
    name="tight",
    function_timeout_s=7,
    parallel_records=1,
    jobs=(
        JobSpec(name="nap", handler="tests.functional.sample_jobs.nap", time_limit_s=3),
        JobSpec(name="tight_flaky", handler="tests.functional.sample_jobs.flaky", time_limit_s=3),
    ),
)
NAP_S = "2.5"
# The same, with the records of a batch run side by side: nothing waits behind the nap. Run one after another,
# the records after a 3.2 s nap would have less than their 3 s limit plus the margin (8 - 3.2 < 5) and be handed
# back; side by side they start at once. The nap's limit leaves it 1.8 s to spare on a loaded machine, and its
# start 1 s (8 - 5 - 2).
PARALLEL_NAP_S = "3.2"
TIGHT_PARALLEL = replace(
    TIGHT,
    name="tight_parallel",
    function_timeout_s=8,
    parallel_records=4,
    jobs=tuple(
        replace(j, name=f"p_{j.name}", time_limit_s=5 if j.name == "nap" else j.time_limit_s) for j in TIGHT.jobs
    ),
)
CATALOG = Catalog(queues=(TESTING, ORDERED, TIGHT, TIGHT_PARALLEL))


@pytest.fixture
def testing(clients: ClientFactory) -> Iterator[Harness]:
    flaky.FAILURES.clear()
    flaky.SIDE_EFFECTS.clear()
    flaky.ATTEMPTS_SEEN.clear()
    nap.FAILURES.clear()
    stubborn.OUTCOMES.clear()
    sleepy.RELEASE.clear()
    sleepy.DONE.clear()
    yield Harness.provisioned(clients, CATALOG)
    sleepy.RELEASE.set()  # let any abandoned run finish


class VisibilityLog:
    """Records every ChangeMessageVisibility the runtime sends (the call still goes to moto)."""

    def __init__(self, clients: ClientFactory) -> None:
        self.timeouts: list[int] = []
        clients.register("provide-client-params.sqs.ChangeMessageVisibility", self._record)

    def _record(self, params: dict[str, Any], **_: Any) -> None:
        self.timeouts.append(params["VisibilityTimeout"])


def worker_with(harness: Harness, queue: str, seed: int) -> Worker:
    return Worker(
        settings=harness.deployment.worker_settings(queue),
        clients=harness.worker_clients(queue),
        observability=Observability.create(output=harness.output),
        rng=random.Random(seed),
    )


def test_transient_failures_back_off_with_growing_jittered_delays_then_dead_letter(testing: Harness) -> None:
    flaky.FAILURES["1"] = 99
    testing.send(envelope("flaky", "1"), queue="testing")
    visibility = VisibilityLog(testing.worker_clients("testing"))
    worker = worker_with(testing, "testing", SEED)
    for _ in range(TESTING.max_attempts - 1):
        invocation = testing.deliver("testing", worker=worker)
        assert invocation is not None and len(invocation.failed_ids) == 1
        testing.expire_visibility(invocation, "testing")
    last = testing.deliver("testing", worker=worker)
    assert last is not None and last.failed_ids == []

    # The runtime set exactly the full-jitter delays of attempts 1..4, drawn in order from its RNG...
    rng = random.Random(SEED)
    expected = [backoff_delay_s(n, TESTING.backoff_base_s, TESTING.backoff_cap_s, rng) for n in range(1, 5)]
    assert visibility.timeouts == expected
    # ...each within its ceiling, and the ceilings double: 4, 8, 16, 32.
    ceilings = [backoff_ceiling_s(n, TESTING.backoff_base_s, TESTING.backoff_cap_s) for n in range(1, 5)]
    assert ceilings == [4, 8, 16, 32]
    assert all(0 <= delay <= ceiling for delay, ceiling in zip(expected, ceilings, strict=True))
    # Dead-lettered on the last attempt, with evidence.
    [dead] = testing.dead_letters("testing")
    evidence = attributes_of(dead)
    assert evidence[deadletter.FAILURE] == DeadLetterFailure.RETRIES_EXHAUSTED
    assert evidence[deadletter.ATTEMPTS] == str(TESTING.max_attempts)
    assert evidence[deadletter.ERROR_TYPE] == "ConnectionRefusedError"


def test_jitter_spreads_the_delays_of_simultaneous_failures(testing: Harness) -> None:
    # Ten jobs failing at the same moment must not all come back at the same moment.
    for entity_id in map(str, range(10)):
        flaky.FAILURES[entity_id] = 1
        testing.send(envelope("flaky", entity_id), queue="testing")
    visibility = VisibilityLog(testing.worker_clients("testing"))
    invocation = testing.deliver("testing", worker=worker_with(testing, "testing", SEED))
    assert invocation is not None and len(invocation.failed_ids) == 10
    assert len(visibility.timeouts) == 10
    assert len(set(visibility.timeouts)) > 1
    assert all(0 <= delay <= TESTING.backoff_base_s for delay in visibility.timeouts)


def test_a_failed_message_stays_invisible_for_its_backoff(testing: Harness) -> None:
    flaky.FAILURES["1"] = 1
    testing.send(envelope("flaky", "1"), queue="testing")
    visibility = VisibilityLog(testing.worker_clients("testing"))
    # Attempt 1's ceiling is 4 s; this seed draws a delay of at least 1 s.
    testing.deliver("testing", worker=worker_with(testing, "testing", SEED))
    assert visibility.timeouts[0] >= 1
    assert testing.deliver("testing") is None  # nothing visible: the retry waits out its delay
    assert testing.queue_counts("testing") == (0, 1)


def test_a_hung_downstream_is_cut_at_the_time_limit_while_the_batch_carries_on(testing: Harness) -> None:
    for entity_id in ("a", "hang-1", "b", "c"):
        testing.send(envelope("sleepy", entity_id), queue="testing")
    invocation = testing.deliver("testing")
    assert invocation is not None
    hung = [r["messageId"] for r in invocation.event["Records"] if json.loads(r["body"])["id"] == "hang-1"]
    assert invocation.failed_ids == hung  # retried later, not lost, not dead-lettered
    assert sorted(sleepy.DONE) == ["a", "b", "c"]
    assert testing.dead_letters("testing") == []
    [cut] = [line for line in testing.log_lines() if line.get("error_type") == "JobTimeLimitError"]
    assert cut["classification"] == "transient"
    assert cut["id"] == "hang-1"
    assert cut["attempt"] == 1


def deliver_and_let_cut_runs_end(harness: Harness, queue: str) -> tuple[Invocation, Worker, float]:
    """One delivery on a worker of its own; returns with its cut runs ended (at most 10 s later)."""
    worker = harness.worker(queue)
    started = time.monotonic()
    invocation = harness.deliver(queue, worker=worker)
    elapsed_s = time.monotonic() - started
    assert invocation is not None
    deadline = time.monotonic() + 10
    while worker._runner.cut_runs() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not worker._runner.cut_runs()
    return invocation, worker, elapsed_s


def test_a_job_that_catches_exception_cannot_swallow_its_time_limit(testing: Harness) -> None:
    testing.send(envelope("stubborn", "except-exception"), queue="testing")
    invocation, _, elapsed_s = deliver_and_let_cut_runs_end(testing, "testing")
    assert len(invocation.failed_ids) == 1  # cut, and retried later
    # At its 1 s limit, not after the 5 s it wanted (a loaded machine's delivery took 3.6 s once: the margin is wide)
    assert elapsed_s < 4.5
    assert stubborn.OUTCOMES == []  # neither swallowed nor run on past its limit
    [cut] = [line for line in testing.log_lines() if line.get("error_type") == "JobTimeLimitError"]
    assert cut["classification"] == "transient"
    # This run's line: a cut run of an earlier test in this process may end (and log) meanwhile.
    [ended] = [
        line
        for line in testing.log_lines()
        if line.get("message") == "run cut at its time limit has ended" and line.get("id") == "except-exception"
    ]
    assert ended["outcome"] == "TimeLimitInterrupt"


@pytest.mark.slow
def test_a_job_that_catches_the_interruption_and_keeps_going_is_interrupted_again(testing: Harness) -> None:
    testing.send(envelope("stubborn", "catch-then-hang"), queue="testing")
    invocation, _, elapsed_s = deliver_and_let_cut_runs_end(testing, "testing")
    assert len(invocation.failed_ids) == 1 and elapsed_s < 4.5  # cut at 1 s, not after 5 s, however loaded
    assert stubborn.OUTCOMES == ["caught"]  # caught once, then stopped by the next interruption
    [ended] = [line for line in testing.log_lines() if line.get("message") == "run cut at its time limit has ended"]
    assert ended["interruptions"] >= 2


def test_a_run_given_up_at_its_limit_stays_given_up_even_if_it_finishes(testing: Harness) -> None:
    # It caught its interruption and then returned: too late. The record was settled as cut at the limit (one
    # attempt, retried later); what the run returned afterwards is never taken, and its end is logged.
    testing.send(envelope("stubborn", "catch-then-finish"), queue="testing")
    invocation, _, elapsed_s = deliver_and_let_cut_runs_end(testing, "testing")
    assert len(invocation.failed_ids) == 1 and elapsed_s < 4.5  # cut at 1 s, not after 5 s, however loaded
    assert stubborn.OUTCOMES == ["caught", "finished"]
    [cut] = [line for line in testing.log_lines() if line.get("error_type") == "JobTimeLimitError"]
    assert cut["attempt"] == 1
    [ended] = [line for line in testing.log_lines() if line.get("message") == "run cut at its time limit has ended"]
    assert ended["outcome"] == "returned"
    assert testing.queue_counts("testing") == (0, 1)  # waiting out its backoff, not acknowledged


def test_a_run_that_returned_in_time_is_never_reported_as_timed_out(testing: Harness) -> None:
    # Finished within its limit, with the waiter about to give up: the result stands (lib/sqs_jobs/worker/
    # time_limit.py: finished and cut exclude each other).
    testing.send(envelope("sleepy", "quick"), queue="testing")
    invocation, worker, _ = deliver_and_let_cut_runs_end(testing, "testing")
    assert invocation.failed_ids == []
    assert not [line for line in testing.log_lines() if line.get("error_type") == "JobTimeLimitError"]
    assert worker._runner.cut_runs() == []


@pytest.mark.slow
def test_records_the_invocation_has_no_time_left_for_are_handed_back_at_once_and_not_counted(testing: Harness) -> None:
    # A nap uses up the invocation: the records after it can't fit their 3 s limit plus the settle margin.
    testing.send(envelope("nap", NAP_S), queue="tight")
    for entity_id in ("1", "2", "3"):
        testing.send(envelope("tight_flaky", entity_id), queue="tight")
    invocation = testing.deliver("tight")
    assert invocation is not None
    assert len(invocation.failed_ids) == 3  # the messages themselves go back...
    assert flaky.ATTEMPTS_SEEN == []  # ...unrun...
    assert testing.queue_counts("tight") == (3, 0)  # ...visible again at once
    deferred = [line for line in testing.log_lines() if line.get("reason") == "no_time" and "message" in line]
    assert len(deferred) == 3
    assert {line["message"] for line in deferred} == {"handed back unrun; visible again later"}
    # Delivered again with time to spare: they run, and the deferral didn't use up an attempt.
    again = testing.deliver("tight")
    assert again is not None and again.failed_ids == []
    assert sorted(flaky.SIDE_EFFECTS) == ["1", "2", "3"]
    assert flaky.ATTEMPTS_SEEN == [1, 1, 1]


@pytest.mark.slow
def test_records_run_side_by_side_do_not_wait_behind_a_long_one(testing: Harness) -> None:
    testing.send(envelope("p_nap", PARALLEL_NAP_S), queue="tight_parallel")
    for entity_id in ("1", "2", "3"):
        testing.send(envelope("p_tight_flaky", entity_id), queue="tight_parallel")
    invocation = testing.deliver("tight_parallel")
    assert invocation is not None and len(invocation.event["Records"]) == 4
    assert invocation.failed_ids == []
    assert sorted(flaky.SIDE_EFFECTS) == ["1", "2", "3"]  # ran beside the nap, none handed back
    assert not [line for line in testing.log_lines() if line.get("reason") == "no_time"]
    assert testing.queue_counts("tight_parallel") == (0, 0)


@pytest.mark.slow
def test_a_record_handed_back_for_lack_of_time_keeps_its_run_count(testing: Harness) -> None:
    nap.FAILURES[NAP_S] = 1
    flaky.FAILURES["1"] = 1
    testing.send(envelope("nap", NAP_S), queue="tight")
    testing.send(envelope("tight_flaky", "1"), queue="tight")
    first = testing.deliver("tight")  # attempt 1 of both fails
    assert first is not None and len(first.failed_ids) == 2
    testing.expire_visibility(first, "tight")
    testing.deliver("tight")  # the nap runs; "1" has no time left: handed back, its key's record says 1 run...
    # ...so it runs as attempt 2, not 1 (and its extra receive spent no run). On a loaded machine the hand-back's
    # own call may find no time left either, and the copy comes back only after its visibility timeout: whenever
    # it runs, it is attempt 2.
    deadline = time.monotonic() + 30
    while len(flaky.ATTEMPTS_SEEN) < 2 and time.monotonic() < deadline:
        if testing.deliver("tight") is None:
            time.sleep(0.5)
    assert flaky.ATTEMPTS_SEEN == [1, 2]
    assert flaky.SIDE_EFFECTS["1"] == 1


def test_a_producer_cannot_forge_the_attempt_count(testing: Harness) -> None:
    # A producer sets the runtime's own attribute on a valid job whose downstream fails transiently once.
    flaky.FAILURES["1"] = 1
    testing.send(
        envelope("flaky", "1"),
        queue="testing",
        MessageAttributes={PRIOR_ATTEMPTS: {"DataType": "Number", "StringValue": str(TESTING.max_attempts - 1)}},
    )
    first = testing.deliver("testing")
    # It is the job's first attempt, retried with backoff; not "retries exhausted" after a single run.
    assert first is not None and len(first.failed_ids) == 1
    assert testing.dead_letters("testing") == []
    testing.expire_visibility(first, "testing")
    testing.deliver("testing")
    assert flaky.ATTEMPTS_SEEN == [1, 2]
    assert flaky.SIDE_EFFECTS["1"] == 1


def test_a_copy_the_previous_runtime_handed_back_keeps_its_runs_because_its_role_sent_it(testing: Harness) -> None:
    # The same attribute on a copy the worker's role sent (what the previous runtime's hand-backs did) counts: the
    # key's record takes the 2 runs over, and this receive's count (the peek made it the second) doesn't matter.
    copy = MessageAttributes.split({}, sent_by_runtime=True)
    queue = testing.deployment.queues["testing"]
    deadletter.DeadLetterQueue(testing.worker_clients("testing")("sqs"), queue.dlq_url).requeue(
        queue.url, envelope("flaky", "1"), copy, prior=2
    )
    message = testing.peek("testing")
    assert message["Attributes"]["SenderId"].split(":")[0] == queue.worker_role_id
    testing.deliver("testing")
    assert flaky.ATTEMPTS_SEEN == [2 + 1]


def test_a_record_no_invocation_could_give_its_time_limit_is_dead_lettered_not_handed_back(testing: Harness) -> None:
    # The function's invocations last 2.5 s (its timeout was lowered outside the catalog): a 5 s limit plus the
    # settle margin can never fit, so handing the record back would go on for ever.
    testing.send(envelope("flaky", "1"), queue="testing")
    invocation = testing.deliver("testing", timeout_s=2.5)
    assert invocation is not None and invocation.failed_ids == []
    assert flaky.ATTEMPTS_SEEN == []
    assert testing.queue_counts("testing") == (0, 0)
    [dead] = testing.dead_letters("testing")
    evidence = attributes_of(dead)
    assert evidence[deadletter.ERROR_TYPE] == "TimeLimitUnservableError"
    assert evidence[deadletter.FAILURE] == DeadLetterFailure.PERMANENT
    assert "raise the function timeout" in evidence[deadletter.ERROR_MESSAGE]


@pytest.mark.parametrize(
    ("entity_id", "failed", "dead_error"),
    [
        ("x1", False, "ValueError"),  # the job's PERMANENT_ERRORS: dead-lettered after one attempt
        ("lookup-1", True, None),  # the job's TRANSIENT_ERRORS: retried
    ],
)
def test_a_job_can_override_the_classification(
    testing: Harness, entity_id: str, failed: bool, dead_error: str | None
) -> None:
    testing.send(envelope("strict", entity_id), queue="testing")
    invocation = testing.deliver("testing")
    assert invocation is not None
    assert bool(invocation.failed_ids) is failed
    dead = testing.dead_letters("testing")
    assert [attributes_of(m)[deadletter.ERROR_TYPE] for m in dead] == ([dead_error] if dead_error else [])


def test_failure_logs_say_job_id_attempt_classification_and_next_delay(testing: Harness) -> None:
    flaky.FAILURES["9"] = 1
    testing.send(envelope("flaky", "9"), queue="testing")
    testing.deliver("testing", worker=worker_with(testing, "testing", SEED))
    [line] = [line for line in testing.log_lines() if line.get("message") == "job failed; retrying after backoff"]
    assert (line["job"], line["id"], line["attempt"]) == ("flaky", "9", 1)
    assert line["classification"] == "transient"
    assert line["reason"] == "ConnectionRefusedError"
    assert 0 <= line["next_delay_s"] <= TESTING.backoff_base_s
    retried = [doc for doc in testing.metrics() if doc.get("job") == "flaky" and "reason" not in doc]
    assert retried[0]["JobRetried"] == [1.0]
    assert retried[0]["JobFailed"] == [1.0]
    # Which attempt of its key failed: the alarm on jobs failing again and again reads its Maximum.
    assert retried[0]["RetryAttempt"] == [1.0]
    [definition] = retried[0]["_aws"]["CloudWatchMetrics"]
    units = {metric["Name"]: metric.get("Unit") for metric in definition["Metrics"]}
    assert units["RetryAttempt"] == "Count"


def test_fifo_retries_keep_the_order_of_a_message_group(testing: Harness) -> None:
    # Given three jobs of one entity, in order, the first of which fails once
    url = testing.deployment.queues["ordered"].url
    sqs = testing.clients("sqs")
    for entity_id in ("first", "second", "third"):
        sqs.send_message(QueueUrl=url, MessageBody=envelope("ordered_flaky", entity_id), MessageGroupId="order-1")
    flaky.FAILURES["first"] = 1
    visibility = VisibilityLog(testing.worker_clients("ordered"))
    # When the batch runs, the group stops at the failure: the later two are not run
    invocation = testing.deliver("ordered", worker=worker_with(testing, "ordered", SEED))
    assert invocation is not None
    assert len(invocation.failed_ids) == 3
    assert list(flaky.SIDE_EFFECTS) == []
    # The failed one waits out its backoff; the two never run are released at once, so the group resumes
    # when the backoff ends rather than after the queue's visibility timeout.
    first_delay = backoff_delay_s(1, ORDERED.backoff_base_s, ORDERED.backoff_cap_s, random.Random(SEED))
    assert visibility.timeouts == [first_delay, 0, 0]
    testing.expire_visibility(invocation, "ordered")
    # Then the retry runs all three in their original order
    again = testing.deliver("ordered")
    assert again is not None and again.failed_ids == []
    assert list(flaky.SIDE_EFFECTS) == ["first", "second", "third"]


def test_fifo_dead_letters_go_to_the_fifo_dlq_with_evidence(testing: Harness) -> None:
    url = testing.deployment.queues["ordered"].url
    testing.clients("sqs").send_message(QueueUrl=url, MessageBody="not json", MessageGroupId="g")
    invocation = testing.deliver("ordered")
    assert invocation is not None and invocation.failed_ids == []
    [dead] = testing.dead_letters("ordered")
    assert attributes_of(dead)[deadletter.ERROR_TYPE] == "EnvelopeNotJSONError"
    assert dead["Attributes"]["MessageGroupId"] == "g"


def test_defaults_allow_a_long_outage_before_dead_lettering() -> None:
    # The catalog's defaults: the expected total backoff before the last attempt far outlasts a 2-minute outage,
    # and even the worst case stays under the oldest-message alarm's 15 minutes plus one cap.
    ceilings = [backoff_ceiling_s(n, BASE.backoff_base_s, BASE.backoff_cap_s) for n in range(1, BASE.max_attempts)]
    assert sum(ceilings) / 2 > 3 * 120
    assert sum(ceilings) <= BASE.alarms.oldest_message_age_s + BASE.backoff_cap_s
    assert replace(BASE, backoff_cap_s=BASE.backoff_base_s).problems() == []


@pytest.mark.slow
def test_a_producers_binary_attribute_survives_a_hand_back_a_dead_letter_and_a_redrive(testing: Harness) -> None:
    payload = bytes(range(256))
    testing.send(envelope("nap", NAP_S), queue="tight")
    testing.send(
        envelope("tight_flaky", "reject-1"),
        queue="tight",
        MessageAttributes={"blob": {"DataType": "Binary", "BinaryValue": payload}},
    )
    testing.deliver("tight")  # the nap uses up the invocation: "reject-1" is handed back as a copy
    testing.deliver("tight")  # the copy runs and is rejected: dead-lettered, its producer's attributes packed
    local = testing.deployment.queues["tight"]
    dead = DeadLetterQueue(
        testing.clients("sqs"), local.dlq_url, local.url, Provenance.of([local.worker_role_id]), receive_wait_s=0
    )
    [letter] = dead.peek()
    assert letter.error_type == "RejectedByDownstreamError"
    assert dead.move(Filter()).moved == 1
    message = testing.peek("tight")
    assert message["MessageAttributes"]["blob"]["BinaryValue"] == payload
