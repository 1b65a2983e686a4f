"""Pausing and resuming a queue's worker: its Lambda event source mapping, disabled and enabled again.

A disabled mapping stops polling; messages stay in the queue (their retention still counts) and nothing is
lost, and enabling it resumes polling where it stopped. Batches in flight finish. On AWS the change goes
through `Disabling` / `Enabling` before it settles; the local engine's mappings settle at once. A queue with
priority lanes has a mapping per lane (docs/priorities.md): pausing it pauses every lane's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqs_jobs.cli.errors import OperatorUnreachableError

# Lambda's event source mapping states (GetEventSourceMapping `State`).
PAUSED_STATES = frozenset({"Disabled", "Disabling"})
RUNNING_STATES = frozenset({"Enabled", "Enabling"})


class QueueControlError(OperatorUnreachableError):
    """A queue's worker could not be paused, resumed or read."""


class NoMappingError(QueueControlError):
    """No event source mapping reads the queue: nothing to pause or resume."""


@dataclass(frozen=True)
class Mapping:
    uuid: str
    function_arn: str
    state: str
    # The queue it reads (its EventSourceArn): a priority lane's, or the queue's own.
    source_arn: str = ""

    @property
    def function_name(self) -> str:
        return self.function_arn.rsplit(":", 1)[-1]

    @property
    def paused(self) -> bool:
        return self.state in PAUSED_STATES

    @classmethod
    def from_api(cls, item: dict[str, Any]) -> Mapping:
        return cls(
            uuid=item["UUID"],
            function_arn=item["FunctionArn"],
            state=item.get("State", "Unknown"),
            source_arn=item.get("EventSourceArn", ""),
        )


def mappings(lambda_client: Any, queue_arn: str) -> list[Mapping]:
    """Every event source mapping that reads `queue_arn` (the stack makes one)."""
    found: list[Mapping] = []
    for page in lambda_client.get_paginator("list_event_source_mappings").paginate(EventSourceArn=queue_arn):
        found += [Mapping.from_api(item) for item in page.get("EventSourceMappings", [])]
    if not found:
        raise NoMappingError(
            f"no Lambda event source mapping reads {queue_arn}: is the stack deployed with its workers "
            "(or the local engine running at --endpoint-url)?"
        )
    return found


def _set_enabled(lambda_client: Any, queue_arns: tuple[str, ...], enabled: bool) -> list[Mapping]:
    # Every lane's mappings found first: a lane without one changes nothing of the others.
    found = [mapping for queue_arn in queue_arns for mapping in mappings(lambda_client, queue_arn)]
    return [
        Mapping.from_api(lambda_client.update_event_source_mapping(UUID=mapping.uuid, Enabled=enabled))
        for mapping in found
    ]


def pause(lambda_client: Any, *queue_arns: str) -> list[Mapping]:
    """Disable the mappings of the queue (of each of its priority lanes' queues, `QueueLocation.sources`): polling
    stops, the batches in flight finish. Idempotent."""
    return _set_enabled(lambda_client, queue_arns, enabled=False)


def resume(lambda_client: Any, *queue_arns: str) -> list[Mapping]:
    """Enable the queue's (each lane's) mappings again. Idempotent."""
    return _set_enabled(lambda_client, queue_arns, enabled=True)


def is_paused(lambda_client: Any, queue_arn: str) -> bool:
    """True when every mapping of the queue is disabled (or disabling): nothing will consume it."""
    return all(mapping.paused for mapping in mappings(lambda_client, queue_arn))
