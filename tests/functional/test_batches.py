"""Batches on moto: members are ordinary jobs run by the real worker from real SQS deliveries; their ends are
counted in the batch's item, and each callback is published exactly once (docs/workflows.md)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sqs_jobs.batches import (
    COMPLETE,
    EXPIRATION,
    MAX_BATCH_MEMBERS,
    SUCCESS,
    BatchDefinitionError,
    BatchesNotConfiguredError,
    BatchMember,
    CallbackNotPublishableError,
    batch_item_id,
    callback_key,
)
from sqs_jobs.cli.dlq import DeadLetterQueue, Filter
from sqs_jobs.envelope import Envelope
from sqs_jobs.errors import EnvelopeFieldError, UnknownJobError
from sqs_jobs.publisher import BatchTable, JobPublisher
from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from sqs_jobs.worker.batch_members import BatchMembers
from sqs_jobs.worker.clients import ClientFactory
from sqs_jobs.worker.provenance import Provenance
from tests.functional.conftest import Harness, attributes_of
from tests.functional.sample_jobs import tallied

HANDLER = "tests.functional.sample_jobs.tallied"
CATALOG = Catalog(
    queues=(
        QueueSpec(
            name="members",
            max_attempts=3,
            jobs=(
                JobSpec(name="member", handler=HANDLER, publishes=("batch_done",)),
                JobSpec(name="loner", handler=HANDLER),
            ),
        ),
        QueueSpec(name="callbacks", jobs=(JobSpec(name="batch_done", handler=HANDLER),)),
    )
)
DONE = ("batch_done", "import-1")
CATALOG_REF = f"{__name__}:CATALOG"


@pytest.fixture
def harness(clients: ClientFactory) -> Iterator[Harness]:
    tallied.reset()
    yield Harness.provisioned(clients, CATALOG)


def drain(harness: Harness, queue: str) -> None:
    while harness.deliver(queue) is not None:
        pass


def batch_item(harness: Harness, batch_id: str) -> dict[str, Any]:
    return dict(
        harness.clients("dynamodb").get_item(
            TableName=harness.deployment.idempotency_table, Key={"id": {"S": batch_item_id(batch_id)}}
        )["Item"]
    )


def callback_runs() -> int:
    return tallied.RUNS[DONE]


def callback_keys() -> list[str]:
    return [key for key in tallied.KEYS if key.startswith("batch_done:")]


@pytest.mark.slow
def test_every_member_succeeding_publishes_both_callbacks_once(harness: Harness) -> None:
    # Given a batch of five members with both callbacks
    batch_id = harness.stack_publisher().batch(
        [("member", str(n)) for n in range(5)], on_success=DONE, on_complete=DONE, description="import 1"
    )
    # When every member runs
    drain(harness, "members")
    drain(harness, "callbacks")
    # Then each member ran once, and each callback once, with the key its batch names
    assert all(tallied.RUNS[("member", str(n))] == 1 for n in range(5))
    assert sorted(callback_keys()) == sorted(
        f"batch_done:{callback_key(batch_id, kind)}" for kind in (SUCCESS, COMPLETE)
    )
    item = batch_item(harness, batch_id)
    assert sorted(item["succeeded"]["NS"], key=int) == [str(n) for n in range(5)]
    assert "dead" not in item
    assert item["success_published_at"]["N"] != "0" and item["complete_published_at"]["N"] != "0"
    assert "life" not in item  # no longer listed as open


def test_a_dead_lettered_member_completes_the_batch_without_success_until_redriven(harness: Harness) -> None:
    # Given a batch whose member "bad-1" fails permanently
    batch_id = harness.stack_publisher().batch(
        [("member", "1"), ("member", "bad-1"), ("member", "2")], on_success=DONE, on_complete=DONE
    )
    drain(harness, "members")
    drain(harness, "callbacks")
    # Then the complete callback ran once, after the last member ended, and the success callback never
    assert callback_keys() == [f"batch_done:{callback_key(batch_id, COMPLETE)}"]
    item = batch_item(harness, batch_id)
    assert item["dead"]["NS"] == ["1"]
    assert item["success_published_at"]["N"] == "0"
    # When the entity is fixed and its dead letter redriven
    tallied.FIXED.add("bad-1")
    local = harness.deployment.queues["members"]
    dlq = DeadLetterQueue(
        harness.clients("sqs"), local.dlq_url, local.url, Provenance.of([local.worker_role_id]), receive_wait_s=0
    )
    assert dlq.move(Filter()).moved == 1
    drain(harness, "members")
    drain(harness, "callbacks")
    # Then it moved from dead to succeeded, the success callback ran once, the complete callback not again
    item = batch_item(harness, batch_id)
    assert "dead" not in item and len(item["succeeded"]["NS"]) == 3
    assert sorted(callback_keys()) == sorted(
        f"batch_done:{callback_key(batch_id, kind)}" for kind in (SUCCESS, COMPLETE)
    )


def test_a_recount_after_a_crash_publishes_nothing_again(harness: Harness) -> None:
    # Given a one-member batch that completed
    batch_id = harness.stack_publisher().batch([("member", "7")], on_complete=DONE)
    drain(harness, "members")
    # When the member's message comes again (a worker died after counting, before acknowledging)
    harness.send(json.dumps({"job": "member", "id": "7", "batch": f"{batch_id}.0"}), queue="members")
    drain(harness, "members")
    drain(harness, "callbacks")
    # Then it is answered as a duplicate, counted again harmlessly, and the callback ran once
    assert tallied.RUNS[("member", "7")] == 1
    assert callback_runs() == 1
    assert harness.queue_counts("callbacks") == (0, 0)


def test_two_workers_ending_the_last_two_members_at_once_publish_once(harness: Harness) -> None:
    # Given a batch with its first member counted, and two workers' counters of it
    batch_id = harness.stack_publisher().batch([("member", str(n)) for n in range(3)], on_complete=DONE)
    members = [Envelope("member", str(n), batch=BatchMember(batch_id, n)) for n in range(3)]
    sent = []

    def counter(queue: str) -> BatchMembers:
        worker_publisher = JobPublisher(
            harness.worker_clients(queue)("sqs"),
            {"callbacks": harness.deployment.queues["callbacks"].url},
            catalog=CATALOG,
        )
        original = worker_publisher.publish

        def publish(*args: Any, **kwargs: Any) -> str:
            sent.append(kwargs["key"])
            return original(*args, **kwargs)

        worker_publisher.publish = publish  # type: ignore[method-assign]
        return BatchMembers(
            harness.deployment.idempotency_table,
            lambda: harness.worker_clients(queue)("dynamodb"),
            lambda: worker_publisher,
            retention_s=3600,
        )

    first, second = counter("members"), counter("members")
    first.succeeded(members[0])
    # When the last two members end at the same moment in two workers
    start = threading.Barrier(2)
    published: list[list[str]] = []

    def end(counting: BatchMembers, member: Envelope) -> None:
        start.wait()
        published.append(counting.succeeded(member))

    threads = [threading.Thread(target=end, args=pair) for pair in ((first, members[1]), (second, members[2]))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then exactly one of them completed the batch and published its callback
    assert sorted(published, key=len) == [[], [COMPLETE]]
    assert sent == [callback_key(batch_id, COMPLETE)]
    assert harness.queue_counts("callbacks") == (1, 0)


def test_a_forged_batch_field_is_a_permanent_failure_and_counts_nothing(harness: Harness) -> None:
    # Given a real batch, and a message claiming a member index it does not have, and one of a batch never made
    batch_id = harness.stack_publisher().batch([("member", "1")], on_complete=DONE)
    before = batch_item(harness, batch_id)
    harness.send(json.dumps({"job": "member", "id": "9", "batch": f"{batch_id}.5"}), queue="members")
    harness.send(json.dumps({"job": "member", "id": "8", "batch": f"{'f' * 32}.0"}), queue="members")
    harness.send(json.dumps({"job": "member", "id": "6", "batch": "not-a-batch"}), queue="members")
    # When they are delivered (the real member stays on the queue, delivered after them or with them)
    drain(harness, "members")
    # Then each forged one is dead-lettered with evidence naming what was wrong, and the batch counts its member only
    letters = {json.loads(m["Body"])["id"]: attributes_of(m) for m in harness.dead_letters("members")}
    assert sorted(letters) == ["6", "8", "9"]
    assert letters["9"]["jobs.error_type"] == "BatchMemberError"
    assert letters["8"]["jobs.error_type"] == "BatchMemberError"
    assert letters["6"]["jobs.error_type"] == "EnvelopeFieldError"
    assert all(letter["jobs.failure"] == "permanent" for letter in letters.values())
    after = batch_item(harness, batch_id)
    assert after["succeeded"]["NS"] == ["0"] and "dead" not in after
    assert before["size"] == after["size"]


def test_a_batch_field_copied_onto_another_message_counts_nothing_for_the_member_it_names(harness: Harness) -> None:
    # Given a batch whose member 0 fails for good (dead), and a message of another ID carrying member 0's field
    batch_id = harness.stack_publisher().batch([("member", "bad-1"), ("member", "2")], on_success=DONE)
    drain(harness, "members")
    assert batch_item(harness, batch_id)["dead"]["NS"] == ["0"]
    harness.send(json.dumps({"job": "member", "id": "forged-ok", "batch": f"{batch_id}.0"}), queue="members")

    drain(harness, "members")

    # Then the copy is dead-lettered naming whom the batch lists there, member 0 stays dead, and no success callback
    letters = {json.loads(m["Body"])["id"]: attributes_of(m) for m in harness.dead_letters("members")}
    assert letters["forged-ok"]["jobs.error_type"] == "BatchMemberError"
    assert "is 'member:bad-1', not this message's 'member:forged-ok'" in letters["forged-ok"]["jobs.error_message"]
    item = batch_item(harness, batch_id)
    assert (item["dead"]["NS"], item["succeeded"]["NS"]) == (["0"], ["1"])
    assert harness.queue_counts("callbacks") == (0, 0)


def test_each_member_end_keeps_the_batch_past_its_dlqs_retention(harness: Harness) -> None:
    batch_id = harness.stack_publisher().batch([("member", "1"), ("member", "2")])
    created = int(batch_item(harness, batch_id)[EXPIRATION]["N"])
    drain(harness, "members")
    item = batch_item(harness, batch_id)
    retention = CATALOG.queue("members").dlq_retention_s
    assert int(item["last_ended_at"]["N"]) + retention == int(item[EXPIRATION]["N"])
    assert created > int(item["created_at"]["N"]) + 2 * retention - 1


@pytest.mark.parametrize(
    ("jobs", "options", "error"),
    [
        ([], {}, BatchDefinitionError),
        ([("member", str(n)) for n in range(MAX_BATCH_MEMBERS + 1)], {}, BatchDefinitionError),
        ([("member", "1")], {"on_success": ("batch_done",)}, BatchDefinitionError),
        ([("member", "1")], {"on_complete": ("no_such_job", "1")}, UnknownJobError),
        ([("loner", "1")], {"on_complete": DONE}, CallbackNotPublishableError),
        ([("member", "1")], {"description": "x" * 300}, BatchDefinitionError),
        ([("member", "1"), ("member", "a\u202eb")], {}, EnvelopeFieldError),
        ([("member", "1"), ("no_such_job", "1")], {}, UnknownJobError),
        # A member of another batch: a message counts toward one batch.
        ([Envelope("member", "1", batch=BatchMember("e" * 32, 0))], {}, BatchDefinitionError),
    ],
)
def test_a_batch_that_cant_be_kept_is_refused_before_anything_is_written(
    harness: Harness, jobs: list[Any], options: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        harness.stack_publisher().batch(jobs, **options)
    scanned = harness.clients("dynamodb").scan(TableName=harness.deployment.idempotency_table)
    assert scanned["Count"] == 0
    assert harness.queue_counts("members") == (0, 0)


def test_a_publisher_without_the_batch_table_says_how_to_get_one(harness: Harness) -> None:
    plain = JobPublisher(harness.clients("sqs"), {"members": harness.deployment.queues["members"].url}, CATALOG)
    with pytest.raises(BatchesNotConfiguredError):
        plain.batch([("member", "1")])
    tabled = JobPublisher(
        harness.clients("sqs"),
        {"members": harness.deployment.queues["members"].url},
        CATALOG,
        batches=BatchTable(harness.clients("dynamodb"), harness.deployment.idempotency_table),
    )
    assert len(tabled.batch([("member", "1")])) == 32


def test_jobctl_batch_show_lists_members_by_state_and_the_callbacks(harness: Harness) -> None:
    from click.testing import CliRunner

    from sqs_jobs.cli.cli import main as jobctl

    # Given a batch with a hostile description, one member dead-lettered, one succeeded and one not yet run
    hostile = "import \u202e[bold]gnp.exe[/bold]\x1b[2J"
    batch_id = harness.stack_publisher().batch(
        [("member", "1"), ("member", "bad-1")], on_success=DONE, on_complete=DONE, description=hostile
    )
    drain(harness, "members")
    harness.send(json.dumps({"job": "member", "id": "x"}), queue="members")  # not a member: no effect on it
    # When the operator looks it up, as JSON and as text
    as_json = CliRunner().invoke(jobctl, ["--output", "json", "batch", "show", batch_id])
    as_text = CliRunner().invoke(jobctl, ["batch", "show", batch_id])
    # Then JSON is exact and complete, and the text shows every hostile character escaped
    assert as_json.exit_code == 0, as_json.output
    shown = json.loads(as_json.output)
    assert shown["description"] == hostile
    assert shown["counts"] == {"succeeded": 1, "dead": 1, "open": 0}
    assert shown["members"]["dead"] == [{"index": 1, "member": "member:bad-1"}]
    callbacks = {callback["kind"]: callback for callback in shown["callbacks"]}
    assert callbacks["on_complete"]["published"] and not callbacks["on_success"]["published"]
    assert shown["time_to_complete_s"] is not None and shown["time_to_complete_s"] >= 0
    assert as_text.exit_code == 0, as_text.output
    assert "\u202e" not in as_text.output and "\x1b" not in as_text.output
    assert "1: member:bad-1" in as_text.output and "complete, not succeeded" in as_text.output


def test_job_show_finds_a_callback_by_the_job_and_id_it_was_published_as(harness: Harness, tmp_path: Any) -> None:
    from click.testing import CliRunner

    from sqs_jobs.cli.cli import main as jobctl

    # Given a batch that names one callback for both ends, and a member that fails
    not_yet = look_up(harness, *DONE)
    batch_id = harness.stack_publisher().batch([("member", "bad-4")], on_success=DONE, on_complete=DONE)
    before = look_up(harness, *DONE)
    drain(harness, "members")
    drain(harness, "callbacks")
    # When the operator looks the callback up by its job and ID, as JSON and as text
    as_json = CliRunner().invoke(jobctl, ["--catalog", CATALOG_REF, "--output", "json", "job", "show", *DONE])
    as_text = CliRunner().invoke(jobctl, ["--catalog", CATALOG_REF, "job", "show", *DONE])
    # Then it is the batch's complete callback, completed under the key the batch named, and the success one is named
    assert as_json.exit_code == 0, as_json.output
    shown = json.loads(as_json.output)
    callback = f"batch_done:{callback_key(batch_id, COMPLETE)}"
    assert (shown["verdict"], shown["idempotency_key"]) == ("completed", callback)
    assert shown["callback_of"] == {
        "batch": batch_id,
        "kind": COMPLETE,
        "published": True,
        "others": [{"kind": SUCCESS, "key": callback_key(batch_id, SUCCESS)}],
    }
    assert f"the complete callback of batch {batch_id}" in as_text.output, as_text.output
    page = console_job_page(harness, tmp_path, *DONE)
    assert f'<a href="/batches?id={batch_id}">batch {batch_id}</a> (complete' in page
    # And before it ran, it was found as not run yet; before any batch named it, as nothing at all
    assert before.callback_of is not None and before.callback_of.batch_id == batch_id
    assert before.verdict == "not found" and not_yet.callback_of is None
    assert before.explanation() == (
        f"not published yet: the complete callback of batch {batch_id}, published once every member has ended "
        f"(jobctl batch show {batch_id})"
    )
    # And a job of the same job and ID published under its own key is found as itself
    harness.send(json.dumps({"job": DONE[0], "id": DONE[1], "key": "own"}), queue="callbacks")
    drain(harness, "callbacks")
    own = look_up(harness, *DONE, key="own")
    assert (own.idempotency_key, own.verdict, own.callback_of) == ("batch_done:own", "completed", None)


def console_job_page(harness: Harness, archive_dir: Any, job: str, entity_id: str) -> str:
    from sqs_jobs.cli.console.app import create_app
    from sqs_jobs.cli.console.security import Guard
    from tests.functional.console_support import JobPageBackend

    guard = Guard(host="127.0.0.1", port=8000)
    backend = JobPageBackend(CATALOG, lambda job, entity_id, key: look_up(harness, job, entity_id, key))
    browser = create_app(backend, guard, archive_dir).test_client()  # type: ignore[arg-type]
    page = browser.get(
        f"/jobs?job={job}&id={entity_id}&token={guard.access_token}",
        base_url="http://127.0.0.1:8000",
        follow_redirects=True,
    )
    assert page.status_code == 200, page.text
    return page.text


def look_up(harness: Harness, job: str, entity_id: str, key: str | None = None) -> Any:
    from sqs_jobs.cli.job_lookup import find_job

    local = harness.deployment.queues["callbacks"]
    return find_job(
        spec=CATALOG.queue("callbacks"),
        job=job,
        entity_id=entity_id,
        key=key,
        dynamodb=harness.clients("dynamodb"),
        table=harness.deployment.idempotency_table,
        dead_letter_queue=DeadLetterQueue(
            harness.clients("sqs"), local.dlq_url, local.url, Provenance.of([local.worker_role_id]), receive_wait_s=0
        ),
    )


def test_jobctl_batch_show_refuses_what_is_not_a_batch_id_and_says_when_there_is_none(harness: Harness) -> None:
    from click.testing import CliRunner

    from sqs_jobs.cli.cli import main as jobctl
    from sqs_jobs.cli.errors import EXIT_FAILED, EXIT_USAGE

    assert CliRunner().invoke(jobctl, ["batch", "show", "nope"]).exit_code == EXIT_USAGE
    missing = CliRunner().invoke(jobctl, ["batch", "show", "f" * 32])
    assert missing.exit_code == EXIT_FAILED and "never published, or expired" in missing.output


def test_each_heartbeat_counts_the_batches_no_member_has_ended_in_for_an_hour(harness: Harness) -> None:
    from sqs_jobs.batches import STALLED_AFTER_S
    from sqs_jobs.specs import HEARTBEAT_JOB
    from sqs_jobs.worker.names import STALLED_BATCHES
    from tests.functional.conftest import metric_values

    # Given three batches: one whose members all ended, one open and quiet for over an hour, one open and recent
    done = harness.stack_publisher().batch([("member", "1")])
    drain(harness, "members")
    quiet = harness.stack_publisher().batch([("member", "2"), ("member", "3")])
    harness.stack_publisher().batch([("member", "4")])
    for batch_id in (done, quiet):
        harness.clients("dynamodb").update_item(
            TableName=harness.deployment.idempotency_table,
            Key={"id": {"S": batch_item_id(batch_id)}},
            UpdateExpression="SET life_at = :long_ago",
            ExpressionAttributeValues={":long_ago": {"N": str(int(time.time()) - STALLED_AFTER_S - 60)}},
        )
    # When a heartbeat goes through a worker
    harness.send(json.dumps({"job": HEARTBEAT_JOB, "id": "beat-1"}), queue="callbacks")
    drain(harness, "callbacks")
    # Then it reports one stalled batch: the quiet open one (the ended one has left the index)
    [document] = [line for line in harness.metrics() if STALLED_BATCHES in line]
    assert metric_values(document, STALLED_BATCHES) == [1.0]
    [definition] = document["_aws"]["CloudWatchMetrics"][0]["Metrics"]
    assert definition == {"Name": STALLED_BATCHES, "Unit": "Count"}  # a number of batches, not a duration


def test_a_callback_its_last_count_could_not_publish_is_published_by_a_later_heartbeat(harness: Harness) -> None:
    from sqs_jobs.specs import HEARTBEAT_JOB
    from sqs_jobs.worker.batch_members import OWED_AFTER_S

    # Given a one-member batch whose member fails permanently; once it is dead-lettered and counted, the publish of
    # the callback fails, and so do both tries of the write that would bring the member back to count it again
    batch_id = harness.stack_publisher().batch([("member", "bad-9")], on_complete=DONE)
    callbacks_url = harness.deployment.queues["callbacks"].url
    refused: list[str] = []

    def refuse_callback(params: dict[str, Any], **_: Any) -> None:
        if params["QueueUrl"] == callbacks_url and not refused.count("send"):
            refused.append("send")
            raise ConnectionResetError("the connection to SQS was reset")

    def refuse_ending(params: dict[str, Any], **_: Any) -> None:
        if "#ending_message" in params.get("UpdateExpression", "") and refused.count("ending") < 2:
            refused.append("ending")
            raise ConnectionResetError("the connection to DynamoDB was reset")

    clients = harness.worker_clients("members")
    clients.register("provide-client-params.sqs.SendMessage", refuse_callback)
    clients.register("provide-client-params.dynamodb.UpdateItem", refuse_ending)
    drain(harness, "members")
    assert refused == ["send", "ending", "ending"]
    item = batch_item(harness, batch_id)
    assert item["dead"]["NS"] == ["0"] and item["complete_published_at"]["N"] == "0"
    assert harness.queue_counts("members") == (0, 0) and harness.queue_counts("callbacks") == (0, 0)

    def beat(ahead_s: float, queue: str = "members") -> None:
        worker = harness.worker(queue, clock=lambda: time.time() + ahead_s)
        harness.send(json.dumps({"job": HEARTBEAT_JOB, "id": f"beat-{ahead_s}"}), queue=queue)
        drain_with(harness, queue, worker)

    # When a heartbeat goes through the members' worker before the count's invocation could have ended, and one
    # after it through the callbacks' worker, which may not publish the callback (its jobs publish nothing)
    beat(0)
    beat(OWED_AFTER_S + 60, queue="callbacks")
    # Then both leave the batch alone
    assert callback_keys() == [] and batch_item(harness, batch_id)["complete_published_at"]["N"] == "0"
    # When one goes through after it
    beat(OWED_AFTER_S + 60)
    drain(harness, "callbacks")
    # Then the callback is published, by the key its batch names, and the batch is no longer open
    assert callback_keys() == [f"batch_done:{callback_key(batch_id, COMPLETE)}"]
    item = batch_item(harness, batch_id)
    assert item["complete_published_at"]["N"] != "0" and "life" not in item
    # And a later heartbeat publishes nothing again
    beat(2 * OWED_AFTER_S)
    drain(harness, "callbacks")
    assert callback_runs() == 1


def test_a_callback_that_ran_but_was_never_marked_is_marked_by_a_later_heartbeat_not_published_again(
    harness: Harness,
) -> None:
    from sqs_jobs.batches import open_life
    from sqs_jobs.specs import HEARTBEAT_JOB
    from sqs_jobs.worker.batch_members import OWED_AFTER_S

    # Given a one-member batch whose callback was published and ran, but whose mark was lost (the batch open)
    batch_id = harness.stack_publisher().batch([("member", "8")], on_complete=DONE)
    drain(harness, "members")
    drain(harness, "callbacks")
    harness.clients("dynamodb").update_item(
        TableName=harness.deployment.idempotency_table,
        Key={"id": {"S": batch_item_id(batch_id)}},
        UpdateExpression="SET complete_published_at = :zero, life = :open",
        ExpressionAttributeValues={":zero": {"N": "0"}, ":open": {"S": open_life(batch_id)}},
    )
    # When a heartbeat goes through the members' worker long after
    worker = harness.worker("members", clock=lambda: time.time() + OWED_AFTER_S + 60)
    harness.send(json.dumps({"job": HEARTBEAT_JOB, "id": "beat-marks"}), queue="members")
    drain_with(harness, "members", worker)
    # Then it marks the callback without publishing it again: a copy could run a dead-lettered callback again
    assert harness.queue_counts("callbacks") == (0, 0) and callback_runs() == 1
    item = batch_item(harness, batch_id)
    assert item["complete_published_at"]["N"] != "0" and "life" not in item


def test_an_open_batch_that_cant_be_read_stops_neither_the_count_nor_the_others(harness: Harness) -> None:
    from sqs_jobs.batches import STALLED_AFTER_S, open_life
    from sqs_jobs.specs import HEARTBEAT_JOB
    from sqs_jobs.worker.names import RUNTIME_FAULT, STALLED_BATCHES
    from tests.functional.conftest import metric_values

    # Given an open batch quiet for over an hour, and beside it an item in the open batches' index without a size
    quiet = harness.stack_publisher().batch([("member", "2"), ("member", "3")])
    long_ago = str(int(time.time()) - STALLED_AFTER_S - 60)
    table, dynamodb = harness.deployment.idempotency_table, harness.clients("dynamodb")
    dynamodb.update_item(
        TableName=table,
        Key={"id": {"S": batch_item_id(quiet)}},
        UpdateExpression="SET life_at = :long_ago",
        ExpressionAttributeValues={":long_ago": {"N": long_ago}},
    )
    broken = "f" * 32
    dynamodb.put_item(
        TableName=table,
        Item={"id": {"S": batch_item_id(broken)}, "life": {"S": open_life(broken)}, "life_at": {"N": long_ago}},
    )
    # When a heartbeat goes through a worker
    harness.send(json.dumps({"job": HEARTBEAT_JOB, "id": "beat-broken"}), queue="callbacks")
    drain(harness, "callbacks")
    # Then both are counted as stalled, and the one it could not read is the runtime's fault
    [document] = [line for line in harness.metrics() if STALLED_BATCHES in line]
    assert metric_values(document, STALLED_BATCHES) == [2.0]
    assert [line for line in harness.log_lines() if line.get("message", "").startswith("could not publish a batch")]
    assert any(RUNTIME_FAULT in line for line in harness.metrics())


def drain_with(harness: Harness, queue: str, worker: Any) -> None:
    while harness.deliver(queue, worker=worker) is not None:
        pass


def test_the_console_batch_page_shows_every_value_as_text(harness: Harness, tmp_path: Any) -> None:
    from sqs_jobs.cli.console.app import create_app
    from sqs_jobs.cli.console.backend import ConsoleBackend
    from sqs_jobs.cli.console.security import ACCESS_COOKIE, Guard

    # Given a batch whose description and member IDs carry markup and hidden characters
    hostile = "<script>alert(1)</script>\u202egnp.exe"
    batch_id = harness.stack_publisher().batch(
        [("member", "bad-<b>x</b>"), ("member", "ok-1")], on_complete=DONE, description=hostile
    )
    drain(harness, "members")
    guard = Guard(host="127.0.0.1", port=8080)
    browser = create_app(ConsoleBackend(harness.clients, "SqsJobs", catalog=CATALOG), guard, tmp_path).test_client()
    browser.set_cookie(ACCESS_COOKIE, guard.access_token, domain="127.0.0.1")
    # When the operator opens its page
    page = browser.get(f"/batches?id={batch_id}", base_url="http://127.0.0.1:8080")
    # Then it shows the members by state and the callback, every value escaped, no character hidden
    assert page.status_code == 200, page.text
    assert "<script>" not in page.text and "&lt;script&gt;" in page.text
    assert "\u202e" not in page.text and "\\u202e" in page.text
    assert "member:bad-&lt;b&gt;x&lt;/b&gt;" in page.text
    assert "complete, not succeeded" in page.text and "published" in page.text
    missing = browser.get(f"/batches?id={'a' * 32}", base_url="http://127.0.0.1:8080")
    bad = browser.get("/batches?id=nope", base_url="http://127.0.0.1:8080")
    assert (missing.status_code, bad.status_code) == (404, 400)


def test_a_member_whose_completion_could_not_be_written_is_counted_all_the_same(harness: Harness) -> None:
    from tests.functional.test_job_results import fail_completion_writes

    # Given a one-member batch whose run succeeds and whose completion writes both fail (acknowledged anyway)
    batch_id = harness.stack_publisher().batch([("member", "5")], on_complete=DONE)
    fail_completion_writes(harness, times=2, queue="members")
    drain(harness, "members")
    drain(harness, "callbacks")
    # Then the member is counted (it was acknowledged), and the batch calls back
    assert batch_item(harness, batch_id)["succeeded"]["NS"] == ["0"]
    assert callback_runs() == 1


def test_a_member_an_operator_cancelled_before_it_ran_counts_as_dead_and_the_batch_completes(harness: Harness) -> None:
    from sqs_jobs.cli.job_cancel import CancelOutcome, cancel_job, target_for

    # Given a batch of two, and an operator who cancels one member's job before it runs
    batch_id = harness.stack_publisher().batch([("member", "1"), ("member", "2")], on_success=DONE, on_complete=DONE)
    target = target_for(CATALOG.queue("members"), "member", "2", None)
    table = harness.deployment.idempotency_table
    assert cancel_job(harness.clients("dynamodb"), table, target, "operator").outcome is CancelOutcome.CANCELLED
    # When the members' messages come
    drain(harness, "members")
    drain(harness, "callbacks")
    # Then the cancelled one never ran, ended unsucceeded, and the batch completed without success
    assert ("member", "2") not in tallied.RUNS
    item = batch_item(harness, batch_id)
    assert (item["succeeded"]["NS"], item["dead"]["NS"]) == (["0"], ["1"])
    assert callback_keys() == [f"batch_done:{callback_key(batch_id, COMPLETE)}"]
    # And batch show says how to run it after all: it has no dead letter to redrive
    from sqs_jobs.cli.batch_lookup import look_up_batch

    verdict = look_up_batch(harness.clients("dynamodb"), table, batch_id).verdict
    assert (
        verdict.startswith("complete, not succeeded: 1 of 2 members dead") and "publish a member cancelled" in verdict
    )
    # Published again as the runbook says, once its cancel is undone: a member named by a string is refused clearly
    with pytest.raises(EnvelopeFieldError, match="batch is a str; accepted: a BatchMember"):
        harness.stack_publisher().publish_many([Envelope(job="member", id="2", batch=f"{batch_id}.1")])  # type: ignore[arg-type]


def test_a_run_of_the_members_job_and_id_under_another_key_counts_nothing_for_the_member(harness: Harness) -> None:
    # Given a batch whose member 0 (member:bad-1, the job's default key) was dead-lettered
    batch_id = harness.stack_publisher().batch(
        [("member", "bad-1"), ("member", "2")], on_success=DONE, on_complete=DONE
    )
    drain(harness, "members")
    drain(harness, "callbacks")
    assert batch_item(harness, batch_id)["dead"]["NS"] == ["0"]
    # When another run of that job and ID, under another key and with the member's `batch` field, succeeds
    tallied.FIXED.add("bad-1")
    harness.send(
        json.dumps({"job": "member", "id": "bad-1", "key": "rerun-1", "batch": f"{batch_id}.0"}), queue="members"
    )
    drain(harness, "members")
    drain(harness, "callbacks")
    # Then it ran under its own key and is dead-lettered as not the batch's member: member 0 stays dead, no success
    assert "member:rerun-1" in tallied.KEYS
    letters = {json.loads(m["Body"]).get("key"): attributes_of(m) for m in harness.dead_letters("members")}
    assert letters["rerun-1"]["jobs.error_type"] == "BatchMemberError"
    assert "another key, tenant or fields" in letters["rerun-1"]["jobs.error_message"]
    item = batch_item(harness, batch_id)
    assert (item["dead"]["NS"], item["succeeded"]["NS"]) == (["0"], ["1"])
    assert callback_keys() == [f"batch_done:{callback_key(batch_id, COMPLETE)}"]


def test_a_member_with_a_key_a_tenant_and_fields_is_counted_from_its_own_message(harness: Harness) -> None:
    # Given a batch whose member has its own key, tenant and fields (and one whose copy differs only in a field)
    member = Envelope("member", "7", key="7-v2", tenant="acme", extra={"locale": "de", "version": 2})
    batch_id = harness.stack_publisher().batch([member], on_complete=DONE)
    copy = {"job": "member", "id": "7", "key": "7-v2", "tenant": "acme", "locale": "fr", "version": 2}
    harness.send(json.dumps({**copy, "batch": f"{batch_id}.0"}), queue="members")
    # When both are delivered
    drain(harness, "members")
    drain(harness, "callbacks")
    # Then the member is counted once, by its own message, and the copy that differs in a field counts nothing
    assert batch_item(harness, batch_id)["succeeded"]["NS"] == ["0"]
    assert callback_runs() == 1
    [letter] = harness.dead_letters("members")
    assert json.loads(letter["Body"])["locale"] == "fr"
    assert attributes_of(letter)["jobs.error_type"] == "BatchMemberError"


def test_a_batch_written_before_members_were_digested_counts_as_it_did(harness: Harness) -> None:
    from sqs_jobs.batches import members_item_id

    # Given a batch whose members' item lists `<job>:<id>` only, as publishers before the digests wrote it
    batch_id = harness.stack_publisher().batch([("member", "1"), ("member", "2")], on_success=DONE, on_complete=DONE)
    harness.clients("dynamodb").update_item(
        TableName=harness.deployment.idempotency_table,
        Key={"id": {"S": members_item_id(batch_id)}},
        UpdateExpression="REMOVE member_digests",
    )
    # When its members run
    drain(harness, "members")
    drain(harness, "callbacks")
    # Then each is counted by its job and ID, and both callbacks follow once
    assert sorted(batch_item(harness, batch_id)["succeeded"]["NS"]) == ["0", "1"]
    assert sorted(callback_keys()) == sorted(
        f"batch_done:{callback_key(batch_id, kind)}" for kind in (SUCCESS, COMPLETE)
    )
