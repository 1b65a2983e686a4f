"""Finding a deployed stack's queues: the SSM parameters the stack (or the local engine) writes per queue, and per
priority lane of a queue that has lanes (docs/priorities.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqs_jobs.cdk.naming import (
    DLQ_URL,
    QUEUE_ARN,
    QUEUE_URL,
    WORKER_ROLE_ID,
    lane_parameter_name,
    parameter_name,
)
from sqs_jobs.cli.errors import OperatorUnreachableError
from sqs_jobs.specs import Catalog

# GetParameters takes 10 names at most.
_PARAMETERS_PER_CALL = 10


class DiscoveryError(OperatorUnreachableError):
    """The stack's queues could not be found."""


@dataclass(frozen=True)
class LaneLocation:
    """One SQS queue a queue's worker consumes: a priority lane's (`name`), or the queue's own (`name` None)."""

    name: str | None
    url: str
    arn: str


@dataclass(frozen=True)
class QueueLocation:
    name: str
    url: str
    dlq_url: str
    arn: str
    # The worker role's unique ID: only messages it sent carry the runtime's evidence. None on a stack deployed
    # before it was published: then nothing is shown as evidence.
    worker_role_id: str | None = None
    # Its priority lanes, the most urgent first (the default lane's queue is `url`); empty without lanes.
    lanes: tuple[LaneLocation, ...] = ()

    @property
    def sources(self) -> tuple[LaneLocation, ...]:
        """The queues its event source mappings poll, the most urgent first: its lanes, or itself."""
        return self.lanes or (LaneLocation(None, self.url, self.arn),)


def find_queues(ssm_client: Any, stack_name: str, catalog: Catalog) -> dict[str, QueueLocation]:
    found: dict[str, QueueLocation] = {}
    for spec in catalog:
        queue = spec.name
        names = [parameter_name(stack_name, queue, key) for key in (QUEUE_URL, DLQ_URL, QUEUE_ARN, WORKER_ROLE_ID)]
        # A lane's own queue (the default lane's is the queue's): only a queue with lanes reads more.
        other_lanes = [lane for lane in spec.lanes if lane != spec.default_lane]
        lane_names = [
            lane_parameter_name(stack_name, queue, lane, key) for lane in other_lanes for key in (QUEUE_URL, QUEUE_ARN)
        ]
        values = _parameters(ssm_client, names + lane_names)
        missing = [name for name in names[:3] + lane_names if name not in values]
        if missing:
            raise DiscoveryError(
                f"stack {stack_name!r} has no SSM parameter {missing[0]}: is it deployed to this account and "
                "region (or the local engine running at --endpoint-url)?"
            )
        url, arn = values[names[0]], values[names[2]]
        lanes = tuple(
            LaneLocation(lane, url, arn)
            if lane == spec.default_lane
            else LaneLocation(
                lane,
                values[lane_parameter_name(stack_name, queue, lane, QUEUE_URL)],
                values[lane_parameter_name(stack_name, queue, lane, QUEUE_ARN)],
            )
            for lane in spec.lanes
        )
        found[queue] = QueueLocation(
            name=queue,
            url=url,
            dlq_url=values[names[1]],
            arn=arn,
            worker_role_id=values.get(names[3]),
            lanes=lanes,
        )
    return found


def _parameters(ssm_client: Any, names: list[str]) -> dict[str, str]:
    values: dict[str, str] = {}
    for start in range(0, len(names), _PARAMETERS_PER_CALL):
        response = ssm_client.get_parameters(Names=names[start : start + _PARAMETERS_PER_CALL])
        values.update({parameter["Name"]: parameter["Value"] for parameter in response.get("Parameters", [])})
    return values
