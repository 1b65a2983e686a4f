"""Finding a deployed stack's queues: the SSM parameters the stack (or the local engine) writes per queue."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from functions.catalog import CATALOG, Catalog
from jobctl.local.provision import queue_parameter_prefix


class DiscoveryError(Exception):
    """The stack's queues could not be found."""


@dataclass(frozen=True)
class QueueLocation:
    name: str
    url: str
    dlq_url: str
    arn: str


def find_queues(ssm_client: Any, stack_name: str, catalog: Catalog = CATALOG) -> dict[str, QueueLocation]:
    found: dict[str, QueueLocation] = {}
    for queue in catalog.queue_names:
        prefix = queue_parameter_prefix(stack_name, queue)
        names = [f"{prefix}url", f"{prefix}dlq-url", f"{prefix}arn"]
        response = ssm_client.get_parameters(Names=names)
        values = {parameter["Name"]: parameter["Value"] for parameter in response.get("Parameters", [])}
        missing = [name for name in names if name not in values]
        if missing:
            raise DiscoveryError(
                f"stack {stack_name!r} has no SSM parameter {missing[0]}: is it deployed to this account and "
                "region (or the local engine running at --endpoint-url)?"
            )
        found[queue] = QueueLocation(name=queue, url=values[names[0]], dlq_url=values[names[1]], arn=values[names[2]])
    return found
