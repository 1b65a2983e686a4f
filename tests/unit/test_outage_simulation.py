"""The outage benchmark's simulator: its SQS semantics and bookkeeping, on small instances (never its timing)."""

from __future__ import annotations

import dataclasses
import json
import random
import time
from typing import Any

import pytest
from aws_lambda_powertools.utilities.circuit_breaker import base as powertools_base

import bench.outage
from bench.outage import (
    BREAKER_CALLS_SHARE,
    BREAKER_DRAIN_TOLERANCE,
    DEFAULTS,
    SQS_DEFAULT_VISIBILITY_S,
    BreakerSweepRow,
    Check,
    Kind,
    Policy,
    Result,
    Run,
    Scenario,
    SweepRow,
    breaker_checks,
    fixed_visibility,
    immediate_retry,
    main,
    percentile,
    powertools_breaker,
    run_policy,
    runtime_backoff,
    runtime_breaker,
    simulate,
    standard_policies,
    sweep,
    sweep_breaker,
)
from sqs_jobs.limits import SQS_MAX_VISIBILITY_S
from sqs_jobs.specs import CircuitBreakerSpec, QueueSpec
from sqs_jobs.worker.backoff import backoff_delay_s
from sqs_jobs.worker.breaker import Breakers

# 0.25 s is exact in binary floating point: receive times land exactly where the tests expect them.
FAIL_S = 0.25
SMALL = Scenario(jobs=50, workers=5, outage_s=60.0, fail_s=FAIL_S, service_s=0.5, max_attempts=5)
ALL_POLICIES = (
    immediate_retry(),
    fixed_visibility(SQS_DEFAULT_VISIBILITY_S),
    fixed_visibility(360),
    runtime_backoff(),
    runtime_breaker(),
)


def breaker_policy(**settings: Any) -> Policy:
    """The runtime with its breakers, the catalog's defaults but for `settings`."""
    spec = CircuitBreakerSpec(**settings)
    return runtime_breaker(dataclasses.replace(DEFAULTS, circuit_breaker=spec))


@pytest.mark.parametrize("policy", ALL_POLICIES, ids=lambda policy: policy.kind.value)
def test_without_an_outage_every_job_runs_once(policy: Policy) -> None:
    run = simulate(policy, Scenario(jobs=100, workers=10, outage_s=0.0, service_s=0.5), seed=3)
    assert run.total_calls == 100
    assert run.outage_calls == 0
    assert run.completed == 100
    assert run.dead_lettered == 0
    assert run.pending_at_recovery == 100
    assert (run.holds, run.refused_attempts, run.breaker_opened) == (0, 0, 0)
    # Ten rounds of ten workers, half a second each.
    assert run.drain_s == pytest.approx(5.0)
    assert run.p50_s == pytest.approx(2.5)
    assert run.p99_s == pytest.approx(5.0)


@pytest.mark.parametrize("policy", ALL_POLICIES, ids=lambda policy: policy.kind.value)
def test_a_message_is_dead_lettered_after_exactly_max_attempts_failed_receives(policy: Policy) -> None:
    scenario = Scenario(jobs=1, workers=1, outage_s=100_000.0, fail_s=FAIL_S, max_attempts=4)
    run = simulate(policy, scenario, seed=1)
    assert run.total_calls == run.outage_calls == 4
    assert run.dead_lettered == 1
    assert run.completed == 0
    assert run.p50_s is None and run.p99_s is None


def test_the_runtime_dead_letters_on_its_last_failure_sqs_on_the_receive_after() -> None:
    scenario = Scenario(jobs=1, workers=1, outage_s=0.125, fail_s=FAIL_S, max_attempts=1)
    runtime = simulate(runtime_backoff(), scenario, seed=1)
    assert runtime.dead_lettered == 1
    assert runtime.drain_s == pytest.approx(FAIL_S - 0.125)
    # Without the runtime, SQS's redrive moves the message once it is visible again: 30 s after the receive.
    sqs = simulate(fixed_visibility(30), scenario, seed=1)
    assert sqs.dead_lettered == 1
    assert sqs.drain_s == pytest.approx(30 - 0.125)


