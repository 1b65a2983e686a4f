"""Powertools' own batch tests, their SQS and FIFO cases, run against the worker's processors.

The worker's `ParallelBatchProcessor` and `ParallelFifoProcessor` (lib/sqs_jobs/worker/batch.py) subclass Powertools'
`BatchProcessor` and change only `process()`. Each test here checks one behaviour of Powertools' 3.x batch suite
(aws-powertools/powertools-lambda-python), in our own words, and names the case it mirrors:
`utilities_batch` is tests/functional/batch/required_dependencies/test_utilities_batch.py and `pydantic` is
tests/functional/batch/_pydantic/test_utilities_batch_pydantic.py. Every case runs twice: records side by side on
a thread pool, and one after another (executor None).

Records are real: sent to SQS (moto), received with all attributes and turned into Lambda's event by the local
engine's converter (lib/sqs_jobs/local/lambda_events.py). Where ours differ on purpose, the test pins our behaviour and
says so (docs/failure-semantics.md, "What Powertools' own tests say"): a batch whose every record failed is
answered with all its IDs instead of `BatchProcessingError`, and `batchItemFailures` come in the order records
finished, not in event order.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest
from aws_lambda_powertools.utilities.batch import (
    AsyncBatchProcessor,
    BatchProcessor,
    EventType,
    SqsFifoPartialProcessor,
    async_process_partial_response,
    batch_processor,
    process_partial_response,
)
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError, UnexpectedBatchTypeError
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.warnings import PowertoolsDeprecationWarning

from sqs_jobs.local.lambda_events import sqs_event
from sqs_jobs.worker.batch import ParallelBatchProcessor, ParallelFifoProcessor
from sqs_jobs.worker.clients import ClientFactory

Processor = ParallelBatchProcessor | ParallelFifoProcessor
# How long a record waits for another record's failure before giving up (the test then fails on the order).
WAIT_S = 5.0


class RecordFailedError(Exception):
    """The record handler failing a record on purpose."""


@dataclass
class Source:
    """A real queue to build Lambda events from: what is sent is received whole, as one batch."""

    sqs: Any
    url: str
    arn: str
    fifo: bool

    @classmethod
    def create(cls, sqs: Any, name: str) -> Source:
        fifo = name.endswith(".fifo")
        url = sqs.create_queue(QueueName=name, Attributes={"FifoQueue": "true"} if fifo else {})["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        return cls(sqs=sqs, url=url, arn=arn, fifo=fifo)

    def batch(self, *bodies: str, groups: Sequence[str] = ()) -> dict[str, Any]:
        """Send `bodies` (on a FIFO queue the n-th in message group `groups[n]`) and receive them as the event
        Lambda would invoke the worker with."""
        for n, body in enumerate(bodies):
            extra = {"MessageGroupId": groups[n], "MessageDeduplicationId": str(uuid.uuid4())} if self.fifo else {}
            self.sqs.send_message(QueueUrl=self.url, MessageBody=body, **extra)
        messages = self.sqs.receive_message(
            QueueUrl=self.url,
            MaxNumberOfMessages=10,
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
        )["Messages"]
        assert len(messages) == len(bodies)
        return sqs_event(messages, self.arn)


@dataclass
class Handler:
    """A record handler: fails the records whose body starts with "fail" and notes every body it ran."""

    ran: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, record: SQSRecord) -> str:
        with self._lock:
            self.ran.append(record.body)
        if record.body.startswith("fail"):
            raise RecordFailedError(record.body)
        return record.body


@pytest.fixture(params=["side_by_side", "one_after_another"])
def executor(request: pytest.FixtureRequest) -> Iterator[Executor | None]:
    if request.param == "one_after_another":
        yield None
        return
    with ThreadPoolExecutor(max_workers=4, thread_name_prefix="parity") as pool:
        yield pool


@pytest.fixture
def standard(clients: ClientFactory) -> Source:
    return Source.create(clients("sqs"), "parity")


@pytest.fixture
def fifo(clients: ClientFactory) -> Source:
    return Source.create(clients("sqs"), "parity.fifo")


def failed_ids(response: Mapping[str, Any]) -> list[str]:
    return [item["itemIdentifier"] for item in response["batchItemFailures"]]


def ids_of(event: Mapping[str, Any], *bodies: str) -> list[str]:
    """The message IDs of the records with these bodies, sorted (failures compare as a set: see the order tests)."""
    by_body = {record["body"]: record["messageId"] for record in event["Records"]}
    return sorted(by_body[body] for body in bodies)


def through_decorator(processor: Processor, handler: Handler, event: dict[str, Any]) -> dict[str, Any]:
    """Powertools' `batch_processor` decorator around a Lambda handler that returns the processor's response.
    The decorator is deprecated in 3.x and says so on every call."""

    def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return dict(processor.response())

    decorated = batch_processor(record_handler=handler, processor=processor)(lambda_handler)
    with pytest.warns(PowertoolsDeprecationWarning):
        response: dict[str, Any] = decorated(event, {})
    return response


# Standard queues: ParallelBatchProcessor.


def test_a_batch_that_all_succeeds_reports_no_failures(executor: Executor | None, standard: Source) -> None:
    """Mirrors utilities_batch::test_batch_processor_middleware_success_only."""
    event = standard.batch("ok 1", "ok 2")
    handler = Handler()
    response = through_decorator(ParallelBatchProcessor(executor), handler, event)
    assert response == {"batchItemFailures": []}
    assert sorted(handler.ran) == ["ok 1", "ok 2"]


def test_the_decorator_reports_exactly_the_records_that_failed(executor: Executor | None, standard: Source) -> None:
    """Mirrors utilities_batch::test_batch_processor_middleware_with_failure."""
    event = standard.batch("fail 1", "ok 2", "fail 3")
    response = through_decorator(ParallelBatchProcessor(executor), Handler(), event)
    assert sorted(failed_ids(response)) == ids_of(event, "fail 1", "fail 3")


def test_the_context_manager_returns_every_record_in_event_order(executor: Executor | None, standard: Source) -> None:
    """Mirrors utilities_batch::test_batch_processor_context_success_only: `process()` answers each record with
    ("success", the handler's result, the raw record), in event order even when the records ran side by side."""
    records = standard.batch("ok 1", "ok 2", "ok 3")["Records"]
    processor = ParallelBatchProcessor(executor)
    with processor(records, Handler()) as batch:
        processed = batch.process()
    assert processed == [("success", record["body"], record) for record in records]
    assert batch.response() == {"batchItemFailures": []}


def test_the_context_manager_reports_failures_and_keeps_each_result_in_its_place(
    executor: Executor | None, standard: Source
) -> None:
    """Mirrors utilities_batch::test_batch_processor_context_with_failure."""
    event = standard.batch("fail 1", "ok 2", "fail 3")
    records = event["Records"]
    processor = ParallelBatchProcessor(executor)
    with processor(records, Handler()) as batch:
        processed = batch.process()
    for record, entry in zip(records, processed, strict=True):
        if record["body"] == "ok 2":
            assert entry == ("success", "ok 2", record)
        else:
            status, error, failed = entry
            assert (status, failed.message_id) == ("fail", record["messageId"])
            assert RecordFailedError.__name__ in error
    assert len(batch.fail_messages) == 2
    assert sorted(failed_ids(batch.response())) == ids_of(event, "fail 1", "fail 3")


def test_a_batch_whose_every_record_failed_returns_all_ids_instead_of_raising(
    executor: Executor | None, standard: Source
) -> None:
    """Ours differ on purpose. utilities_batch::test_batch_processor_error_when_entire_batch_fails expects
    `BatchProcessingError` on a cold and a warm start; the worker's processor is built with
    `raise_on_entire_batch_failure=False`, so it answers with every ID, as
    utilities_batch::test_batch_processor_not_raise_when_entire_batch_fails_sync does, and again on reuse."""
    event = standard.batch("fail 1", "fail 2")
    with pytest.raises(BatchProcessingError):  # Powertools' default, for the contrast
        process_partial_response(event, Handler(), BatchProcessor(event_type=EventType.SQS))

    processor = ParallelBatchProcessor(executor)
    for _start in ("cold", "warm"):
        response = process_partial_response(event, Handler(), processor)
        assert sorted(failed_ids(response)) == ids_of(event, "fail 1", "fail 2")


def test_process_partial_response_answers_a_good_batch_with_no_failures(
    executor: Executor | None, standard: Source
) -> None:
    """Mirrors utilities_batch::test_process_partial_response."""
    event = standard.batch("ok 1", "ok 2")
    assert process_partial_response(event, Handler(), ParallelBatchProcessor(executor)) == {"batchItemFailures": []}


@pytest.mark.parametrize(
    "event",
    [123456789, [], False, object, lambda x: x],
    ids=["num", "list", "bool", "object", "callable"],
)
def test_process_partial_response_refuses_an_event_that_is_not_a_mapping(executor: Executor | None, event: Any) -> None:
    """Mirrors utilities_batch::test_process_partial_response_invalid_input."""
    handler = Handler()
    with pytest.raises(ValueError):
        process_partial_response(event, handler, ParallelBatchProcessor(executor))
    assert handler.ran == []


@pytest.mark.parametrize("event", [{}, {"Records": None}, {"Records": "not a list"}], ids=["none", "null", "string"])
def test_process_partial_response_refuses_records_that_are_not_a_list(
    executor: Executor | None, event: dict[str, Any]
) -> None:
    """Mirrors utilities_batch::test_process_partial_response_raises_unexpected_batch_type."""
    with pytest.raises(UnexpectedBatchTypeError):
        process_partial_response(event, Handler(), ParallelBatchProcessor(executor))


def test_a_poison_pill_fails_only_itself(executor: Executor | None, standard: Source) -> None:
    """Mirrors pydantic::test_batch_processor_model_with_partial_validation_error. Our processors take no model
    (the worker parses each envelope itself), so the malformed record is one whose body isn't JSON."""
    event = standard.batch('{"item": 1}', "poison pill", '{"item": 2}')

    def parse(record: SQSRecord) -> Any:
        return json.loads(record.body)["item"]

    response = process_partial_response(event, parse, ParallelBatchProcessor(executor))
    assert failed_ids(response) == ids_of(event, "poison pill")


# FIFO queues: ParallelFifoProcessor, which stops a group at its first failure.


def test_fifo_a_batch_that_all_succeeds_reports_no_failures(executor: Executor | None, fifo: Source) -> None:
    """Mirrors utilities_batch::test_sqs_fifo_batch_processor_middleware_success_only."""
    event = fifo.batch("ok 1", "ok 2", groups="aa")
    response = through_decorator(ParallelFifoProcessor(executor), Handler(), event)
    assert response == {"batchItemFailures": []}


def test_fifo_a_failure_fails_the_rest_of_its_group_without_running_it(executor: Executor | None, fifo: Source) -> None:
    """Mirrors utilities_batch::test_sqs_fifo_batch_processor_middleware_with_failure. That case uses Powertools'
    default `SqsFifoPartialProcessor()`, which stops the whole batch; its records share one message group, where
    stopping the group (ours) is the same."""
    event = fifo.batch("ok 1", "fail 2", "ok 3", groups="aaa")
    handler = Handler()
    response = through_decorator(ParallelFifoProcessor(executor), handler, event)
    assert sorted(failed_ids(response)) == ids_of(event, "fail 2", "ok 3")
    assert handler.ran == ["ok 1", "fail 2"]


def test_fifo_a_failed_group_does_not_stop_the_others(executor: Executor | None, fifo: Source) -> None:
    """Mirrors utilities_batch::test_sqs_fifo_batch_processor_middleware_with_skip_group_on_error."""
    event = fifo.batch("ok 1", "ok 2", "fail 3", "ok 4", "fail 5", groups="11223")
    handler = Handler()
    response = through_decorator(ParallelFifoProcessor(executor), handler, event)
    assert sorted(failed_ids(response)) == ids_of(event, "fail 3", "ok 4", "fail 5")
    assert sorted(handler.ran) == ["fail 3", "fail 5", "ok 1", "ok 2"]


def test_fifo_groups_failing_at_their_first_record(executor: Executor | None, fifo: Source) -> None:
    """Mirrors utilities_batch::test_sqs_fifo_batch_processor_middleware_with_skip_group_on_error_first_message_fail."""
    event = fifo.batch("fail 1", "ok 2", "fail 3", "ok 4", "ok 5", groups="11223")
    handler = Handler()
    response = through_decorator(ParallelFifoProcessor(executor), handler, event)
    assert sorted(failed_ids(response)) == ids_of(event, "fail 1", "ok 2", "fail 3", "ok 4")
    assert sorted(handler.ran) == ["fail 1", "fail 3", "ok 5"]


def test_fifo_answers_as_skip_group_on_error_does_with_groups_interleaved(
    executor: Executor | None, fifo: Source
) -> None:
    """Ours against Powertools' `SqsFifoPartialProcessor(skip_group_on_error=True)` on one event whose groups
    interleave: the same records run, each record gets the same outcome in the same place, the same IDs fail.
    (pydantic::test_sqs_fifo_batch_processor_middleware_with_skip_group_on_error_and_model checks this rule with a
    model; ours take none.)"""
    bodies = ("ok 1", "fail 2", "fail 3", "ok 4", "ok 5", "ok 6", "ok 7")
    event = fifo.batch(*bodies, groups="1211231")

    def run(processor: BatchProcessor) -> tuple[list[tuple[str, str]], list[str], list[str]]:
        handler = Handler()
        with processor(event["Records"], handler) as batch:
            processed = batch.process()
        outcomes = [(status, _message_id(record)) for status, _, record in processed]
        return outcomes, sorted(handler.ran), sorted(failed_ids(batch.response()))

    ours = run(ParallelFifoProcessor(executor))
    assert ours == run(SqsFifoPartialProcessor(skip_group_on_error=True))
    assert ours[2] == ids_of(event, "fail 2", "fail 3", "ok 4", "ok 5", "ok 7")


def test_fifo_a_batch_whose_every_record_failed_returns_all_ids_instead_of_raising(
    executor: Executor | None, fifo: Source
) -> None:
    """Ours differ on purpose: Powertools' `SqsFifoPartialProcessor` (3.37.0 has no switch for it) raises
    `BatchProcessingError` when every record failed, counting the records skipped after a failure; ours answer
    with every ID, as on a standard queue."""
    event = fifo.batch("fail 1", "ok 2", "fail 3", groups="aab")
    with pytest.raises(BatchProcessingError):
        process_partial_response(event, Handler(), SqsFifoPartialProcessor(skip_group_on_error=True))

    response = process_partial_response(event, Handler(), ParallelFifoProcessor(executor))
    assert sorted(failed_ids(response)) == ids_of(event, "fail 1", "ok 2", "fail 3")


def _message_id(record: SQSRecord | Mapping[str, Any]) -> str:
    # Powertools keeps the raw record for a success and the data class for a failure.
    return record.message_id if isinstance(record, SQSRecord) else str(record["messageId"])


# The order of batchItemFailures: ours differ on purpose.


def test_one_after_another_a_standard_batch_reports_failures_in_event_order(standard: Source) -> None:
    """Powertools' cases that compare batchItemFailures as a list (utilities_batch::
    test_batch_processor_context_with_failure, test_batch_processor_not_raise_when_entire_batch_fails_sync) hold
    exactly when records run one after another: they finish in event order."""
    event = standard.batch("fail 1", "ok 2", "fail 3", "fail 4")
    response = process_partial_response(event, Handler(), ParallelBatchProcessor(None))
    in_event_order = [r["messageId"] for r in event["Records"] if r["body"].startswith("fail")]
    assert failed_ids(response) == in_event_order


def _fails_after_another(processor: Processor) -> Callable[[SQSRecord], None]:
    """A handler under which "slow" records fail only once another record's failure is on the books."""

    def handler(record: SQSRecord) -> None:
        if record.body.startswith("slow"):
            deadline = time.monotonic() + WAIT_S
            while not processor.fail_messages and time.monotonic() < deadline:
                time.sleep(0.001)
        raise RecordFailedError(record.body)

    return handler


def test_side_by_side_failures_come_in_the_order_records_finished(standard: Source) -> None:
    """Ours differ on purpose: side by side, batchItemFailures lists failures as they happen (Powertools'
    `failure_handler` appends each), not in event order. SQS only reads which IDs are listed."""
    event = standard.batch("slow 1", "fail 2")
    with ThreadPoolExecutor(max_workers=2) as pool:
        processor = ParallelBatchProcessor(pool)
        response = process_partial_response(event, _fails_after_another(processor), processor)
    assert failed_ids(response) == [*ids_of(event, "fail 2"), *ids_of(event, "slow 1")]


def test_side_by_side_fifo_groups_report_in_the_order_they_finished(fifo: Source) -> None:
    """As above for FIFO: a group's failure and the records skipped after it are listed when that group stops."""
    event = fifo.batch("slow 1", "skipped 2", "fail 3", groups="aab")
    with ThreadPoolExecutor(max_workers=2) as pool:
        processor = ParallelFifoProcessor(pool)
        response = process_partial_response(event, _fails_after_another(processor), processor)
    assert failed_ids(response) == [*ids_of(event, "fail 3"), *ids_of(event, "slow 1"), *ids_of(event, "skipped 2")]


def test_powertools_own_async_processor_reports_in_completion_order_too(standard: Source) -> None:
    """Powertools' `AsyncBatchProcessor` runs records concurrently and lists failures as they happen as well: its
    async cases (utilities_batch::test_async_batch_processor_context_with_failure) see event order only because
    their handler never waits."""
    event = standard.batch("slow 1", "fail 2")

    async def handler(record: SQSRecord) -> None:
        if record.body.startswith("slow"):
            await asyncio.sleep(0.05)
        raise RecordFailedError(record.body)

    response = async_process_partial_response(
        event, handler, AsyncBatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
    )
    assert failed_ids(response) == [*ids_of(event, "fail 2"), *ids_of(event, "slow 1")]
