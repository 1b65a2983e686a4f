"""The article's four signals per queue - backlog, age of the oldest job, failure rate and DLQ count, worker
liveness - read the same way from AWS and from the local engine (which publishes the same metrics to its
CloudWatch stand-in), with a health verdict; and the queue's flow limits with what their store holds now
(sqs_jobs.cli.flow_limits).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import botocore.exceptions

from sqs_jobs.cli.discovery import QueueLocation
from sqs_jobs.cli.flow_limits import LimitView, read_limits, unread
from sqs_jobs.cli.queue_control import QueueControlError, is_paused
from sqs_jobs.flow_control import DeclaredLimit, RateLimit
from sqs_jobs.specs import HEARTBEAT_JOB, QueueSpec
from sqs_jobs.worker.names import (
    CIRCUIT_OPENED,
    FAILED,
    HEARTBEAT,
    HOLD_SHARE,
    METRICS_NAMESPACE,
    RETRY_ATTEMPT,
    RUNTIME_JOB,
    SERVICE_NAME,
    SQS_NOISY_GROUPS,
    SQS_QUIET_OLDEST_AGE,
    SUCCEEDED,
    UNPARSEABLE_JOB,
)

SQS_NAMESPACE = "AWS/SQS"
OLDEST_AGE_METRIC = "ApproximateAgeOfOldestMessage"
VISIBLE_METRIC = "ApproximateNumberOfMessagesVisible"
# How far back failure rate and liveness look.
DEFAULT_WINDOW_S = 15 * 60
# CloudWatch publishes SQS metrics once a minute and may lag: look a few minutes back for the latest age.
AGE_LOOKBACK_S = 5 * 60


@dataclass
class LaneStatus:
    """What SQS says of one priority lane's queue (docs/priorities.md): its backlog, in flight, delayed, and the age
    of its oldest message."""

    name: str
    url: str
    backlog: int
    in_flight: int
    delayed: int
    oldest_age_s: float | None
    # Whether its event source mapping is disabled; None: not read.
    paused: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "url": self.url,
            "backlog": self.backlog,
            "in_flight": self.in_flight,
            "delayed": self.delayed,
            "oldest_age_s": self.oldest_age_s,
            "paused": self.paused,
        }


@dataclass
class QueueStatus:
    name: str
    url: str
    dlq_url: str
    backlog: int
    in_flight: int
    delayed: int
    dlq_depth: int
    oldest_age_s: float | None
    succeeded: int
    failed: int
    last_success_at: datetime | None
    last_heartbeat_at: datetime | None
    window_s: int
    # Whether the worker's event source mapping is disabled (`jobctl queue pause`; a queue with priority lanes:
    # every lane's); None: not read (no Lambda client given, or the operator may not list event source mappings).
    paused: bool | None = None
    # Times a circuit breaker of the queue's downstreams opened in the window (any worker, any downstream).
    circuit_opened: int = 0
    # The most runs in a row one job's key failed and was retried after, in the window (RetryAttempt's Maximum).
    retry_attempt_max: int = 0
    # SQS's fair-queue metrics (a standard queue's tenants): how many tenants it deems noisy, and the age of the
    # oldest message of the others. None: no datapoint (a FIFO queue, no tenant's messages lately, the local engine).
    noisy_tenants: int | None = None
    quiet_oldest_age_s: float | None = None
    # The most of its bound (max_hold_s) a held key will have used when due again, in the window (HoldShare's
    # Maximum): past 1 its refusals spend attempts.
    hold_share_max: float = 0.0
    # The catalog's limits its runs pass, with what their store holds now (Catalog.flow_limits).
    limits: list[LimitView] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    # A queue with priority lanes: each lane's queue, the most urgent first (the queue's own figures above are its
    # default lane's); empty without lanes.
    lanes: list[LaneStatus] = field(default_factory=list)

    @property
    def failure_rate(self) -> float | None:
        runs = self.succeeded + self.failed
        return self.failed / runs if runs else None

    @property
    def healthy(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        lanes = {"lanes": [lane.to_dict() for lane in self.lanes]} if self.lanes else {}
        return {
            "name": self.name,
            "url": self.url,
            "dlq_url": self.dlq_url,
            "backlog": self.backlog,
            "in_flight": self.in_flight,
            "delayed": self.delayed,
            "oldest_age_s": self.oldest_age_s,
            "dlq_depth": self.dlq_depth,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "failure_rate": self.failure_rate,
            "window_s": self.window_s,
            "last_success_at": self.last_success_at.isoformat() if self.last_success_at else None,
            "last_heartbeat_at": self.last_heartbeat_at.isoformat() if self.last_heartbeat_at else None,
            "paused": self.paused,
            "circuit_opened": self.circuit_opened,
            "retry_attempt_max": self.retry_attempt_max,
            "noisy_tenants": self.noisy_tenants,
            "quiet_oldest_age_s": self.quiet_oldest_age_s,
            "hold_share_max": self.hold_share_max,
            "limits": [view.to_dict() for view in self.limits],
            "healthy": self.healthy,
            "problems": list(self.problems),
            **lanes,
        }


def _counts(sqs: Any, url: str) -> dict[str, int]:
    names = [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
    ]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
    return {name: int(attributes.get(name, "0")) for name in names}


def job_metric(queue: str, job: str, metric: str) -> dict[str, Any]:
    dimensions = [
        {"Name": "queue", "Value": queue},
        {"Name": "job", "Value": job},
        {"Name": "service", "Value": SERVICE_NAME},
    ]
    return {"Namespace": METRICS_NAMESPACE, "MetricName": metric, "Dimensions": dimensions}


def _last_positive(result: dict[str, Any]) -> datetime | None:
    stamps = [s for s, v in zip(result.get("Timestamps", []), result.get("Values", []), strict=False) if v > 0]
    return max(stamps) if stamps else None


@dataclass
class _Readings:
    oldest_age_s: float | None
    succeeded: int
    failed: int
    last_success_at: datetime | None
    last_heartbeat_at: datetime | None
    circuit_opened: int = 0
    retry_attempt_max: int = 0
    noisy_tenants: int | None = None
    quiet_oldest_age_s: float | None = None
    hold_share_max: float = 0.0
    # Per priority lane other than the default, its queue's oldest-message age (the latest datapoint).
    lane_ages: dict[str, float | None] = field(default_factory=dict)


def _latest(result: dict[str, Any], since: datetime) -> float | None:
    """A gauge's latest datapoint since `since`, or None."""
    recent = [
        (stamp, value)
        for stamp, value in zip(result.get("Timestamps", []), result.get("Values", []), strict=False)
        if stamp >= since
    ]
    return max(recent)[1] if recent else None


