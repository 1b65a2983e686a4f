"""The catalog: its defaults, its rules, and the queues and jobs it defines."""

from __future__ import annotations

import dataclasses
import importlib
import re
from pathlib import Path
from typing import Any

import pytest

from functions.catalog import CATALOG
from sqs_jobs.limits import (
    DAY,
    DEAD_LETTER_HEADROOM_BYTES,
    ESM_MAX_BATCHING_WINDOW_S,
    ESM_MAX_CONCURRENCY,
    ESM_MIN_CONCURRENCY,
    HAND_BACK_RECEIVES,
    INVOCATION_START_S,
    LAMBDA_MAX_TIMEOUT_S,
    MAX_PARALLEL_RECORDS,
    MINUTE,
    SETTLE_MARGIN_S,
    SQS_DEFAULT_MAX_MESSAGE_BYTES,
    SQS_MAX_BATCH_SIZE,
    SQS_MAX_MESSAGE_BYTES,
    SQS_MAX_RECEIVE_COUNT,
    SQS_MAX_RETENTION_S,
    SQS_MAX_VISIBILITY_S,
    SQS_MIN_RETENTION_S,
)
from sqs_jobs.specs import (
    AlarmThresholds,
    Catalog,
    CatalogError,
    CircuitBreakerSpec,
    JobSpec,
    QueueSpec,
    UnknownQueueError,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "catalog.md"


def job(name: str = "send_mail", **changes: Any) -> JobSpec:
    return JobSpec(name=name, handler=f"functions.jobs.{name}", **changes)


def queue(name: str = "mail", jobs: tuple[JobSpec, ...] | None = None, **changes: Any) -> QueueSpec:
    return QueueSpec(name=name, jobs=jobs if jobs is not None else (job(),), **changes)


def catalog_error(*queues: QueueSpec) -> str:
    with pytest.raises(CatalogError) as caught:
        Catalog(queues=queues, resources=CATALOG.resources)
    return str(caught.value)


# --- the catalog as shipped -------------------------------------------------------------------------------


def test_the_shipped_catalog_is_valid() -> None:
    assert CATALOG.queue_names
    assert CATALOG.job_names
    for spec in CATALOG:
        assert spec.problems() == []
    # Rebuilding it runs every rule again, including the cross-queue ones.
    assert Catalog(queues=CATALOG.queues, resources=CATALOG.resources) == CATALOG


def test_the_shipped_catalog_has_the_order_confirmation_job() -> None:
    orders = CATALOG.queue("orders")

    assert orders.job_names == ("order_confirmation",)
    assert CATALOG.queue_for_job("order_confirmation") is orders
    assert orders.job("order_confirmation").handler == "functions.jobs.order_confirmation"
    assert set(orders.resources) == {"orders_table", "mail_sender"}


def test_every_resource_a_job_needs_is_described() -> None:
    for spec in CATALOG:
        for resource in spec.resources:
            assert CATALOG.resource(resource).description.strip()


@pytest.mark.parametrize("spec", [j for q in CATALOG for j in q.jobs], ids=[j.name for q in CATALOG for j in q.jobs])
def test_every_job_handler_is_importable_and_has_a_callable_run(spec: JobSpec) -> None:
    module = importlib.import_module(spec.handler)

    assert callable(getattr(module, "run", None)), f"{spec.handler} has no callable run(envelope, context)"
    key_function = getattr(module, "idempotency_key", None)
    assert key_function is None or callable(key_function)


# --- defaults ---------------------------------------------------------------------------------------------


def test_queue_defaults() -> None:
    spec = queue()

    assert spec.max_attempts == 10
    assert spec.backoff_base_s == 30
    assert spec.backoff_cap_s == 120
    assert spec.fifo is False
    assert spec.default_time_limit_s == 30
    assert spec.function_timeout_s == 60
    assert spec.memory_mb == 256
    assert spec.batch_size == 10
    assert spec.batching_window_s == 0
    assert spec.max_concurrency == 5
    assert spec.retention_s == 4 * DAY
    assert spec.dlq_retention_s == 14 * DAY
    assert spec.idempotency_expiry_s == 15 * DAY
    assert spec.alarms == AlarmThresholds()
    assert spec.description == ""
    assert spec.parallel_records == 10
    assert spec.circuit_breaker == CircuitBreakerSpec()


def test_circuit_breaker_defaults() -> None:
    spec = CircuitBreakerSpec()
    assert (spec.enabled, spec.failure_threshold, spec.open_s, spec.max_open_s) == (True, 5, 5.0, 30.0)
    assert spec.max_hold_s == AlarmThresholds().oldest_message_age_s == 15 * MINUTE


def test_records_in_parallel_never_exceed_a_batch_and_bound_what_a_downstream_sees() -> None:
    assert queue().records_in_parallel == 10
    assert queue(batch_size=4).records_in_parallel == 4  # the default adapts: no error for a small batch
    assert queue(parallel_records=3, batch_size=100, batching_window_s=1).records_in_parallel == 3
    assert queue(parallel_records=3, max_concurrency=7).max_in_flight == 21


def test_the_example_queues_run_what_fits_their_downstreams() -> None:
    assert CATALOG.queue("orders").records_in_parallel == 10
    assert CATALOG.queue("order_updates").records_in_parallel == 10  # ten orders at once, each order's in turn
    assert CATALOG.queue("invoices").records_in_parallel == 5
    assert CATALOG.queue("invoices").max_in_flight == 10  # the API of the incident
    assert CATALOG.queue("maintenance").records_in_parallel == 1


def test_the_fifo_example_keeps_each_orders_updates_in_order_with_room_for_skipped_receives() -> None:
    updates = CATALOG.queue_for_job("order_update_mail")
    assert updates.name == "order_updates" and updates.fifo
    assert updates.resources == ("orders_table", "mail_sender")
    # A message may be received behind each of up to a batch of failing messages of its order's group
    assert updates.receive_limit == updates.max_attempts * updates.batch_size + HAND_BACK_RECEIVES


def test_default_max_attempts_follows_lambdas_guidance_of_at_least_five() -> None:
    assert queue().max_attempts >= 5


def test_default_dlq_keeps_messages_for_the_sqs_maximum_longer_than_the_source() -> None:
    spec = queue()

    assert spec.dlq_retention_s == SQS_MAX_RETENTION_S
    assert spec.dlq_retention_s > spec.retention_s


def test_default_idempotency_records_outlive_the_dlq() -> None:
    spec = queue()

    assert spec.idempotency_expiry_s > spec.dlq_retention_s


def test_default_alarms() -> None:
    alarms = AlarmThresholds()

    assert alarms.oldest_message_age_s == 15 * MINUTE == 900
    assert alarms.dlq_depth == 1


def test_job_defaults() -> None:
    spec = JobSpec(name="send_mail", handler="functions.jobs.send_mail")

    assert spec.idempotent is True
    assert spec.resources == ()
    assert spec.description == ""
    assert (spec.unique_for_s, spec.debounce_s) == (None, None)


@pytest.mark.parametrize(
    ("timeout", "window", "visibility"),
    [(60, 0, 360), (4, 0, 24), (30, 5, 185), (LAMBDA_MAX_TIMEOUT_S, ESM_MAX_BATCHING_WINDOW_S, 5700)],
)
def test_visibility_timeout_is_six_times_the_function_timeout_plus_the_window(
    timeout: int, window: int, visibility: int
) -> None:
    spec = queue(function_timeout_s=timeout, batching_window_s=window)

    assert spec.visibility_timeout_s == visibility
    assert spec.problems() == []


def test_default_visibility_timeout() -> None:
    assert queue().visibility_timeout_s == 6 * 60


def test_specs_are_immutable() -> None:
    spec = queue()

    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.max_attempts = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.jobs[0].handler = "elsewhere"  # type: ignore[misc]


# --- rules ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"max_attempts": 0}, "max_attempts 0"),
        ({"max_attempts": SQS_MAX_RECEIVE_COUNT}, "max_attempts 1000 is outside 1..999"),
        ({"max_receives": 10}, "max_receives 10 must be between max_attempts + 1 (11) and 1000"),
        ({"max_receives": SQS_MAX_RECEIVE_COUNT + 1}, "max_receives 1001 must be between"),
        ({"max_receives": 1000}, "1000 receives x the 360s visibility timeout is longer than retention_s (345600)"),
        ({"retention_s": 3000}, "11 receives x the 360s visibility timeout is longer than retention_s (3000)"),
        ({"function_timeout_s": 0}, "function_timeout_s 0"),
        ({"function_timeout_s": LAMBDA_MAX_TIMEOUT_S + 1}, "function_timeout_s 901"),
        ({"memory_mb": 127}, "memory_mb 127"),
        ({"memory_mb": 10_241}, "memory_mb 10241"),
        ({"batch_size": 0}, "batch_size 0"),
        ({"batch_size": SQS_MAX_BATCH_SIZE + 1, "batching_window_s": 1}, "batch_size 10001"),
        ({"batch_size": 11}, "batch_size over 10 needs batching_window_s >= 1"),
        ({"batching_window_s": -1}, "batching_window_s -1"),
        ({"batching_window_s": ESM_MAX_BATCHING_WINDOW_S + 1}, "batching_window_s 301"),
        ({"max_concurrency": ESM_MIN_CONCURRENCY - 1}, "max_concurrency 1"),
        ({"max_concurrency": ESM_MAX_CONCURRENCY + 1}, "max_concurrency 1001"),
        ({"function_timeout_s": SQS_MAX_VISIBILITY_S // 6 + 1}, "visibility timeout 43206s"),
        ({"retention_s": SQS_MIN_RETENTION_S - 1}, "retention_s 59"),
        ({"dlq_retention_s": SQS_MAX_RETENTION_S + 1, "idempotency_expiry_s": 30 * DAY}, "dlq_retention_s 1209601"),
        ({"dlq_retention_s": 4 * DAY}, "dlq_retention_s (345600) must be longer than retention_s (345600)"),
        ({"retention_s": 14 * DAY}, "must be longer than retention_s (1209600)"),
        ({"idempotency_expiry_s": 14 * DAY}, "idempotency_expiry_s (1209600) must be longer than dlq_retention_s"),
        ({"alarms": AlarmThresholds(oldest_message_age_s=59)}, "alarms.oldest_message_age_s"),
        ({"alarms": AlarmThresholds(dlq_depth=0)}, "alarms.dlq_depth"),
        ({"alarms": AlarmThresholds(circuit_opened=0)}, "alarms.circuit_opened"),
        ({"parallel_records": 0}, "parallel_records 0 is outside 1..100"),
        ({"parallel_records": MAX_PARALLEL_RECORDS + 1}, "parallel_records 101"),
        ({"list_running_after_s": -1}, "list_running_after_s -1 is outside 0..900"),
        ({"list_running_after_s": float("nan")}, "list_running_after_s nan is outside 0..900"),
        ({"list_running_after_s": "abc"}, "list_running_after_s must be a number, not str 'abc'"),
        ({"parallel_records": "10"}, "parallel_records must be a whole number, not str '10'"),
        ({"max_attempts": True}, "max_attempts must be a whole number, not bool True"),
        ({"function_timeout_s": None}, "function_timeout_s must be a whole number, not NoneType None"),
        ({"circuit_breaker": CircuitBreakerSpec(failure_threshold=0)}, "circuit_breaker.failure_threshold 0"),
        ({"circuit_breaker": CircuitBreakerSpec(open_s=0)}, "circuit_breaker needs 0 < open_s (0)"),
        ({"circuit_breaker": CircuitBreakerSpec(open_s=60, max_open_s=30)}, "open_s (60) <= max_open_s (30)"),
        ({"circuit_breaker": CircuitBreakerSpec(max_open_s=901)}, "max_open_s (901) <= 900"),
        ({"circuit_breaker": CircuitBreakerSpec(max_hold_s=-1)}, "circuit_breaker.max_hold_s -1"),
        ({"jobs": ()}, "needs at least one job"),
        # A limit that leaves no room for the settle margin would have every record handed back unrun for ever.
        ({"jobs": (JobSpec(name="send_mail", handler="functions.jobs.x", time_limit_s=58),)}, "between 1 and 57"),
        ({"jobs": (JobSpec(name="send_mail", handler="functions.jobs.x", time_limit_s=0),)}, "time_limit_s 0"),
        ({"function_timeout_s": 3}, "function_timeout_s >= 4"),
        ({"max_message_bytes": 1023}, "max_message_bytes 1023 is outside 1024..1032192"),
        # SQS would take it, but the DLQ could not hold such a message with its evidence.
        ({"max_message_bytes": SQS_MAX_MESSAGE_BYTES}, "DLQ keeps 16384 bytes above the queue's limit"),
        ({"jobs": (job(unique_for_s=60, debounce_s=60),)}, "sets both unique_for_s and debounce_s; set one"),
        ({"jobs": (job(unique_for_s=0),)}, "unique_for_s 0 is outside 1..1296000"),
        # The claimant is told by its idempotency record, which must outlive the window.
        ({"jobs": (job(unique_for_s=15 * DAY + 1),)}, "unique_for_s 1296001 is outside 1..1296000"),
        ({"jobs": (job(debounce_s=0),)}, "debounce_s 0 is outside 1..43140"),
        # One hand-back waits out the window: SQS hides a message at most 12 h from its receive.
        (
            {"jobs": (job(debounce_s=SQS_MAX_VISIBILITY_S),), "alarms": AlarmThresholds(oldest_message_age_s=DAY)},
            "debounce_s 43200 is outside 1..43140",
        ),
        ({"jobs": (job(debounce_s=900),)}, "debounce_s 900 must be less than alarms.oldest_message_age_s (900)"),
        ({"jobs": (job(debounce_s=120),), "retention_s": 120}, "debounce_s 120 must be less than retention_s (120)"),
        ({"jobs": (job(debounce_s=60),), "fifo": True}, "sets debounce_s on a FIFO queue"),
    ],
    ids=lambda value: re.sub(r"\W+", "-", str(value))[:40] if isinstance(value, dict) else None,
)
def test_each_rule_violation_is_a_catalog_error_naming_the_problem(changes: dict[str, Any], problem: str) -> None:
    spec = queue(**changes)

    assert any(problem in found for found in spec.problems())
    message = catalog_error(spec)
    assert problem in message
    assert "queue 'mail'" in message


@pytest.mark.parametrize(
    "changes",
    [
        {"max_attempts": 1},
        # As many runs as SQS allows receives, less the one after the last run; retention to fit them.
        {"max_attempts": SQS_MAX_RECEIVE_COUNT - 1, "retention_s": 13 * DAY},
        {"function_timeout_s": 1 + SETTLE_MARGIN_S + INVOCATION_START_S},
        {"function_timeout_s": LAMBDA_MAX_TIMEOUT_S},
        {"jobs": (JobSpec(name="send_mail", handler="functions.jobs.x", time_limit_s=57),)},
        {"memory_mb": 128},
        {"memory_mb": 10_240},
        {"batch_size": 1},
        {"batch_size": 10},
        {"batch_size": SQS_MAX_BATCH_SIZE, "batching_window_s": 1},
        {"batching_window_s": ESM_MAX_BATCHING_WINDOW_S},
        {"max_concurrency": ESM_MIN_CONCURRENCY},
        {"max_concurrency": ESM_MAX_CONCURRENCY},
        # The shortest retention, with a visibility timeout short enough for every run and one receive more.
        {"retention_s": SQS_MIN_RETENTION_S, "function_timeout_s": 4, "max_attempts": 1},
        {"retention_s": 14 * DAY - 1},
        {"dlq_retention_s": 4 * DAY + 1, "idempotency_expiry_s": 4 * DAY + 2},
        {"alarms": AlarmThresholds(oldest_message_age_s=MINUTE, dlq_depth=1)},
        {"parallel_records": 1},
        {"parallel_records": MAX_PARALLEL_RECORDS},
        {"list_running_after_s": 0},
        {"list_running_after_s": 900},
        {"circuit_breaker": CircuitBreakerSpec(failure_threshold=1, open_s=0.1, max_open_s=0.1, max_hold_s=0)},
        {"circuit_breaker": CircuitBreakerSpec(open_s=900, max_open_s=900, max_hold_s=SQS_MAX_VISIBILITY_S)},
        {"max_message_bytes": 1024},
        {"max_message_bytes": SQS_MAX_MESSAGE_BYTES - DEAD_LETTER_HEADROOM_BYTES},
        {"jobs": (job(unique_for_s=1),)},
        {"jobs": (job(unique_for_s=15 * DAY),)},
        {"jobs": (job(unique_for_s=60),), "fifo": True},
        {"jobs": (job(debounce_s=1),)},
        {"jobs": (job(debounce_s=899),)},
        {
            "jobs": (job(debounce_s=SQS_MAX_VISIBILITY_S - 60),),
            "alarms": AlarmThresholds(oldest_message_age_s=DAY),
        },
    ],
)
def test_values_at_the_edge_of_each_range_are_accepted(changes: dict[str, Any]) -> None:
    spec = queue(**changes)

    assert spec.problems() == []
    assert Catalog(queues=(spec,)).queues == (spec,)


def test_a_queue_takes_256_kib_messages_and_its_dlq_the_largest_sqs_allows() -> None:
    spec = queue()

    # 256 KiB, not SQS's 1 MiB default of today: the DLQ holds the same message plus its evidence.
    assert spec.max_message_bytes == SQS_DEFAULT_MAX_MESSAGE_BYTES == 262_144
    assert spec.dlq_max_message_bytes == SQS_MAX_MESSAGE_BYTES == 1_048_576
    assert queue(max_message_bytes=900_000).dlq_max_message_bytes - 900_000 >= DEAD_LETTER_HEADROOM_BYTES


def test_all_problems_are_reported_together() -> None:
    spec = queue(max_attempts=0, memory_mb=64, jobs=(JobSpec(name="Bad-Name", handler="functions.jobs.bad"),))

    message = catalog_error(spec)

    assert message.startswith("invalid job catalog: ")
    assert "max_attempts 0" in message
    assert "memory_mb 64" in message
    assert "job name 'Bad-Name'" in message
    assert len(spec.problems()) == 3


def test_problems_of_every_queue_and_across_queues_are_reported_together() -> None:
    message = catalog_error(
        queue("mail", max_attempts=0),
        queue("images", jobs=(job("resize"),), memory_mb=64),
        queue("mail", jobs=(job("other"),)),
        queue("reports", jobs=(job("resize"),)),
    )

    assert "queue 'mail': max_attempts 0" in message
    assert "queue 'images': memory_mb 64" in message
    assert "queue 'mail' is defined twice" in message
    assert "job 'resize' is on queue 'images' and 'reports'" in message


def test_duplicate_queue_is_rejected() -> None:
    message = catalog_error(queue("mail"), queue("mail", jobs=(job("other"),)))

    assert "queue 'mail' is defined twice" in message


def test_job_on_two_queues_is_rejected() -> None:
    message = catalog_error(queue("mail"), queue("bulk_mail"))

    assert "job 'send_mail' is on queue 'mail' and 'bulk_mail'" in message
    assert "exactly one queue" in message


def test_same_job_twice_on_one_queue_is_rejected() -> None:
    message = catalog_error(queue("mail", jobs=(job(), job())))

    assert "job 'send_mail' is on queue 'mail' and 'mail'" in message


def test_empty_catalog_is_rejected() -> None:
    assert "at least one queue" in catalog_error()


def test_unknown_resource_is_rejected_and_the_known_ones_are_listed() -> None:
    message = catalog_error(queue(jobs=(job(resources=("orders_table", "redis")),)))

    assert "unknown resource 'redis'" in message
    assert all(known in message for known in CATALOG.resource_names)
    assert "'orders_table'" not in message  # the known resource itself is fine


@pytest.mark.parametrize(
    "name",
    ["", "Mail", "1mail", "_mail", "mail-queue", "mail queue", "mail.fifo", "m" * 41, "mail\n", "\nmail", "é"],
)
def test_bad_queue_names_are_rejected(name: str) -> None:
    message = catalog_error(queue(name))

    assert f"queue {name!r}: name must match ^[a-z][a-z0-9_]{{0,39}}$" in message


@pytest.mark.parametrize("name", ["", "SendMail", "send-mail", "9lives", "s" * 41, "send_mail\n"])
def test_bad_job_names_are_rejected(name: str) -> None:
    message = catalog_error(queue(jobs=(JobSpec(name=name, handler="functions.jobs.send_mail"),)))

    assert f"job name {name!r} must match" in message


@pytest.mark.parametrize("name", ["m", "mail", "mail_2", "m" * 40])
def test_good_names_are_accepted(name: str) -> None:
    assert queue(name, jobs=(job(name),)).problems() == []


@pytest.mark.parametrize(
    "handler",
    [
        "send_mail",
        "",
        "functions.jobs.",
        ".functions.jobs",
        "functions..jobs",
        "functions.jobs.send-mail",
        "functions/jobs/send_mail.py",
        "functions.jobs.send_mail:run",
        "functions.1jobs",
        "functions.jobs\n",
    ],
)
def test_handler_that_is_not_a_dotted_module_path_is_rejected(handler: str) -> None:
    message = catalog_error(queue(jobs=(JobSpec(name="send_mail", handler=handler),)))

    assert f"handler {handler!r} is not a dotted module path" in message


# --- lookups ----------------------------------------------------------------------------------------------


@pytest.fixture
def two_queues() -> Catalog:
    return Catalog(
        resources=CATALOG.resources,
        queues=(
            queue("mail", jobs=(job("send_mail", resources=("mail_sender",)), job("send_digest"))),
            queue("images", jobs=(job("resize", resources=("orders_table", "mail_sender")),)),
        ),
    )


def test_queue_by_name(two_queues: Catalog) -> None:
    assert two_queues.queue("images").job_names == ("resize",)
    assert two_queues.queue_names == ("mail", "images")
    assert two_queues.job_names == ("send_mail", "send_digest", "resize")
    assert [spec.name for spec in two_queues] == ["mail", "images"]


def test_unknown_queue_lists_the_known_queues(two_queues: Catalog) -> None:
    with pytest.raises(UnknownQueueError) as caught:
        two_queues.queue("pdf")

    message = str(caught.value)
    assert "'pdf'" in message
    assert "mail" in message
    assert "images" in message
    assert message.startswith("unknown queue")  # a sentence, not KeyError's quoted repr
    assert isinstance(caught.value, KeyError)


def test_queue_for_job(two_queues: Catalog) -> None:
    assert two_queues.queue_for_job("send_digest").name == "mail"
    assert two_queues.queue_for_job("resize").name == "images"
    with pytest.raises(KeyError):
        two_queues.queue_for_job("transcode")


def test_job_by_name(two_queues: Catalog) -> None:
    mail = two_queues.queue("mail")

    assert mail.job("send_digest").name == "send_digest"
    with pytest.raises(KeyError):
        mail.job("resize")


def test_queue_resources_are_each_listed_once_in_catalog_order() -> None:
    spec = queue(jobs=(job("a", resources=("mail_sender",)), job("b", resources=("orders_table", "mail_sender"))))

    assert spec.resources == ("mail_sender", "orders_table")


# --- docs/catalog.md --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field_name",
    sorted({f.name for cls in (QueueSpec, JobSpec, AlarmThresholds) for f in dataclasses.fields(cls)}),
)
def test_every_field_is_documented(field_name: str) -> None:
    assert f"`{field_name}`" in DOCS.read_text(encoding="utf-8")


