"""The soak's checker must see every broken promise: fed observations with one fault each, it names it."""

from __future__ import annotations

import io
import json
from collections import Counter

import pytest

from example.soak import (
    DEFAULT_CHAOS,
    DRIFTING,
    DURABLE_JOB,
    INVOICE_JOB,
    LIMITED_JOB,
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
    _batch_members,
    attributes_fingerprint,
    big_attributes,
    check,
    mail_ref,
    planned_faults,
    soak_catalog,
)
from example.soak_jobs import limited, odd_results
from functions.catalog import CATALOG
from functions.jobs import order_update_mail
from sqs_jobs.durable.record import DurableState
from sqs_jobs.worker.deadletter import ERROR_TYPE, FAILURE
from sqs_jobs.worker.execution import CUT_RUN_CALL_ENDED_MESSAGE
from sqs_jobs.worker.key_life import KeyRecord
from sqs_jobs.worker.names import DeadLetterFailure
from sqs_jobs.worker.settings import idempotency_record_id
from sqs_jobs.worker.settlement import COMPLETION_UNWRITTEN_MESSAGE

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
    # Broken by their data (missing or bad), and durable jobs whose code is not deterministic
    assert {job.broken for job in jobs if job.permanent} == {"missing", "bad", DRIFTING}
    assert {job.job for job in jobs if job.broken == DRIFTING} == {DURABLE_JOB}
    broken = [job for job in jobs if job.broken in ("missing", "bad")]
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
    # The limited job's customers each hold a few consecutive entities, so their runs meet at the key's slot
    customers = Counter(job.customer for job in jobs if job.job == LIMITED_JOB)
    assert customers and max(customers.values()) == 3 and None not in customers
    # The operator cancels a share of order confirmations and invoices, never the batch's members, and undoes some;
    # and a share of the limited job's slow runs, mid-run
    cancelled = [job for job in jobs if job.cancel is not None]
    assert {job.job for job in cancelled} == {ORDER_JOB, INVOICE_JOB, LIMITED_JOB}
    assert all(limited.slow(job.id) for job in cancelled if job.job == LIMITED_JOB)
    assert {job.cancel for job in cancelled} == {"cancel", "undo"}
    assert not set(cancelled) & set(_batch_members(jobs))


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
    from sqs_jobs.worker.provenance import attributes_size

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


# --- where the features meet: the operator's cancels and undos, the limited job, the runtime's own faults ----------

CANCELLED = SoakJob(ORDER_JOB, "0000011", cancel="cancel")
DRIFTED = SoakJob(DURABLE_JOB, "0000031", broken=DRIFTING)
DURABLE = SoakJob(DURABLE_JOB, "0000032")
UNDONE = SoakJob(INVOICE_JOB, "0000012", cancel="undo")
LIMITED_RUNS = [
    limited.Run("customer-0", "limited_receipt:0000021", 1, started=10.0, ended=13.2),
    limited.Run("customer-0", "limited_receipt:0000022", 1, started=13.3, ended=13.5),
    limited.Run("customer-1", "limited_receipt:0000023", 1, started=10.0, ended=11.0),
]


def _record(job: SoakJob, status: str, runs: int) -> tuple[str, KeyRecord]:
    record_id = idempotency_record_id(job.name)
    item = {"id": {"S": record_id}, "status": {"S": status}, "runs": {"N": str(runs)}, "expiration": {"N": "9e9"}}
    if status == "CANCELLED":
        item["cancelled_at"] = {"N": "1"}
    return record_id, KeyRecord.from_item(record_id, item)


def meeting() -> tuple[list[SoakJob], Observed]:
    """JOBS and a cancelled key that ended cancelled unrun, an undone one that ran once after its undo, and
    limited runs that never overlapped: what a perfect run leaves."""
    observed = all_well()
    observed.records = dict([_record(CANCELLED, "CANCELLED", 0), _record(UNDONE, "COMPLETED", 2)])
    observed.idempotency_records["COMPLETED"] += 1
    observed.invoices_created[UNDONE.id] = 1
    observed.stored_pdfs.add(UNDONE.id)
    observed.cancel_outcomes = {CANCELLED.ref: ["cancelled"], UNDONE.ref: ["cancelled", "withdrawn"]}
    observed.runs_at_undo = {UNDONE.ref: 1}
    observed.limited_runs = list(LIMITED_RUNS)
    observed.durable_records = {
        DRIFTED.name: _durable(DRIFTED, "FAILED", 1),
        DURABLE.name: _durable(DURABLE, "SUCCEEDED", 0),
    }
    observed.dead_letters[DRIFTED.ref] = [
        {ERROR_TYPE: "NonDeterministicExecutionError", FAILURE: DeadLetterFailure.PERMANENT}
    ]
    observed.mails[DURABLE.ref] = 1
    return [*JOBS, CANCELLED, UNDONE, DRIFTED, DURABLE], observed


def _durable(job: SoakJob, status: str, generation: int) -> DurableState:
    return DurableState.of(job.name, {"status": status, "generation": generation})


