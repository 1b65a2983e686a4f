"""bench.slow_invoicing's arguments, catalog override and arithmetic (its timings are make bench's, never a test's)."""

from __future__ import annotations

import pytest

from bench.slow_invoicing import (
    MAX_DELAY_S,
    MAX_JOBS,
    QUEUE,
    check_arguments,
    ideal_per_s,
    main,
    one_at_a_time,
    render,
    runs,
    summarize,
)
from bench.throughput import RunResult
from functions.catalog import CATALOG


@pytest.mark.parametrize(
    ("jobs", "delay_s", "problem"),
    [
        (0, 0.5, "--jobs"),
        (MAX_JOBS + 1, 0.5, "--jobs"),
        (200, 0, "--delay-s"),
        (200, -1, "--delay-s"),
        (200, MAX_DELAY_S + 0.1, "--delay-s"),
    ],
)
def test_bad_arguments_are_named_and_exit_2(jobs: int, delay_s: float, problem: str) -> None:
    [found] = check_arguments(jobs, delay_s)
    assert found.startswith(problem)
    with pytest.raises(SystemExit) as exited:
        main(["--jobs", str(jobs), "--delay-s", str(delay_s)])
    assert exited.value.code == 2


def test_good_arguments_pass() -> None:
    assert check_arguments(200, 0.5) == []
    assert check_arguments(1, MAX_DELAY_S) == []


def test_before_is_the_catalog_with_only_the_invoices_queue_one_record_at_a_time() -> None:
    [(before_label, before), (after_label, after)] = runs()
    assert (before_label, after_label) == ("before", "after")
    assert after is CATALOG
    assert CATALOG.queue(QUEUE).records_in_parallel == 5  # what "after" measures
    assert before.queue_names == CATALOG.queue_names
    for spec in before:
        shipped = CATALOG.queue(spec.name)
        if spec.name == QUEUE:
            assert spec.parallel_records == spec.records_in_parallel == 1
            assert shipped.parallel_records != 1
        else:
            assert spec == shipped
    # Everything else about the invoices queue is as shipped.
    assert before.queue(QUEUE).max_concurrency == 2 and before.queue(QUEUE).batch_size == 10
    assert before.queue(QUEUE).jobs == CATALOG.queue(QUEUE).jobs


def test_an_unknown_queue_is_an_error() -> None:
    with pytest.raises(KeyError):
        one_at_a_time(CATALOG, "no_such_queue")


def test_ideal_is_pollers_times_records_at_once_over_the_delay() -> None:
    assert ideal_per_s(2, 1, 0.5) == pytest.approx(4.0)
    assert ideal_per_s(2, 5, 0.5) == pytest.approx(20.0)
    assert ideal_per_s(2, 5, 1.0) == pytest.approx(10.0)


def _result(kind: str, records: int, elapsed_s: float, jobs: int = 200) -> RunResult:
    result = RunResult(kind, "generate_invoice", jobs, 50, pollers=2, elapsed_s=elapsed_s, completed=jobs)
    result.cpu_s = elapsed_s / 4
    result.details["records_at_once"] = records
    return result


def test_summary_gives_the_speed_up_and_the_share_of_the_ideal() -> None:
    summary = summarize(_result("before", 1, 54.0), _result("after", 5, 12.5), delay_s=0.5)
    before, after = summary["runs"]
    assert before["per_s"] == pytest.approx(200 / 54.0, abs=0.01)
    assert after["per_s"] == pytest.approx(16.0)
    assert (before["ideal_per_s"], after["ideal_per_s"]) == (4.0, 20.0)
    assert after["share_of_ideal"] == pytest.approx(0.8)
    assert summary["speedup"] == pytest.approx(16.0 / (200 / 54.0), abs=0.01)
    assert summary["ideal_speedup"] == 5.0
    text = render(summary)
    lines = text.splitlines()
    assert lines[0].startswith("run ") and set(lines[1]) <= {"-", "+"}
    assert lines[2].split(" | ")[:4] == ["before", "200 ", "2 x 1                    ", "54.0  "]
    assert "| 16.00  | 20.00" in lines[3] and "| 80%" in lines[3]
    assert "speed-up after / before: 4.32x (ideal 5.00x)" in text and "/ 0.5 s" in text


def test_a_before_run_that_completed_nothing_has_no_speed_up() -> None:
    empty = _result("before", 1, 0.0)
    empty.completed = 0
    summary = summarize(empty, _result("after", 5, 12.5), delay_s=0.5)
    assert summary["speedup"] is None
    assert "speed-up after / before: -" in render(summary)
