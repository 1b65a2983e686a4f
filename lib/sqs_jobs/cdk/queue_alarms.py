"""A queue's alarms: every signal that says its jobs are stuck, failing, slow or not running at all.

Thresholds come from the catalog (`QueueSpec.alarms`); every alarm notifies the topic on ALARM and on OK, and
its description says what it means, the runbook section, and the `jobctl` command to run first. What each one
catches that the others miss, and why missing data is treated as it is: docs/monitoring.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from sqs_jobs.cdk import monitoring
from sqs_jobs.cdk.naming import (
    BACKLOG,
    CIRCUIT_OPEN,
    DLQ_ARRIVALS,
    DLQ_DEPTH,
    FAILURE_RATE,
    HEARTBEAT_MISSING,
    HELD_NEAR_BOUND,
    OLDEST_MESSAGE_AGE,
    RETRYING,
    RUNTIME_FAULTS,
    STALLED,
    WORKER_ERRORS,
    WORKER_THROTTLES,
    alarm_name,
    duration_signal,
    lane_signal,
    pascal_case,
    physical_queue_name,
    queue_signals,
)
from sqs_jobs.specs import QueueSpec

# SQS publishes its metrics every minute; a longer period would delay the page by as much.
PERIOD = Duration.minutes(1)
RUNBOOK = "docs/runbook.md"
Comparison = cloudwatch.ComparisonOperator
Missing = cloudwatch.TreatMissingData


def describe(meaning: str, anchor: str, first: Sequence[str]) -> str:
    """What an alarm means, where the runbook says what to do, and the commands to run first."""
    return f"{meaning} Runbook: {RUNBOOK}#{anchor}. First: {'; '.join(first)}"


class QueueAlarms(Construct):
    """Every alarm of one catalog queue, in `alarms` by signal (`sqs_jobs.cdk.naming`); each notifies `topic`."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        spec: QueueSpec,
        stack_name: str,
        queue: sqs.IQueue,
        dead_letter_queue: sqs.IQueue,
        function: lambda_.IFunction,
        topic: sns.ITopic,
        lanes: Mapping[str, sqs.IQueue] | None = None,
    ) -> None:
        """`lanes`: the queue's priority lanes other than the default one (whose queue is `queue`): each gets the
        alarms of what SQS measures of its queue (age, backlog, stalled), `<stack>-<queue>-<lane>-<signal>`; the
        worker's signals are the queue's, whichever lane a record came from."""
        super().__init__(scope, construct_id)
        monitoring.check(spec)
        self._spec = spec
        self._stack_name = stack_name
        self._action = actions.SnsAction(topic)
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        status = f"jobctl status {spec.name}"
        dlq_list = f"jobctl dlq list {spec.name}"
        dlq_name = physical_queue_name(stack_name, spec.name, dlq=True, fifo=spec.fifo)

        self._queue_alarms(queue, None)
        self._worker_alarms(dead_letter_queue, function, dlq_name, status, dlq_list)
        # In the order they always had (the dashboard lists them so), each lane's after the queue's.
        order = [OLDEST_MESSAGE_AGE, BACKLOG, DLQ_DEPTH, DLQ_ARRIVALS, FAILURE_RATE, STALLED]
        self.alarms = {
            signal: self.alarms[signal]
            for signal in sorted(self.alarms, key=lambda signal: order.index(signal) if signal in order else len(order))
        }
        for lane, lane_queue in (lanes or {}).items():
            self._queue_alarms(lane_queue, lane)

    def _queue_alarms(self, queue: sqs.IQueue, lane: str | None) -> None:
        """What SQS measures of one of the queue's SQS queues (its own, or a priority lane's): age, backlog,
        stalled. A lane's name their signals, what they say and the runbook's step for a backed-up lane."""
        spec, limits = self._spec, self._spec.alarms
        # A lane's alarms say its queue's name less the stack's: `<queue>-<lane>`.
        name = spec.name if lane is None else f"{spec.name}-{lane}"
        status = f"jobctl status {spec.name}"

        def signal(base: str) -> str:
            return base if lane is None else lane_signal(lane, base)

        def anchor(base: str) -> str:
            return base if lane is None else "a-priority-lane-is-backed-up"

        # The article's incident: a hung job found the next morning. Age says "stuck" sooner and more surely
        # than backlog size. SQS leaves out a standard queue's message received 3+ times (retrying jobs): the
        # retrying alarm below watches those.
        self._alarm(
            signal(OLDEST_MESSAGE_AGE),
            metric=queue.metric_approximate_age_of_oldest_message(period=PERIOD, statistic="Maximum"),
            threshold=limits.oldest_message_age_s,
            comparison=Comparison.GREATER_THAN_THRESHOLD,
            # 1 of the newest 1 + lag minutes: a late datapoint is still seen, however few periods CloudWatch
            # fetches.
            evaluation_periods=monitoring.LATE_TOLERANT_PERIODS,
            datapoints_to_alarm=1,
            # No data: an empty queue that SQS stopped reporting (idle for hours): nothing is waiting.
            missing=Missing.NOT_BREACHING,
            meaning=(
                f"A job on the {name} queue has waited more than {limits.oldest_message_age_s / 60:g} min: the "
                "workers are stuck, throttled, or too few for the load. Raise max_concurrency in the catalog only "
                "if the downstream can take it. (SQS leaves a standard queue's message received 3+ times out of "
                "this age: a job failing again and again is the retrying alarm's.)"
            ),
            anchor=anchor("oldest-message-too-old"),
            first=[status],
        )
        # A burst, or workers too slow, before the age alarm sees it. Above the threshold in 5 one-minute
        # datapoints: a bulk publish that drains within minutes doesn't page. Not the Minimum of one 5-minute
        # period: while SQS's last minutes are late, that period holds only its first minutes.
        backlog_minutes, backlog_window = monitoring.backlog_periods()
        self._alarm(
            signal(BACKLOG),
            metric=queue.metric_approximate_number_of_messages_visible(period=PERIOD, statistic="Minimum"),
            threshold=limits.backlog,
            comparison=Comparison.GREATER_THAN_THRESHOLD,
            evaluation_periods=backlog_window,
            datapoints_to_alarm=backlog_minutes,
            # No data: an idle, empty queue.
            missing=Missing.NOT_BREACHING,
            meaning=(
                f"More than {limits.backlog} jobs waited on the {name} queue in {backlog_minutes} of the last "
                f"{backlog_window} minutes: a burst, or workers too slow or too few (max_concurrency "
                f"{spec.max_concurrency})."
            ),
            anchor=anchor("backlog-too-large"),
            first=[status],
        )
        # Backlog and no deletes: nothing consumes (a disabled event source, broken permissions, reserved
        # concurrency 0), the cases in which every runtime metric goes quiet.
        stalled_minutes, stalled_window = monitoring.stalled_periods(spec)
        self._alarm(
            signal(STALLED),
            metric=monitoring.stalled(queue),
            threshold=1,
            comparison=Comparison.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            # M of N: the newest minutes, whose SQS datapoints are not in yet, count as 0 (FILL), so N leaves
            # room for SQS's lag.
            evaluation_periods=stalled_window,
            datapoints_to_alarm=stalled_minutes,
            # FILL gives every minute of the query a value, so missing data never decides; should it, an empty
            # queue SQS stopped reporting is idle, not stalled.
            missing=Missing.NOT_BREACHING,
            meaning=(
                f"Jobs have waited on the {name} queue and none was deleted in {stalled_minutes} of the last "
                f"{stalled_window} minutes: nothing is consuming (event source disabled, permissions broken, "
                "reserved concurrency 0)."
            ),
            anchor=anchor("consumer-stalled"),
            first=[status],
        )

    def _worker_alarms(
        self,
        dead_letter_queue: sqs.IQueue,
        function: lambda_.IFunction,
        dlq_name: str,
        status: str,
        dlq_list: str,
    ) -> None:
        """The queue's one DLQ and one worker, whichever lane a record came from."""
        spec, name, limits = self._spec, self._spec.name, self._spec.alarms
        # The article: alert on the first message in the DLQ.
        self._alarm(
            DLQ_DEPTH,
            metric=dead_letter_queue.metric_approximate_number_of_messages_visible(period=PERIOD, statistic="Maximum"),
            threshold=limits.dlq_depth,
            comparison=Comparison.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            # As the age: 1 of the newest 1 + lag minutes.
            evaluation_periods=monitoring.LATE_TOLERANT_PERIODS,
            datapoints_to_alarm=1,
            # SQS reports a queue that holds messages; no data means an empty, idle DLQ: all clear.
            missing=Missing.NOT_BREACHING,
            meaning=(
                f"{limits.dlq_depth}+ failed job(s) in {dlq_name}: a job failed permanently or ran out of "
                "attempts. The DLQ listing gives the error; outage: redrive after recovery; bug: fix, deploy, "
                "then redrive; bad data: handle it and discard. Redrive only idempotent jobs in bulk."
            ),
            anchor="dlq-has-messages",
            first=[status, dlq_list],
        )
        # Every new dead letter, from the runtime's own metric: also one that someone drained from the DLQ
        # before the depth alarm looked, and the second while the depth alarm is already in ALARM.
        self._alarm(
            DLQ_ARRIVALS,
            metric=monitoring.dead_lettered(spec),
            threshold=limits.dlq_arrivals,
            comparison=Comparison.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            # The runtime emits nothing when nothing is dead-lettered: no data is zero arrivals.
            missing=Missing.NOT_BREACHING,
            meaning=(
                f"The worker dead-lettered {limits.dlq_arrivals}+ job(s) of the {name} queue in 5 min "
                "(JobDeadLettered), even if the DLQ has been emptied since."
            ),
            anchor="jobs-dead-lettered",
            first=[dlq_list, status],
        )
        self._alarm(
            FAILURE_RATE,
            metric=monitoring.failure_rate(spec),
            threshold=limits.failure_rate,
            comparison=Comparison.GREATER_THAN_THRESHOLD,
            # No runs, no data: nothing failed. (A queue where nothing runs is the stalled and heartbeat alarms'.)
            missing=Missing.NOT_BREACHING,
            meaning=(
                f"More than {limits.failure_rate:.0%} of the {name} queue's runs failed over 5 min, with at least "
                f"{limits.failure_rate_min_runs} runs (JobFailed / (JobSucceeded + JobFailed)): a downstream is "
                "failing, or a change broke a job."
            ),
            anchor="failure-rate-high",
            first=[status],
        )
        # Failed jobs don't fail the invocation (partial batch responses): these count crashes, timeouts, out of
        # memory and init errors of whole invocations, and invocations Lambda refused.
        self._alarm(
            WORKER_ERRORS,
            metric=function.metric_errors(period=monitoring.FIVE_MINUTES, statistic="Sum"),
            threshold=0,
            comparison=Comparison.GREATER_THAN_THRESHOLD,
            # No invocations, no data: nothing failed. (No invocations at all is the stalled alarm's.)
            missing=Missing.NOT_BREACHING,
            meaning=(
                f"Invocations of the {name} worker Lambda failed as a whole in 5 min (crash, function timeout, "
                "out of memory, init error); their records go back to the queue and use up attempts."
            ),
            anchor="worker-errors-or-throttles",
            first=[status],
        )
        self._alarm(
            WORKER_THROTTLES,
            metric=function.metric_throttles(period=monitoring.FIVE_MINUTES, statistic="Sum"),
            threshold=0,
            comparison=Comparison.GREATER_THAN_THRESHOLD,
            # No throttles are reported as no data.
            missing=Missing.NOT_BREACHING,
            meaning=(
                f"Lambda throttled the {name} worker in 5 min: the account's concurrency is used up, or the "
                "function's reserved concurrency is too low (0 stops the queue)."
            ),
            anchor="worker-errors-or-throttles",
            first=[status],
        )
        for job in spec.job_names:
            limit_s = spec.time_limit_s(job)
            self._alarm(
                duration_signal(job),
                metric=monitoring.duration(spec, job),
                threshold=monitoring.duration_threshold_ms(spec, job),
                comparison=Comparison.GREATER_THAN_THRESHOLD,
                # No runs of the job, no data: nothing is slow.
                missing=Missing.NOT_BREACHING,
                meaning=(
                    f"The slowest runs of {job} (p99 over 5 min) took more than {limits.duration_ratio:.0%} of "
                    f"its {limit_s} s time limit: runs are about to be cut and retried; a downstream is slowing."
                ),
                anchor="jobs-near-their-time-limit",
                first=[status],
            )
        # End-to-end liveness: the canary's heartbeat went through the queue and a worker recorded it.
        missing_minutes = monitoring.heartbeat_periods(spec)
        self._alarm(
            HEARTBEAT_MISSING,
            metric=monitoring.heartbeat_minutes(spec),
            threshold=1,
            comparison=Comparison.LESS_THAN_THRESHOLD,
            # Every one of the last heartbeat_missing_after_s minutes without a heartbeat (FILL makes each a 0).
            evaluation_periods=missing_minutes,
            # Silence is the alarm: a stopped schedule, queue, event source or worker emits nothing at all. FILL
            # gives every minute a value; should a series with no datapoint at all stay empty, missing data
            # still breaches.
            missing=Missing.BREACHING,
            meaning=(
                f"No heartbeat got through the {name} queue and its worker for {missing_minutes} min (the canary "
                f"sends one every {limits.heartbeat_interval_s / 60:g} min): the schedule, the queue, the event "
                "source or the worker is down."
            ),
            anchor="heartbeat-missing",
            first=[status],
        )

        # The runtime's own resources failing it: an IAM or KMS slip on the idempotency table, the DLQ or the
        # queue. Jobs wait (handed back, not charged an attempt) instead of being dead-lettered as their fault.
        self._alarm(
            RUNTIME_FAULTS,
            metric=monitoring.runtime_faults(spec),
            threshold=1,
            comparison=Comparison.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            # The runtime emits nothing while its resources answer.
            missing=Missing.NOT_BREACHING,
            meaning=(
                f"The {name} worker's own AWS resources failed it in 5 min (RuntimeFault, by reason: "
                "idempotency_store, dead_letter_send, requeue, visibility_change, flow_control_store): permissions, "
                "KMS or an outage. "
                "Jobs are handed back and wait; none is dead-lettered for it."
            ),
            anchor="runtime-faults",
            first=[status],
        )
        # A downstream of the queue's jobs is down: a worker's circuit breaker opened. The jobs that need it wait
        # (handed back, no run spent) for up to max_hold_s: meanwhile nothing fails, nothing is dead-lettered, and
        # a message received 3+ times is out of a standard queue's oldest-message age.
        breaker = spec.circuit_breaker
        signals = queue_signals(spec)
        if CIRCUIT_OPEN in signals:
            self._alarm(
                CIRCUIT_OPEN,
                metric=monitoring.circuit_openings(spec),
                threshold=limits.circuit_opened,
                comparison=Comparison.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                # The runtime emits nothing while the breakers stay closed.
                missing=Missing.NOT_BREACHING,
                meaning=(
                    f"A circuit breaker of the {name} queue's jobs opened {limits.circuit_opened}+ time(s) in 5 min "
                    f"(CircuitOpened): a downstream failed {breaker.failure_threshold} times in a row in a worker. "
                    "Its calls are refused and the jobs that need it wait, handed back without spending attempts for "
                    f"up to {breaker.max_hold_s / 60:g} min (max_hold_s); after that a lasting outage ends in the DLQ "
                    "(CircuitOpenError). The worker's log line 'circuit opened' names the downstream "
                    "(field downstream)."
                ),
                anchor="circuit-open",
                first=[status],
            )
        # One job failing run after run. SQS leaves a standard queue's message received 3+ times out of the
        # oldest-age metric, the failure rate needs volume, and the DLQ alarms see it only once it is dead-lettered.
        if RETRYING in signals:
            self._alarm(
                RETRYING,
                metric=monitoring.retry_attempts(spec),
                threshold=spec.retry_alarm_attempts,
                comparison=Comparison.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                # The runtime samples RetryAttempt only for failed runs that will be retried.
                missing=Missing.NOT_BREACHING,
                meaning=(
                    f"A job of the {name} queue failed {spec.retry_alarm_attempts} runs in a row, the last in the "
                    "past 5 min, and is being retried (RetryAttempt, Maximum): it is dead-lettered after "
                    f"{spec.max_attempts} failed runs. The worker's log line 'job failed; retrying after backoff' "
                    "names the job, its id and the error."
                ),
                anchor="a-job-failing-again-and-again",
                first=[status],
            )

        # A held key nearing its bound: past max_hold_s each refusal spends an attempt and a limit far below the load
        # (or a lasting outage) ends in the DLQ. The circuit-open alarm sees a breaker open; nothing else sees a rate
        # limit or a busy key holding records for long: nothing fails meanwhile.
        if HELD_NEAR_BOUND in signals:
            self._alarm(
                HELD_NEAR_BOUND,
                metric=monitoring.hold_share(spec),
                threshold=limits.hold_share,
                comparison=Comparison.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                # The runtime samples HoldShare only when it holds a record.
                missing=Missing.NOT_BREACHING,
                meaning=(
                    f"A record of the {name} queue has been held back (a rate limit, a busy key or an open breaker) "
                    f"for {limits.hold_share:.0%}+ of its max_hold_s by the time it is due again (HoldShare, Maximum): "
                    "past its bound each refusal spends an attempt and it ends in the DLQ. JobHeld's reason names the "
                    "holder; raise the limit, lower max_concurrency or raise max_hold_s."
                ),
                anchor="hold-near-its-bound",
                first=[status],
            )

    def _alarm(
        self,
        signal: str,
        *,
        metric: cloudwatch.IMetric,
        threshold: float,
        comparison: cloudwatch.ComparisonOperator,
        missing: cloudwatch.TreatMissingData,
        meaning: str,
        anchor: str,
        first: Sequence[str],
        evaluation_periods: int = 1,
        datapoints_to_alarm: int | None = None,
    ) -> cloudwatch.Alarm:
        alarm = cloudwatch.Alarm(
            self,
            pascal_case(signal),
            alarm_name=alarm_name(self._stack_name, self._spec.name, signal),
            alarm_description=describe(meaning, anchor, first),
            metric=metric,
            threshold=threshold,
            comparison_operator=comparison,
            # All of the periods must breach, unless the alarm says how many.
            evaluation_periods=evaluation_periods,
            datapoints_to_alarm=evaluation_periods if datapoints_to_alarm is None else datapoints_to_alarm,
            treat_missing_data=missing,
        )
        alarm.add_alarm_action(self._action)
        # Say when it is over too, so nobody keeps digging into a resolved page.
        alarm.add_ok_action(self._action)
        self.alarms[signal] = alarm
        return alarm
