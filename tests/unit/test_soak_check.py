"""The soak's checker must see every broken promise: fed observations with one fault each, it names it."""

from __future__ import annotations

from collections import Counter

import pytest

from functions.worker.deadletter import ERROR_TYPE, FAILURE, FAILURE_EXHAUSTED, FAILURE_PERMANENT
from jobctl.soak import DEFAULT_CHAOS, INVOICE_JOB, ORDER_JOB, Observed, SoakJob, SoakPlan, check, soak_catalog

JOBS = [
    SoakJob(ORDER_JOB, "0000001"),
    SoakJob(INVOICE_JOB, "0000002"),
    SoakJob(ORDER_JOB, "0000003", broken="missing"),
    SoakJob(INVOICE_JOB, "0000004", broken="bad"),
]


def all_well() -> Observed:
    """What a perfect run leaves behind for JOBS."""
    return Observed(
        mails=Counter({"0000001": 1}),
        invoices_created=Counter({"0000002": 1}),
        stored_pdfs={"0000002"},
        dead_letters={
            (ORDER_JOB, "0000003"): [{ERROR_TYPE: "OrderNotFoundError", FAILURE: FAILURE_PERMANENT}],
            (INVOICE_JOB, "0000004"): [{ERROR_TYPE: "InvoiceDataError", FAILURE: FAILURE_PERMANENT}],
        },
        left_in_queues={"orders": 0, "invoices": 0},
        idempotency_records=Counter({"COMPLETED": 2}),
    )


def test_a_perfect_run_has_no_problems() -> None:
    assert check(JOBS, all_well()) == []


def test_extra_dead_letter_copies_of_a_broken_job_are_not_a_problem() -> None:
    observed = all_well()
    observed.dead_letters[(ORDER_JOB, "0000003")].append({ERROR_TYPE: "OrderNotFoundError", FAILURE: FAILURE_PERMANENT})
    assert check(JOBS, observed) == []


def _break(observed: Observed, fault: str) -> None:
    if fault == "mail twice":
        observed.mails["0000001"] = 2
    elif fault == "job lost":
        observed.invoices_created.clear()
    elif fault == "pdf missing":
        observed.stored_pdfs.clear()
    elif fault == "broken job not dead-lettered":
        del observed.dead_letters[(ORDER_JOB, "0000003")]
    elif fault == "broken job had a side effect":
        observed.mails["0000003"] = 1
    elif fault == "good job dead-lettered":
        observed.dead_letters[(ORDER_JOB, "0000001")] = [{ERROR_TYPE: "Throttling", FAILURE: FAILURE_EXHAUSTED}]
    elif fault == "evidence missing":
        observed.dead_letters[(INVOICE_JOB, "0000004")] = [{}]
    elif fault == "wrong failure":
        observed.dead_letters[(INVOICE_JOB, "0000004")] = [{ERROR_TYPE: "InvoiceDataError", FAILURE: "exhausted"}]
    elif fault == "stranger in the DLQ":
        observed.dead_letters[(ORDER_JOB, "9999999")] = [{}]
    elif fault == "unparseable in the DLQ":
        observed.unparseable_dead_letters.append("garbage")
    elif fault == "mail nobody asked for":
        observed.mails["7777777"] = 1
    elif fault == "left in queue":
        observed.left_in_queues["orders"] = 3
    elif fault == "in progress":
        observed.idempotency_records["INPROGRESS"] = 1
    elif fault == "completed count":
        observed.idempotency_records["COMPLETED"] = 3
    elif fault == "not drained":
        observed.drained = False
    else:
        raise AssertionError(fault)


@pytest.mark.parametrize(
    ("fault", "named"),
    [
        ("mail twice", "order_confirmation:0000001 had 2 side effects"),
        ("job lost", "generate_invoice:0000002 had 0 side effects"),
        ("pdf missing", "generate_invoice:0000002 has no PDF"),
        ("broken job not dead-lettered", "order_confirmation:0000003 (missing data) is not in the DLQ"),
        ("broken job had a side effect", "order_confirmation:0000003 (missing data) had 1 side effect"),
        ("good job dead-lettered", "order_confirmation:0000001 can succeed but was dead-lettered"),
        ("evidence missing", "generate_invoice:0000004 is in the DLQ without its evidence"),
        ("wrong failure", "generate_invoice:0000004 is in the DLQ without its evidence"),
        ("stranger in the DLQ", "unexpected job in the DLQ: order_confirmation:9999999"),
        ("unparseable in the DLQ", "a DLQ message is not a job"),
        ("mail nobody asked for", "mail for unknown order '7777777'"),
        ("left in queue", "3 message(s) left in queue orders"),
        ("in progress", "1 idempotency record(s) still IN_PROGRESS"),
        ("completed count", "3 completed idempotency records for 2 jobs"),
        ("not drained", "did not drain"),
    ],
)
def test_each_broken_promise_is_named(fault: str, named: str) -> None:
    observed = all_well()
    _break(observed, fault)
    problems = check(JOBS, observed)
    assert any(named in problem for problem in problems), problems


def test_an_in_progress_record_past_its_deadline_is_not_in_flight() -> None:
    observed = all_well()
    observed.idempotency_records["INPROGRESS"] = 2
    observed.stale_in_progress = 1  # a start written after its call timed out: its key was settled since
    assert check(JOBS, observed) == ["1 idempotency record(s) still IN_PROGRESS before their deadline"]
    observed.stale_in_progress = 2
    assert check(JOBS, observed) == []


def test_the_plan_is_the_same_for_the_same_seed_and_has_what_was_asked() -> None:
    plan = SoakPlan(jobs=5000, invoice_share=0.3, permanent=0.02, seed=11)
    jobs = plan.build_jobs()
    assert jobs == plan.build_jobs()
    assert len({job.id for job in jobs}) == 5000
    assert 1300 < sum(job.job == INVOICE_JOB for job in jobs) < 1700
    broken = [job for job in jobs if job.permanent]
    assert 60 < len(broken) < 140
    assert {job.broken for job in broken} == {"missing", "bad"}
    assert jobs != SoakPlan(jobs=5000, seed=12).build_jobs()


def test_the_soak_catalog_compresses_time_and_keeps_the_rest() -> None:
    from sqs_jobs.catalog import CATALOG

    compressed = soak_catalog()
    for original, soak in zip(CATALOG, compressed, strict=True):
        assert soak.max_attempts == original.max_attempts
        assert soak.batch_size == original.batch_size and soak.max_concurrency == original.max_concurrency
        assert soak.job_names == original.job_names
        assert soak.visibility_timeout_s < original.visibility_timeout_s
        assert all(soak.time_limit_s(job) < soak.function_timeout_s for job in soak.job_names)
        assert soak.records_in_parallel == original.records_in_parallel
        assert soak.circuit_breaker.open_s < original.circuit_breaker.open_s
        assert soak.circuit_breaker.failure_threshold == original.circuit_breaker.failure_threshold
    # A hang outlasts the time limit, so the soak's hangs are cut.
    assert DEFAULT_CHAOS.hang_s > max(q.time_limit_s(j) for q in compressed for j in q.job_names)


@pytest.mark.parametrize("bad", [{"jobs": 0}, {"window": 0}, {"window": 50, "backlog": 10}, {"permanent": 1.5}])
def test_bad_plans_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        SoakPlan(**bad)  # type: ignore[arg-type]
