"""What every jobctl command shares: the AWS-CLI-like options, one-line errors, table or JSON output."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import boto3
import botocore.exceptions
import click

from functions.worker.errors import EnvelopeError
from jobctl.discovery import DiscoveryError, QueueLocation, find_queues
from jobctl.dlq import DlqError
from sqs_jobs.catalog import CATALOG, QueueSpec, UnknownQueueError
from sqs_jobs.publisher import PublishError

EXIT_FAILED = 1


@dataclass
class Options:
    profile: str | None
    region: str | None
    endpoint_url: str | None
    stack: str
    output: str

    def client(self, service: str) -> Any:
        session = boto3.session.Session(profile_name=self.profile, region_name=self.region)
        return session.client(service, endpoint_url=self.endpoint_url)  # type: ignore[call-overload]


# Errors an operator can act on: shown as one line, exit 1, never a traceback.
_OPERATOR_ERRORS: tuple[type[BaseException], ...] = (
    DiscoveryError,
    DlqError,
    EnvelopeError,
    PublishError,
    UnknownQueueError,
    botocore.exceptions.NoCredentialsError,
    botocore.exceptions.NoRegionError,
    botocore.exceptions.ProfileNotFound,
    botocore.exceptions.EndpointConnectionError,
    botocore.exceptions.ClientError,
)


@contextmanager
def operator_errors() -> Iterator[None]:
    try:
        yield
    except _OPERATOR_ERRORS as error:
        click.echo(f"jobctl: error: {error}", err=True)
        sys.exit(EXIT_FAILED)


def emit(options: Options, payload: dict[str, Any], table: Callable[[], None]) -> None:
    if options.output == "json":
        click.echo(json.dumps(payload, indent=2, sort_keys=True, default=str))
    else:
        table()


def queues_of(options: Options, queue: str | None = None) -> list[tuple[QueueSpec, QueueLocation]]:
    """The catalog queue(s) asked for, with where the stack put them."""
    specs = [CATALOG.queue(queue)] if queue else list(CATALOG)
    locations = find_queues(options.client("ssm"), options.stack)
    return [(spec, locations[spec.name]) for spec in specs]