def test_a_job_that_fails_one_attempt_short_of_the_limit_still_completes() -> None:
    # Immediate retry receives at 0, 0.25, 0.5, 0.75 (all failing) and at 1.0, when the downstream is back.
    back_in_time = simulate(
        immediate_retry(), Scenario(jobs=1, workers=1, outage_s=1.0, fail_s=FAIL_S, max_attempts=5), seed=1
    )
    assert (back_in_time.outage_calls, back_in_time.total_calls) == (4, 5)
    assert (back_in_time.completed, back_in_time.dead_lettered) == (1, 0)
    one_tick_later = simulate(
        immediate_retry(), Scenario(jobs=1, workers=1, outage_s=1.01, fail_s=FAIL_S, max_attempts=5), seed=1
    )
    assert (one_tick_later.outage_calls, one_tick_later.completed, one_tick_later.dead_lettered) == (5, 0, 1)


def test_immediate_retry_calls_the_failing_downstream_more_than_the_runtimes_backoff() -> None:
    immediate = simulate(immediate_retry(), SMALL, seed=1)
    backoff = simulate(runtime_backoff(), SMALL, seed=1)
    assert immediate.outage_calls == SMALL.jobs * SMALL.max_attempts
    assert immediate.dead_lettered == SMALL.jobs
    assert backoff.outage_calls < immediate.outage_calls
    assert backoff.dead_lettered < immediate.dead_lettered


def test_fixed_visibility_counts_from_the_receive_not_from_the_failure() -> None:
    policy = fixed_visibility(30)
    assert policy.visible_at(received_s=10.0, failed_s=10.25, attempt=1, rng=random.Random(0)) == 40.0
    # A failure that outlasts the timeout is visible at once.
    assert policy.visible_at(received_s=10.0, failed_s=45.0, attempt=1, rng=random.Random(0)) == 45.0
    # One message, one worker, a 100 s outage: receives at 0, 30, 60, 90 fail, the one at 120 succeeds.
    run = simulate(policy, Scenario(jobs=1, workers=1, outage_s=100.0, fail_s=FAIL_S, service_s=0.5), seed=1)
    assert (run.outage_calls, run.total_calls, run.completed) == (4, 5, 1)
    assert run.drain_s == pytest.approx(20.5)


def test_the_runtime_policy_uses_the_real_backoff_with_the_catalogs_defaults() -> None:
    policy = runtime_backoff()
    assert (policy.base_s, policy.cap_s) == (DEFAULTS.backoff_base_s, DEFAULTS.backoff_cap_s)
    assert (policy.base_s, policy.cap_s) == (QueueSpec.backoff_base_s, QueueSpec.backoff_cap_s)
    assert Scenario().max_attempts == QueueSpec.max_attempts
    for attempt in range(1, 8):
        expected = 5.0 + backoff_delay_s(attempt, policy.base_s, policy.cap_s, random.Random(attempt))
        assert policy.visible_at(received_s=4.8, failed_s=5.0, attempt=attempt, rng=random.Random(attempt)) == expected


def test_the_standard_policies_include_sqs_default_and_the_stacks_visibility() -> None:
    kinds = [(policy.kind, policy.visibility_s) for policy in standard_policies()]
    assert kinds == [
        (Kind.IMMEDIATE, 0.0),
        (Kind.FIXED, SQS_DEFAULT_VISIBILITY_S),
        (Kind.FIXED, DEFAULTS.visibility_timeout_s),
        (Kind.BACKOFF, 0.0),
        (Kind.BREAKER, 0.0),
    ]


@pytest.mark.parametrize("policy", [runtime_backoff(), runtime_breaker()], ids=lambda policy: policy.kind.value)
def test_a_seed_gives_the_same_run_and_another_seed_another(policy: Policy) -> None:
    assert simulate(policy, SMALL, seed=7) == simulate(policy, SMALL, seed=7)
    runs = {simulate(policy, SMALL, seed=seed) for seed in range(5)}
    assert len({(run.outage_calls, run.drain_s, run.p99_s, run.holds) for run in runs}) > 1


