"""The stack's CloudWatch dashboard: every alarm's state, rows of graphs per queue (one more for a queue with
priority lanes), then the job schedules.

The graphs use the same metric definitions as the alarms (`sqs_jobs.cdk.monitoring`), with the alarm thresholds and
limits drawn as horizontal lines.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from aws_cdk import Aws, Duration, Fn
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from sqs_jobs.cdk import monitoring
from sqs_jobs.cdk.naming import CIRCUIT_OPEN, queue_signals
from sqs_jobs.flow_control import MAX_TOKEN_WAIT_S, DeclaredLimit
from sqs_jobs.specs import QueueSpec
from sqs_jobs.worker.names import SQS_NOISY_GROUPS, SQS_QUIET_OLDEST_AGE, SQS_QUIET_VISIBLE

WIDTH = 6  # four graphs to a row of 24
HEIGHT = 6


@dataclass(frozen=True)
class DashboardQueue:
    """What the dashboard graphs of one catalog queue."""

    spec: QueueSpec
    queue: sqs.IQueue
    dead_letter_queue: sqs.IQueue
    function: lambda_.IFunction
    # The limits its runs pass (Catalog.flow_limits): the flow control graphs are drawn only for a queue with some.
    limits: Sequence[DeclaredLimit] = ()
    # Its priority lanes other than the default one (whose queue is `queue`), by lane: a row of their own.
    lanes: Mapping[str, sqs.IQueue] = field(default_factory=dict)

    def lane_queues(self) -> list[tuple[str, sqs.IQueue]]:
        """Each lane and its queue, the most urgent first; empty for a queue without lanes."""
        return [(lane, self.lanes.get(lane, self.queue)) for lane in self.spec.lanes]


@dataclass(frozen=True)
class DashboardSchedules:
    """What the dashboard graphs of the stack's job schedules (sqs_jobs.cdk.job_schedules)."""

    dead_letter_queue: sqs.IQueue
    group_name: str


