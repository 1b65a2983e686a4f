"""The job-module protocol (lib/sqs_jobs/worker/jobs.py JobModule): what load_jobs accepts and refuses, in one line."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest

from sqs_jobs.specs import JobSpec, QueueSpec
from sqs_jobs.worker.errors import WorkerConfigError
from sqs_jobs.worker.jobs import default_idempotency_key, load_jobs


@pytest.fixture
def module() -> Iterator[types.ModuleType]:
    made = types.ModuleType("job_module_under_test")
    sys.modules[made.__name__] = made
    yield made
    del sys.modules[made.__name__]


def _load(module: types.ModuleType) -> None:
    load_jobs(QueueSpec(name="q", jobs=(JobSpec(name="j", handler=module.__name__),)))


def test_run_alone_is_a_job_with_the_default_key_and_no_overrides(module: types.ModuleType) -> None:
    module.run = lambda envelope, context: None  # type: ignore[attr-defined]

    loaded = load_jobs(QueueSpec(name="q", jobs=(JobSpec(name="j", handler=module.__name__),)))["j"]

    assert loaded.key_function is default_idempotency_key
    assert (loaded.permanent_errors, loaded.transient_errors) == ((), ())
    assert loaded.unique_key_function is None


@pytest.mark.parametrize(
    ("members", "problem"),
    [
        ({}, "has no callable run(envelope, context)"),
        ({"run": "not a function"}, "has no callable run(envelope, context)"),
        ({"run": lambda envelope: None}, "has no callable run(envelope, context)"),
        ({"run": lambda e, c: None, "idempotency_key": "id"}, "idempotency_key must be a function of (envelope)"),
        ({"run": lambda e, c: None, "idempotency_key": lambda: "k"}, "idempotency_key must be a function of"),
        ({"run": lambda e, c: None, "PERMANENT_ERRORS": (ValueError, "x")}, "must be a tuple of exception classes"),
        ({"run": lambda e, c: None, "unique_key": "document"}, "unique_key must be a function of (envelope)"),
        ({"run": lambda e, c: None, "unique_key": lambda e, f: "k"}, "unique_key must be a function of (envelope)"),
    ],
)
def test_a_module_that_breaks_the_protocol_fails_the_start_saying_what(
    module: types.ModuleType, members: dict[str, object], problem: str
) -> None:
    for name, value in members.items():
        setattr(module, name, value)

    with pytest.raises(WorkerConfigError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        _load(module)


def test_a_job_module_that_isnt_deployed_fails_the_start_in_one_line() -> None:
    queue = QueueSpec(name="q", jobs=(JobSpec(name="j", handler="no_such_jobs_e41c.jobs.missing"),))

    with pytest.raises(WorkerConfigError) as raised:
        load_jobs(queue)

    assert str(raised.value) == (
        "job 'j': its module 'no_such_jobs_e41c.jobs.missing' can't be imported: No module named 'no_such_jobs_e41c' "
        "(not in the functions' code or their layer)"
    )