def test_cancels_undos_and_limited_runs_that_kept_their_promises_have_no_problems() -> None:
    jobs, observed = meeting()
    assert check(jobs, observed) == []
    # A run stopped by the cancel is dead-lettered as cancelled: that is the key's end, not a lost job
    observed.dead_letters[CANCELLED.ref] = [{ERROR_TYPE: "JobCancelledError", FAILURE: DeadLetterFailure.CANCELLED}]
    assert check(jobs, observed) == []
    # A cancel that came after the run's success: the success stands
    observed.records.update([_record(CANCELLED, "COMPLETED", 1)])
    observed.idempotency_records["COMPLETED"] += 1
    observed.mails[CANCELLED.ref] = 1
    del observed.dead_letters[CANCELLED.ref]
    assert check(jobs, observed) == []


def _break_meeting(jobs: list[SoakJob], observed: Observed, fault: str) -> None:
    if fault == "cancelled key ran":
        observed.mails[CANCELLED.ref] = 1
    elif fault == "cancelled key lost":
        del observed.records[idempotency_record_id(CANCELLED.name)]
    elif fault == "undone key never ran":
        observed.invoices_created[UNDONE.id] = 0
    elif fault == "undo reset the runs":
        observed.records.update([_record(UNDONE, "COMPLETED", 1)])  # counted from 0 again
    elif fault == "cancel never answered":
        del observed.cancel_outcomes[CANCELLED.ref]
    elif fault == "cancelled dead letter without evidence":
        observed.dead_letters[CANCELLED.ref] = [{ERROR_TYPE: "JobCancelledError", FAILURE: "permanent"}]
    elif fault == "limited runs overlapped":
        observed.limited_runs.append(limited.Run("customer-1", "limited_receipt:0000024", 2, started=10.9, ended=11.4))
    elif fault == "undone key ended cancelled":
        observed.records.update([_record(UNDONE, "CANCELLED", 1)])
    elif fault == "drifting execution dead-lettered twice":
        observed.dead_letters[DRIFTED.ref] *= 2
    elif fault == "drifting execution's record left running":
        observed.durable_records[DRIFTED.name] = _durable(DRIFTED, "RUNNING", 0)
    elif fault == "drifting execution mailed":
        observed.mails[DRIFTED.ref] = 1
    elif fault == "durable executions never ended":
        observed.durable_ended = False
    elif fault == "mail twice after an unwritten completion of another key":
        observed.completions_unwritten[(ORDER_JOB, "0000003")] = 1
        observed.mails[(ORDER_JOB, "0000001")] = 2
    else:
        raise AssertionError(fault)


@pytest.mark.parametrize(
    ("fault", "named"),
    [
        ("cancelled key ran", "order_confirmation:0000011 was cancelled and had 1 side effect"),
        ("cancelled key lost", "order_confirmation:0000011 was cancelled and ended new, not cancelled"),
        ("undone key never ran", "generate_invoice:0000012 had 0 side effects"),
        ("undo reset the runs", "generate_invoice:0000012 had 1 runs when its cancel was withdrawn, and completed at"),
        ("cancel never answered", "order_confirmation:0000011: the operator's cancel got []"),
        ("cancelled dead letter without evidence", "order_confirmation:0000011 is in the DLQ as cancelled without"),
        ("limited runs overlapped", "two runs of limited_receipt for customer-1 overlapped"),
        ("mail twice after an unwritten completion of another key", "order_confirmation:0000001 had 2 side effects"),
        ("drifting execution dead-lettered twice", "durable_receipt:0000031 (drifting) has 2 dead letters for 1"),
        ("drifting execution's record left running", "durable_receipt:0000031's durable record ended RUNNING"),
        ("undone key ended cancelled", "generate_invoice:0000012 was undone (the operator was answered"),
        ("drifting execution mailed", "durable_receipt:0000031 (drifting data) had 1 side effect"),
        ("durable executions never ended", "the durable executions did not all end"),
    ],
)
def test_each_broken_promise_where_the_features_meet_is_named(fault: str, named: str) -> None:
    jobs, observed = meeting()
    _break_meeting(jobs, observed, fault)
    problems = check(jobs, observed)
    assert any(named in problem for problem in problems), problems


def test_a_durable_key_delivered_again_after_its_execution_failed_has_one_dead_letter_per_execution() -> None:
    jobs, observed = meeting()
    observed.durable_records[DRIFTED.name] = _durable(DRIFTED, "FAILED", 2)
    observed.dead_letters[DRIFTED.ref] *= 2
    assert check(jobs, observed) == []


def test_a_run_whose_completion_went_unwritten_may_repeat_its_side_effect_once() -> None:
    observed = all_well()
    observed.completions_unwritten[(ORDER_JOB, "0000001")] = 1
    observed.mails[(ORDER_JOB, "0000001")] = 2
    assert check(JOBS, observed) == []
    observed.mails[(ORDER_JOB, "0000001")] = 3
    assert any("had 3 side effects" in problem for problem in check(JOBS, observed))


def test_the_witness_notes_completions_unwritten_and_calls_of_cut_runs_by_job() -> None:
    witness = CutRunWitness(io.StringIO())
    unwritten = {"message": COMPLETION_UNWRITTEN_MESSAGE, "job": ORDER_JOB, "idempotency_key": "order_confirmation:7"}
    cut = {"message": CUT_RUN_CALL_ENDED_MESSAGE, "job": "limited_receipt", "call": "POST x", "outcome": "raised"}
    witness.write(json.dumps(unwritten) + "\n" + json.dumps(cut) + "\n")
    assert witness.completions_unwritten == Counter({(ORDER_JOB, "7"): 1})
    assert witness.cut_calls == Counter({"limited_receipt": 1})
    assert witness.mails == Counter()  # not a mail answered after the cut
