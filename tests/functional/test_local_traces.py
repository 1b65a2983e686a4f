"""`jobctl local --traces`: the engine's process exports the traced queues' spans as JSON lines (OpenTelemetry's SDK),
here from the real worker on moto: a run published from a traced request is a line naming that trace."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.util._once import Once

from sqs_jobs.local.traces import export_traces
from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from sqs_jobs.worker.clients import ClientFactory
from tests.functional.conftest import Harness

CATALOG = Catalog(
    queues=(
        QueueSpec(
            name="traced", tracing=True, jobs=(JobSpec(name="flaky", handler="tests.functional.sample_jobs.flaky"),)
        ),
    )
)


def _reset_tracer_provider() -> None:
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None


@pytest.fixture
def exported() -> Iterator[io.StringIO]:
    """What `jobctl local --traces` installs, writing to memory; the process has no provider again afterwards."""
    out = io.StringIO()
    _reset_tracer_provider()
    provider = export_traces(out)
    yield out
    provider.shutdown()
    _reset_tracer_provider()


def test_each_traced_run_is_written_as_a_json_line_of_its_publishers_trace(
    clients: ClientFactory, exported: io.StringIO
) -> None:
    harness = Harness.provisioned(clients, CATALOG)
    with trace.get_tracer("checkout").start_as_current_span("POST /checkout") as request:
        harness.publish("flaky", "order-77")
    assert (invocation := harness.deliver("traced")) is not None and invocation.failed_ids == []

    lines = [json.loads(line) for line in exported.getvalue().splitlines()]
    [run] = [line for line in lines if line["name"] == "flaky process"]
    assert run["context"]["trace_id"] == f"0x{request.get_span_context().trace_id:032x}"
    assert run["kind"] == "SpanKind.CONSUMER" and run["attributes"]["jobs.id"] == "order-77"
    assert run["resource"]["attributes"]["service.name"] == "sqs-jobs-local"
    assert lines[0]["name"] == "POST /checkout"  # the request's span, ended first