def _metrics(
    cloudwatch: Any,
    spec: QueueSpec,
    queue_name: str,
    now: datetime,
    window_s: int,
    lane_queue_names: dict[str, str] | None = None,
) -> _Readings:
    """Oldest age (latest datapoint), failed and succeeded sums over the window, last success and heartbeat; and
    each of `lane_queue_names`' (lane -> SQS queue name) oldest age, in the same request."""

    def stat(query_id: str, metric: dict[str, Any], statistic: str) -> dict[str, Any]:
        return {"Id": query_id, "MetricStat": {"Metric": metric, "Period": 60, "Stat": statistic}}

    def sqs_metric(name: str, queue: str = queue_name) -> dict[str, Any]:
        return {
            "Namespace": SQS_NAMESPACE,
            "MetricName": name,
            "Dimensions": [{"Name": "QueueName", "Value": queue}],
        }

    lanes = list((lane_queue_names or {}).items())
    queries = [
        stat("age", sqs_metric(OLDEST_AGE_METRIC), "Maximum"),
        *(
            stat(f"lane{index}", sqs_metric(OLDEST_AGE_METRIC, name), "Maximum")
            for index, (_, name) in enumerate(lanes)
        ),
        stat("hb", job_metric(spec.name, HEARTBEAT_JOB, HEARTBEAT), "Sum"),
        stat("circuit", job_metric(spec.name, RUNTIME_JOB, CIRCUIT_OPENED), "Sum"),
    ]
    if not spec.fifo:  # fair queues are standard queues' (a FIFO queue's groups are its order)
        queries.append(stat("noisy", sqs_metric(SQS_NOISY_GROUPS), "Maximum"))
        queries.append(stat("quietage", sqs_metric(SQS_QUIET_OLDEST_AGE), "Maximum"))
    # Malformed messages fail under the runtime's "(unparseable)" job: they count as failed runs too.
    for index, job in enumerate((*spec.job_names, UNPARSEABLE_JOB)):
        queries.append(stat(f"ok{index}", job_metric(spec.name, job, SUCCEEDED), "Sum"))
        queries.append(stat(f"failed{index}", job_metric(spec.name, job, FAILED), "Sum"))
    # What the retrying alarm watches: which attempt the most-failing key was when it failed (never unparseable).
    for index, job in enumerate(spec.job_names):
        queries.append(stat(f"retry{index}", job_metric(spec.name, job, RETRY_ATTEMPT), "Maximum"))
        # What the held-near-bound alarm watches: the share of its bound the key held longest will have used.
        queries.append(stat(f"share{index}", job_metric(spec.name, job, HOLD_SHARE), "Maximum"))
    lookback_s = max(window_s, spec.alarms.heartbeat_missing_after_s, spec.alarms.stalled_after_s)
    response = cloudwatch.get_metric_data(
        MetricDataQueries=queries, StartTime=now - timedelta(seconds=lookback_s), EndTime=now + timedelta(minutes=1)
    )
    results = {result["Id"]: result for result in response.get("MetricDataResults", [])}
    recent = now - timedelta(seconds=AGE_LOOKBACK_S)
    noisy = _latest(results.get("noisy", {}), recent)
    window_start = now - timedelta(seconds=window_s)
    succeeded = failed = circuit_opened = retry_attempt_max = 0
    hold_share_max = 0.0
    last_success: datetime | None = None
    for query_id, result in results.items():
        in_window = [
            v for t, v in zip(result.get("Timestamps", []), result.get("Values", []), strict=False) if t >= window_start
        ]
        if query_id.startswith("ok"):
            succeeded += int(sum(in_window))
            stamp = _last_positive(result)
            if stamp and (last_success is None or stamp > last_success):
                last_success = stamp
        elif query_id.startswith("failed"):
            failed += int(sum(in_window))
        elif query_id == "circuit":
            circuit_opened = int(sum(in_window))
        elif query_id.startswith("retry"):
            retry_attempt_max = max([retry_attempt_max, *(int(value) for value in in_window)])
        elif query_id.startswith("share"):
            hold_share_max = max([hold_share_max, *in_window])
    return _Readings(
        oldest_age_s=_latest(results.get("age", {}), recent),
        succeeded=succeeded,
        failed=failed,
        last_success_at=last_success,
        last_heartbeat_at=_last_positive(results.get("hb", {})),
        circuit_opened=circuit_opened,
        retry_attempt_max=retry_attempt_max,
        noisy_tenants=int(noisy) if noisy is not None else None,
        quiet_oldest_age_s=_latest(results.get("quietage", {}), recent),
        hold_share_max=hold_share_max,
        lane_ages={lane: _latest(results.get(f"lane{index}", {}), recent) for index, (lane, _) in enumerate(lanes)},
    )


