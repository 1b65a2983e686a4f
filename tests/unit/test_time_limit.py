"""Time limits in threads (lib/sqs_jobs/worker/time_limit.py): a run is cut at its limit, fenced, interrupted only in
the job's own code, and its thread never reused."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest

from sqs_jobs.worker.errors import JobCodeExitError, JobTimeLimitError, TimeLimitInterrupt
from sqs_jobs.worker.time_limit import (
    INTERRUPT_AGAIN_EVERY_S,
    REPORTED_CALLS_AFTER_CUT,
    JobRun,
    JobRunner,
    RunState,
    _run_job,
    current_run,
    interruptible,
)


def job_run(target: Callable[..., Any], limit_s: float = 5.0, key: str = "job:1", **fields: Any) -> JobRun:
    return JobRun(key=key, limit_s=limit_s, target=target, args=(), job="job", **fields)


@pytest.fixture
def runner() -> Iterator[JobRunner]:
    runner = JobRunner()
    yield runner
    runner.close()


def wait_until(condition: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


# --- where an interruption may land ---------------------------------------------------------------------------


def test_only_the_jobs_own_code_below_its_entry_is_interruptible() -> None:
    frames: dict[str, FrameType] = {}

    def in_json(_value: object) -> str:
        frames["inside json"] = sys._getframe()  # the job's callback, called by a protected module's code
        return "x"

    def helper() -> None:
        frames["called by the job"] = sys._getframe()

    def job() -> None:
        frames["job"] = sys._getframe()
        frames["entry"] = sys._getframe(1)
        helper()
        json.dumps(object(), default=in_json)

    _run_job(job, ())

    assert frames["entry"].f_code is _run_job.__code__
    assert interruptible(frames["job"])
    assert interruptible(frames["called by the job"])
    # Below a protected module (json's encoder here; the SDK, urllib3, logging in practice): never.
    assert frames["inside json"].f_back is not None
    assert not interruptible(frames["entry"])  # not started, or returned
    assert not interruptible(sys._getframe())  # the runtime, outside any job
    assert not interruptible(None)


# --- the runner -----------------------------------------------------------------------------------------------


def test_a_run_that_returns_in_time_is_its_result_and_its_thread_is_reused(runner: JobRunner) -> None:
    threads: list[threading.Thread] = []

    def job() -> str:
        threads.append(threading.current_thread())
        assert current_run() is not None
        return "done"

    first = job_run(job)
    assert runner.run(first) == "done"
    assert runner.run(job_run(job)) == "done"
    assert first.state is RunState.FINISHED
    assert threads[0] is threads[1] is not threading.current_thread()
    assert current_run() is None  # only job threads run a job


def test_what_the_job_raises_is_raised_to_the_caller(runner: JobRunner) -> None:
    def job() -> None:
        raise KeyError("missing")

    with pytest.raises(KeyError):
        runner.run(job_run(job))


def test_system_exit_from_a_job_is_a_failed_run_not_the_end_of_the_worker(runner: JobRunner) -> None:
    def job() -> None:
        sys.exit(3)

    with pytest.raises(JobCodeExitError, match="SystemExit"):
        runner.run(job_run(job))


def test_a_hung_run_is_cut_at_its_limit_not_when_it_ends(runner: JobRunner) -> None:
    release = threading.Event()
    started = time.monotonic()
    run = job_run(lambda: release.wait(30), limit_s=0.3)

    with pytest.raises(JobTimeLimitError, match=r"0\.3s"):
        runner.run(run)

    assert 0.3 <= time.monotonic() - started < 2.0
    assert run.was_cut
    assert runner.still_running("job:1")
    # A retry of the same key runs beside its cut run, which is fenced: waiting for a thread that may never end
    # would hold the record for ever.
    assert runner.run(job_run(lambda: "again")) == "again"
    release.set()
    assert wait_until(lambda: not runner.still_running("job:1"))


def test_a_cut_runs_thread_is_never_reused(runner: JobRunner) -> None:
    release = threading.Event()
    threads: list[threading.Thread] = []

    def hang() -> None:
        threads.append(threading.current_thread())
        release.wait(30)

    with pytest.raises(JobTimeLimitError):
        runner.run(job_run(hang, limit_s=0.1))
    release.set()
    assert wait_until(lambda: not threads[0].is_alive())
    runner.run(job_run(lambda: threads.append(threading.current_thread()), key="job:2"))
    assert threads[1] is not threads[0]


def test_a_busy_loop_is_interrupted_after_its_cut() -> None:
    ended: list[JobRun] = []
    runner = JobRunner(on_cut_run_end=ended.append)

    def spin() -> None:
        while True:
            pass

    run = job_run(spin, limit_s=0.2)
    with pytest.raises(JobTimeLimitError):
        runner.run(run)

    assert wait_until(run.done.is_set, timeout_s=3.0)
    assert isinstance(run.error, TimeLimitInterrupt)
    assert run.interruptions >= 1
    assert wait_until(lambda: ended == [run])
    runner.close()


def test_a_job_that_catches_the_interruption_is_interrupted_again(runner: JobRunner) -> None:
    caught: list[str] = []

    def stubborn() -> None:
        while True:
            try:
                while True:
                    pass
            except BaseException:
                caught.append("caught")
                if len(caught) >= 2:
                    raise

    run = job_run(stubborn, limit_s=0.2)
    with pytest.raises(JobTimeLimitError):
        runner.run(run)

    assert wait_until(run.done.is_set, timeout_s=3 * INTERRUPT_AGAIN_EVERY_S + 2)
    assert caught == ["caught", "caught"]
    assert run.interruptions >= 2


def test_a_run_blocked_in_a_protected_call_is_not_interrupted_there(runner: JobRunner) -> None:
    gate = threading.Event()

    def waits_in_threading() -> str:
        gate.wait(1.5)  # threading's Python code: an exception landing here could break its lock
        return "answer"

    run = job_run(waits_in_threading, limit_s=0.2)
    with pytest.raises(JobTimeLimitError):
        runner.run(run)
    time.sleep(INTERRUPT_AGAIN_EVERY_S + 0.3)
    assert run.interruptions == 0
    assert wait_until(run.done.is_set)
    assert run.result == "answer"  # it ended on its own; nobody takes its answer


def test_finished_and_cut_exclude_each_other() -> None:
    finished = job_run(lambda: None)
    assert finished._finish()
    assert not finished.cut()
    assert finished.state is RunState.FINISHED

    cut = job_run(lambda: None)
    assert cut.cut()
    assert not cut._finish()
    assert cut.state is RunState.CUT


def test_a_cut_run_is_fenced_from_further_calls(runner: JobRunner) -> None:
    reported: list[tuple[str, str]] = []
    release = threading.Event()
    outcome: list[str] = []

    def job() -> None:
        release.wait(30)
        run = current_run()
        assert run is not None
        for _ in range(10):  # a job that keeps trying after each refusal
            try:
                run.refuse_if_cut("ses.SendEmail")
            except TimeLimitInterrupt:
                outcome.append("refused")
        raise TimeLimitInterrupt("gave up")

    run = job_run(job, limit_s=0.1, on_call_after_cut=lambda _run, what, result: reported.append((what, result)))
    with pytest.raises(JobTimeLimitError):
        runner.run(run)
    release.set()
    assert wait_until(run.done.is_set)
    assert outcome == ["refused"] * 10  # every call refused...
    assert reported == [("ses.SendEmail", "refused")] * REPORTED_CALLS_AFTER_CUT  # ...the first few reported
    assert run.calls_after_cut == 10
    assert isinstance(run.error, TimeLimitInterrupt)


# --- a wait for a rate limit's token is the runtime's, not the job's -------------------------------------------


def test_a_wait_for_a_token_moves_the_runs_limit_out_and_is_not_its_duration(runner: JobRunner) -> None:
    budgets: list[float] = []

    def wait_for_token(downstream: str, allowed_s: float) -> float:
        budgets.append(allowed_s)
        time.sleep(0.8)  # longer than the whole limit
        return 0.8

    def job() -> str:
        run = current_run()
        assert run is not None
        run.limit_call("https://api.example.com")
        time.sleep(0.1)  # the call itself
        return "done"

    run = job_run(job, limit_s=0.5, call_limit=wait_for_token, invocation_left=lambda: 30.0)

    assert runner.run(run) == "done"
    assert run.state is RunState.FINISHED
    # The wait may take what the invocation has beyond the run's own time and the settle margin.
    assert 27.0 < budgets[0] <= 30.0 - 2
    assert run.paused_s == pytest.approx(0.8)
    assert 100 <= run.elapsed_ms() < 500


def test_without_time_to_spare_in_the_invocation_a_run_may_not_wait_for_a_token(runner: JobRunner) -> None:
    budgets: list[float] = []

    def wait_for_token(downstream: str, allowed_s: float) -> float:
        budgets.append(allowed_s)
        return 0.0

    def job() -> None:
        run = current_run()
        assert run is not None
        run.limit_call("https://api.example.com")

    runner.run(job_run(job, limit_s=5.0, call_limit=wait_for_token, invocation_left=lambda: 6.0))

    assert budgets == [0.0]  # 6 s left: the run's own 5 s and the 2 s settle margin leave none
