"""What the dashboard must show for each queue, read from its rendered body. Used on the shared synth and the
overrides synth."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from sqs_jobs.flow_control import KeyConcurrency, RateLimit
from sqs_jobs.limits import MINUTE
from sqs_jobs.specs import Catalog, QueueSpec
from sqs_jobs.worker.names import (
    METRICS_NAMESPACE,
    SERVICE_NAME,
    SQS_NOISY_GROUPS,
    SQS_QUIET_OLDEST_AGE,
    SQS_QUIET_VISIBLE,
)
from tests.infra.cfn import Resources, of_type, props, queue_id, render, worker_id
from tests.infra.metric_math import evaluate

Widget = dict[str, Any]


def dashboard_body(resources: Resources) -> dict[str, Any]:
    (dashboard,) = of_type(resources, "AWS::CloudWatch::Dashboard")
    body: dict[str, Any] = json.loads(render(props(resources, dashboard)["DashboardBody"]))
    return body


def graph(body: dict[str, Any], title: str) -> Widget:
    (found,) = [widget for widget in body["widgets"] if widget["properties"].get("title") == title]
    widget: Widget = found
    return widget


def plain_metrics(widget: Widget) -> Iterator[tuple[str, str, dict[str, str], dict[str, Any]]]:
    """(namespace, name, dimensions, options) of each metric line (not expressions) of a graph."""
    for line in widget["properties"]["metrics"]:
        if isinstance(line[0], str):
            options = line[-1] if isinstance(line[-1], dict) else {}
            fields = line[:-1] if isinstance(line[-1], dict) else line
            dimensions = dict(zip(fields[2::2], fields[3::2], strict=True))
            yield fields[0], fields[1], dimensions, options


def expressions(widget: Widget) -> dict[str, dict[str, Any]]:
    """Expression lines of a graph, by label."""
    return {
        line[0]["label"]: line[0]
        for line in widget["properties"]["metrics"]
        if isinstance(line[0], dict) and "expression" in line[0]
    }


def horizontal_lines(widget: Widget) -> dict[str, float]:
    return {item["label"]: item["value"] for item in widget["properties"].get("annotations", {}).get("horizontal", [])}


def check_dashboard_queue(resources: Resources, stack_name: str, spec: QueueSpec, catalog: Catalog) -> None:
    body = dashboard_body(resources)
    name = spec.name
    queue = {"QueueName": f"{queue_id(resources, stack_name, spec)}.QueueName"}
    dlq = {"QueueName": f"{queue_id(resources, stack_name, spec, dlq=True)}.QueueName"}
    limits = spec.alarms

    backlog = graph(body, f"{name}: backlog and in flight")
    assert {(metric, tuple(dims.items())) for _, metric, dims, _ in plain_metrics(backlog)} == {
        ("ApproximateNumberOfMessagesVisible", tuple(queue.items())),
        ("ApproximateNumberOfMessagesNotVisible", tuple(queue.items())),
        *([] if spec.fifo else [(SQS_QUIET_VISIBLE, tuple(queue.items()))]),
    }
    assert horizontal_lines(backlog) == {"backlog alarm": limits.backlog}

    age = graph(body, f"{name}: age of the oldest job (s)")
    assert [(metric, dims) for _, metric, dims, _ in plain_metrics(age)] == [("ApproximateAgeOfOldestMessage", queue)]
    assert horizontal_lines(age) == {"age alarm": limits.oldest_message_age_s}

    depth = graph(body, f"{name}: DLQ depth")
    assert [(metric, dims) for _, metric, dims, _ in plain_metrics(depth)] == [
        ("ApproximateNumberOfMessagesVisible", dlq)
    ]
    assert horizontal_lines(depth) == {"DLQ alarm": limits.dlq_depth}

    runs = graph(body, f"{name}: runs per 5 min (all jobs)")
    assert set(expressions(runs)) == {"succeeded", "failed", "retried", "dead-lettered"}
    counted = {(metric, dims["job"]) for namespace, metric, dims, _ in plain_metrics(runs)}
    for metric in ("JobSucceeded", "JobFailed", "JobRetried", "JobDeadLettered"):
        assert {(metric, job) for job in spec.job_names} <= counted
    for namespace, _, dims, options in plain_metrics(runs):
        assert namespace == METRICS_NAMESPACE
        assert (dims["queue"], dims["service"], options["stat"]) == (name, SERVICE_NAME, "Sum")

    durations = graph(body, f"{name}: job duration p99 (ms) against the time limit")
    assert sorted(dims["job"] for _, metric, dims, _ in plain_metrics(durations) if metric == "JobDuration") == sorted(
        spec.job_names
    )
    assert {options["stat"] for *_, options in plain_metrics(durations)} == {"p99"}
    assert horizontal_lines(durations) == {f"{job} time limit": spec.time_limit_s(job) * 1000 for job in spec.job_names}

    concurrency = graph(body, f"{name}: worker concurrency")
    assert [(namespace, metric, dims) for namespace, metric, dims, _ in plain_metrics(concurrency)] == [
        ("AWS/Lambda", "ConcurrentExecutions", {"FunctionName": f"Ref:{worker_id(resources, spec)}"})
    ]
    assert horizontal_lines(concurrency) == {"max_concurrency": spec.max_concurrency}

    drain = graph(body, f"{name}: estimated time to drain (s)")
    check_time_to_drain(drain, queue)

    heartbeats = graph(body, f"{name}: heartbeats")
    assert [(metric, dims["job"]) for _, metric, dims, _ in plain_metrics(heartbeats)] == [("Heartbeat", "heartbeat")]

    circuits_title = f"{name}: circuit breakers opened, and records they held (per 5 min)"
    shares_title = f"{name}: longest hold, share of its bound (per 5 min)"
    # A queue whose jobs are all durable runs none in its worker: no breaker, no hold
    # (sqs_jobs.cdk.naming.queue_signals).
    runs_jobs = not all(job.durable is not None for job in spec.jobs)
    if runs_jobs:
        check_circuit_breakers(graph(body, circuits_title), spec)
    else:
        assert not [w for w in body["widgets"] if w["properties"].get("title") in (circuits_title, shares_title)]

    retries = graph(body, f"{name}: most failed runs in a row of one job (per 5 min)")
    check_retries(retries, spec)

    check_fair_queue(body, spec, queue)
    if runs_jobs:
        check_hold_share(graph(body, shares_title), spec)

    check_flow_control(body, spec, catalog)


def check_fair_queue(body: dict[str, Any], spec: QueueSpec, queue: dict[str, str]) -> None:
    """A standard queue's tenants as SQS's fair queues report them (AWS/SQS, by QueueName); none for a FIFO queue,
    whose message groups are its order."""
    titles = (
        f"{spec.name}: tenants SQS deems noisy (fair queues)",
        f"{spec.name}: age of the oldest job (s), every tenant's and the quiet tenants'",
    )
    if spec.fifo:
        assert not [widget for widget in body["widgets"] if widget["properties"].get("title") in titles]
        return
    noisy, ages = (graph(body, title) for title in titles)
    assert [(ns, metric, dims, options["stat"]) for ns, metric, dims, options in plain_metrics(noisy)] == [
        ("AWS/SQS", SQS_NOISY_GROUPS, queue, "Maximum")
    ]
    assert [(metric, dims) for _, metric, dims, _ in plain_metrics(ages)] == [
        ("ApproximateAgeOfOldestMessage", queue),
        (SQS_QUIET_OLDEST_AGE, queue),
    ]
    assert horizontal_lines(ages) == {"age alarm": spec.alarms.oldest_message_age_s}


def check_hold_share(widget: Widget, spec: QueueSpec) -> None:
    """The held-near-bound alarm's figure: MAX over the jobs of HoldShare's Maximum, with its threshold and the
    bound."""
    lines = list(plain_metrics(widget))
    shares = {options["id"]: dims for _, metric, dims, options in lines if metric == "HoldShare"}
    assert len(shares) == len(lines), "nothing but HoldShare per job"
    assert sorted(dims["job"] for dims in shares.values()) == sorted(
        job.name for job in spec.jobs if job.durable is None
    )
    for namespace, _, dims, options in lines:
        assert (namespace, options["stat"], options.get("visible")) == (METRICS_NAMESPACE, "Maximum", False)
        assert dims == {"queue": spec.name, "job": dims["job"], "service": SERVICE_NAME}
    shown = expressions(widget)["longest hold, share of its bound"]
    values = {key: (index + 1) / (len(shares) + 1) for index, key in enumerate(shares)}
    assert evaluate(shown["expression"], values) == max(values.values())
    assert horizontal_lines(widget) == {
        "held-near-bound alarm": spec.alarms.hold_share,
        "max_hold_s (refusals spend attempts)": 1,
    }


FLOW_HELD = "{q}: records held by flow control (per 5 min)"
FLOW_WAITS = "{q}: waits for a rate limit's token, p99 (ms)"


def check_flow_control(body: dict[str, Any], spec: QueueSpec, catalog: Catalog) -> None:
    """A queue whose jobs or endpoints declare limits: the records they held (per reason summed over the jobs,
    and per holder by a SEARCH), and the token waits of its rate-limited jobs. Any other queue: neither graph."""
    name = spec.name
    titles = {widget["properties"].get("title") for widget in body["widgets"]}
    rated = sorted(job.name for job in spec.jobs if job.rate_limit is not None)
    if not catalog.flow_limits(name):
        assert FLOW_HELD.format(q=name) not in titles and FLOW_WAITS.format(q=name) not in titles
        return
    held = graph(body, FLOW_HELD.format(q=name))
    lines = list(plain_metrics(held))
    by_reason: dict[str, dict[str, str]] = {}
    for namespace, metric, dims, options in lines:
        assert (namespace, metric, options["stat"], options.get("visible")) == (
            METRICS_NAMESPACE,
            "JobDeferred",
            "Sum",
            False,
        )
        assert dims == {"queue": name, "job": dims["job"], "reason": dims["reason"], "service": SERVICE_NAME}
        by_reason.setdefault(dims["reason"], {})[options["id"]] = dims["job"]
    declared = catalog.flow_limits(name)
    # A line only for a reason the queue's limits can give: rate limits, busy keys.
    reasons = {
        reason
        for reason, kind in (("rate_limited", RateLimit), ("key_busy", KeyConcurrency))
        if any(isinstance(limit.limit, kind) for limit in declared)
    }
    assert set(by_reason) == reasons
    shown = expressions(held)
    for label, reason in (("held by rate limits", "rate_limited"), ("held by busy keys", "key_busy")):
        if reason not in reasons:
            assert label not in shown
            continue
        ids = by_reason[reason]
        assert sorted(ids.values()) == sorted(spec.job_names)
        assert evaluate(shown[label]["expression"], dict.fromkeys(ids, 2.0)) == 2.0 * len(ids)
    # One line per holder: the per-reason series of JobHeld under the runtime's pseudo-job, summed per 5 minutes.
    assert shown["held by"]["expression"] == (
        "SEARCH('{SqsJobs,job,queue,reason,service} "
        f'MetricName="JobHeld" queue="{name}" job="(runtime)" service="sqs-jobs"'
        "', 'Sum', 300)"
    )
    assert held["properties"]["period"] == 5 * MINUTE
    if not rated:
        assert FLOW_WAITS.format(q=name) not in titles, "only a job's own rate limit samples LimitWait"
        return
    waits = graph(body, FLOW_WAITS.format(q=name))
    assert sorted(dims["job"] for _, metric, dims, _ in plain_metrics(waits) if metric == "LimitWait") == rated
    for namespace, metric, dims, options in plain_metrics(waits):
        assert (namespace, metric, options["stat"]) == (METRICS_NAMESPACE, "LimitWait", "p99")
        assert dims == {"queue": name, "job": dims["job"], "service": SERVICE_NAME}
    assert horizontal_lines(waits) == {"longest wait, then held": 20_000}


def check_retries(widget: Widget, spec: QueueSpec) -> None:
    """The retrying alarm's figure: MAX over the jobs of RetryAttempt's Maximum, with its threshold and the attempt
    that dead-letters."""
    lines = list(plain_metrics(widget))
    attempts = {options["id"]: dims for _, metric, dims, options in lines if metric == "RetryAttempt"}
    assert len(attempts) == len(lines), "nothing but RetryAttempt per job"
    assert sorted(dims["job"] for dims in attempts.values()) == sorted(spec.job_names)
    for namespace, _, dims, options in lines:
        assert (namespace, options["stat"], options.get("visible")) == (METRICS_NAMESPACE, "Maximum", False)
        assert dims == {"queue": spec.name, "job": dims["job"], "service": SERVICE_NAME}
    shown = expressions(widget)["most failed runs in a row"]
    assert evaluate(shown["expression"], {key: float(index + 1) for index, key in enumerate(attempts)}) == len(attempts)
    assert horizontal_lines(widget) == {
        "retrying alarm": spec.retry_alarm_attempts,
        "max_attempts (dead letter)": spec.max_attempts,
    }


def check_circuit_breakers(widget: Widget, spec: QueueSpec) -> None:
    """Openings (every downstream's: no reason dimension) and the records open breakers held, summed over jobs."""
    runtime = {"queue": spec.name, "job": "(runtime)", "service": SERVICE_NAME}
    lines = list(plain_metrics(widget))
    for namespace, _, _, options in lines:
        assert (namespace, options["stat"]) == (METRICS_NAMESPACE, "Sum")
    openings = [(dims, options) for _, metric, dims, options in lines if metric == "CircuitOpened"]
    assert [dims for dims, _ in openings] == [runtime]
    assert openings[0][1].get("visible", True), "the openings are drawn"
    held = {
        options["id"]: dims["job"] for _, metric, dims, options in lines if metric == "JobDeferred" and "id" in options
    }
    assert len(held) == len(lines) - 1, "nothing but openings and the held records' per-job series"
    # The jobs its worker runs: a durable job (only started there) is never held.
    assert sorted(held.values()) == sorted(job.name for job in spec.jobs if job.durable is None)
    for _, metric, dims, options in lines:
        if metric == "JobDeferred":
            assert dims == {"queue": spec.name, "job": dims["job"], "reason": "circuit_open", "service": SERVICE_NAME}
            assert options.get("visible") is False, "only their sum is drawn"
    total = expressions(widget)["held by open breakers"]
    for key in held:
        assert evaluate(total["expression"], {other: 3.0 if other == key else None for other in held}) == 3.0
    assert evaluate(total["expression"], dict.fromkeys(held, 2.0)) == 2.0 * len(held)
    assert evaluate(total["expression"], dict.fromkeys(held)) is None
    assert horizontal_lines(widget) == {"circuit-open alarm": spec.alarms.circuit_opened}
    assert widget["properties"]["period"] == 5 * MINUTE


def check_time_to_drain(widget: Widget, queue: dict[str, str]) -> None:
    lines = expressions(widget)
    shown = lines["estimated time to drain (s)"]
    assert shown.get("visible", True)
    ids = {options["id"]: metric for _, metric, dims, options in plain_metrics(widget) if dims == queue}
    helpers = {line["id"]: line["expression"] for line in lines.values() if "id" in line}
    assert set(ids.values()) == {"ApproximateNumberOfMessagesVisible", "NumberOfMessagesDeleted"}
    (visible,) = [key for key, metric in ids.items() if metric == "ApproximateNumberOfMessagesVisible"]
    (deleted,) = [key for key, metric in ids.items() if metric == "NumberOfMessagesDeleted"]
    period = widget["properties"]["period"]
    assert period == 5 * MINUTE

    def time_to_drain(backlog: float, deleted_in_period: float | None) -> float | None:
        values: dict[str, float | None] = {visible: backlog, deleted: deleted_in_period}
        for key, expression in helpers.items():
            values[key] = evaluate(expression, values, {deleted: period})
        return evaluate(shown["expression"], values, {deleted: period})

    assert time_to_drain(600, 300) == 600  # 1 a second
    assert time_to_drain(600, 0) == 600 / 0.001  # nothing deleted: "practically never", not a division by zero
    assert time_to_drain(600, None) == 600 / 0.001
    assert time_to_drain(0, 300) == 0
