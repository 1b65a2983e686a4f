"""jobctl run against a local engine as an operator runs it, and an engine whose orders DLQ holds work for it."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from click.testing import CliRunner, Result

from functions.catalog import CATALOG
from sqs_jobs.cli.cli import main as jobctl
from sqs_jobs.local.engine import LocalEngine

MISSING = ("501", "502", "503")


@contextmanager
def engine_with_dead_letters() -> Iterator[LocalEngine]:
    """An engine whose orders DLQ holds three missing orders and one malformed message."""
    with LocalEngine(port=0, worker_output=io.StringIO(), catalog=CATALOG) as running:
        assert running.deployment is not None
        sqs = running.clients()("sqs")
        url = running.deployment.queues["orders"].url
        for order_id in MISSING:
            sqs.send_message(QueueUrl=url, MessageBody=json.dumps({"job": "order_confirmation", "id": order_id}))
        sqs.send_message(QueueUrl=url, MessageBody="not json")
        assert running.wait_until_idle(timeout_s=30)
        yield running


def run(engine: LocalEngine, *args: str) -> Result:
    env = {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local", "AWS_REGION": engine.region}
    env["COLUMNS"] = "200"  # a wide terminal, so tables show whole words
    return CliRunner().invoke(jobctl, ["--endpoint-url", engine.endpoint_url, *args], env=env)


def as_json(result: Result) -> Any:
    return json.loads(result.stdout)  # stderr (progress, warnings) is not the payload


def put_order(engine: LocalEngine, order_id: str, email: str = "buyer@example.com") -> None:
    """An order `order_confirmation` can mail, in the engine's orders table."""
    assert engine.deployment is not None
    engine.clients()("dynamodb").put_item(
        TableName=engine.deployment.resources["orders_table"],
        Item={"order_id": {"S": order_id}, "email": {"S": email}},
    )


def publish(engine: LocalEngine, queue: str, job: str, *entity_ids: str) -> None:
    """Each ID's job on the queue, as a producer sends it."""
    assert engine.deployment is not None
    sqs = engine.clients()("sqs")
    for entity_id in entity_ids:
        sqs.send_message(
            QueueUrl=engine.deployment.queues[queue].url, MessageBody=json.dumps({"job": job, "id": entity_id})
        )
