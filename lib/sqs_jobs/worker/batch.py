"""Powertools' batch processors, with a batch's records run side by side.

Powertools' `BatchProcessor` runs records one after another. These keep everything it does per record (the
record handler, success and failure bookkeeping, the partial batch response) and change only `process()`: up to
`parallel` records at once on a thread pool the worker keeps. On a FIFO queue the unit that runs in parallel is
the message group: a group's records run one at a time, in order, and after its first failure the rest of that
group in the batch is reported failed without running, as `SqsFifoPartialProcessor(skip_group_on_error=True)`
does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, SqsFifoPartialProcessor

# What Powertools' _process_record returns for a record: ("success" | "fail", result or error text, record).
Entry = tuple[Any, ...]


def _in_order(executor: Executor | None, work: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
    if executor is None or len(items) <= 1:
        return [work(item) for item in items]
    return list(executor.map(work, items))


class ParallelBatchProcessor(BatchProcessor):
    """A standard queue's batch: records run on `executor` (None: one after another)."""

    def __init__(self, executor: Executor | None) -> None:
        super().__init__(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
        self._executor = executor

    def process(self) -> list[Entry]:
        return _in_order(self._executor, self._process_record, self.records)


class ParallelFifoProcessor(BatchProcessor):
    """A FIFO queue's batch: message groups run on `executor`, each group's records in order, a group stopped
    at its first failure."""

    def __init__(self, executor: Executor | None) -> None:
        super().__init__(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
        self._executor = executor

    def process(self) -> list[Entry]:
        groups: dict[str, list[int]] = {}
        for index, record in enumerate(self.records):
            group_id = (record.get("attributes") or {}).get("MessageGroupId") or ""
            groups.setdefault(group_id, []).append(index)
        entries: list[Entry | None] = [None] * len(self.records)

        def run_group(indexes: list[int]) -> None:
            failed = False
            for index in indexes:
                record = self.records[index]
                if failed:
                    entries[index] = self.failure_handler(
                        record=self._to_batch_type(record, event_type=self.event_type, model=self.model),
                        exception=SqsFifoPartialProcessor.group_circuit_breaker_exc,
                    )
                    continue
                entry = self._process_record(record)
                entries[index] = entry
                failed = entry[0] == "fail"

        _in_order(self._executor, run_group, list(groups.values()))
        return [entry for entry in entries if entry is not None]