def queue_status(
    sqs: Any,
    cloudwatch: Any,
    spec: QueueSpec,
    location: QueueLocation,
    now: datetime | None = None,
    window_s: int = DEFAULT_WINDOW_S,
    lambda_client: Any = None,
    limits: Sequence[DeclaredLimit] = (),
    dynamodb: Any = None,
) -> QueueStatus:
    """`limits`: the catalog's for the queue (Catalog.flow_limits); an unkeyed rate limit's bucket is read through
    `dynamodb` in the table the worker's environment names (through `lambda_client`)."""
    now = now or datetime.now(UTC)
    source = _counts(sqs, location.url)
    dead = _counts(sqs, location.dlq_url)
    queue_name = _queue_name(location.url)
    # A queue with priority lanes: each other lane's queue read too (the default lane's is the queue's own).
    others = [lane for lane in location.lanes if lane.url != location.url]
    readings = _metrics(
        cloudwatch, spec, queue_name, now, window_s, {str(lane.name): _queue_name(lane.url) for lane in others}
    )
    backlog = source["ApproximateNumberOfMessages"]
    oldest_age = _age(readings.oldest_age_s, source)
    status = QueueStatus(
        name=spec.name,
        url=location.url,
        dlq_url=location.dlq_url,
        backlog=backlog,
        in_flight=source["ApproximateNumberOfMessagesNotVisible"],
        delayed=source["ApproximateNumberOfMessagesDelayed"],
        dlq_depth=dead["ApproximateNumberOfMessages"] + dead["ApproximateNumberOfMessagesNotVisible"],
        oldest_age_s=oldest_age,
        succeeded=readings.succeeded,
        failed=readings.failed,
        last_success_at=readings.last_success_at,
        last_heartbeat_at=readings.last_heartbeat_at,
        window_s=window_s,
        paused=None,
        circuit_opened=readings.circuit_opened,
        retry_attempt_max=readings.retry_attempt_max,
        noisy_tenants=readings.noisy_tenants,
        quiet_oldest_age_s=readings.quiet_oldest_age_s,
        hold_share_max=readings.hold_share_max,
        limits=_limits(limits, dynamodb, lambda_client, location, now),
    )
    lanes_paused = {source.arn: _paused(lambda_client, source.arn) for source in location.sources}
    # Paused when every lane's mapping is: nothing consumes the queue (a lane paused alone is that lane's problem).
    states = set(lanes_paused.values())
    status.paused = None if None in states else all(states)
    for lane in location.lanes:
        counts = source if lane.url == location.url else _counts(sqs, lane.url)
        age = oldest_age if lane.url == location.url else _age(readings.lane_ages.get(str(lane.name)), counts)
        status.lanes.append(
            LaneStatus(
                name=str(lane.name),
                url=lane.url,
                backlog=counts["ApproximateNumberOfMessages"],
                in_flight=counts["ApproximateNumberOfMessagesNotVisible"],
                delayed=counts["ApproximateNumberOfMessagesDelayed"],
                oldest_age_s=age,
                paused=lanes_paused[lane.arn],
            )
        )
    status.problems = diagnose(status, spec, now)
    return status


