"""A durable job in the catalog: AWS's bounds (DurableConfig), where its promise can't be kept, its execution name."""

from __future__ import annotations

import re

import pytest

from sqs_jobs.durable import DURABLE_MAX_EXECUTION_TIMEOUT_S, Durable, execution_name
from sqs_jobs.flow_control import KeyConcurrency
from sqs_jobs.specs import JobSpec, QueueSpec


def queue_with(durable: object, **job: object) -> QueueSpec:
    spec = JobSpec(name="import_orders", handler="functions.jobs.import_orders", durable=durable, **job)  # type: ignore[arg-type]
    return QueueSpec(name="imports", jobs=(spec,))


def test_the_example_settings_and_awss_extremes_are_accepted() -> None:
    assert queue_with(Durable()).problems() == []
    longest = Durable(execution_timeout_s=DURABLE_MAX_EXECUTION_TIMEOUT_S, retention_days=90)
    assert queue_with(longest).problems() == []
    assert queue_with(Durable(execution_timeout_s=1, retention_days=1)).problems() == []


@pytest.mark.parametrize(
    ("durable", "named"),
    [
        (Durable(execution_timeout_s=0), "durable.execution_timeout_s 0 is outside 1..31622400"),
        (Durable(execution_timeout_s=31_622_401), "durable.execution_timeout_s 31622401 is outside"),
        (Durable(retention_days=0), "durable.retention_days 0 is outside 1..90"),
        (Durable(retention_days=91), "durable.retention_days 91 is outside 1..90"),
        (Durable(function_timeout_s=901), "durable.function_timeout_s 901 is outside 1..900"),
        (Durable(function_timeout_s=60, step_time_limit_s=59), "durable.step_time_limit_s 59 must be 1..function"),
        (Durable(memory_mb=64), "durable.memory_mb 64 is outside 128..10240"),
        ("yes", "durable must be a Durable(...) or None, not str"),
    ],
)
def test_a_setting_out_of_bounds_is_named_with_what_is_accepted(durable: object, named: str) -> None:
    [problem] = queue_with(durable).problems()
    assert problem.startswith("queue 'imports': job 'import_orders': ")
    assert named in problem


def test_a_durable_job_is_refused_where_its_promise_cant_hold() -> None:
    fifo = QueueSpec(name="imports", fifo=True, jobs=queue_with(Durable()).jobs)
    assert any("can't be on a FIFO queue" in problem for problem in fifo.problems())
    assert any(
        "take no rate_limit or concurrency" in p for p in queue_with(Durable(), concurrency=KeyConcurrency()).problems()
    )
    assert any("take no unique_for_s or debounce_s" in p for p in queue_with(Durable(), unique_for_s=60).problems())


def test_the_execution_name_fits_lambdas_rule_and_is_the_same_for_the_same_key_and_generation() -> None:
    rule = re.compile(r"[a-zA-Z0-9_-]{1,64}")  # API_Execution: DurableExecutionName
    for key in ("import_orders:2026-12-01", "import_orders:" + "é/ü:" * 100, "x" * 40 + ":k"):
        name = execution_name(key, 0)
        assert rule.fullmatch(name), name
        assert execution_name(key, 0) == name
        assert execution_name(key, 1) != name
    assert execution_name("import_orders:a", 0).startswith("import_orders-")
    assert execution_name("import_orders:a", 0) != execution_name("import_orders:b", 0)
