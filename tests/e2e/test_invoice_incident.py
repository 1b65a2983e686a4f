"""Replayed on the local engine: a hanging invoicing API no longer stops the queue.

The article's incident: one job hung on an HTTP call without a timeout, the only worker with it, and nobody
noticed until morning. Here the invoicing API hangs for one invoice; the others still land within seconds,
the hung one is cut at its time limit and retried (never lost), and once the API answers again it lands too,
with exactly one invoice per job created at the API however often the job ran.
"""

from __future__ import annotations

import io
import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest

from example.records import invoice_item
from example.standins.invoicing import FakeInvoicingApi
from functions.catalog import CATALOG
from functions.catalog import RESOURCES as APP_RESOURCES
from sqs_jobs.local.engine import LocalEngine, free_port
from sqs_jobs.publisher import JobPublisher
from sqs_jobs.specs import Catalog
from tests.e2e.processes import ROOT, cli_env, jobctl_local

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

QUEUE = "invoices"
INVOICE_IDS = [f"INV-{number}" for number in range(1, 7)]
HUNG = "INV-3"
_INVOICES = CATALOG.queue(QUEUE)
# The shipped settings (60 s limit in a 120 s function, backoff from 30 s) at test speed. The attempts are
# raised so that the hung invoice cannot use them all up while the test watches it being retried.
INCIDENT = replace(
    _INVOICES,
    function_timeout_s=6,
    max_concurrency=2,
    max_attempts=30,
    backoff_base_s=1,
    backoff_cap_s=2,
    # The longest limit a 6 s function serves: healthy runs stay far below it even on a loaded machine.
    jobs=tuple(replace(job, time_limit_s=3) for job in _INVOICES.jobs),
)
INCIDENT_CATALOG = Catalog(
    resources=APP_RESOURCES, queues=tuple(INCIDENT if queue.name == QUEUE else queue for queue in CATALOG)
)


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str, poll_s: float = 0.2) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout_s:g} s: {what}")
        time.sleep(poll_s)


@pytest.fixture
def worker_log() -> io.StringIO:
    return io.StringIO()


@pytest.fixture
def engine(worker_log: io.StringIO) -> Iterator[LocalEngine]:
    with LocalEngine(port=0, catalog=INCIDENT_CATALOG, worker_output=worker_log) as running:
        yield running


def stored_invoices(engine: LocalEngine) -> set[str]:
    assert engine.deployment is not None
    s3 = engine.clients()("s3")
    listed = s3.list_objects_v2(Bucket=engine.deployment.resources["invoices_bucket"], Prefix="invoices/")
    return {item["Key"].removeprefix("invoices/").removesuffix(".pdf") for item in listed.get("Contents", [])}


def dead_letter_count(engine: LocalEngine) -> int:
    assert engine.deployment is not None
    attributes: dict[str, Any] = (
        engine.clients()("sqs")
        .get_queue_attributes(
            QueueUrl=engine.deployment.queues[QUEUE].dlq_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )
        .get("Attributes", {})
    )
    return sum(int(value) for value in attributes.values())


def invoicing(engine: LocalEngine) -> FakeInvoicingApi:
    standin = engine.standins["invoicing_api_url"]
    assert isinstance(standin, FakeInvoicingApi)
    return standin


def test_a_hanging_invoicing_api_no_longer_stops_the_queue(engine: LocalEngine, worker_log: io.StringIO) -> None:
    assert engine.deployment is not None
    clients = engine.clients()
    for invoice_id in INVOICE_IDS:
        clients("dynamodb").put_item(
            TableName=engine.deployment.resources["invoices_table"],
            Item=invoice_item(invoice_id),
        )
    invoicing(engine).set_mode("hang", only_ids=[HUNG])
    publisher = JobPublisher(clients("sqs"), {QUEUE: engine.deployment.queues[QUEUE].url}, catalog=CATALOG)
    publisher.publish_many([("generate_invoice", invoice_id) for invoice_id in INVOICE_IDS])

    # Every other invoice lands, though the API never answers for one of them.
    others = set(INVOICE_IDS) - {HUNG}
    wait_for(lambda: others <= stored_invoices(engine), 30, "the invoices the API answers for are stored")
    assert HUNG not in stored_invoices(engine)

    # The hung one is cut and retried, again and again, not lost and not dead-lettered. (Cold workers may first
    # hand records back unrun, for want of time: those are failed records too, so the cuts are what is counted.)
    def cuts() -> list[dict[str, Any]]:
        lines = map(json.loads, worker_log.getvalue().splitlines())
        return [line for line in lines if line.get("error_type") == "JobTimeLimitError"]

    wait_for(lambda: len(cuts()) >= 2, 30, "the hung invoice is cut at its time limit and retried at least twice")
    assert HUNG not in stored_invoices(engine)
    assert dead_letter_count(engine) == 0
    assert engine.stats()[QUEUE]["timeouts"] == 0  # every invocation returned within its function timeout
    assert {line["id"] for line in cuts()} == {HUNG}

    # The API recovers: the hung invoice lands too, and the API created one invoice per job.
    invoicing(engine).set_mode("ok")
    wait_for(lambda: HUNG in stored_invoices(engine), 30, "the hung invoice is stored once the API answers")
    assert engine.wait_until_idle(timeout_s=30)
    assert stored_invoices(engine) == set(INVOICE_IDS)
    assert invoicing(engine).created_count() == len(INVOICE_IDS)
    assert invoicing(engine).created_count(HUNG) == 1
    assert invoicing(engine).requests_for(f"generate_invoice:{HUNG}") >= 1
    assert dead_letter_count(engine) == 0


def test_jobctl_local_starts_the_fake_invoicing_api_in_the_mode_asked_and_prints_its_url() -> None:
    with jobctl_local("--port", str(free_port()), "--standin", "invoicing_api_url:mode=hang") as process:
        assert process.stdout is not None
        # Its banner: the engine's line, one per catalog queue, then one per resource
        banner = [process.stdout.readline() for _ in range(1 + len(CATALOG.queues) + len(CATALOG.resources))]
        [line] = [line for line in banner if "Endpoint invoicing_api_url:" in line]
        assert line.rstrip().endswith("(stand-in)")
        url = line.split("invoicing_api_url:", 1)[1].split()[0]
        with urllib.request.urlopen(f"{url}/_stats", timeout=5) as response:
            assert json.load(response)["mode"] == "hang"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0


@pytest.mark.parametrize("busy", ["--port", "--standin"])
def test_jobctl_local_on_a_busy_port_fails_at_once_in_one_line(busy: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy_port = taken.getsockname()[1]
        ports = {"--port": free_port(), "--standin": free_port(), busy: busy_port}
        args = ["--port", str(ports["--port"]), "--standin", f"invoicing_api_url:port={ports['--standin']}"]
        env = cli_env()

        result = subprocess.run(
            [sys.executable, "-m", "sqs_jobs.cli", "local", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )

    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"jobctl: error: cannot start the local engine (port {ports['--port']}, or a stand-in's port): "
        "Address already in use"
    ]


def test_jobctl_local_refuses_a_stand_in_option_it_has_no_endpoint_for_in_one_line() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "sqs_jobs.cli", "local", "--port", str(free_port()), "--standin", "images_api:mode=ok"],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )

    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "jobctl: error: no stand-in named 'images_api'; endpoints with one: invoicing_api_url"
    ]
