"""A team's own app on the local engine: a catalog unrelated to the example (tests/sample_app), whose job uses a
table, a table another service owns, a bucket prefix, an endpoint with its stand-in and a secret, runs end to end
without a line of the framework changed."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator

import pytest

from sqs_jobs.local.engine import LocalEngine
from sqs_jobs.stack_names import resource_parameter_name
from tests.sample_app.catalog import CATALOG, LOCAL_API_KEY
from tests.sample_app.thumbnail_standin import PNG, ThumbnailStandIn

pytestmark = pytest.mark.e2e


@pytest.fixture
def worker_log() -> io.StringIO:
    return io.StringIO()


@pytest.fixture
def engine(worker_log: io.StringIO) -> Iterator[LocalEngine]:
    with LocalEngine(port=0, catalog=CATALOG, worker_output=worker_log, heartbeat_interval_s=3600) as running:
        yield running


def _standin(engine: LocalEngine) -> ThumbnailStandIn:
    standin = engine.standins["thumbnail_api"]
    assert isinstance(standin, ThumbnailStandIn)
    return standin


def test_every_resource_is_made_and_published_where_a_service_finds_it(engine: LocalEngine) -> None:
    assert engine.deployment is not None
    resources = engine.deployment.resources
    assert set(resources) == set(CATALOG.resource_names)
    clients = engine.clients()
    for name in ("images_table", "users_table"):
        clients("dynamodb").describe_table(TableName=resources[name])
    clients("s3").head_bucket(Bucket=resources["media_bucket"])
    assert clients("secretsmanager").get_secret_value(SecretId=resources["thumbnail_api_key"])["SecretString"] == (
        LOCAL_API_KEY
    )
    assert resources["thumbnail_api"] == _standin(engine).url
    for spec in (spec for spec in CATALOG.resources if spec.published):
        parameter = clients("ssm").get_parameter(Name=resource_parameter_name(engine.stack_name, spec.name))
        assert parameter["Parameter"]["Value"] == resources[spec.name]
    # The worker's environment names exactly its jobs' resources.
    function = clients("lambda").get_function(FunctionName=f"{engine.stack_name}-images-worker")
    variables = function["Configuration"]["Environment"]["Variables"]
    assert {name for name in variables if name.startswith("JOBS_RESOURCE_")} == {
        f"JOBS_RESOURCE_{name.upper()}" for name in CATALOG.queue("images").resources
    }
    # The secret travels as its ARN; its value is in no environment variable.
    assert variables["JOBS_RESOURCE_THUMBNAIL_API_KEY"] == resources["thumbnail_api_key"]
    assert LOCAL_API_KEY not in json.dumps(variables)


def test_the_job_reads_its_table_and_secret_calls_the_stand_in_and_writes_under_its_prefix(
    engine: LocalEngine, worker_log: io.StringIO
) -> None:
    assert engine.deployment is not None
    resources = engine.deployment.resources
    clients = engine.clients()
    clients("dynamodb").put_item(
        TableName=resources["images_table"], Item={"image_id": {"S": "img-1"}, "source": {"S": "uploads/img-1.jpg"}}
    )
    clients("sqs").send_message(
        QueueUrl=engine.deployment.queues["images"].url,
        MessageBody=json.dumps({"job": "make_thumbnail", "id": "img-1"}),
    )

    deadline = time.monotonic() + 60
    item: dict[str, dict[str, str]] = {}
    while "thumbnail" not in item and time.monotonic() < deadline:
        time.sleep(0.2)
        item = clients("dynamodb").get_item(
            TableName=resources["images_table"], Key={"image_id": {"S": "img-1"}}, ConsistentRead=True
        )["Item"]

    assert item["thumbnail"] == {"S": "thumbnails/img-1.png"}
    stored = clients("s3").get_object(Bucket=resources["media_bucket"], Key="thumbnails/img-1.png")
    assert stored["Body"].read() == PNG
    standin = _standin(engine)
    assert standin.renders == ['{"source":"uploads/img-1.jpg"}']
    assert standin.refused == 0
    assert engine.wait_until_idle(timeout_s=30)
    # The secret's value is read, never written to a log.
    assert LOCAL_API_KEY not in worker_log.getvalue()
