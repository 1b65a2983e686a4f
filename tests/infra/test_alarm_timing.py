"""When each alarm of the shared synth pages, by CloudWatch's documented evaluation rules (tests/infra/metric_math.py):
a scenario in which it must fire, and how soon, and one in which it must stay quiet; with SQS's and the runtime's
metrics 0, 1 and 2 minutes late and several evaluation ranges. The expression, periods, M, N, threshold and
missing-data treatment come from the template (`QueueUnderTest.model`). The times measured here are the ones
docs/monitoring.md states."""

from __future__ import annotations

import random
from statistics import quantiles

import pytest

from functions.catalog import CATALOG
from sqs_jobs.flow_control import KeyConcurrency
from sqs_jobs.specs import QueueSpec
from sqs_jobs.worker.backoff import backoff_delay_s
from tests.infra.alarm_checks import QueueUnderTest
from tests.infra.alarm_scenarios import LAGS, T0, Scenario, evaluations, first_alarm, run_alarm
from tests.infra.cfn import of_type
from tests.infra.conftest import Synth
from tests.infra.metric_math import MINUTE, Evaluation

QUEUES = pytest.mark.parametrize("spec", CATALOG.queues, ids=lambda spec: spec.name)
BY_LAG = pytest.mark.parametrize("lag", LAGS, ids=lambda lag: f"lag{lag}")
HOUR = 60 * MINUTE


@pytest.fixture
def orders(synth: Synth) -> QueueUnderTest:
    return under_test(synth, CATALOG.queue("orders"))


def under_test(synth: Synth, spec: QueueSpec) -> QueueUnderTest:
    (topic,) = of_type(synth.resources, "AWS::SNS::Topic")
    return QueueUnderTest(synth.resources, synth.context.stack_name, spec, {"Ref": topic})


def all_evaluations(queue: QueueUnderTest, signal: str) -> list[Evaluation]:
    alarm, _ = queue.model(signal)
    return evaluations(alarm)


def quiet(queue: QueueUnderTest, signal: str, scenario: Scenario, start: float, end: float) -> None:
    for evaluation in all_evaluations(queue, signal):
        states = run_alarm(queue, signal, scenario, start, end, evaluation)
        assert states.first("ALARM") is None, (signal, scenario.lag_min, evaluation)


def fires_at(queue: QueueUnderTest, signal: str, scenario: Scenario, start: float, end: float) -> list[float]:
    """The first ALARM under every evaluation range and alignment (each must fire)."""
    times = []
    for evaluation in all_evaluations(queue, signal):
        fired = first_alarm(queue, signal, scenario, start, end, evaluation)
        assert fired is not None, (signal, scenario.lag_min, evaluation)
        times.append(fired)
    return times


# --- stalled: messages wait and nothing deletes them -------------------------------------------------------------


def stalled_queue(lag: int, stopped: int, end: int) -> Scenario:
    """Busy until `stopped`, then 40 waiting and none deleted (the heartbeat's included)."""
    scenario = Scenario(lag)
    scenario.per_minute(
        "ApproximateNumberOfMessagesVisible", "queue", T0, end, lambda minute: 40 if minute >= stopped else 3
    )
    scenario.per_minute("NumberOfMessagesDeleted", "queue", T0, end, lambda minute: 0 if minute >= stopped else 25)
    return scenario


@QUEUES
@BY_LAG
def test_stalled_pages_stalled_after_s_plus_the_lag_after_the_last_delete(
    synth: Synth, spec: QueueSpec, lag: int
) -> None:
    queue = under_test(synth, spec)
    stopped = T0 + HOUR

    times = fires_at(queue, "stalled", stalled_queue(lag, stopped, stopped + HOUR), stopped, stopped + HOUR)

    # Whatever the evaluation range: FILL gives every minute of the query a value.
    assert set(times) == {stopped + spec.alarms.stalled_after_s + lag * MINUTE}


