"""The distribution as a service gets it: the wheel `make dist` builds, installed without extras into a fresh venv
on the oldest Python it supports, publishing to a stack (a moto server holding its SSM parameters and queue) with
nothing but boto3 installed. And what the wheel holds: the framework, no example app."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import boto3
import pytest
from moto.server import ThreadedMotoServer

from functions.catalog import CATALOG
from sqs_jobs.contract import JobContract
from sqs_jobs.local.engine import free_port
from sqs_jobs.stack_names import QUEUE_URL, contract_parameter_name, parameter_name

REPO_ROOT = Path(__file__).resolve().parents[2]
UV = REPO_ROOT / ".tools" / "bin" / "uv"
# lib/pyproject.toml's requires-python: the oldest Python a service may run the publisher on.
OLDEST_PYTHON = "python3.11"
# boto3's own dependency tree and the wheel: what a publishing service gets, nothing more.
EXPECTED_DISTRIBUTIONS = {
    "sqs-jobs",
    *("boto3", "botocore", "s3transfer", "jmespath", "python-dateutil", "six", "urllib3"),
}
NOT_INSTALLED = ("moto", "functions", "infra", "aws_lambda_powertools", "aws_cdk", "flask", "click", "docker")
# The stack the service publishes to, as its SSM parameters name it.
STACK = "ShopJobs"

SERVICE = """
import importlib.util, json, sys
import boto3
import sqs_jobs
from sqs_jobs import JobPublisher, UnknownJobError

endpoint, stack = sys.argv[1:3]
credentials = {"endpoint_url": endpoint, "region_name": "us-east-1", "aws_access_key_id": "service",
               "aws_secret_access_key": "service"}
# The stack's contract routes each job to its queue: the service carries no catalog.
publisher = JobPublisher.from_stack(boto3.client("ssm", **credentials), boto3.client("sqs", **credentials),
                                    stack_name=stack, queues=["orders"])
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
    "loaded": sorted(name for name in sys.modules if name.startswith("sqs_jobs.")),
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
    [wheel] = _wheel(dist)
    venv = tmp_path_factory.mktemp("service") / "venv"
    _run(UV, "venv", "--quiet", "--python", interpreter, venv)
    _run(UV, "pip", "install", "--quiet", "--python", venv / "bin" / "python", wheel)
    return venv / "bin" / "python"


def _wheel(dist: Path) -> list[Path]:
    _run(UV, "build", "--package", "sqs-jobs", "--wheel", "--out-dir", dist, "--quiet")
    return list(dist.glob("sqs_jobs-*-py3-none-any.whl"))


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
    ssm = boto3.client(
        "ssm", endpoint_url=sqs_endpoint, region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t"
    )
    ssm.put_parameter(Name=parameter_name(STACK, "orders", QUEUE_URL), Value=url, Type="String")
    contract = JobContract.from_catalog(CATALOG).to_json()
    ssm.put_parameter(Name=contract_parameter_name(STACK), Value=contract, Type="String")

    # Run from elsewhere: `-c` puts the working directory on sys.path, and the checkout has functions/ and infra/.
    report = json.loads(_run(service_python, "-c", SERVICE, sqs_endpoint, STACK, *NOT_INSTALLED, cwd=tmp_path))

    assert report["importable"] == []
    assert "site-packages" in report["package"] and str(REPO_ROOT) not in report["package"]
    # One version, the distribution's (lib/pyproject.toml), whatever catalog a project runs.
    assert report["version"] == version("sqs-jobs")
    # The publisher's modules only: no worker, CLI, CDK or local engine module came with it.
    assert not [
        name
        for name in report["loaded"]
        if name.startswith(("sqs_jobs.worker", "sqs_jobs.cli", "sqs_jobs.cdk", "sqs_jobs.local"))
    ]
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


def test_the_wheel_holds_the_framework_and_no_example_app(tmp_path: Path) -> None:
    [wheel] = _wheel(tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        texts = [archive.read(name).decode() for name in names if name.endswith((".py", ".html", ".txt", ".toml"))]
        metadata = archive.read(next(name for name in names if name.endswith(".dist-info/METADATA"))).decode()
        entry_points = archive.read(next(name for name in names if name.endswith("entry_points.txt"))).decode()

    tops = {name.split("/", 1)[0] for name in names}
    assert tops == {"sqs_jobs", f"sqs_jobs-{version('sqs-jobs')}.dist-info"}
    packages = {name.split("/")[1] for name in names if name.startswith("sqs_jobs/") and name.count("/") > 1}
    assert {"worker", "durable", "cdk", "cli", "local", "testing", "maintenance"} <= packages
    # No job, queue or resource of the example deployment is named anywhere in it.
    example = [job.name for queue in CATALOG for job in queue.jobs if not job.handler.startswith("sqs_jobs.")]
    assert [word for word in example if any(word in text for text in texts)] == []
    # Extras select what a project needs; the bare install is the publisher.
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert [line for line in requires if "extra ==" not in line] == ["Requires-Dist: boto3>=1.40"]
    assert {line.split("extra == ")[1].strip("'\"") for line in requires if "extra ==" in line} == {
        "worker",
        "cdk",
        "cli",
        "testing",
        "tracing",
    }
    assert "jobctl = sqs_jobs.cli.cli:main" in entry_points
    assert "Requires-Python: >=3.11" in metadata