def test_sqs_may_redeliver_a_message_for_every_run_and_every_hand_back_before_its_redrive_policy_fires() -> None:
    # The runtime counts runs in the key's record; SQS's maxReceiveCount is the safety net beyond them.
    assert queue().receive_limit == 10 + HAND_BACK_RECEIVES
    # FIFO: a message may be received behind each of up to a batch of failing messages of its group.
    assert queue(fifo=True, batch_size=5).receive_limit == 5 * 10 + HAND_BACK_RECEIVES
    assert queue(max_receives=12).receive_limit == 12


def test_the_receive_limit_fits_the_retention_so_a_message_no_worker_can_start_still_reaches_the_dlq() -> None:
    # 15-minute functions: a 90-minute visibility timeout; 4 days hold 64 of them.
    long_jobs = queue(function_timeout_s=LAMBDA_MAX_TIMEOUT_S)
    assert long_jobs.visibility_timeout_s == 5400
    assert long_jobs.receive_limit == 4 * DAY // 5400 == 64
    assert long_jobs.receive_limit * long_jobs.visibility_timeout_s <= long_jobs.retention_s
    assert long_jobs.problems() == []


def test_a_queues_flow_limits_are_its_jobs_then_the_endpoints_its_jobs_call() -> None:
    from functions.catalog import RESOURCES
    from sqs_jobs.flow_control import KeyConcurrency, RateLimit
    from sqs_jobs.resources import Endpoint
    from sqs_jobs.specs import Catalog, JobSpec, QueueSpec

    api_limit = RateLimit(per_second=10, burst=20)
    resources = tuple(dataclasses.replace(r, rate_limit=api_limit) if isinstance(r, Endpoint) else r for r in RESOURCES)
    (endpoint,) = [r.name for r in resources if isinstance(r, Endpoint)]
    imports = QueueSpec(
        name="imports",
        jobs=(
            JobSpec(
                name="import_customer",
                handler="a.b",
                resources=(endpoint,),
                rate_limit=RateLimit(per_second=2, burst=2, per="tenant"),
                concurrency=KeyConcurrency(limit=1, per="customer"),
            ),
            JobSpec(name="plain", handler="a.b"),
        ),
    )
    quiet = QueueSpec(name="quiet", jobs=(JobSpec(name="unlimited", handler="a.b"),))
    catalog = Catalog(resources=resources, queues=(imports, quiet))

    limits = catalog.flow_limits("imports")

    assert [limit.name for limit in limits] == ["key:import_customer", "job:import_customer", f"endpoint:{endpoint}"]
    assert [limit.keyed for limit in limits] == [True, True, False]
    assert [limit.describe() for limit in limits] == [
        "1 at once per customer; held at most 3600s",
        "2/s, burst 2, per tenant; held at most 900s",
        "10/s, burst 20; held at most 900s",
    ]
    assert limits[2].to_dict() == {
        "name": f"endpoint:{endpoint}",
        "kind": "rate",
        "per_second": 10,
        "burst": 20,
        "per": None,
        "max_hold_s": 900,
    }
    assert catalog.flow_limits("quiet") == ()
    assert CATALOG.flow_limits("orders") == (), "the example app declares no limits"
