"""bench.cost's arithmetic on hand-checked inputs, and bench.writes' DynamoDB call counter on a tiny run."""

from __future__ import annotations

import json

import pytest

from bench import cost, writes
from functions.catalog import CATALOG
from sqs_jobs.local.resource_providers import local_resource_name
from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from sqs_jobs.stack_names import DEFAULT_STACK_NAME

# Round prices so every figure below can be checked by hand.
PRICES = cost.Prices(
    sqs_standard_per_million_requests=1.0,
    sqs_fifo_per_million_requests=2.0,
    lambda_per_million_requests=1.0,
    lambda_per_gb_second=0.001,
    dynamodb_per_million_wru=1.0,
    dynamodb_per_million_rru=1.0,
    cloudwatch_per_alarm_month=1.0,
    cloudwatch_per_metric_month=1.0,
    cloudwatch_logs_per_gb_ingested=1.0,
    scheduler_per_million_invocations=0.0,
)
ASSUME = cost.Assumptions(
    duration_ms_per_job=1000.0,
    io_wait_share=0.0,  # CPU-bound: records side by side don't shorten the invocation
    overhead_ms_per_invocation=0.0,
    batch_fill=1.0,
    retries_per_job=0.0,
    duplicates_per_job=0.0,
    message_bytes=1024,
    log_bytes_per_job=2**30 / cost.MILLION,  # 1 GiB per million jobs
    platform_log_bytes_per_invocation=0.0,
    idempotency_writes_per_job=2.0,
    reads_per_job=1.0,
    jobs_per_month=1_000_000.0,
)
SPEC = QueueSpec(name="q", jobs=(JobSpec(name="j", handler="a.b"),), batch_size=10, memory_mb=1024)


def test_each_component_matches_the_hand_computed_figure() -> None:
    result = cost.queue_cost(SPEC, PRICES, ASSUME)
    # SQS: 1 send + (1 receive + 1 delete) / 10 = 1.2 requests per job -> 1.2 USD per million at 1 USD/M.
    assert result.sqs == pytest.approx(1.2)
    # Lambda: 0.1 invocation per job.
    assert result.lambda_requests == pytest.approx(0.1)
    # 1 GB x 1 s per job = 1 GB-s; 1e6 GB-s x 0.001 = 1,000 USD.
    assert result.lambda_duration == pytest.approx(1000.0)
    # 2 WRU to the table, none to the index of keys in flight (a 1 s run ends before the queue's
    # list_running_after_s, 5 s), + 1 RRU per job.
    assert result.dynamodb == pytest.approx(3.0)
    assert result.cloudwatch_logs == pytest.approx(1.0)
    # 13 + 1 alarms (one per queue signal, one per job), 3 + 10 metrics, one month per million jobs.
    assert cost.ALARMS_PER_QUEUE == 13
    assert result.cloudwatch_alarms == pytest.approx(14.0)
    assert result.cloudwatch_metrics == pytest.approx(13.0)
    # 43,800 min / 5 min = 8,760 heartbeats, each 3 SQS requests (1 USD/M) and 1 invocation (1 USD/M).
    assert result.heartbeats == pytest.approx(8760 * 4 / cost.MILLION)
    assert result.total == pytest.approx(1.2 + 0.1 + 1000 + 3 + 1 + 14 + 13 + 8760 * 4 / cost.MILLION)


def test_runs_that_outlast_the_queues_listing_delay_pay_three_writes() -> None:
    watched = QueueSpec(name="q", jobs=SPEC.jobs, batch_size=10, memory_mb=1024, list_running_after_s=1)
    # The 1 s run is listed (its listing write and the index's entry at 1 s, the entry out at its completion): 3 WRU
    # more than the table's 2, + 1 RRU.
    assert cost.queue_cost(watched, PRICES, ASSUME).dynamodb == pytest.approx(6.0)
    # Or a share of the runs, as the flag says.
    tenth = cost.Assumptions(**{**ASSUME.__dict__, "listed_share": 0.1})
    assert cost.queue_cost(SPEC, PRICES, tenth).dynamodb == pytest.approx(3.3)


def test_a_queue_that_never_retries_has_no_retrying_alarm_to_pay_for() -> None:
    once = QueueSpec(name="q", jobs=(JobSpec(name="j", handler="a.b"),), max_attempts=1)
    assert cost.queue_cost(once, PRICES, ASSUME).cloudwatch_alarms == pytest.approx(13.0)


def test_waits_of_records_side_by_side_overlap_in_the_billed_duration() -> None:
    waiting = cost.Assumptions(**{**ASSUME.__dict__, "io_wait_share": 0.9})
    # 10 records at once: per job 1 s x (0.1 + 0.9 / 10) = 0.19 s billed; 1 GB x 0.19 s x 1e6 x 0.001 = 190 USD.
    assert cost.queue_cost(SPEC, PRICES, waiting).lambda_duration == pytest.approx(190.0)
    # One at a time, nothing overlaps: the whole second.
    serial = QueueSpec(name="q", jobs=SPEC.jobs, batch_size=10, memory_mb=1024, parallel_records=1)
    assert cost.queue_cost(serial, PRICES, waiting).lambda_duration == pytest.approx(1000.0)
    # Half-full batches have 5 records to overlap, whatever parallel_records allows.
    half = cost.Assumptions(**{**waiting.__dict__, "batch_fill": 0.5})
    assert cost.queue_cost(SPEC, PRICES, half).lambda_duration == pytest.approx(1000 * (0.1 + 0.9 / 5))


