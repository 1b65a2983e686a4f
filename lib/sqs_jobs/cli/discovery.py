"""Finding a deployed stack's queues: the SSM parameters the stack (or the local engine) writes per queue."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqs_jobs.cdk.naming import DLQ_URL, QUEUE_ARN, QUEUE_URL, WORKER_ROLE_ID, parameter_name
from sqs_jobs.cli.errors import OperatorUnreachableError
from sqs_jobs.specs import Catalog


class DiscoveryError(OperatorUnreachableError):
    """The stack's queues could not be found."""


@dataclass(frozen=True)
class QueueLocation:
    name: str
    url: str
    dlq_url: str
    arn: str
    # The worker role's unique ID: only messages it sent carry the runtime's evidence. None on a stack deployed
    # before it was published: then nothing is shown as evidence.
    worker_role_id: str | None = None


def find_queues(ssm_client: Any, stack_name: str, catalog: Catalog) -> dict[str, QueueLocation]:
    found: dict[str, QueueLocation] = {}
    for queue in catalog.queue_names:
        names = [parameter_name(stack_name, queue, key) for key in (QUEUE_URL, DLQ_URL, QUEUE_ARN, WORKER_ROLE_ID)]
        response = ssm_client.get_parameters(Names=names)
        values = {parameter["Name"]: parameter["Value"] for parameter in response.get("Parameters", [])}
        missing = [name for name in names[:3] if name not in values]
        if missing:
            raise DiscoveryError(
                f"stack {stack_name!r} has no SSM parameter {missing[0]}: is it deployed to this account and "
                "region (or the local engine running at --endpoint-url)?"
            )
        found[queue] = QueueLocation(
            name=queue,
            url=values[names[0]],
            dlq_url=values[names[1]],
            arn=values[names[2]],
            worker_role_id=values.get(names[3]),
        )
    return found
