"""A queue's page in the console lists the flow limits its runs pass, with what their store holds now: an unkeyed
rate limit's free tokens after the runtime's own limiter spent some, keyed limits said to be per key; a queue
without limits shows no such section. Over real HTTP, on the local engine with a catalog that declares limits."""

from __future__ import annotations

import html
import io
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sqs_jobs.cli.console.server import ConsoleServer
from sqs_jobs.flow_control import KeyConcurrency, RateLimit, job_rate_limit_name
from sqs_jobs.local.engine import LocalEngine
from sqs_jobs.resources import Endpoint
from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from sqs_jobs.worker.rate_limit import RateLimiter, TokenBucketStore
from tests.e2e.console_requests import console_request

pytestmark = pytest.mark.e2e

HANDLER = "tests.functional.sample_jobs.gather"
# One token every 100 s, 4 at once: leased one at a time, so the bucket holds every token and a read is exact.
IMPORTS_LIMIT = RateLimit(per_second=0.01, burst=4)
PARTNER = Endpoint(
    name="partner_api",
    description="a partner's API, 10 calls a second from every job",
    default_url="https://partner.example.com",
    rate_limit=RateLimit(per_second=10, burst=20),
)
LIMITED = Catalog(
    resources=(PARTNER,),
    queues=(
        QueueSpec(
            name="imports",
            jobs=(
                JobSpec(
                    name="import_customer",
                    handler=HANDLER,
                    resources=("partner_api",),
                    rate_limit=IMPORTS_LIMIT,
                    concurrency=KeyConcurrency(per="customer"),
                ),
            ),
        ),
        QueueSpec(name="plain", jobs=(JobSpec(name="plain_job", handler=HANDLER),)),
    ),
)


@pytest.fixture(scope="module")
def engine() -> Iterator[LocalEngine]:
    with LocalEngine(
        port=0, catalog=LIMITED, run_workers=False, worker_output=io.StringIO(), heartbeat_interval_s=3600
    ) as running:
        yield running


@pytest.fixture
def console(engine: LocalEngine, tmp_path: Path) -> Iterator[ConsoleServer]:
    with ConsoleServer(engine.clients(), engine.stack_name, port=0, archive_dir=tmp_path, catalog=LIMITED) as server:
        yield server


def _limits(page: str) -> dict[str, tuple[str, str]]:
    """The flow limits table: limit -> (declared, now), as the browser shows the text."""
    rows = re.findall(r"<tr><th scope=\"row\"><code>([^<]*)</code></th><td>([^<]*)</td><td>([^<]*)</td></tr>", page)
    return {html.unescape(name): (html.unescape(declared), html.unescape(now)) for name, declared, now in rows}


def test_a_queue_page_lists_its_limits_and_an_unkeyed_rate_limits_free_tokens(
    engine: LocalEngine, console: ConsoleServer
) -> None:
    assert engine.deployment is not None
    # Three runs' tokens, taken as a worker takes them, by the runtime's limiter on the engine's table.
    dynamodb = engine.clients()("dynamodb")
    limiter = RateLimiter(TokenBucketStore(lambda: dynamodb, engine.deployment.idempotency_table))
    for _ in range(3):
        limiter.acquire(job_rate_limit_name("import_customer"), "", IMPORTS_LIMIT, wait_until=time.time())

    response, page = console_request(console, "GET", "/queues/imports")

    assert response.status == 200
    assert 'id="flow-limits"' in page
    assert _limits(page) == {
        "key:import_customer": (
            "1 at once per customer; held at most 3600s",
            "per customer value: `jobctl job show JOB ID` lists a key's slots",
        ),
        # 3 of its 4 tokens taken, the next one due in 100 s.
        "job:import_customer": ("0.01/s, burst 4; held at most 900s", "1 of 4 token(s) free now"),
        # No call made yet: the bucket is full but for one lease (10 tokens) kept back for leases.
        "endpoint:partner_api": ("10/s, burst 20; held at most 900s", "10 of 20 token(s) free now"),
    }


def test_a_queue_without_limits_has_no_limits_section(console: ConsoleServer) -> None:
    response, page = console_request(console, "GET", "/queues/plain")

    assert response.status == 200
    assert 'id="flow-limits"' not in page and _limits(page) == {}
