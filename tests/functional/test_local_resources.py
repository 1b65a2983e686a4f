"""The local engine's providers by kind: a kind it has no provider for is one line, as synth says it."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from functions.catalog import CATALOG
from sqs_jobs.cli.errors import EXIT_USAGE
from sqs_jobs.local.provision import provision
from sqs_jobs.local.resource_providers import UnsupportedResourceError
from sqs_jobs.resources import Resource
from sqs_jobs.worker.clients import ClientFactory


@dataclass(frozen=True, kw_only=True)
class Queue(Resource):
    """A kind no provider knows."""


def test_a_kind_without_a_local_provider_is_refused_in_one_line(clients: ClientFactory) -> None:
    catalog = replace(CATALOG, resources=(*CATALOG.resources, Queue(name="payments_queue", description="a queue")))

    with pytest.raises(UnsupportedResourceError) as raised:
        provision(clients, catalog=catalog)

    assert str(raised.value) == "resource 'payments_queue' is a Queue, which the local engine has no provider for"
    assert raised.value.exit_code == EXIT_USAGE
