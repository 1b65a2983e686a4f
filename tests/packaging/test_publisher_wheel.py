"""The publisher as a service gets it: the wheel `make wheel` builds, installed without extras into a fresh venv
on the oldest Python it supports, publishing to an SQS endpoint (a moto server) with nothing else installed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from moto.server import ThreadedMotoServer

from jobctl.local.engine import free_port
from sqs_jobs._wheel_version import RELEASE, wheel_version
from sqs_jobs.contract import CONTRACT_VERSION

REPO_ROOT = Path(__file__).resolve().parents[2]
UV = REPO_ROOT / ".tools" / "bin" / "uv"
# lib/pyproject.toml's requires-python: the oldest Python a service may run the publisher on.
OLDEST_PYTHON = "python3.11"
# boto3's own dependency tree and the wheel: what a publishing service gets, nothing more.
EXPECTED_DISTRIBUTIONS = {
    "sqs-jobs",
    *("boto3", "botocore", "s3transfer", "jmespath", "python-dateutil", "six", "urllib3"),
}
NOT_INSTALLED = ("moto", "functions", "jobctl", "infra", "aws_lambda_powertools", "aws_cdk", "flask", "docker")

SERVICE = """
import importlib.util, json, sys
import boto3
import sqs_jobs
from sqs_jobs import JobPublisher, UnknownJobError

endpoint, url = sys.argv[1:3]
sqs = boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1",
                   aws_access_key_id="service", aws_secret_access_key="service")
publisher = JobPublisher(sqs, queue_urls={"orders": url})
sent = publisher.publish("order_confirmation", "1001")
for_tenant = publisher.publish("order_confirmation", "1002", tenant="acme-eu")
try:
    publisher.publish("no_such_job", "1")
    refused = None
except UnknownJobError as error:
    refused = str(error)
print(json.dumps({
    "sent": sent,
    "for_tenant": for_tenant,
    "refused": refused,
    "version": sqs_jobs.__version__,
    "package": sqs_jobs.__file__,
    "importable": [name for name in sys.argv[3:] if importlib.util.find_spec(name) is not None],
}))
"""


def _run(*command: str | Path, cwd: Path = REPO_ROOT) -> str:
    result = subprocess.run([str(part) for part in command], check=False, capture_output=True, text=True, cwd=cwd)
    assert result.returncode == 0, f"{command}: {result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def service_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert UV.is_file(), f"{UV} is missing: run `make dev`"
    interpreter = shutil.which(OLDEST_PYTHON) or sys.executable
    dist = tmp_path_factory.mktemp("dist")
    _run(UV, "build", "--package", "sqs-jobs", "--wheel", "--out-dir", dist, "--quiet")
    [wheel] = dist.glob("sqs_jobs-*-py3-none-any.whl")
    venv = tmp_path_factory.mktemp("service") / "venv"
    _run(UV, "venv", "--quiet", "--python", interpreter, venv)
    _run(UV, "pip", "install", "--quiet", "--python", venv / "bin" / "python", wheel)
    return venv / "bin" / "python"


@pytest.fixture(scope="module")
def sqs_endpoint() -> Iterator[str]:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


def test_the_wheel_installs_only_boto3_beside_the_publisher(service_python: Path) -> None:
    listed = json.loads(_run(UV, "pip", "list", "--format", "json", "--python", service_python))
    assert {entry["name"] for entry in listed} == EXPECTED_DISTRIBUTIONS


def test_a_service_publishes_through_the_installed_wheel(
    service_python: Path, sqs_endpoint: str, tmp_path: Path
) -> None:
    sqs = boto3.client(
        "sqs", endpoint_url=sqs_endpoint, region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t"
    )
    url = sqs.create_queue(QueueName="orders")["QueueUrl"]

    # Run from elsewhere: `-c` puts the working directory on sys.path, and the checkout has functions/ and jobctl/.
    report = json.loads(_run(service_python, "-c", SERVICE, sqs_endpoint, url, *NOT_INSTALLED, cwd=tmp_path))

    assert report["importable"] == []
    assert "site-packages" in report["package"] and str(REPO_ROOT) not in report["package"]
    # The release, then the contract and catalog it carries: a changed catalog is a new version pip installs.
    assert report["version"] == wheel_version()
    assert report["version"].startswith(f"{RELEASE}+contract{CONTRACT_VERSION}.catalog")
    assert report["refused"].startswith("unknown job type 'no_such_job'; accepted: ")
    messages = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1, MessageSystemAttributeNames=["All"]
    )["Messages"]
    by_id = {message["MessageId"]: message for message in messages}
    assert set(by_id) == {report["sent"], report["for_tenant"]}
    assert json.loads(by_id[report["sent"]]["Body"]) == {"job": "order_confirmation", "id": "1001"}
    # A tenant's job on a standard queue: in the body, and the message group SQS's fair queues go by.
    tenants = by_id[report["for_tenant"]]
    assert json.loads(tenants["Body"]) == {"job": "order_confirmation", "id": "1002", "tenant": "acme-eu"}
    assert tenants["Attributes"]["MessageGroupId"] == "acme-eu"
