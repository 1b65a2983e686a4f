"""The soak's checker must see every broken promise: fed observations with one fault each, it names it."""

from __future__ import annotations

import io
import json
from collections import Counter

import pytest

from example.soak import (
    DEFAULT_CHAOS,
    INVOICE_JOB,
    ODD_RESULT_FIFO_JOB,
    ODD_RESULT_JOB,
    ORDER_JOB,
    SOAK_HTTP_TIMEOUTS_S,
    UNKNOWN_MAIL,
    UPDATE_JOB,
    CutRunWitness,
    Observed,
    SoakJob,
    SoakPlan,
    attributes_fingerprint,
    big_attributes,
    check,
    mail_ref,
    planned_faults,
    soak_catalog,
)
from example.soak_jobs import odd_results
from functions.jobs import order_update_mail
from functions.worker.deadletter import ERROR_TYPE, FAILURE
from functions.worker.execution import CUT_RUN_CALL_ENDED_MESSAGE
from functions.worker.names import DeadLetterFailure
from sqs_jobs.catalog import CATALOG

JOBS = [
    SoakJob(ORDER_JOB, "0000001"),
    SoakJob(INVOICE_JOB, "0000002"),
    SoakJob(ORDER_JOB, "0000003", broken="missing", big_attributes=True),
    SoakJob(INVOICE_JOB, "0000004", broken="bad"),
    SoakJob(UPDATE_JOB, "0000005", key="0000005-u1"),
    SoakJob(UPDATE_JOB, "0000005", key="0000005-u2", big_attributes=True),
    SoakJob(UPDATE_JOB, "0000005", key="0000005-u3"),
    SoakJob(ODD_RESULT_FIFO_JOB, "0000006"),
]
BROKEN_WITH_ATTRIBUTES = JOBS[2]


def all_well() -> Observed:
    """What a perfect run leaves behind for JOBS."""
    return Observed(
        mails=Counter(
            {
                (ORDER_JOB, "0000001"): 1,
                (UPDATE_JOB, "0000005-u1"): 1,
                (UPDATE_JOB, "0000005-u2"): 1,
                (UPDATE_JOB, "0000005-u3"): 1,
                (ODD_RESULT_FIFO_JOB, "0000006"): 1,
            }
        ),
        update_mails={"0000005": ["0000005-u1", "0000005-u2", "0000005-u3"]},
        invoices_created=Counter({"0000002": 1}),
        stored_pdfs={"0000002"},
        dead_letters={
            (ORDER_JOB, "0000003"): [{ERROR_TYPE: "OrderNotFoundError", FAILURE: DeadLetterFailure.PERMANENT}],
            (INVOICE_JOB, "0000004"): [{ERROR_TYPE: "InvoiceDataError", FAILURE: DeadLetterFailure.PERMANENT}],
        },
        dead_letter_attributes={
            (ORDER_JOB, "0000003"): [attributes_fingerprint(big_attributes(BROKEN_WITH_ATTRIBUTES.name))],
            (INVOICE_JOB, "0000004"): [""],
        },
        left_in_queues={"orders": 0, "invoices": 0, "order_updates": 0},
        idempotency_records=Counter({"COMPLETED": 6}),
    )


def test_a_perfect_run_has_no_problems() -> None:
    assert check(JOBS, all_well()) == []


def test_extra_dead_letter_copies_of_a_broken_job_are_not_a_problem() -> None:
    observed = all_well()
    observed.dead_letters[(ORDER_JOB, "0000003")].append(
        {ERROR_TYPE: "OrderNotFoundError", FAILURE: DeadLetterFailure.PERMANENT}
    )
    observed.dead_letter_attributes[(ORDER_JOB, "0000003")] *= 2
    assert check(JOBS, observed) == []