@BY_LAG
def test_stalled_stays_quiet_for_idle_busy_slow_and_unreported_queues(orders: QueueUnderTest, lag: int) -> None:
    start, end = T0 + HOUR, T0 + 4 * HOUR
    idle, busy, slow, unreported = Scenario(lag), Scenario(lag), Scenario(lag), Scenario(lag)
    # Idle: nothing waits; only the heartbeat, received and deleted within seconds, every 5 minutes.
    idle.per_minute("ApproximateNumberOfMessagesVisible", "queue", T0, end, lambda minute: 0)
    idle.per_minute("NumberOfMessagesDeleted", "queue", T0, end, lambda minute: 1 if minute % 300 == 0 else 0)
    # Busy: a backlog that moves.
    busy.per_minute("ApproximateNumberOfMessagesVisible", "queue", T0, end, lambda minute: 500)
    busy.per_minute("NumberOfMessagesDeleted", "queue", T0, end, lambda minute: 120)
    # Slow: a backlog and a delete only every third minute (8 stalled minutes in any 12).
    slow.per_minute("ApproximateNumberOfMessagesVisible", "queue", T0, end, lambda minute: 50)
    slow.per_minute("NumberOfMessagesDeleted", "queue", T0, end, lambda minute: 3 if minute % 180 == 0 else 0)
    # Unreported: SQS stopped reporting a queue inactive for six hours.
    for scenario in (idle, busy, slow, unreported):
        quiet(orders, "stalled", scenario, start, end)


# --- heartbeat-missing: no heartbeat got through ----------------------------------------------------------------


def heartbeats(lag: int, first: int, last: int, interval_s: int, late_s: int = 0) -> Scenario:
    """A Heartbeat from `first` to `last` every `interval_s`, every other one `late_s` seconds late."""
    scenario = Scenario(lag)
    beats = [(at + (late_s if index % 2 else 0), 1.0) for index, at in enumerate(range(first, last + 1, interval_s))]
    scenario.emitted("Heartbeat", "heartbeat", beats)
    return scenario


@QUEUES
@BY_LAG
@pytest.mark.parametrize("fill_empty", [True, False], ids=["fill-empty", "no-fill-empty"])
def test_heartbeat_pages_heartbeat_missing_after_s_after_the_last_heartbeat(
    synth: Synth, spec: QueueSpec, lag: int, fill_empty: bool
) -> None:
    queue = under_test(synth, spec)
    interval = spec.alarms.heartbeat_interval_s
    last = T0 + 2 * HOUR + 20  # delivered 20 s into its minute
    scenario = heartbeats(lag, T0, last, interval)

    times = []
    for evaluation in all_evaluations(queue, "heartbeat-missing"):
        every = Evaluation(evaluation.retrieved, evaluation.aligned, fill_empty)
        fired = first_alarm(queue, "heartbeat-missing", scenario, last, last + 2 * HOUR, every)
        assert fired is not None
        times.append(fired)

    # The first minute whose last heartbeat_missing_after_s minutes held none: whatever the lag and range.
    last_minute = last // MINUTE * MINUTE
    assert set(times) == {last_minute + spec.alarms.heartbeat_missing_after_s + MINUTE}
    first_missed = last + interval
    assert max(times) - first_missed <= spec.alarms.heartbeat_missing_after_s - interval + MINUTE


@BY_LAG
@pytest.mark.parametrize("fill_empty", [True, False], ids=["fill-empty", "no-fill-empty"])
def test_heartbeat_pages_for_a_queue_that_never_had_one(orders: QueueUnderTest, lag: int, fill_empty: bool) -> None:
    for evaluation in all_evaluations(orders, "heartbeat-missing"):
        every = Evaluation(evaluation.retrieved, evaluation.aligned, fill_empty)
        assert first_alarm(orders, "heartbeat-missing", Scenario(lag), T0, T0 + HOUR, every) == T0


@QUEUES
@BY_LAG
def test_heartbeat_stays_quiet_while_heartbeats_arrive_late_and_their_metrics_later(
    synth: Synth, spec: QueueSpec, lag: int
) -> None:
    queue = under_test(synth, spec)
    scenario = heartbeats(lag, T0, T0 + 5 * HOUR, spec.alarms.heartbeat_interval_s, late_s=59)
    quiet(queue, "heartbeat-missing", scenario, T0 + HOUR, T0 + 5 * HOUR)


@BY_LAG
def test_heartbeat_stays_quiet_at_the_tightest_interval_the_catalog_accepts(orders: QueueUnderTest, lag: int) -> None:
    alarm, _ = orders.model("heartbeat-missing")
    tightest = alarm.evaluation_periods * MINUTE - 3 * MINUTE  # heartbeat_missing_after_s - 180
    scenario = heartbeats(lag, T0, T0 + 5 * HOUR, tightest, late_s=59)
    quiet(orders, "heartbeat-missing", scenario, T0 + HOUR, T0 + 5 * HOUR)


# --- retrying: one job failing run after run --------------------------------------------------------------------