def test_only_the_jittered_policies_run_several_seeds() -> None:
    assert len(run_policy(runtime_backoff(), SMALL, first_seed=1, seeds=3).runs) == 3
    assert len(run_policy(runtime_breaker(), SMALL, first_seed=1, seeds=3).runs) == 3
    assert len(run_policy(fixed_visibility(30), SMALL, first_seed=1, seeds=3).runs) == 1


def test_drain_is_zero_when_nothing_was_pending_at_recovery() -> None:
    # Immediate retry dead-letters every job long before a 1,000 s outage ends.
    run = simulate(immediate_retry(), Scenario(jobs=20, workers=4, outage_s=1000.0, fail_s=FAIL_S), seed=1)
    assert run.pending_at_recovery == 0
    assert run.drain_s == 0.0
    assert run.dead_lettered == 20


def test_drain_runs_from_recovery_to_the_last_job() -> None:
    # Stack-length visibility: every job fails once, reappears 360 s after its receive, then takes 0.5 s.
    scenario = Scenario(jobs=10, workers=10, outage_s=100.0, fail_s=FAIL_S, service_s=0.5)
    run = simulate(fixed_visibility(360), scenario, seed=1)
    assert run.pending_at_recovery == 10
    assert run.drain_s == pytest.approx(360.5 - 100.0)
    assert (run.outage_calls, run.total_calls) == (10, 20)


def test_percentile_is_nearest_rank() -> None:
    values = [float(n) for n in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile([3.0], 99) == 3.0
    assert percentile([], 50) is None


def test_a_scenario_that_makes_no_sense_is_refused() -> None:
    with pytest.raises(ValueError, match="workers must be at least 1"):
        simulate(immediate_retry(), Scenario(workers=0))


def test_the_sweep_marks_the_default_and_compares_with_fixed_visibility() -> None:
    rows = sweep(
        SMALL,
        first_seed=1,
        seeds=2,
        bases_s=(DEFAULTS.backoff_base_s, 1),
        caps_s=(DEFAULTS.backoff_cap_s,),
        max_attempts=(DEFAULTS.max_attempts,),
    )
    assert [(row.base_s, row.is_default) for row in rows] == [(DEFAULTS.backoff_base_s, True), (1, False)]
    fixed = simulate(fixed_visibility(SQS_DEFAULT_VISIBILITY_S), SMALL, seed=1)
    assert {row.fixed_outage_calls for row in rows} == {fixed.outage_calls}


def test_a_drain_that_lost_jobs_is_never_comparable() -> None:
    row = SweepRow(
        base_s=20,
        cap_s=300,
        max_attempts=5,
        outage_calls=3000.0,
        fixed_outage_calls=4000.0,
        drain_s=40.0,
        drain_max_s=45.0,
        fixed_drain_s=50.0,
        fixed_dead_lettered=0,
        dead_lettered=0.0,
        dead_lettered_max=0.0,
        is_default=True,
    )
    assert row.meets_all
    lost = dataclasses.replace(row, dead_lettered=0.2, dead_lettered_max=1.0)
    assert lost.drains_comparable and not lost.comparable_drain and not lost.meets_all
    fixed_lost = dataclasses.replace(row, fixed_dead_lettered=3)
    assert not fixed_lost.comparable_drain
    slow = dataclasses.replace(row, drain_s=75.5)
    assert (slow.fewer_calls, slow.comparable_drain, slow.no_dead_letters) == (True, False, True)


def test_the_command_prints_json_for_every_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--jobs", "40", "--workers", "4", "--outage-s", "30", "--seeds", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["scenario"]["jobs"] == 40
    assert [policy["kind"] for policy in data["policies"]] == ["immediate", "fixed", "fixed", "backoff", "breaker"]
    assert len(data["policies"][3]["runs"]) == 2
    assert {check["claim"] for check in data["checks"]} >= {
        "far fewer downstream calls during the outage than immediate retry"
    }
    breaker = data["policies"][4]
    assert len(breaker["runs"]) == 2
    assert breaker["summary"]["holds"]["mean"] == sum(run["holds"] for run in breaker["runs"]) / 2
    assert len(data["breaker_checks"]) == 3
    assert data["circuit_breaker_defaults"]["failure_threshold"] == CircuitBreakerSpec().failure_threshold


def test_the_command_prints_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    # Powertools' breaker has its own test below (its runs go through moto).
    assert main(["--jobs", "40", "--workers", "4", "--outage-s", "30", "--no-powertools"]) == 0
    out = capsys.readouterr().out
    assert "fixed 30 s visibility (SQS default)" in out
    assert "this runtime: full-jitter backoff" in out
    assert "this runtime + circuit breaker" in out
    assert "The issue's goals for the circuit breaker" in out


def test_the_command_refuses_bad_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--workers", "0"])
    assert exit_.value.code == 2
    assert "workers must be at least 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--hold-s", "0"])
    assert "hold_s must be above 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--sweep", "--sweep-breaker"])
    assert "choose one" in capsys.readouterr().err