def _break(observed: Observed, fault: str) -> None:
    if fault == "mail twice":
        observed.mails[(ORDER_JOB, "0000001")] = 2
    elif fault == "job lost":
        observed.invoices_created.clear()
    elif fault == "pdf missing":
        observed.stored_pdfs.clear()
    elif fault == "broken job not dead-lettered":
        del observed.dead_letters[(ORDER_JOB, "0000003")]
    elif fault == "broken job had a side effect":
        observed.mails[(ORDER_JOB, "0000003")] = 1
    elif fault == "good job dead-lettered":
        observed.dead_letters[(ORDER_JOB, "0000001")] = [
            {ERROR_TYPE: "Throttling", FAILURE: DeadLetterFailure.RETRIES_EXHAUSTED}
        ]
    elif fault == "evidence missing":
        observed.dead_letters[(INVOICE_JOB, "0000004")] = [{}]
    elif fault == "wrong failure":
        observed.dead_letters[(INVOICE_JOB, "0000004")] = [{ERROR_TYPE: "InvoiceDataError", FAILURE: "exhausted"}]
    elif fault == "attributes lost":
        observed.dead_letter_attributes[(ORDER_JOB, "0000003")] = [""]
    elif fault == "attributes changed":
        changed = {
            **big_attributes(BROKEN_WITH_ATTRIBUTES.name),
            "locale": {"DataType": "String", "StringValue": "ja-JP"},
        }
        observed.dead_letter_attributes[(ORDER_JOB, "0000003")] = [attributes_fingerprint(changed)]
    elif fault == "attributes unreadable":
        observed.unreadable_attributes.append("order_confirmation:0000003: expired")
    elif fault == "update lost":
        del observed.mails[(UPDATE_JOB, "0000005-u2")]
        observed.update_mails["0000005"].remove("0000005-u2")
    elif fault == "updates out of order":
        observed.update_mails["0000005"] = ["0000005-u1", "0000005-u3", "0000005-u2"]
    elif fault == "odd result mailed twice":
        observed.mails[(ODD_RESULT_FIFO_JOB, "0000006")] = 2
    elif fault == "stranger in the DLQ":
        observed.dead_letters[(ORDER_JOB, "9999999")] = [{}]
    elif fault == "unparseable in the DLQ":
        observed.unparseable_dead_letters.append("garbage")
    elif fault == "mail nobody asked for":
        observed.mails[(ORDER_JOB, "7777777")] = 1
    elif fault == "mail no job writes":
        observed.mails[(UNKNOWN_MAIL, "hello")] = 1
    elif fault == "left in queue":
        observed.left_in_queues["order_updates"] = 3
    elif fault == "in progress":
        observed.idempotency_records["INPROGRESS"] = 1
    elif fault == "completed count":
        observed.idempotency_records["COMPLETED"] = 7
    elif fault == "not drained":
        observed.drained = False
    elif fault in _FLOW_FAULTS:
        setattr(observed, *_FLOW_FAULTS[fault])
    else:
        raise AssertionError(fault)


# Flow control's broken promises: the figure of Observed that shows each.
_FLOW_FAULTS: dict[str, tuple[str, float]] = {
    "api over its limit": ("api_calls_in_busiest_second", 31),
    "api refused": ("api_refused_over_rate", 2),
    "held past its bound": ("most_hold_share", 1.0),
}


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
        ("attributes lost", "order_confirmation:0000003 is in the DLQ without its producer's attributes"),
        ("attributes changed", "order_confirmation:0000003 is in the DLQ without its producer's attributes"),
        ("attributes unreadable", "a dead letter's attributes could not be read back: order_confirmation:0000003"),
        ("update lost", "order_update_mail:0000005-u2 had 0 side effects"),
        ("updates out of order", "order 0000005's updates were mailed out of order"),
        ("odd result mailed twice", "odd_result_update_receipt:0000006 had 2 side effects"),
        ("stranger in the DLQ", "unexpected job in the DLQ: order_confirmation:9999999"),
        ("unparseable in the DLQ", "a DLQ message is not a job"),
        ("mail nobody asked for", "mail nobody asked for: order_confirmation:7777777"),
        ("mail no job writes", "mail nobody asked for: (unknown):hello"),
        ("left in queue", "3 message(s) left in queue order_updates"),
        ("in progress", "1 idempotency record(s) still IN_PROGRESS"),
        ("completed count", "7 completed idempotency records for 6 jobs"),
        ("not drained", "did not drain"),
        ("api over its limit", "the invoicing API got 31 calls in one second; its limit allows 30"),
        ("api refused", "the invoicing API refused 2 call(s) past its own rate limit"),
        ("held past its bound", "a record was held 100% of its bound"),
    ],
)
def test_each_broken_promise_is_named(fault: str, named: str) -> None:
    observed = all_well()
    _break(observed, fault)
    problems = check(JOBS, observed)
    assert any(named in problem for problem in problems), problems


def test_a_lost_update_is_not_also_reported_as_out_of_order() -> None:
    observed = all_well()
    _break(observed, "update lost")
    assert not any("out of order" in problem for problem in check(JOBS, observed))


def test_an_in_progress_record_past_its_deadline_is_not_in_flight() -> None:
    observed = all_well()
    observed.idempotency_records["INPROGRESS"] = 2
    observed.stale_in_progress = 1  # a start written after its call timed out: its key was settled since
    assert check(JOBS, observed) == ["1 idempotency record(s) still IN_PROGRESS before their deadline"]
    observed.stale_in_progress = 2
    assert check(JOBS, observed) == []