def failing_job(lag: int, spec: QueueSpec, job: str, first_failure: float, delays: list[int]) -> tuple[Scenario, float]:
    """A job whose every run fails after a second, retried after each delay; RetryAttempt per retried failure.
    Returns the scenario and when its last failure dead-letters it."""
    failures = [first_failure]
    for delay in delays[: spec.max_attempts - 1]:
        failures.append(failures[-1] + delay + 1)  # the backoff, then a one-second run
    scenario = Scenario(lag)
    scenario.emitted("RetryAttempt", job, [(at, float(n)) for n, at in enumerate(failures[:-1], start=1)])
    return scenario, failures[-1]


@QUEUES
@BY_LAG
def test_retrying_pages_before_the_slowest_default_timeline_dead_letters(
    synth: Synth, spec: QueueSpec, lag: int
) -> None:
    queue = under_test(synth, spec)
    job = spec.job_names[0]  # any of the queue's jobs: the alarm takes the MAX over them
    ceilings = [min(spec.backoff_cap_s, spec.backoff_base_s * 2 ** (n - 1)) for n in range(1, spec.max_attempts)]
    start = T0 + HOUR + 17
    scenario, dead_lettered = failing_job(lag, spec, job, start, ceilings)
    third_failure = start + sum(ceilings[: spec.retry_alarm_attempts - 1]) + spec.retry_alarm_attempts - 1

    times = fires_at(queue, "retrying", scenario, start, start + HOUR)

    assert max(times) < dead_lettered
    # Within a minute plus the lag of the third failure when 5-minute periods end at the evaluation's minute;
    # within the rest of its 5-minute period more if they are aligned to multiples of 5 minutes.
    assert min(times) <= third_failure + MINUTE + lag * MINUTE
    assert max(times) <= third_failure + 5 * MINUTE + lag * MINUTE


def test_retrying_pages_before_the_dead_letter_in_nearly_every_jittered_timeline(orders: QueueUnderTest) -> None:
    """The real backoff (full jitter, 30 s base, 120 s cap) over 300 seeded timelines of a job failing every run."""
    spec = orders.spec
    (job,) = spec.job_names
    rng = random.Random(19)
    sliding, aligned, sliding_lead = 0, 0, []
    timelines = 300
    for index in range(timelines):
        delays = [backoff_delay_s(n, spec.backoff_base_s, spec.backoff_cap_s, rng) for n in range(1, spec.max_attempts)]
        start = T0 + index * 2 * HOUR + rng.randrange(MINUTE)
        scenario, dead_lettered = failing_job(2, spec, job, start, delays)
        by_sliding = first_alarm(orders, "retrying", scenario, start, start + HOUR, Evaluation(retrieved=3))
        by_aligned = first_alarm(orders, "retrying", scenario, start, start + HOUR, Evaluation(3, aligned=True))
        assert by_sliding is not None and by_aligned is not None
        sliding += by_sliding <= dead_lettered
        aligned += by_aligned <= dead_lettered
        sliding_lead.append(dead_lettered - by_sliding)
    # With metrics 2 minutes late. docs/monitoring.md quotes these shares.
    assert sliding / timelines >= 0.97
    assert aligned / timelines >= 0.95
    assert quantiles(sliding_lead, n=2)[0] >= 3 * MINUTE, "typically minutes ahead of the dead letter"


@BY_LAG
def test_retrying_stays_quiet_for_failures_that_a_retry_or_two_fixes(orders: QueueUnderTest, lag: int) -> None:
    (job,) = orders.spec.job_names
    scenario = Scenario(lag)
    # A busy queue: every minute some first failures (attempt 1), now and then a second one (attempt 2).
    scenario.emitted(
        "RetryAttempt",
        job,
        [(T0 + second, 2.0 if second % 600 == 0 else 1.0) for second in range(0, 4 * HOUR, 20)],
    )
    quiet(orders, "retrying", scenario, T0 + HOUR, T0 + 4 * HOUR)
    quiet(orders, "retrying", Scenario(lag), T0 + HOUR, T0 + 4 * HOUR)


def test_the_retrying_alarm_sees_what_sqs_leaves_out_of_the_oldest_age(orders: QueueUnderTest) -> None:
    """A job failing fast on a quiet standard queue: after its third receive SQS stops counting it in
    ApproximateAgeOfOldestMessage, and the queue has nothing else waiting; only the retrying alarm pages, minutes
    before the DLQ alarms would."""
    spec = orders.spec
    (job,) = spec.job_names
    start = T0 + HOUR
    delays = [10, 20, 40, 40, 40, 40, 40, 40, 40]
    scenario, dead_lettered = failing_job(2, spec, job, start, delays)
    # Its first receives (age under a minute), then no message SQS counts: no datapoint at all.
    scenario.per_minute(
        "ApproximateAgeOfOldestMessage", "queue", start, start + HOUR, lambda m: 30 if m < start + 60 else None
    )

    quiet(orders, "oldest-message-age", scenario, start, start + HOUR)
    assert max(fires_at(orders, "retrying", scenario, start, start + HOUR)) < dead_lettered