class JobsDashboard(Construct):
    """`dashboard`, named `<stack_name>-<region>` (dashboards are global to an account: the region keeps two
    deployments of the stack apart)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        stack_name: str,
        queues: Sequence[DashboardQueue],
        schedules: DashboardSchedules,
        alarms: Sequence[cloudwatch.IAlarm],
    ) -> None:
        super().__init__(scope, construct_id)
        self.dashboard = cloudwatch.Dashboard(
            self,
            "Dashboard",
            dashboard_name=Fn.join("-", [stack_name, Aws.REGION]),
            default_interval=Duration.hours(24),
            period_override=cloudwatch.PeriodOverride.INHERIT,
        )
        self.dashboard.add_widgets(
            cloudwatch.AlarmStatusWidget(
                title="Alarms (docs/monitoring.md; each description names its runbook section)",
                alarms=list(alarms),
                width=24,
                height=HEIGHT,
            )
        )
        for queue in queues:
            self._queue_rows(queue)
        self._schedule_row(schedules)

    def _schedule_row(self, item: DashboardSchedules) -> None:
        self.dashboard.add_widgets(
            cloudwatch.TextWidget(
                markdown="## Job schedules\nRecurring catalog schedules and delayed jobs (EventBridge Scheduler).",
                width=24,
                height=2,
            )
        )
        self.dashboard.add_widgets(
            _graph(
                "schedules: failed deliveries (the alarm's sum)",
                [monitoring.scheduled_delivery_failures(item.dead_letter_queue, item.group_name)],
                [cloudwatch.HorizontalAnnotation(value=1, label="failed deliveries alarm")],
            ),
            _graph(
                "schedules: sends attempted and refused",
                [
                    monitoring.scheduler_metric(item.group_name, "InvocationAttemptCount", label="attempts"),
                    monitoring.scheduler_metric(item.group_name, "TargetErrorCount", label="target errors"),
                ],
                [],
            ),
            _graph(
                "schedules: DLQ depth",
                [
                    item.dead_letter_queue.metric_approximate_number_of_messages_visible(
                        statistic="Maximum", label="DLQ depth"
                    )
                ],
                [],
            ),
        )

    def _queue_rows(self, item: DashboardQueue) -> None:
        spec, limits = item.spec, item.spec.alarms
        name = spec.name
        self.dashboard.add_widgets(
            cloudwatch.TextWidget(markdown=f"## Queue `{name}`\n{spec.description}", width=24, height=2)
        )
        # A standard queue is a fair queue once its messages name their tenants (MessageGroupId): SQS then reports
        # how many tenants it deems noisy and how the others fare; it counts no backlog per tenant.
        quiet_backlog = (
            []
            if spec.fifo
            else [item.queue.metric(SQS_QUIET_VISIBLE, statistic="Maximum", label="backlog of quiet tenants")]
        )
        self.dashboard.add_widgets(
            _graph(
                f"{name}: backlog and in flight",
                [
                    item.queue.metric_approximate_number_of_messages_visible(statistic="Maximum", label="backlog"),
                    item.queue.metric_approximate_number_of_messages_not_visible(
                        statistic="Maximum", label="in flight"
                    ),
                    *quiet_backlog,
                ],
                [cloudwatch.HorizontalAnnotation(value=limits.backlog, label="backlog alarm")],
            ),
            _graph(
                f"{name}: age of the oldest job (s)",
                [item.queue.metric_approximate_age_of_oldest_message(statistic="Maximum", label="oldest age")],
                [cloudwatch.HorizontalAnnotation(value=limits.oldest_message_age_s, label="age alarm")],
            ),
            _graph(
                f"{name}: DLQ depth",
                [
                    item.dead_letter_queue.metric_approximate_number_of_messages_visible(
                        statistic="Maximum", label="DLQ depth"
                    )
                ],
                [cloudwatch.HorizontalAnnotation(value=limits.dlq_depth, label="DLQ alarm")],
            ),
            _graph(f"{name}: estimated time to drain (s)", [monitoring.time_to_drain(item.queue)], []),
        )
        self.dashboard.add_widgets(
            _graph(f"{name}: runs per 5 min (all jobs)", monitoring.outcomes(spec), []),
            _graph(
                f"{name}: job duration p99 (ms) against the time limit",
                [monitoring.duration(spec, job).with_(label=f"{job} p99") for job in spec.job_names],
                [
                    cloudwatch.HorizontalAnnotation(
                        value=monitoring.time_limit_ms(spec, job), label=f"{job} time limit"
                    )
                    for job in spec.job_names
                ],
            ),
            _graph(
                f"{name}: worker concurrency",
                [item.function.metric("ConcurrentExecutions", statistic="Maximum", label="concurrent executions")],
                [cloudwatch.HorizontalAnnotation(value=spec.max_concurrency, label="max_concurrency")],
            ),
            _graph(
                f"{name}: heartbeats",
                [monitoring.heartbeats(spec, period=monitoring.FIVE_MINUTES).with_(label="heartbeats")],
                [],
            ),
        )
        fair = (
            []
            if spec.fifo  # a FIFO queue's message groups are its order, not tenants
            else [
                _graph(
                    f"{name}: tenants SQS deems noisy (fair queues)",
                    [item.queue.metric(SQS_NOISY_GROUPS, statistic="Maximum", label="noisy tenants")],
                    [],
                ),
                _graph(
                    f"{name}: age of the oldest job (s), every tenant's and the quiet tenants'",
                    [
                        item.queue.metric_approximate_age_of_oldest_message(statistic="Maximum", label="every tenant"),
                        item.queue.metric(SQS_QUIET_OLDEST_AGE, statistic="Maximum", label="quiet tenants"),
                    ],
                    [cloudwatch.HorizontalAnnotation(value=limits.oldest_message_age_s, label="age alarm")],
                ),
            ]
        )
        # A queue whose jobs are all durable runs none in its worker: no breaker opens, nothing is held (naming).
        runs_jobs = CIRCUIT_OPEN in queue_signals(spec)
        breakers = [
            # A downstream outage: breakers opening in the workers, and the records they hold back meanwhile.
            _graph(
                f"{name}: circuit breakers opened, and records they held (per 5 min)",
                [monitoring.circuit_openings(spec), monitoring.circuit_held(spec)],
                [cloudwatch.HorizontalAnnotation(value=limits.circuit_opened, label="circuit-open alarm")],
            )
        ]
        holds = [
            # A held record nearing its bound (the held-near-bound alarm's figure), whatever held it.
            _graph(
                f"{name}: longest hold, share of its bound (per 5 min)",
                [monitoring.hold_share(spec)],
                [
                    cloudwatch.HorizontalAnnotation(value=limits.hold_share, label="held-near-bound alarm"),
                    cloudwatch.HorizontalAnnotation(value=1, label="max_hold_s (refusals spend attempts)"),
                ],
            )
        ]
        self.dashboard.add_widgets(
            *(breakers if runs_jobs else []),
            # A job failing run after run (the retrying alarm's figure): how close it is to the DLQ.
            _graph(
                f"{name}: most failed runs in a row of one job (per 5 min)",
                [monitoring.retry_attempts(spec)],
                [
                    cloudwatch.HorizontalAnnotation(value=spec.retry_alarm_attempts, label="retrying alarm"),
                    cloudwatch.HorizontalAnnotation(value=spec.max_attempts, label="max_attempts (dead letter)"),
                ],
            ),
            *fair,
            *(holds if runs_jobs else []),
        )
        if item.spec.lanes:
            self._lanes_row(item)
        if item.limits:
            self._flow_row(item)

    def _lanes_row(self, item: DashboardQueue) -> None:
        """Only for a queue with priority lanes: each lane's queue, side by side, against the thresholds of its own
        alarms (the queue's, per lane). The row above graphs the default lane's queue, which has the queue's name."""
        name, limits = item.spec.name, item.spec.alarms
        lanes = item.lane_queues()
        self.dashboard.add_widgets(
            _graph(
                f"{name}: backlog of each priority lane",
                [
                    queue.metric_approximate_number_of_messages_visible(statistic="Maximum", label=lane)
                    for lane, queue in lanes
                ],
                [cloudwatch.HorizontalAnnotation(value=limits.backlog, label="backlog alarm (each lane)")],
            ),
            _graph(
                f"{name}: age of the oldest job of each priority lane (s)",
                [
                    queue.metric_approximate_age_of_oldest_message(statistic="Maximum", label=lane)
                    for lane, queue in lanes
                ],
                [cloudwatch.HorizontalAnnotation(value=limits.oldest_message_age_s, label="age alarm (each lane)")],
            ),
            _graph(
                f"{name}: in flight on each priority lane",
                [
                    queue.metric_approximate_number_of_messages_not_visible(statistic="Maximum", label=lane)
                    for lane, queue in lanes
                ],
                [],
            ),
            _graph(
                f"{name}: jobs taken from each priority lane (per 5 min)",
                [queue.metric_number_of_messages_received(statistic="Sum", label=lane) for lane, queue in lanes],
                [],
            ),
        )

    def _flow_row(self, item: DashboardQueue) -> None:
        """Only for a queue whose jobs or endpoints declare limits: elsewhere these graphs would stay empty (an
        open breaker's holds have their own graph)."""
        spec = item.spec
        name = spec.name
        graphs = [
            _graph(
                f"{name}: records held by flow control (per 5 min)",
                [*monitoring.flow_held(spec, item.limits), monitoring.held_by_holder(spec)],
                [],
            )
        ]
        waits = monitoring.limit_waits(spec)
        if waits:  # only a job's own rate limit samples LimitWait
            graphs.append(
                _graph(
                    f"{name}: waits for a rate limit's token, p99 (ms)",
                    waits,
                    [cloudwatch.HorizontalAnnotation(value=MAX_TOKEN_WAIT_S * 1000, label="longest wait, then held")],
                )
            )
        self.dashboard.add_widgets(*graphs)


def _graph(
    title: str, metrics: Sequence[cloudwatch.IMetric], annotations: Sequence[cloudwatch.HorizontalAnnotation]
) -> cloudwatch.GraphWidget:
    return cloudwatch.GraphWidget(
        title=title,
        left=list(metrics),
        left_annotations=list(annotations),
        left_y_axis=cloudwatch.YAxisProps(min=0),
        period=monitoring.FIVE_MINUTES,
        width=WIDTH,
        height=HEIGHT,
    )