def test_a_second_mail_is_allowed_only_for_a_send_the_runtime_reported_answered_after_a_cut() -> None:
    observed = all_well()
    observed.mails[(ORDER_JOB, "0000001")] = 2
    observed.cut_in_flight[(ORDER_JOB, "0000001")] = 1
    assert check(JOBS, observed) == []
    observed.mails[(ORDER_JOB, "0000001")] = 3  # one more than the runtime reported
    assert check(JOBS, observed) == [
        "order_confirmation:0000001 had 3 side effects, not exactly 1 (1 sent by runs cut with the call in flight)"
    ]
    observed.mails[(ORDER_JOB, "0000001")] = 0  # a report never excuses a job that didn't happen
    assert "order_confirmation:0000001 had 0 side effects" in check(JOBS, observed)[0]
    observed = all_well()
    observed.cut_in_flight[(INVOICE_JOB, "0000002")] = 1  # invoices are one per Idempotency-Key at the API
    observed.invoices_created["0000002"] = 2
    assert any("generate_invoice:0000002 had 2 side effects" in problem for problem in check(JOBS, observed))


def _log_line(**fields: object) -> str:
    return json.dumps({"level": "WARNING", "message": CUT_RUN_CALL_ENDED_MESSAGE, **fields}) + "\n"


def test_the_witness_passes_the_log_on_and_notes_only_mail_sends_answered_after_a_cut() -> None:
    output = io.StringIO()
    witness = CutRunWitness(output)
    mail = _log_line(
        job=UPDATE_JOB, idempotency_key=f"{UPDATE_JOB}:0000005-u1", call="ses.SendEmail", outcome="answered 200"
    )
    lines = [
        mail[:40],  # a line may come in pieces
        mail[40:],
        _log_line(job=ORDER_JOB, idempotency_key=f"{ORDER_JOB}:0000001", call="ses.SendEmail", outcome="refused"),
        _log_line(job=ORDER_JOB, idempotency_key=f"{ORDER_JOB}:0000001", call="s3.PutObject", outcome="answered 200"),
        _log_line(job=ORDER_JOB, idempotency_key=f"{ORDER_JOB}:0000001", call="ses.SendEmail", outcome="answered 400"),
        json.dumps({"message": "job done", "job": ORDER_JOB, "call": "ses.SendEmail", "outcome": "answered 200"})
        + "\n",
        _log_line(
            job=ODD_RESULT_JOB,
            idempotency_key=f"{ODD_RESULT_JOB}:0000009",
            call="ses.SendEmail",
            outcome="answered 200",
        ),
    ]
    for piece in lines:
        witness.write(piece)
    assert output.getvalue() == "".join(lines)
    assert witness.mails == Counter({(UPDATE_JOB, "0000005-u1"): 1, (ODD_RESULT_JOB, "0000009"): 1})


def test_each_jobs_mail_subject_names_its_job() -> None:
    assert mail_ref("Your order 0000001 is confirmed") == (ORDER_JOB, "0000001")
    assert mail_ref(order_update_mail.subject("0000005", "0000005-u2")) == (UPDATE_JOB, "0000005-u2")
    assert mail_ref(odd_results.subject(ODD_RESULT_JOB, "0000006")) == (ODD_RESULT_JOB, "0000006")
    assert mail_ref("hello") == (UNKNOWN_MAIL, "hello")


def test_the_plan_is_the_same_for_the_same_seed_and_has_what_was_asked() -> None:
    plan = SoakPlan(jobs=5000, invoice_share=0.3, update_share=0.2, odd_result_share=0.1, permanent=0.02, seed=11)
    jobs = plan.build_jobs()
    assert jobs == plan.build_jobs()
    assert len(jobs) == 5000
    assert len({job.ref for job in jobs}) == 5000
    kinds = Counter(job.job for job in jobs)
    entities = Counter(job.job for job in {(job.job, job.id): job for job in jobs}.values())
    assert sum(entities.values()) > 3000  # an order's updates share it
    assert 0.25 < entities[INVOICE_JOB] / sum(entities.values()) < 0.35
    assert kinds[UPDATE_JOB] > entities[UPDATE_JOB]  # groups of one order's updates
    assert kinds[ODD_RESULT_JOB] > 0 and kinds[ODD_RESULT_FIFO_JOB] > 0
    broken = [job for job in jobs if job.permanent]
    assert {job.broken for job in broken} == {"missing", "bad"}
    # An order's updates come one after another, in their order, all broken alike
    updates = [job for job in jobs if job.job == UPDATE_JOB]
    for order in {job.id for job in updates}:
        group = [job for job in updates if job.id == order]
        assert [job.key for job in group] == [f"{order}-u{n}" for n in range(1, len(group) + 1)]
        assert len({job.broken for job in group}) == 1
    # Big attributes on about half the broken jobs, and on few of the others
    assert 0.3 < sum(job.big_attributes for job in broken) / len(broken) < 0.7
    assert sum(job.big_attributes for job in jobs if not job.permanent) < 0.03 * len(jobs)
    assert jobs != SoakPlan(jobs=5000, seed=12).build_jobs()