# --- the circuit breaker policy ---------------------------------------------------------------------------

# A downstream that never recovers, for as long as any test runs.
FOREVER = 1_000_000.0


def test_the_breaker_policy_takes_the_catalogs_defaults() -> None:
    policy = runtime_breaker()
    assert policy.breaker == CircuitBreakerSpec() == DEFAULTS.circuit_breaker
    assert (policy.base_s, policy.cap_s) == (QueueSpec.backoff_base_s, QueueSpec.backoff_cap_s)
    assert policy.dead_letters_itself


@pytest.mark.parametrize("threshold", [1, 3, CircuitBreakerSpec().failure_threshold])
def test_each_workers_breaker_makes_exactly_failure_threshold_failing_calls_then_holds(threshold: int) -> None:
    # Three workers in step: each fails `threshold` calls of 0.25 s, so each breaker opens at threshold x 0.25 s
    # and lets a probe through open_s (5 s) later, after the 5 s outage: every call past the threshold's is a
    # success, and the records received in between are held, not called.
    scenario = Scenario(jobs=30, workers=3, outage_s=5.0, fail_s=FAIL_S, service_s=0.5, max_attempts=10)
    run = simulate(breaker_policy(failure_threshold=threshold), scenario, seed=1)
    assert run.outage_calls == 3 * threshold
    assert run.breaker_opened == 3  # one breaker per worker, each opened once
    assert run.holds >= 30 - 3 * threshold  # every job not called before the breakers opened was held
    # Held records cost no call: each job is called once, plus once more for each that failed.
    assert run.total_calls == 30 + 3 * threshold
    assert (run.completed, run.dead_lettered, run.refused_attempts) == (30, 0, 0)


def test_a_breaker_that_is_turned_off_leaves_the_runtimes_backoff_as_it_is() -> None:
    # Breakers.admit gives no ticket when the spec is disabled: the same calls and the same jitter, draw for draw.
    off = simulate(breaker_policy(enabled=False), SMALL, seed=4)
    backoff = simulate(runtime_backoff(), SMALL, seed=4)
    assert off.holds == 0
    assert dataclasses.replace(off, policy=backoff.policy) == backoff


def test_the_simulation_drives_the_real_breakers_one_per_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[Breakers] = []

    class Counted(Breakers):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(bench.outage, "Breakers", Counted)
    run = simulate(runtime_breaker(), SMALL, seed=1)
    assert len(made) == SMALL.workers
    assert all(breakers.spec == CircuitBreakerSpec() for breakers in made)
    # Their state is what the run reports: every worker's breaker opened during the 60 s outage.
    assert sum(snapshot.opened for breakers in made for snapshot in breakers.snapshots()) == run.breaker_opened
    assert run.breaker_opened >= SMALL.workers