# --- held near its bound: a key handed back again and again --------------------------------------------------------


def held_key(lag: int, job: str, first_hold: float, max_hold_s: int) -> tuple[Scenario, float, float]:
    """A busy key's record held until its bound, each time due again after about as long as it has waited (5 s to
    5 minutes, lib/sqs_jobs/worker/key_concurrency.py), HoldShare sampled at each hold as the runtime does. Returns the
    scenario, the first hold whose share reached 0.8, and when its holds end (the next refusal spends an attempt)."""
    holds: list[tuple[float, float]] = []
    at = first_hold
    while at - first_hold < max_hold_s:
        held_s = at - first_hold
        delay_s = min(max(5.0, held_s), 300.0)
        holds.append((at, min(1.0, (held_s + delay_s) / max_hold_s)))
        at += delay_s
    scenario = Scenario(lag)
    scenario.emitted("HoldShare", job, holds)
    near = min(when for when, share in holds if share >= 0.8)
    return scenario, near, at


@BY_LAG
def test_held_near_bound_pages_before_a_busy_keys_record_starts_spending_attempts(
    orders: QueueUnderTest, lag: int
) -> None:
    (job,) = orders.spec.job_names
    start = T0 + HOUR + 13
    scenario, near, bound = held_key(lag, job, start, KeyConcurrency().max_hold_s)

    times = fires_at(orders, "held-near-bound", scenario, start, start + 2 * HOUR)

    assert max(times) < bound
    assert min(times) <= near + MINUTE + lag * MINUTE
    assert max(times) <= near + 5 * MINUTE + lag * MINUTE


@BY_LAG
def test_held_near_bound_stays_quiet_for_holds_well_within_their_bound(orders: QueueUnderTest, lag: int) -> None:
    (job,) = orders.spec.job_names
    scenario = Scenario(lag)
    # A limit that keeps records waiting all day, each for under 70 % of its bound.
    scenario.emitted("HoldShare", job, [(T0 + second, 0.1 + (second % 7) / 10) for second in range(0, 4 * HOUR, 20)])
    quiet(orders, "held-near-bound", scenario, T0 + HOUR, T0 + 4 * HOUR)
    quiet(orders, "held-near-bound", Scenario(lag), T0 + HOUR, T0 + 4 * HOUR)


# --- the other alarms: one scenario that must fire, one that must not -----------------------------------------------


@BY_LAG
def test_oldest_message_age(orders: QueueUnderTest, lag: int) -> None:
    hung = T0 + HOUR
    threshold_s = orders.spec.alarms.oldest_message_age_s
    stuck, moving = Scenario(lag), Scenario(lag)
    stuck.per_minute("ApproximateAgeOfOldestMessage", "queue", T0, hung + HOUR, lambda m: max(20.0, m + 60 - hung))
    moving.per_minute("ApproximateAgeOfOldestMessage", "queue", T0, hung + HOUR, lambda m: 45.0)

    times = fires_at(orders, "oldest-message-age", stuck, hung, hung + HOUR)

    # The first minute whose age is over the threshold ends threshold_s after the hang; it shows `lag` later.
    assert set(times) == {hung + threshold_s + MINUTE + lag * MINUTE}
    quiet(orders, "oldest-message-age", moving, hung, hung + HOUR)


@BY_LAG
def test_backlog(orders: QueueUnderTest, lag: int) -> None:
    burst_at = T0 + HOUR
    above = orders.spec.alarms.backlog + 1
    lasting, draining = Scenario(lag), Scenario(lag)
    lasting.per_minute(
        "ApproximateNumberOfMessagesVisible", "queue", T0, burst_at + HOUR, lambda m: 0 if m < burst_at else above
    )
    # A bulk publish of 5 backlogs that drains in 3 minutes.
    draining.per_minute(
        "ApproximateNumberOfMessagesVisible",
        "queue",
        T0,
        burst_at + HOUR,
        lambda m: 5 * above if burst_at <= m < burst_at + 3 * MINUTE else 10,
    )

    times = fires_at(orders, "backlog", lasting, burst_at, burst_at + HOUR)

    assert set(times) == {burst_at + 5 * MINUTE + lag * MINUTE}  # 5 minutes above, shown `lag` later
    quiet(orders, "backlog", draining, burst_at, burst_at + HOUR)


