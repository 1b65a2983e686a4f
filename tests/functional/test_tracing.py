"""A job published from a traced request is a span in that trace, each of its attempts a sibling span (the real
worker on moto, OpenTelemetry's SDK with its in-memory exporter); a producer's forged trace context places a span
and changes nothing else; a queue without `tracing` makes none."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.util._once import Once

from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from sqs_jobs.tracing import TRACEPARENT, valid_traceparent
from sqs_jobs.worker.clients import ClientFactory
from sqs_jobs.worker.names import SUCCEEDED
from tests.functional.conftest import Harness, envelope, metric_values
from tests.functional.sample_jobs import flaky, span_seen

TRACED = QueueSpec(
    name="traced",
    tracing=True,
    backoff_base_s=1,
    backoff_cap_s=1,
    jobs=(
        JobSpec(name="flaky", handler="tests.functional.sample_jobs.flaky"),
        JobSpec(name="span_seen", handler="tests.functional.sample_jobs.span_seen"),
    ),
)
PLAIN = QueueSpec(name="plain", jobs=(JobSpec(name="plain_flaky", handler="tests.functional.sample_jobs.flaky"),))
CATALOG = Catalog(queues=(TRACED, PLAIN))


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    """A tracer provider of this module's own, exporting to memory; afterwards the process has none again (the
    other tests' traced workers record nothing), reset as OpenTelemetry's own test utilities reset it."""
    provider = TracerProvider()
    found = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(found))
    _reset_tracer_provider()
    trace.set_tracer_provider(provider)
    yield found
    provider.shutdown()
    _reset_tracer_provider()


def _reset_tracer_provider() -> None:
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None


@pytest.fixture
def harness(clients: ClientFactory, exporter: InMemorySpanExporter) -> Iterator[Harness]:
    flaky.FAILURES.clear()
    flaky.SIDE_EFFECTS.clear()
    span_seen.SEEN.clear()
    exporter.clear()
    yield Harness.provisioned(clients, CATALOG)


def _runs(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.kind is SpanKind.CONSUMER]


def test_a_job_published_in_a_traced_request_runs_as_a_span_of_that_trace(
    harness: Harness, exporter: InMemorySpanExporter
) -> None:
    with trace.get_tracer("checkout").start_as_current_span("POST /checkout") as request:
        harness.publish("flaky", "order-1")
    assert (invocation := harness.deliver("traced")) is not None and invocation.failed_ids == []

    [run] = _runs(exporter)
    assert run.context is not None and run.parent is not None
    assert run.context.trace_id == request.get_span_context().trace_id
    assert run.parent.span_id == request.get_span_context().span_id
    assert run.name == "flaky process"
    attributes = dict(run.attributes or {})
    assert (attributes["jobs.job"], attributes["jobs.id"], attributes["jobs.outcome"]) == (
        "flaky",
        "order-1",
        "succeeded",
    )
    assert attributes["messaging.destination.name"] == "traced" and isinstance(attributes["jobs.queue_wait_ms"], int)
    assert 0 <= attributes["jobs.queue_wait_ms"] < 60_000
    assert run.status.status_code is not StatusCode.ERROR


def test_each_attempt_is_a_sibling_span_and_a_failed_one_says_so(
    harness: Harness, exporter: InMemorySpanExporter
) -> None:
    flaky.FAILURES["order-2"] = 1
    with trace.get_tracer("checkout").start_as_current_span("POST /checkout") as request:
        harness.publish("flaky", "order-2")
    first = harness.deliver("traced")
    assert first is not None and first.failed_ids
    harness.expire_visibility(first, "traced")
    assert (second := harness.deliver("traced")) is not None and second.failed_ids == []

    failed, succeeded = _runs(exporter)
    for span in (failed, succeeded):
        assert span.parent is not None and span.parent.span_id == request.get_span_context().span_id
    assert dict(failed.attributes or {})["jobs.outcome"] == "retried"
    assert failed.status.status_code is StatusCode.ERROR
    assert dict(failed.attributes or {})["error.type"]
    assert (dict(succeeded.attributes or {})["jobs.outcome"], dict(succeeded.attributes or {})["jobs.receive"]) == (
        "succeeded",
        2,
    )


@pytest.mark.parametrize(
    "forged",
    ["00-zzzz-not-a-trace-01", "00-" + "0" * 32 + "-" + "1" * 16 + "-01", "00-" + "a" * 32 + "-" + "b" * 16 + "-01"],
    ids=["malformed", "zero trace ID", "well-formed"],
)
def test_a_producers_traceparent_places_the_span_and_changes_nothing_counted(
    harness: Harness, exporter: InMemorySpanExporter, forged: str
) -> None:
    sqs = harness.clients("sqs")
    sqs.send_message(
        QueueUrl=harness.deployment.queues["traced"].url,
        MessageBody=envelope("flaky", "order-3"),
        MessageAttributes={TRACEPARENT: {"DataType": "String", "StringValue": forged}},
    )

    assert (invocation := harness.deliver("traced")) is not None and invocation.failed_ids == []

    [run] = _runs(exporter)
    assert run.context is not None
    placed = valid_traceparent(forged) is not None
    assert (run.parent is not None) is placed
    if placed:
        assert f"{run.context.trace_id:032x}" == "a" * 32
    assert flaky.SIDE_EFFECTS["order-3"] == 1
    assert sum(sum(metric_values(doc, SUCCEEDED)) for doc in harness.metrics() if SUCCEEDED in doc) == 1


def test_a_queue_without_tracing_makes_no_span(harness: Harness, exporter: InMemorySpanExporter) -> None:
    with trace.get_tracer("checkout").start_as_current_span("POST /checkout"):
        harness.publish("plain_flaky", "order-4")
    assert (invocation := harness.deliver("plain")) is not None and invocation.failed_ids == []

    assert _runs(exporter) == []
    # The message still carried the caller's trace: a queue that turns tracing on later links it.
    [producer_span] = exporter.get_finished_spans()
    assert producer_span.name == "POST /checkout"


def test_the_jobs_own_code_runs_under_the_runs_span(harness: Harness, exporter: InMemorySpanExporter) -> None:
    """A job's own instrumented calls (and the jobs it publishes) are children of its run, though its code runs in a
    job thread of its own (its time limit)."""
    with trace.get_tracer("checkout").start_as_current_span("POST /checkout"):
        harness.publish("span_seen", "order-5")
    assert (invocation := harness.deliver("traced")) is not None and invocation.failed_ids == []

    [run] = _runs(exporter)
    [seen] = span_seen.SEEN
    assert run.context is not None and seen.span_id == run.context.span_id


def test_job_show_names_the_trace_of_the_jobs_newest_run(harness: Harness, exporter: InMemorySpanExporter) -> None:
    from tests.functional.test_job_lookup import _lookup

    with trace.get_tracer("checkout").start_as_current_span("POST /checkout") as request:
        harness.publish("flaky", "order-9")
    assert (invocation := harness.deliver("traced")) is not None and invocation.failed_ids == []

    found = _lookup(harness, "flaky", "order-9", queue="traced")

    trace_id = format(request.get_span_context().trace_id, "032x")
    assert found.record is not None and found.record.trace_id == trace_id
    assert found.to_dict()["record"]["trace_id"] == trace_id
    plain = harness.publish("plain_flaky", "order-9")
    assert plain is not None and harness.deliver("plain") is not None
    untraced = _lookup(harness, "plain_flaky", "order-9", queue="plain")
    assert untraced.record is not None and untraced.record.trace_id is None  # a queue without tracing writes none


def test_a_traced_queue_whose_layer_lacks_opentelemetry_runs_its_jobs_untraced_and_says_why(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    # The worker's layer without the `tracing` extra: neither OpenTelemetry nor the module that needs it imports.
    for name in [name for name in sys.modules if name == "opentelemetry" or name.startswith("opentelemetry.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    monkeypatch.delitem(sys.modules, "sqs_jobs.worker.tracing", raising=False)
    harness.publish("flaky", "order-10")

    invocation = harness.deliver("traced")

    assert invocation is not None and invocation.failed_ids == []
    assert flaky.SIDE_EFFECTS["order-10"] == 1
    said = [
        line for line in harness.log_lines() if "OpenTelemetry is not in the worker's layer" in str(line.get("message"))
    ]
    assert said and said[0]["level"] == "WARNING"


def test_a_traced_durable_jobs_step_attempts_are_spans_of_its_publishers_trace(
    clients: ClientFactory, exporter: InMemorySpanExporter
) -> None:
    from sqs_jobs.durable import Durable
    from tests.functional.sample_jobs import traced_steps

    catalog = Catalog(
        queues=(
            QueueSpec(
                name="durable_traced",
                tracing=True,
                backoff_base_s=1,
                backoff_cap_s=1,
                jobs=(
                    JobSpec(
                        name="traced_steps",
                        handler="tests.functional.sample_jobs.traced_steps",
                        durable=Durable(execution_timeout_s=600, retention_days=1, step_time_limit_s=5),
                    ),
                ),
            ),
        )
    )
    traced_steps.FAIL_ONCE.add("import-1")
    traced_steps.SEEN.clear()
    exporter.clear()
    harness = Harness.provisioned(clients, catalog)
    try:
        with trace.get_tracer("checkout").start_as_current_span("POST /imports") as request:
            harness.publish("traced_steps", "import-1")
        assert (invocation := harness.deliver("durable_traced")) is not None and invocation.failed_ids == []
        assert harness.durable_result("traced_steps", "import-1").status.value == "SUCCEEDED"
    finally:
        harness.close()

    steps = [span for span in exporter.get_finished_spans() if " step " in span.name]
    trace_id = request.get_span_context().trace_id
    assert [(span.name, dict(span.attributes or {})["jobs.attempt"]) for span in steps] == [
        ("traced_steps step fetch", 1),
        ("traced_steps step fetch", 2),
        ("traced_steps step store", 1),
    ]
    for span in steps:  # each the child of the publisher's span, in its trace
        assert span.context is not None and span.context.trace_id == trace_id
        assert span.parent is not None and span.parent.span_id == request.get_span_context().span_id
    failed = steps[0]
    assert failed.status.status_code is StatusCode.ERROR
    assert dict(failed.attributes or {})["error.type"] == "TransientError"
    # The step's own code ran under its attempt's span.
    assert [span_id for _, span_id in traced_steps.SEEN] == [steps[0].context.span_id, steps[1].context.span_id]


def test_jobctl_enqueue_places_the_job_in_the_trace_it_is_given(harness: Harness) -> None:
    from click.testing import CliRunner

    from sqs_jobs.cli.cli import main as jobctl

    given = "00-" + "4bf92f3577b34da6a3ce929d0e0e4736" + "-" + "00f067aa0ba902b7" + "-01"
    env = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}
    args = ["--catalog", "tests.functional.test_tracing:CATALOG", "--stack", harness.deployment.stack_name]

    sent = CliRunner().invoke(
        jobctl, [*args, "enqueue", "traced", "flaky", "order-11", "--traceparent", given], env=env
    )
    refused = CliRunner().invoke(
        jobctl, [*args, "enqueue", "traced", "flaky", "order-12", "--traceparent", "00-zz"], env=env
    )

    assert sent.exit_code == 0, sent.output
    [message] = harness.clients("sqs").receive_message(
        QueueUrl=harness.deployment.queues["traced"].url, MessageAttributeNames=["All"], MaxNumberOfMessages=10
    )["Messages"]
    carried = message["MessageAttributes"][TRACEPARENT]["StringValue"]
    assert carried.split("-")[1:3] == given.split("-")[1:3]  # the trace, and the span its runs are children of
    assert refused.exit_code == 2 and "is not a W3C traceparent" in refused.output