def test_held_records_spend_no_attempts() -> None:
    # A downstream that never comes back, holds allowed for SQS's 12 h: each job is dead-lettered after exactly
    # max_attempts calls (the first, then probes), however often it was held in between.
    scenario = Scenario(jobs=10, workers=2, outage_s=FOREVER, fail_s=FAIL_S, max_attempts=3)
    policy = breaker_policy(failure_threshold=1, open_s=5.0, max_open_s=5.0, max_hold_s=SQS_MAX_VISIBILITY_S)
    for seed in range(3):
        run = simulate(policy, scenario, seed=seed)
        assert run.total_calls == run.outage_calls == 10 * 3
        assert run.holds > 10  # many more hand-backs than jobs
        assert (run.dead_lettered, run.completed, run.refused_attempts) == (10, 0, 0)


def test_records_held_while_a_breaker_is_open_each_run_once_after_it_closes() -> None:
    # One worker's breaker opens on the first (failing) call; the other nine jobs are held until its probe, after
    # the 0.1 s outage, closes it; then each runs once, and the failed one once more.
    scenario = Scenario(jobs=10, workers=1, outage_s=0.1, fail_s=FAIL_S, service_s=0.5)
    run = simulate(breaker_policy(failure_threshold=1), scenario, seed=2)
    assert (run.outage_calls, run.total_calls) == (1, 11)
    assert run.holds >= 9
    assert (run.completed, run.dead_lettered) == (10, 0)


@pytest.mark.parametrize("max_hold_s", [0, 60])
def test_past_max_hold_s_a_refusal_spends_an_attempt_and_the_job_ends_dead_lettered(max_hold_s: int) -> None:
    # Every receive is a call or a refusal; past max_hold_s (at once for 0) the refusals count as attempts, so
    # calls and spent refusals add up to max_attempts per job, and every job ends in the DLQ.
    scenario = Scenario(jobs=10, workers=2, outage_s=FOREVER, fail_s=FAIL_S, max_attempts=3)
    policy = breaker_policy(failure_threshold=1, open_s=5.0, max_open_s=5.0, max_hold_s=max_hold_s)
    run = simulate(policy, scenario, seed=1)
    assert run.total_calls + run.refused_attempts == 10 * 3
    assert run.refused_attempts > 0
    assert (run.dead_lettered, run.completed) == (10, 0)
    if max_hold_s == 0:
        assert run.holds == 0
    else:
        assert run.holds > 0


def test_a_spent_refusal_backs_off_at_least_until_the_breaker_would_let_a_probe_through() -> None:
    policy = runtime_breaker()
    for attempt in range(1, 6):
        rng = random.Random(attempt)
        expected = 5.0 + backoff_delay_s(attempt, policy.base_s, policy.cap_s, random.Random(attempt), floor_s=100.0)
        assert policy.visible_at(received_s=4.8, failed_s=5.0, attempt=attempt, rng=rng, floor_s=100.0) == expected
        assert expected >= 105.0


def _result(policy: Policy, **runs: Any) -> Result:
    base = Run(
        policy=policy.label, seed=1, outage_calls=0, total_calls=0, completed=0, dead_lettered=0,
        pending_at_recovery=0, drain_s=0.0, p50_s=None, p99_s=None,
    )  # fmt: skip
    return Result(policy=policy, runs=(dataclasses.replace(base, **runs),))


def test_the_breaker_goals_are_judged_on_the_worst_seed() -> None:
    immediate = _result(immediate_retry(), outage_calls=10_000)
    fixed = _result(fixed_visibility(30), drain_s=100.0)
    runs = (
        dataclasses.replace(_result(runtime_breaker(), outage_calls=100, drain_s=110.0).runs[0], seed=1),
        dataclasses.replace(_result(runtime_breaker(), outage_calls=1_001, drain_s=121.0).runs[0], seed=2),
    )
    verdict = breaker_checks(immediate, fixed, Result(runtime_breaker(), runs), Scenario())
    assert [check.ok for check in verdict] == [False, False, True]
    good = Result(runtime_breaker(), runs[:1])
    assert all(check.ok for check in breaker_checks(immediate, fixed, good, Scenario()))
    # A yardstick that lost jobs judges no drain.
    lossy = _result(fixed_visibility(30), drain_s=5.0, dead_lettered=1000)
    drain: Check = breaker_checks(immediate, lossy, good, Scenario())[1]
    assert not drain.ok and "no yardstick" in drain.detail