def test_the_plan_counts_what_it_puts_in() -> None:
    jobs = SoakPlan(jobs=2000, seed=3).build_jobs()
    planned = planned_faults(jobs)
    assert planned["big_attributes"] == sum(job.big_attributes for job in jobs)
    assert planned["fifo.updates"] == sum(job.job == UPDATE_JOB for job in jobs)
    odd = [job for job in jobs if job.job in (ODD_RESULT_JOB, ODD_RESULT_FIFO_JOB)]
    assert sum(count for name, count in planned.items() if name.startswith("result.")) == len(odd)
    # The runtime must drop some results and keep others
    assert any(f"result.{kind}" in planned for kind in odd_results.DROPPED)
    assert any(f"result.{kind}" in planned for kind in set(odd_results.RESULT_KINDS) - odd_results.DROPPED)


def test_big_attributes_are_big_non_ascii_and_fit_their_queue() -> None:
    from functions.worker.provenance import attributes_size

    attributes = big_attributes("order_confirmation:1")
    size = attributes_size(attributes)
    assert 100_000 < size < CATALOG.queue("orders").max_message_bytes - 1024
    note = attributes["note"]["StringValue"]
    assert len(note.encode()) > 3 * len(note)  # mostly 4-byte emoji
    assert attributes["thumbnail"]["DataType"] == "Binary"
    assert attributes_fingerprint(attributes) == attributes_fingerprint(big_attributes("order_confirmation:1"))
    assert attributes_fingerprint(attributes) != attributes_fingerprint(big_attributes("order_confirmation:2"))


def test_the_soak_catalog_compresses_time_adds_its_own_jobs_and_keeps_the_rest() -> None:
    compressed = soak_catalog()
    for original, soak in zip(CATALOG, compressed, strict=True):
        assert soak.max_attempts == original.max_attempts
        assert soak.batch_size == original.batch_size and soak.max_concurrency == original.max_concurrency
        assert soak.fifo == original.fifo
        assert soak.job_names[: len(original.job_names)] == original.job_names
        assert soak.visibility_timeout_s < original.visibility_timeout_s
        assert all(soak.time_limit_s(job) < soak.function_timeout_s for job in soak.job_names)
        assert soak.records_in_parallel == original.records_in_parallel
        assert soak.circuit_breaker.open_s < original.circuit_breaker.open_s
        assert soak.circuit_breaker.failure_threshold == original.circuit_breaker.failure_threshold
    # The soak's own jobs, on a standard and a FIFO queue; the runtime's catalog never names them
    assert compressed.queue_for_job(ODD_RESULT_JOB).fifo is False
    assert compressed.queue_for_job(ODD_RESULT_FIFO_JOB).fifo is True
    assert ODD_RESULT_JOB not in CATALOG.job_names and ODD_RESULT_FIFO_JOB not in CATALOG.job_names
    # A hang outlasts the time limit, so the soak's hangs are cut; a whole HTTP call ends before it, so a drip meets
    # the call's own deadline; a slow start leaves its first batch too little time for a run
    limit = max(q.time_limit_s(j) for q in compressed for j in q.job_names)
    assert DEFAULT_CHAOS.hang_s > limit > sum(SOAK_HTTP_TIMEOUTS_S)
    assert DEFAULT_CHAOS.drip_s > sum(SOAK_HTTP_TIMEOUTS_S)
    assert compressed.queue("orders").function_timeout_s - DEFAULT_CHAOS.slow_start_s < limit + 2


@pytest.mark.parametrize(
    "bad",
    [
        {"jobs": 0},
        {"window": 0},
        {"window": 50, "backlog": 10},
        {"permanent": 1.5},
        {"invoice_share": 0.6, "update_share": 0.6},
        {"big_attributes": -0.1},
        {"max_updates": 0},
    ],
)
def test_bad_plans_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        SoakPlan(**bad)  # type: ignore[arg-type]


def test_the_witness_notes_what_flow_control_held_and_how_near_its_bound() -> None:
    witness = CutRunWitness(io.StringIO())
    documents = [
        {"job": "(runtime)", "reason": "endpoint:invoicing_api_url", "JobHeld": 2.0},
        {"job": "(runtime)", "JobHeld": 2.0},  # the total of the same count: not counted twice
        {"job": "generate_invoice", "HoldShare": [0.1, 0.4]},
        {"job": "odd_result_receipt", "HoldShare": 0.2},
    ]
    for document in documents:
        witness.write(json.dumps(document) + "\n")

    assert witness.held == Counter({"endpoint:invoicing_api_url": 2})
    assert witness.most_hold_share == 0.4