def _queue_name(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


def _age(reading: float | None, counts: dict[str, int]) -> float | None:
    """A queue's oldest-message age: CloudWatch's latest, or 0 when nothing waits or runs (nothing is old)."""
    waiting = counts["ApproximateNumberOfMessages"] + counts["ApproximateNumberOfMessagesNotVisible"]
    return 0.0 if reading is None and waiting == 0 else reading


def _limits(
    limits: Sequence[DeclaredLimit], dynamodb: Any, lambda_client: Any, location: QueueLocation, now: datetime
) -> list[LimitView]:
    """The limits with their state; a limit whose state can't be read says why, and the rest of the status stays."""
    if not any(isinstance(item.limit, RateLimit) and item.limit.per is None for item in limits):
        return [LimitView(item) for item in limits]  # nothing to read: keyed limits aren't listed
    if dynamodb is None or lambda_client is None:
        return unread(limits, "no DynamoDB or Lambda client given")
    # Imported here: the table is found the way `job show` finds it, which only a queue with limits needs.
    from sqs_jobs.cli.job_lookup import JobLookupError, idempotency_table

    try:
        table = idempotency_table(lambda_client, location.arn)
        return read_limits(dynamodb, table, limits, now.timestamp())
    except (
        JobLookupError,
        botocore.exceptions.BotoCoreError,
        botocore.exceptions.ClientError,
    ) as error:
        return unread(limits, f"{type(error).__name__}: {error}")


def _paused(lambda_client: Any, queue_arn: str) -> bool | None:
    if lambda_client is None:
        return None
    try:
        return is_paused(lambda_client, queue_arn)
    except (QueueControlError, botocore.exceptions.ClientError):
        # Not knowing whether a queue is paused must not hide the rest of its status.
        return None


def diagnose(status: QueueStatus, spec: QueueSpec, now: datetime) -> list[str]:
    """Why a queue is unhealthy, one short sentence per problem (the alarms' signals); empty when healthy."""
    alarms = spec.alarms
    problems = []
    if status.paused:
        problems.append(f"paused: its worker takes no jobs until `jobctl queue resume {spec.name}`")
    if status.oldest_age_s is not None and status.oldest_age_s > alarms.oldest_message_age_s:
        problem = f"oldest message has waited {status.oldest_age_s:.0f}s (alarm above {alarms.oldest_message_age_s}s)"
        if status.noisy_tenants and status.quiet_oldest_age_s is not None:
            # Whose wait it is: SQS serves the other tenants first, so their oldest tells whether they suffer too.
            problem += (
                f"; SQS deems {status.noisy_tenants} tenant(s) noisy, the others' oldest has waited "
                f"{status.quiet_oldest_age_s:.0f}s"
            )
        problems.append(problem)
    if status.backlog > alarms.backlog:
        problems.append(f"backlog of {status.backlog} (alarm above {alarms.backlog})")
    if not status.paused:
        problems += [
            f"lane {lane.name} paused: its jobs wait until `jobctl queue resume {spec.name}`"
            for lane in status.lanes
            if lane.paused
        ]
    for lane in status.lanes:  # the other lanes' own alarms (the default lane's are the queue's, above)
        if lane.url == status.url:
            continue
        if lane.oldest_age_s is not None and lane.oldest_age_s > alarms.oldest_message_age_s:
            problems.append(
                f"lane {lane.name}: oldest message has waited {lane.oldest_age_s:.0f}s "
                f"(alarm above {alarms.oldest_message_age_s}s)"
            )
        if lane.backlog > alarms.backlog:
            problems.append(f"lane {lane.name}: backlog of {lane.backlog} (alarm above {alarms.backlog})")
    if status.dlq_depth >= alarms.dlq_depth:
        problems.append(f"DLQ holds {status.dlq_depth} message(s): run `jobctl dlq list {spec.name}`")
    rate = status.failure_rate
    # As the alarm: a rate from too few runs says nothing.
    if (
        rate is not None
        and rate > alarms.failure_rate
        and status.succeeded + status.failed >= alarms.failure_rate_min_runs
    ):
        problems.append(f"{rate:.0%} of runs failed in the last {status.window_s // 60} min")
    if status.circuit_opened >= alarms.circuit_opened:
        problems.append(
            f"circuit breakers opened {status.circuit_opened} time(s) in the last {status.window_s // 60} min: a "
            "downstream is failing (the workers' 'circuit opened' log lines name it); the jobs that need it wait "
            f"without spending attempts for up to {spec.circuit_breaker.max_hold_s // 60} min"
        )
    if spec.max_attempts > 1 and status.retry_attempt_max >= spec.retry_alarm_attempts:
        problems.append(
            f"a job failed {status.retry_attempt_max} runs in a row in the last {status.window_s // 60} min and is "
            f"being retried; it is dead-lettered after {spec.max_attempts} (the workers' 'job failed; retrying "
            "after backoff' log lines name it, its id and the error)"
        )
    if status.hold_share_max >= alarms.hold_share:
        problems.append(
            f"a held record will have used {status.hold_share_max:.0%} of its bound (max_hold_s) by the time it is "
            f"due again, in the last {status.window_s // 60} min (alarm at {alarms.hold_share:.0%}): past it each "
            "refusal spends an attempt (JobHeld's reason and the workers' 'handed back unrun' log lines name the "
            "holder)"
        )
    quiet_since = status.last_success_at
    no_recent_success = quiet_since is None or (now - quiet_since).total_seconds() > alarms.stalled_after_s
    waited_long = status.oldest_age_s is None or status.oldest_age_s > alarms.stalled_after_s
    if status.backlog > 0 and status.in_flight == 0 and no_recent_success and waited_long:
        problems.append(
            f"stalled: {status.backlog} waiting and no job done for over {alarms.stalled_after_s // 60} min "
            "(event source disabled? concurrency 0? permissions?)"
        )
    beat = status.last_heartbeat_at
    if beat is None or (now - beat).total_seconds() > alarms.heartbeat_missing_after_s:
        since = f"since {beat.isoformat(timespec='seconds')}" if beat else "in the lookback window"
        problems.append(
            f"heartbeat missing: none got through {since} (alarm after {alarms.heartbeat_missing_after_s}s)"
        )
    return problems
