"""Each catalog queue's alarms, on the shared synth: every signal, its metric, threshold, missing-data treatment,
the topic action and a description naming the runbook section and the command to run first."""

from __future__ import annotations

import re

import pytest

from functions.catalog import CATALOG
from sqs_jobs.cdk.durable_function import DURABLE_FAILED, DURABLE_TIMED_OUT, durable_signal
from sqs_jobs.cdk.naming import alarm_name
from sqs_jobs.limits import MINUTE
from sqs_jobs.specs import AlarmThresholds, QueueSpec
from tests.infra.alarm_checks import SIGNALS, QueueUnderTest, check_signal, signals
from tests.infra.cfn import of_type, props
from tests.infra.conftest import REPO_ROOT, Synth

QUEUES = pytest.mark.parametrize("spec", CATALOG.queues, ids=lambda spec: spec.name)
SIGNALS_OF_QUEUES = pytest.mark.parametrize(
    ("spec", "signal"),
    [(spec, signal) for spec in CATALOG for signal in signals(spec)],
    ids=[f"{spec.name}-{signal}" for spec in CATALOG for signal in signals(spec)],
)


def _under_test(synth: Synth, spec: QueueSpec) -> QueueUnderTest:
    (topic,) = of_type(synth.resources, "AWS::SNS::Topic")
    return QueueUnderTest(synth.resources, synth.context.stack_name, spec, {"Ref": topic})


def test_every_queue_has_exactly_its_alarms(synth: Synth) -> None:
    names = {props(synth.resources, key)["AlarmName"] for key in of_type(synth.resources, "AWS::CloudWatch::Alarm")}

    expected = {alarm_name(synth.context.stack_name, spec.name, signal) for spec in CATALOG for signal in signals(spec)}
    # ...and two for the whole stack: deliveries the scheduler could not make (test_schedules.py), and batches that
    # stall (test_batch_workflows.py).
    stack_wide = {
        f"{synth.context.stack_name}-schedules-failed-deliveries",
        f"{synth.context.stack_name}-batches-stalled",
    }
    # ...and two per durable job: its executions failing or timing out (test_durable.py).
    durable = {
        alarm_name(synth.context.stack_name, spec.name, durable_signal(signal, job.name))
        for spec in CATALOG
        for job in spec.jobs
        if job.durable is not None
        for signal in (DURABLE_FAILED, DURABLE_TIMED_OUT)
    }

    assert names == expected | stack_wide | durable
    # 13 per queue (each retries its jobs; 11 where every job is durable), plus one per job: 14 for each of today's
    # one-job queues; plus the stack-wide two.
    assert all(spec.max_attempts > 1 for spec in CATALOG)
    assert len(names) == sum(len(signals(spec)) for spec in CATALOG) + len(stack_wide) + len(durable)


def test_every_alarm_name_lets_it_publish_to_the_topic(synth: Synth) -> None:
    # The topic policy lets only alarms named <stack_name>-* publish.
    for key in of_type(synth.resources, "AWS::CloudWatch::Alarm"):
        assert props(synth.resources, key)["AlarmName"].startswith(f"{synth.context.stack_name}-")


@SIGNALS_OF_QUEUES
def test_alarm(synth: Synth, spec: QueueSpec, signal: str) -> None:
    check_signal(_under_test(synth, spec), signal)


def test_the_catalog_defaults_are_the_documented_ones() -> None:
    assert AlarmThresholds() == AlarmThresholds(
        oldest_message_age_s=15 * MINUTE,
        dlq_depth=1,
        backlog=1000,
        dlq_arrivals=1,
        failure_rate=0.1,
        failure_rate_min_runs=10,
        stalled_after_s=10 * MINUTE,
        duration_ratio=0.8,
        heartbeat_interval_s=5 * MINUTE,
        heartbeat_missing_after_s=15 * MINUTE,
        circuit_opened=1,
        # Derived: 3, or max_attempts - 1 where a queue allows fewer runs.
        retry_attempts=None,
        hold_share=0.8,
    )
    assert AlarmThresholds().retry_alarm_attempts(max_attempts=10) == 3


@QUEUES
def test_default_thresholds_reach_the_template(synth: Synth, spec: QueueSpec) -> None:
    under_test = _under_test(synth, spec)
    assert spec.alarms == AlarmThresholds(), "the catalog's queues run on the defaults"

    assert under_test.alarm("oldest-message-age")["Threshold"] == 900
    assert under_test.alarm("backlog")["Threshold"] == 1000
    assert under_test.alarm("dlq-depth")["Threshold"] == 1
    assert under_test.alarm("dlq-arrivals")["Threshold"] == 1
    assert under_test.alarm("failure-rate")["Threshold"] == 0.1
    stalled = under_test.alarm("stalled")
    assert (stalled["DatapointsToAlarm"], stalled["EvaluationPeriods"]) == (10, 12)
    assert under_test.alarm("heartbeat-missing")["EvaluationPeriods"] == 15
    assert under_test.alarm("retrying")["Threshold"] == 3
    if "circuit-open" in signals(spec):  # not where every job is durable
        assert under_test.alarm("circuit-open")["Threshold"] == 1
        assert under_test.alarm("held-near-bound")["Threshold"] == 0.8
    for job in spec.job_names:
        expected_ms = 0.8 * spec.time_limit_s(job) * 1000
        assert under_test.alarm(f"duration-{job}")["Threshold"] == expected_ms


def test_the_invoice_job_alarms_at_48_seconds_of_its_60() -> None:
    # The article's incident: generate_invoice's limit is 60 s, so its duration alarm sits at 48 000 ms.
    invoices = CATALOG.queue("invoices")
    assert invoices.alarms.duration_ratio * invoices.time_limit_s("generate_invoice") * 1000 == 48_000


def test_every_runbook_anchor_is_a_runbook_heading() -> None:
    runbook = REPO_ROOT / "docs" / "runbook.md"
    headings = re.findall(r"^#+ (.+)$", runbook.read_text(), flags=re.MULTILINE)
    anchors = {re.sub(r"[^a-z0-9 -]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}
    used = {anchor for anchor, _ in SIGNALS.values()} | {"jobs-near-their-time-limit", "scheduled-deliveries-failed"}
    # What docs/monitoring.md sends flow control's operators to besides its alarm.
    used |= {"records-held-by-a-rate-limit-or-a-busy-key", "the-limits-store-failing"}
    assert used <= anchors, f"missing headings for {sorted(used - anchors)}"