@BY_LAG
def test_dlq_depth(orders: QueueUnderTest, lag: int) -> None:
    arrived = T0 + HOUR + 30
    one, idle = Scenario(lag), Scenario(lag)
    one.per_minute("ApproximateNumberOfMessagesVisible", "dlq", arrived // MINUTE * MINUTE, arrived + HOUR, lambda m: 1)

    times = fires_at(orders, "dlq-depth", one, arrived, arrived + HOUR)

    assert set(times) == {arrived // MINUTE * MINUTE + MINUTE + lag * MINUTE}
    quiet(orders, "dlq-depth", idle, arrived, arrived + HOUR)


@pytest.mark.parametrize(
    ("signal", "metric", "subject"),
    [
        ("dlq-arrivals", "JobDeadLettered", "order_confirmation"),
        ("dlq-arrivals", "JobDeadLettered", "(unparseable)"),
        ("runtime-faults", "RuntimeFault", "(runtime)"),
        ("circuit-open", "CircuitOpened", "(runtime)"),
    ],
)
@BY_LAG
def test_one_count_of_the_runtime_pages_within_minutes(
    orders: QueueUnderTest, signal: str, metric: str, subject: str, lag: int
) -> None:
    happened = T0 + HOUR + 25
    once = Scenario(lag)
    once.emitted(metric, subject, [(happened, 1.0)])

    times = fires_at(orders, signal, once, happened, happened + HOUR)

    next_minute = happened // MINUTE * MINUTE + MINUTE
    assert min(times) == next_minute + lag * MINUTE
    assert max(times) <= next_minute + 5 * MINUTE + lag * MINUTE
    quiet(orders, signal, Scenario(lag), happened, happened + HOUR)


@BY_LAG
def test_failure_rate(orders: QueueUnderTest, lag: int) -> None:
    (job,) = orders.spec.job_names
    broke = T0 + HOUR
    failing, quiet_queue = Scenario(lag), Scenario(lag)
    # 20 runs a minute from `broke` on, half of them failing.
    failing.emitted("JobSucceeded", job, [(broke + s, 1.0) for s in range(0, HOUR, 6)])
    failing.emitted("JobFailed", job, [(broke + s + 3, 1.0) for s in range(0, HOUR, 6)])
    # A quiet queue: two runs in 5 minutes, one of them failing: 50 %, but below failure_rate_min_runs.
    quiet_queue.emitted("JobSucceeded", job, [(broke + s, 1.0) for s in range(0, HOUR, 300)])
    quiet_queue.emitted("JobFailed", job, [(broke + s + 60, 1.0) for s in range(0, HOUR, 300)])

    times = fires_at(orders, "failure-rate", failing, broke, broke + HOUR)

    assert max(times) <= broke + 5 * MINUTE + lag * MINUTE
    quiet(orders, "failure-rate", quiet_queue, broke, broke + HOUR)


@pytest.mark.parametrize("signal", ["worker-errors", "worker-throttles"])
@BY_LAG
def test_worker_errors_and_throttles(orders: QueueUnderTest, signal: str, lag: int) -> None:
    metric = {"worker-errors": "Errors", "worker-throttles": "Throttles"}[signal]
    crashed = T0 + HOUR
    once, healthy = Scenario(lag), Scenario(lag)
    once.per_minute(metric, "function", T0, crashed + HOUR, lambda m: 1 if m == crashed else 0)
    # Lambda reports 0 for a function that was invoked without errors or throttles.
    healthy.per_minute(metric, "function", T0, crashed + HOUR, lambda m: 0)

    times = fires_at(orders, signal, once, crashed, crashed + HOUR)

    assert max(times) <= crashed + 6 * MINUTE + lag * MINUTE
    quiet(orders, signal, healthy, crashed, crashed + HOUR)


@BY_LAG
def test_jobs_near_their_time_limit(orders: QueueUnderTest, lag: int) -> None:
    (job,) = orders.spec.job_names
    limit_ms = orders.spec.time_limit_s(job) * 1000
    slowed = T0 + HOUR
    slow, fast = Scenario(lag), Scenario(lag)
    slow.emitted("JobDuration", job, [(slowed + s, 0.9 * limit_ms) for s in range(0, HOUR, 10)])
    fast.emitted("JobDuration", job, [(slowed + s, 0.1 * limit_ms) for s in range(0, HOUR, 10)])

    times = fires_at(orders, f"duration-{job}", slow, slowed, slowed + HOUR)

    assert max(times) <= slowed + 6 * MINUTE + lag * MINUTE
    quiet(orders, f"duration-{job}", fast, slowed, slowed + HOUR)