def test_the_breaker_sweep_marks_the_default_and_compares_with_immediate_and_fixed() -> None:
    default = CircuitBreakerSpec()
    rows = sweep_breaker(
        SMALL,
        first_seed=1,
        seeds=2,
        thresholds=(default.failure_threshold, 1),
        opens_s=(default.open_s,),
        max_opens_s=(default.max_open_s, 1.0),  # 1.0 < open_s: skipped
    )
    assert [(row.failure_threshold, row.is_default) for row in rows] == [(default.failure_threshold, True), (1, False)]
    assert {row.immediate_outage_calls for row in rows} == {simulate(immediate_retry(), SMALL, seed=1).outage_calls}
    assert {row.fixed_drain_s for row in rows} == {simulate(fixed_visibility(30), SMALL, seed=1).drain_s}
    # The same runs as the policy itself.
    own = run_policy(breaker_policy(failure_threshold=1), SMALL, first_seed=1, seeds=2)
    assert rows[1].outage_calls_max == max(run.outage_calls for run in own.runs)


def test_a_breaker_sweep_row_meets_the_goals_only_in_every_seed() -> None:
    row = BreakerSweepRow(
        failure_threshold=5, open_s=5.0, max_open_s=30.0, outage_calls=90.0, outage_calls_max=100.0,
        immediate_outage_calls=10_000.0, drain_s=105.0, drain_max_s=110.0, fixed_drain_s=100.0,
        fixed_dead_lettered=0, dead_lettered=0.0, dead_lettered_max=0.0, holds=5_000.0, is_default=True,
    )  # fmt: skip
    assert row.meets_all
    assert not dataclasses.replace(row, outage_calls_max=BREAKER_CALLS_SHARE * 10_000 + 1).few_calls
    assert not dataclasses.replace(row, drain_max_s=BREAKER_DRAIN_TOLERANCE * 100.0 + 0.1).drains_in_time
    assert not dataclasses.replace(row, dead_lettered_max=1.0).meets_all
    assert not dataclasses.replace(row, fixed_dead_lettered=3).drains_in_time


def test_the_command_sweeps_the_breaker(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--sweep-breaker", "--jobs", "40", "--workers", "4", "--outage-s", "30", "--seeds", "2"]
    assert main([*argv, "--thresholds", "1,5", "--opens", "5", "--max-opens", "30", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(row["failure_threshold"], row["is_default"]) for row in data["breaker_sweep"]] == [(1, False), (5, True)]
    assert main([*argv, "--thresholds", "5", "--opens", "5", "--max-opens", "30"]) == 0
    assert "<- current default" in capsys.readouterr().out


# --- Powertools' circuit breaker --------------------------------------------------------------------------


def test_powertools_breaker_shares_its_state_and_calls_the_failing_downstream_less_than_the_backoff() -> None:
    # Its real handler and DynamoDB persistence, on moto: each worker fails failure_threshold calls before it opens,
    # then the workers elect one probe per recovery_timeout between them (per worker, it would be 5 x 12 probes).
    powertools_globals = (powertools_base._LOCAL_FAILURES, powertools_base._probe_owner_id)
    policy = powertools_breaker()
    assert policy.powertools is not None
    run = simulate(policy, SMALL, seed=1)
    backoff = simulate(runtime_backoff(), SMALL, seed=1)
    assert run.outage_calls < backoff.outage_calls
    probes = SMALL.outage_s / policy.powertools.recovery_timeout
    assert run.outage_calls <= SMALL.workers * policy.powertools.failure_threshold + probes
    assert run.store_reads > 0 and run.store_writes > 0
    assert run.holds > 0
    assert (run.completed, run.dead_lettered) == (SMALL.jobs, 0)
    # The virtual clock and the per-worker counters were Powertools' only during the run.
    assert (powertools_base._LOCAL_FAILURES, powertools_base._probe_owner_id) == powertools_globals
    assert abs(powertools_base.CircuitBreakerHandler._now() - time.time()) <= 1
