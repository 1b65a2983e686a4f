"""A job's code under its time limit, in a thread of its own, with any number of records running at once.

A signal can't interrupt a thread, and Python can't kill one. So the limit is kept by who waits, not by who runs:

1. The record's own thread (the one that settles it) starts the job's code in a job thread and waits for it, at
   most its limit. A run that returned in time is its result, whatever happens after.
2. At the limit the waiter *cuts* the run: one compare-and-set from RUNNING to CUT, against the job thread's
   RUNNING to FINISHED, so a run is either finished or cut, never both. The record is then settled as a failed
   attempt (JobTimeLimitError, transient), its idempotency key released by the record's thread: the
   invocation is never held past the limit, whatever the job's code is doing.
3. The cut run is *fenced*: from then on every call it makes through `context.client(...)` or `context.http`
   is refused (TimeLimitInterrupt, raised by sqs_jobs.worker.downstream), a call that was in flight and
   answers after the cut is reported and refused its answer, and the job thread never touches the
   idempotency store (only the record's thread does). A given-up run can't complete a side effect later
   unnoticed.
4. Best effort on top: TimeLimitInterrupt is raised inside the job thread asynchronously (CPython's
   PyThreadState_SetAsyncExc), again every INTERRUPT_AGAIN_EVERY_S while it keeps running, but only while it runs
   the job's own code: never inside the AWS SDK, urllib3, logging, threading or the runtime, whose locks it
   could break. That stops a busy loop; a blocking call (a socket read, a sleep) ends first.
5. A job thread whose run was cut is never reused: the next run gets a fresh thread.

A frozen Lambda environment resumes its threads on the next invocation: a cut run then finds itself fenced
(its calls refused, the late answer reported in that invocation's log with the cut run's own record keys), and its
key long released. A retry of the same key runs whether or not its cut run is still blocked somewhere (here or in
another environment): the cut run can't act any more, and holding the retry back for a thread that may never end
would make the record wait for ever.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import math
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator
from enum import Enum
from types import FrameType
from typing import TYPE_CHECKING, Any

from sqs_jobs.limits import SETTLE_MARGIN_S
from sqs_jobs.worker.errors import JobCodeExitError, JobTimeLimitError, TimeLimitInterrupt

if TYPE_CHECKING:
    from sqs_jobs.worker.breaker import Breakers, Ticket

# The most the long-run hook's call (the key's listing as running, sent from a thread of its own) may take.
LONG_RUN_CALL_S = 2.0
# After a run is cut, how often its thread is interrupted again while it keeps running the job's own code.
INTERRUPT_AGAIN_EVERY_S = 1.0
# An idle job thread ends after this long; the next run starts a new one (about 0.1 ms).
IDLE_THREAD_S = 10.0
# Calls after its cut a run reports (log line and metric); a job that loops on refusals adds no more.
REPORTED_CALLS_AFTER_CUT = 3
# A cut run's thread is renamed with this prefix: it is never reused, and ends when the run does.
CUT_THREAD_PREFIX = "job-cut-"
# Code the asynchronous interruption must never land in: these hold locks or shared state (connection pools,
# the import lock, log handlers) that an exception raised at an arbitrary bytecode could leave broken. A cut run
# inside them is stopped by the fence when their call returns.
_PROTECTED_MODULES = frozenset(
    {
        "boto3",
        "botocore",
        "s3transfer",
        "urllib3",
        "aws_lambda_powertools",
        "sqs_jobs.worker",
        "threading",
        "logging",
        "queue",
        "concurrent",
        "importlib",
        "_frozen_importlib",
        "_frozen_importlib_external",
        "http",
        "ssl",
        "socket",
        "selectors",
        "json",
    }
)

_current = threading.local()


def current_run() -> JobRun | None:
    """The run the calling thread is executing: None outside a job thread (the runtime's own calls)."""
    return getattr(_current, "run", None)


class RunState(Enum):
    RUNNING = "running"
    FINISHED = "finished"
    CUT = "cut"


class JobRun:
    """One run of a job's code in a job thread. A plain class, not a dataclass: it is built once per record, but its
    class on every cold start, where a dataclass of its 31 fields cost 1.3 ms (docs/benchmarks.md, issue 33)."""

    def __init__(
        self,
        key: str,
        limit_s: float,
        target: Callable[..., Any],
        args: tuple[Any, ...],
        job: str = "",
        attempt: int = 0,
        on_start: Callable[[], None] | None = None,
        on_end: Callable[[], None] | None = None,
        breakers: Breakers | None = None,
        on_call_after_cut: Callable[[JobRun, str, str], None] | None = None,
        cancel_check: Callable[[], None] | None = None,
        call_limit: Callable[[str, float], float] | None = None,
        invocation_left: Callable[[], float] | None = None,
        on_long_run: Callable[[float], object] | None = None,
        long_run_after_s: float = 0.0,
        context: contextvars.Context | None = None,
    ) -> None:
        self.key = key
        self.limit_s = limit_s
        self.target = target
        self.args = args
        self.job = job
        # Which run of its key this is (1 = the first).
        self.attempt = attempt
        # Run in the job thread before and after the job's code (outside the frame the interruption may land in).
        self.on_start = on_start
        self.on_end = on_end
        # The worker's breakers, for the downstream calls this run makes.
        self.breakers = breakers
        # Called (in the job thread) for every call the run makes or finishes after it was cut: (run, what, outcome).
        self.on_call_after_cut = on_call_after_cut
        # Raises JobCancelledError if an operator cancelled the run's key (sqs_jobs.worker.progress); it reads the
        # key's record itself, a call the downstream hooks let through untouched (`runtime_calling`).
        self.cancel_check = cancel_check
        # Before each HTTP call: waits for a token of the host's rate limit, for at most the seconds given, and says
        # how long it waited, or raises RateLimitedError (sqs_jobs.worker.flow_control); its store calls pass the
        # hooks untouched too. The wait is the runtime's, not the job's: the run's limit is moved out by it, as far
        # as the invocation's time left (`invocation_left`) allows beyond the run's own time and the settle margin.
        self.call_limit = call_limit
        self.invocation_left = invocation_left
        # Called once (in the waiting thread) if the run is still going `long_run_after_s` after it started, with
        # the seconds the call may take: the ledger then lists its key as running (the in-flight view).
        self.on_long_run = on_long_run
        self.long_run_after_s = long_run_after_s
        # The context the job's code runs in (contextvars: a traced run's span), or None: the job thread's own.
        self.context = context
        # Seconds the run's limit is moved out by: waits for tokens (during one, the whole time it may take).
        self.paused_s = 0.0
        # Called once the thread of a run cut at its limit has ended (`when_ended`): what it held until then.
        self._after_end: list[Callable[[], None]] = []
        self._thread_ended = False
        # The runtime's own calls from the job thread (the cancel check's read, a rate limit's lease) are going on.
        self.runtime_calling = False
        self.state = RunState.RUNNING
        self.started = 0.0
        self.cut_at: float | None = None
        self.ended: float | None = None
        self.result: Any = None
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None
        self.interruptions = 0
        # Calls made or ended after the cut; only the first few are reported (a job looping on refusals says it
        # once).
        self.calls_after_cut = 0
        self.done = threading.Event()
        self._lock = threading.Lock()
        self._tickets: set[Ticket] = set()

    @property
    def was_cut(self) -> bool:
        return self.state is RunState.CUT

    def _finish(self) -> bool:
        """The job's code returned or raised: RUNNING -> FINISHED, unless the waiter cut it first."""
        with self._lock:
            if self.state is RunState.RUNNING:
                self.state = RunState.FINISHED
            return self.state is RunState.FINISHED

    def cut(self) -> bool:
        """The waiter gives the run up: RUNNING -> CUT, unless it finished first."""
        with self._lock:
            if self.state is RunState.RUNNING:
                self.state = RunState.CUT
                self.cut_at = time.monotonic()
            return self.state is RunState.CUT

    def elapsed_ms(self) -> float:
        """How long the job's code ran, or had run when it was cut, less its waits for rate limits' tokens."""
        end = self.ended if self.state is RunState.FINISHED else self.cut_at
        return round(max(0.0, (end or time.monotonic()) - self.started - self.paused_s) * 1000, 3)

    # --- the downstream calls it makes (sqs_jobs.worker.downstream) ----------------------------------------

    def refuse_if_cut(self, what: str) -> None:
        if self.was_cut:
            self._after_cut(what, "refused")
            raise TimeLimitInterrupt(f"{what} refused: this run was cut at its time limit of {self.limit_s:g}s")

    def raise_if_cancelled(self) -> None:
        """Before a call of the run: stop it here if its key was cancelled (never from inside the check's read)."""
        if self.cancel_check is None or self.runtime_calling:
            return
        with self._runtime_call():
            self.cancel_check()

    def limit_call(self, downstream: str) -> None:
        """Before an HTTP call of the run: wait for the host's rate limit, if it has one. The run's limit is moved
        out by the wait, so the job keeps its own time for the call; the wait may take what the invocation has
        beyond that and the settle margin."""
        if self.call_limit is None or self.runtime_calling:
            return
        own_left_s = max(0.0, self.limit_s + self.paused_s - (time.monotonic() - self.started))
        invocation_left_s = self.invocation_left() if self.invocation_left is not None else 0.0
        allowed_s = max(0.0, invocation_left_s - own_left_s - SETTLE_MARGIN_S)
        with self._lock:
            self.paused_s += allowed_s
        waited_s = 0.0
        try:
            with self._runtime_call():
                waited_s = self.call_limit(downstream, allowed_s)
        finally:
            with self._lock:
                self.paused_s -= allowed_s - min(waited_s, allowed_s)

    @contextlib.contextmanager
    def _runtime_call(self) -> Iterator[None]:
        self.runtime_calling = True
        try:
            yield
        finally:
            self.runtime_calling = False

    def answered_after_cut(self, what: str, outcome: str) -> None:
        """A call that was in flight when the run was cut has ended: say so, and stop the run there."""
        if self.was_cut:
            self._after_cut(what, outcome)
            raise TimeLimitInterrupt(f"{what} ended after this run was cut at its time limit of {self.limit_s:g}s")

    def _after_cut(self, what: str, outcome: str) -> None:
        self.calls_after_cut += 1
        if self.on_call_after_cut is not None and self.calls_after_cut <= REPORTED_CALLS_AFTER_CUT:
            self.on_call_after_cut(self, what, outcome)

    def when_ended(self, callback: Callable[[], None]) -> None:
        """Call `callback` once the run's thread has ended: at once if it has, else when a cut run's thread ends
        (its calls in flight answered or abandoned), so what the run held outlasts what it may still be doing."""
        with self._lock:
            if not self._thread_ended:
                self._after_end.append(callback)
                return
        callback()

    def thread_ended(self) -> None:
        with self._lock:
            self._thread_ended = True
            callbacks, self._after_end = self._after_end, []
        for callback in callbacks:
            callback()

    def hold(self, ticket: Ticket) -> None:
        with self._lock:
            self._tickets.add(ticket)

    def release(self, ticket: Ticket) -> None:
        with self._lock:
            self._tickets.discard(ticket)

    def _abandon_tickets(self) -> None:
        """Calls whose outcome no hook saw (another hook raised first, the run was stopped): a probe among them
        must free its breaker's slot."""
        with self._lock:
            tickets, self._tickets = self._tickets, set()
        for ticket in tickets:
            ticket.abandoned()

    # --- in the job thread ------------------------------------------------------------------------------------

    def execute(self) -> None:
        _current.run = self
        self.started = time.monotonic()
        try:
            if self.on_start is not None:
                self.on_start()
            if self.context is None:
                self.result = _run_job(self.target, self.args)
            else:
                self.result = self.context.run(_run_job, self.target, self.args)
        except BaseException as error:
            self.error = error
        self.ended = time.monotonic()
        self.complete()

    def complete(self) -> None:
        """Mark the run ended (idempotent: an interruption that lands here is caught and this is done again)."""
        if self.ended is None:
            self.ended = time.monotonic()
        _current.run = None
        self._abandon_tickets()
        self._finish()
        self.done.set()


def _note_long_run(run: JobRun, until_limit_s: float) -> None:
    """The run's long-run hook, in the waiting thread: it must not hold the wait up (the ledger sends its listing
    from a thread of its own), and its call may take at most LONG_RUN_CALL_S, never past the run's limit. What it
    raises is its own: the run goes on either way."""
    budget_s = min(LONG_RUN_CALL_S, until_limit_s - 0.05)
    if run.on_long_run is None or budget_s <= 0:
        return
    # Best effort by contract: a run's listing never changes its outcome, nor holds up its settlement.
    with contextlib.suppress(Exception):
        run.on_long_run(budget_s)


def _run_job(target: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """The one frame the job's code runs under: the asynchronous interruption only lands in code below it."""
    return target(*args)


def _module_of(frame: FrameType) -> str:
    return str(frame.f_globals.get("__name__", ""))


def _protected(module: str) -> bool:
    return any(module == name or module.startswith(name + ".") for name in _PROTECTED_MODULES)


def interruptible(frame: FrameType | None) -> bool:
    """True when `frame` (a thread's innermost) runs the job's own code: strictly below `_run_job`, and nowhere
    below it in a protected module (the SDK, urllib3, logging, threading, the runtime, ...)."""
    current = frame
    while current is not None:
        if current.f_code is _run_job.__code__:
            return current is not frame
        if _protected(_module_of(current)):
            return False
        current = current.f_back
    return False


def _raise_in(thread_id: int) -> bool:
    import ctypes  # failure path only: a cut run

    set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
    return bool(set_async_exc(ctypes.c_ulong(thread_id), ctypes.py_object(TimeLimitInterrupt)))


def interrupt(run: JobRun) -> bool:
    """Raise TimeLimitInterrupt in a cut run's thread if, right now, it runs the job's own code."""
    thread = run.thread
    if not run.was_cut or thread is None or thread.ident is None or run.done.is_set():
        return False
    if not interruptible(sys._current_frames().get(thread.ident)):
        return False
    raised = _raise_in(thread.ident)
    if raised:
        run.interruptions += 1
    return raised


class _JobThread:
    """A daemon thread that runs one job run after another until one of them is cut."""

    _numbers = itertools.count(1)

    def __init__(self, pool: JobRunner) -> None:
        self._pool = pool
        self._work: queue.SimpleQueue[JobRun | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name=f"job-{next(self._numbers)}", daemon=True)
        self.thread.start()

    def submit(self, run: JobRun) -> None:
        run.thread = self.thread
        self._work.put(run)

    def stop(self) -> None:
        self._work.put(None)

    def _loop(self) -> None:
        while True:
            try:
                run = self._work.get(timeout=IDLE_THREAD_S)
            except queue.Empty:
                if self._pool._retire(self):
                    return
                continue  # taken for a run at the very moment: its run is on the way
            if run is None:
                return
            try:
                run.execute()
            except TimeLimitInterrupt:
                # Sent while the job's code ran, landed just after it: the run's end is still to be marked.
                while not run.done.is_set():
                    try:
                        run.complete()
                    except TimeLimitInterrupt:
                        continue
            if run.was_cut:
                # This thread is never used again: a late interruption can only end it.
                with contextlib.suppress(TimeLimitInterrupt):
                    run.thread_ended()
                    self._pool._ended_after_cut(run)
                return
            run.thread_ended()
            if run.on_end is not None:
                run.on_end()
            self._pool._idle(self)


class JobRunner:
    """Runs job code in job threads and keeps each run's time limit (see the module's docstring)."""

    def __init__(self, on_cut_run_end: Callable[[JobRun], None] | None = None) -> None:
        self._on_cut_run_end = on_cut_run_end
        self._lock = threading.Lock()
        self._idle_threads: list[_JobThread] = []
        self._cut_runs: list[JobRun] = []
        self._interrupter: threading.Thread | None = None

    def run(self, run: JobRun) -> Any:
        """Run `run` and return what its job returned, or raise what it raised; JobTimeLimitError at its limit."""
        started = time.monotonic()
        deadline = started + run.limit_s
        long_at = started + run.long_run_after_s if run.on_long_run is not None else math.inf
        self._thread().submit(run)
        while not run.done.wait(max(0.0, min(long_at, deadline + run.paused_s) - time.monotonic())):
            now = time.monotonic()
            if now >= long_at:
                long_at = math.inf
                _note_long_run(run, deadline + run.paused_s - now)
                continue
            if now < deadline + run.paused_s:
                continue  # moved out by a wait for a rate limit's token
            if run.cut():
                self._watch(run)
                raise JobTimeLimitError(f"run went past its time limit of {run.limit_s:g}s and was cut")
            break
        run.done.wait()  # finished at the very limit: its end is moments away
        if run.error is not None:
            if not isinstance(run.error, Exception):
                # SystemExit, KeyboardInterrupt from a job: its failure, not the worker's end.
                raise JobCodeExitError(f"job raised {type(run.error).__name__}: {run.error}") from run.error
            raise run.error
        return run.result

    def still_running(self, key: str) -> bool:
        return any(run.key == key for run in self.cut_runs())

    def cut_runs(self) -> list[JobRun]:
        """Runs cut at their limit whose threads are still going."""
        with self._lock:
            # A thread that died counts as ended, whatever it managed to mark.
            self._cut_runs = [
                run
                for run in self._cut_runs
                if not run.done.is_set() and run.thread is not None and run.thread.is_alive()
            ]
            return list(self._cut_runs)

    def _thread(self) -> _JobThread:
        with self._lock:
            if self._idle_threads:
                return self._idle_threads.pop()
        return _JobThread(self)

    def _idle(self, thread: _JobThread) -> None:
        with self._lock:
            self._idle_threads.append(thread)

    def _retire(self, thread: _JobThread) -> bool:
        """An idle thread's time is up: True if it may end (nobody took it for a run meanwhile)."""
        with self._lock:
            if thread in self._idle_threads:
                self._idle_threads.remove(thread)
                return True
            return False

    def _ended_after_cut(self, run: JobRun) -> None:
        if self._on_cut_run_end is not None:
            self._on_cut_run_end(run)

    def _watch(self, run: JobRun) -> None:
        if run.thread is not None:
            run.thread.name = CUT_THREAD_PREFIX + run.thread.name
        interrupt(run)
        with self._lock:
            self._cut_runs.append(run)
            if self._interrupter is None or not self._interrupter.is_alive():
                self._interrupter = threading.Thread(
                    target=self._interrupt_cut_runs, name="job-interrupter", daemon=True
                )
                self._interrupter.start()

    def _interrupt_cut_runs(self) -> None:
        """Interrupt cut runs again while they keep running the job's own code; end when none is left."""
        while True:
            time.sleep(INTERRUPT_AGAIN_EVERY_S)
            runs = self.cut_runs()
            if not runs:
                with self._lock:
                    if not self._cut_runs:
                        self._interrupter = None
                        return
                continue
            for run in runs:
                interrupt(run)

    def close(self) -> None:
        """Let the idle threads end (tests, the local engine's stop); cut runs end on their own."""
        with self._lock:
            idle, self._idle_threads = self._idle_threads, []
        for thread in idle:
            thread.stop()
