"""What the two models of a job's life (test_model.py, test_model_durable.py) share: telling published messages
apart, reading the DLQ without taking from it, and redriving it as an operator does."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from sqs_jobs.local.provision import LocalQueue
from tests.functional.conftest import REGION, Harness


def message_of(body: dict[str, Any]) -> str:
    """Which published message a body is (a redrive sends its body back as it was): its `m`, or its batch field."""
    return str(body.get("m", body.get("batch", f"{body['job']}:{body['id']}")))


def dlq_messages(local: LocalQueue) -> list[Any]:
    """Every message in the queue's DLQ, read from moto's own state (nothing received, nothing hidden)."""
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.sqs.models import sqs_backends

    return list(sqs_backends[DEFAULT_ACCOUNT_ID][REGION].queues[local.dlq_url.rsplit("/", 1)[-1]]._messages)


def redrive_all(harness: Harness, local: LocalQueue, redriven: Counter[str]) -> int:
    """Move every dead letter back to its queue (each to the priority lane its evidence names), counting each
    message's redrives in `redriven`; how many moved."""
    for message in dlq_messages(local):
        redriven[message_of(json.loads(message.body))] += 1
    return harness.redrive(local.spec.name)