def test_retries_duplicates_fifo_and_volume_change_the_right_components() -> None:
    spec = QueueSpec(name="q", jobs=SPEC.jobs, batch_size=10, memory_mb=1024, fifo=True)
    assume = cost.Assumptions(**{**ASSUME.__dict__, "retries_per_job": 1.0, "duplicates_per_job": 0.5})
    result = cost.queue_cost(spec, PRICES, assume)
    # 2 attempts: 1 send + 2 x 2 / 10 + 1 ChangeMessageVisibility = 2.4 requests, at the FIFO price of 2.
    assert result.sqs == pytest.approx(4.8)
    # 2 attempts x 2 table writes + 3 index writes for the retry (listed as it fails, as it starts again, out at
    # its completion) + 0.5 conditional checks, 2 reads.
    assert result.dynamodb == pytest.approx(4 + 3 + 0.5 + 2.0)
    busier = cost.queue_cost(SPEC, PRICES, cost.Assumptions(**{**ASSUME.__dict__, "jobs_per_month": 10_000_000.0}))
    assert busier.cloudwatch_alarms == pytest.approx(1.4)  # fixed costs spread over 10 million jobs


def test_a_large_message_is_billed_per_64_kib_chunk() -> None:
    assume = cost.Assumptions(**{**ASSUME.__dict__, "message_bytes": 64 * 1024 + 1})
    assert cost.queue_cost(SPEC, PRICES, assume).sqs == pytest.approx(2.2)


def test_the_command_prints_every_catalog_queue_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert cost.main(["--json", "--lambda-per-gb-second", "0"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [q["queue"] for q in report["queues"]] == list(CATALOG.queue_names)
    assert all(q["lambda_duration"] == 0 for q in report["queues"])
    assert cost.estimate(Catalog(queues=(SPEC,)), PRICES, ASSUME)[0].queue == "q"


class _Model:
    def __init__(self, name: str) -> None:
        self.name = name


def test_the_counter_counts_calls_by_table_and_operation_and_refused_conditions() -> None:
    counter = writes.CallCounter()
    for operation, table, error in (
        ("PutItem", "idem", None),
        ("UpdateItem", "idem", None),
        ("PutItem", "idem", writes.CONDITIONAL_FAILED),
        ("GetItem", "orders", None),
    ):
        context: dict[str, object] = {}
        counter._before(params={"TableName": table}, model=_Model(operation), context=context)
        counter._after(parsed={"Error": {"Code": error}} if error else {}, model=_Model(operation), context=context)
    assert counter.writes("idem") == 3
    assert counter.conditional_checks("idem") == 1
    assert counter.reads("idem") == 0
    assert counter.reads("orders") == 1
    assert counter.writes() == 3


def test_a_tiny_run_of_the_real_worker_meets_the_goal() -> None:
    new, duplicate, retry, batch, hand_back = writes.run(jobs=3)
    assert (new.jobs, new.side_effects, duplicate.side_effects) == (3, 3, 0)
    assert new.idempotency_writes == 2 * 3
    assert new.idempotency_conditional_checks == 0
    assert duplicate.idempotency_writes == duplicate.idempotency_conditional_checks == 3
    assert duplicate.effective_writes == 0
    # The run's start (a new key on its message's first delivery: a conditional put, its run counted) and its
    # completion (an update).
    assert new.calls == {
        "idempotency PutItem": 3,
        "idempotency UpdateItem": 3,
        f"{local_resource_name(DEFAULT_STACK_NAME, 'orders_table')} GetItem": 3,
    }
    # A job retried once: two runs, each its start and its end; every mail still sent once.
    assert (retry.side_effects, retry.effective_writes) == (3, 4 * 3)
    # A batch of three: each member's two and its count, plus the batch's two definition items and one mark.
    assert batch.side_effects == 3
    assert batch.calls["idempotency PutItem"] == 3 + 2
    assert batch.calls["idempotency UpdateItem"] == 3 + 3 + 1
    assert batch.effective_writes == 3 * writes.GOAL_WRITES_PER_BATCH_MEMBER + writes.GOAL_WRITES_PER_BATCH
    # Its members' item, which each member's count reads: three `<job>:<id>` and three 16-byte digests, well
    # under one read unit's 4 KB.
    assert batch.members_item_bytes is not None and 3 * 16 < batch.members_item_bytes < 4096
    assert (batch.member_read_units, new.members_item_bytes) == (1, None)
    # A hand-back before any run writes nothing, and sends nothing.
    assert (hand_back.side_effects, hand_back.idempotency_writes, hand_back.calls) == (0, 0, {})


def test_an_items_size_is_counted_as_dynamodb_bills_it() -> None:
    # "DynamoDB item sizes and formats": names and values; a number one byte per two significant digits plus one;
    # a list 3 bytes plus one per element; a binary its raw bytes.
    item = {"id": {"S": "abc"}, "n": {"N": "-0123.50"}, "l": {"L": [{"S": "xy"}, {"B": b"\x00\x01"}]}}
    assert writes.item_bytes(item) == (2 + 3) + (1 + 3) + (1 + 3 + (1 + 2) + (1 + 2))
