"""An emulator of Lambda's SQS event source mapping, running the real worker code.

Per queue, `max_concurrency` pollers (Lambda's maximum concurrency); a queue with priority lanes has a mapping's
pollers per lane, as the stack has an event source mapping per lane, each with its lane's concurrency
(QueueSpec.lane_concurrency: the most urgent lane all of it), so an urgent lane's pollers wait on its queue alone and
take its job the moment it comes, whatever the backlog of the others. On AWS every invocation has an execution
environment of its own; here every poller shares one interpreter (and moto's lock) with the others, so while a
more urgent lane of the queue has a batch in flight a lower lane's pollers take no new batch and its workers' AWS
calls wait (`wait_for_urgent_lanes`, at most URGENT_WAIT_S a call): the urgent lane gets the engine's time first,
as it gets environments of its own on AWS (docs/priorities.md). Each long-polls a batch of up to
`batch_size` (gathering across receives for up to the batching window), invokes the worker with the real
Lambda SQS event shape and a context counting down from the function timeout, deletes the records that
succeeded and leaves the failed ones to SQS's visibility timeout and redrive policy - as Lambda does with
ReportBatchItemFailures. An invocation that raises, or runs past its timeout, deletes nothing.

A disabled mapping (`jobctl queue pause`, UpdateEventSourceMapping Enabled=false through the engine's Lambda API)
stops receiving within about a second; batches in flight finish. Enabling it again resumes polling.

With a Chaos (sqs_jobs.local.chaos) it also delivers some messages twice and crashes some invocations after
their side effects, before the ack: nothing is deleted and the poller starts a new execution environment.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqs_jobs.cli.queue_control import is_paused
from sqs_jobs.local.chaos import Chaos
from sqs_jobs.local.lambda_events import LocalLambdaContext, sqs_event
from sqs_jobs.local.provision import LocalLane, LocalQueue

log = logging.getLogger("sqs_jobs.local")

Handler = Callable[[Mapping[str, Any], Any], Mapping[str, Any]]
SQS_RECEIVE_MAX = 10
# How often a paused poller looks again; resuming takes effect within this plus the switch's refresh.
PAUSED_POLL_S = 0.5
# The longest a lower lane's worker waits, at one AWS call, for a more urgent lane's batches to end: nothing of a
# lower lane waits for ever, whatever an urgent batch does.
URGENT_WAIT_S = 2.0


@dataclass
class QueueStats:
    """What the emulator saw on one queue: the local stand-in for Lambda's and the ESM's metrics."""

    invocations: int = 0
    records: int = 0
    deleted: int = 0
    failed_records: int = 0
    invocation_errors: int = 0
    timeouts: int = 0
    crashes: int = 0
    duplicates: int = 0
    last_invocation_at: float | None = None
    last_success_at: float | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {name: value for name, value in vars(self).items() if name != "lock"}


@dataclass
class Invocation:
    """One emulated Lambda invocation: the event sent, what the handler answered, what was deleted."""

    event: dict[str, Any]
    response: Mapping[str, Any]
    raised: bool
    timed_out: bool
    deleted: list[str] = field(default_factory=list)
    # Injected by chaos: the environment died after the handler's side effects, before the ack.
    crashed: bool = False

    @property
    def failed_ids(self) -> list[str]:
        return [item["itemIdentifier"] for item in self.response.get("batchItemFailures", [])]


class MappingSwitch:
    """Whether the queue's event source mapping is enabled, read through Lambda's API (where `jobctl queue
    pause|resume` sets it) at most once per `refresh_s`, shared by the mapping's pollers."""

    def __init__(self, lambda_client: Any, queue_arn: str, refresh_s: float = 1.0) -> None:
        self._lambda = lambda_client
        self._queue_arn = queue_arn
        self._refresh_s = refresh_s
        self._lock = threading.Lock()
        self._enabled = True
        self._read_at = -float("inf")

    def enabled(self) -> bool:
        with self._lock:
            if time.monotonic() - self._read_at >= self._refresh_s:
                self._read_at = time.monotonic()
                try:
                    self._enabled = not is_paused(self._lambda, self._queue_arn)
                except Exception:  # the server going away at stop: keep the last state, stop() ends the loop
                    log.debug("could not read the mapping state of %s", self._queue_arn, exc_info=True)
            return self._enabled


class EventSourceMapping:
    """Polls one queue (each of its priority lanes) and invokes one handler per poller thread (one Lambda execution
    environment each). `concurrency` overrides every lane's."""

    def __init__(
        self,
        queue: LocalQueue,
        sqs_client: Any,
        handler_factory: Callable[[], Handler],
        function_name: str,
        concurrency: int | None = None,
        wait_time_s: int = 1,
        chaos: Chaos | None = None,
        switch: MappingSwitch | None = None,
        switches: Mapping[str, MappingSwitch] | None = None,
    ) -> None:
        """`switch`: whether the mapping of a queue without lanes is enabled; `switches`: each lane's, by its queue's
        ARN (None: always enabled, for tests that drive a mapping by hand)."""
        self.queue = queue
        self._switches = dict(switches or {})
        if switch is not None:
            self._switches[queue.arn] = switch
        self.stats = QueueStats()
        self._sqs = sqs_client
        self._handler_factory = handler_factory
        self._function_name = function_name
        self._concurrency = concurrency
        # Short long-polls so that a stop request is noticed within a second or so.
        self._wait_time_s = wait_time_s
        self._chaos = chaos
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        # Per priority lane (the most urgent first), its batches in flight; a lower lane's pollers wait for a more
        # urgent lane's to end before they take a batch.
        self._in_flight = [0] * len(queue.sources)
        self._lanes_changed = threading.Condition()
        # Which lane the calling poller thread polls (its index in queue.sources).
        self._poller = threading.local()

    def start(self) -> None:
        spec = self.queue.spec
        for source in self.queue.sources:
            lane = f"-{source.name}" if source.name else ""
            for slot in range(self._concurrency or spec.lane_concurrency(source.name)):
                thread = threading.Thread(
                    target=self._poll, name=f"esm-{spec.name}{lane}-{slot}", args=(source,), daemon=True
                )
                thread.start()
                self._threads.append(thread)

    def request_stop(self) -> None:
        """Stop taking new batches; batches in flight run to the end."""
        self._stop.set()

    def join(self, timeout_s: float | None = None) -> None:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def _receive_batch(self, source: LocalLane, wait_time_s: int | None = None) -> list[dict[str, Any]]:
        spec = self.queue.spec
        messages: list[dict[str, Any]] = []
        window_ends = time.monotonic() + spec.batching_window_s
        while not self._stop.is_set() and len(messages) < spec.batch_size:
            response = self._sqs.receive_message(
                QueueUrl=source.url,
                MaxNumberOfMessages=min(SQS_RECEIVE_MAX, spec.batch_size - len(messages)),
                WaitTimeSeconds=self._wait_time_s if wait_time_s is None else wait_time_s,
                MessageSystemAttributeNames=["All"],
                MessageAttributeNames=["All"],
            )
            messages.extend(response.get("Messages", []))
            if not messages or time.monotonic() >= window_ends:
                break
        if self._chaos is not None:
            for message in messages:
                if self._chaos.duplicate():
                    self._deliver_again(source, message)
        return messages

    def _deliver_again(self, source: LocalLane, message: Mapping[str, Any]) -> None:
        """SQS's at-least-once delivery, on demand: visible again now, so another receive gets it too."""
        try:
            self._sqs.change_message_visibility(
                QueueUrl=source.url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
            )
        except Exception:
            log.warning("could not deliver a message twice on %s; delivering it once", self.queue.spec.name)
            return
        with self.stats.lock:
            self.stats.duplicates += 1

    def _start_environment(self) -> Handler | None:
        """A new execution environment (a cold start), or None after a second if its init failed: Lambda, too,
        retries a failed init on the next batch rather than giving up on the queue."""
        try:
            return self._handler_factory()
        except Exception:
            log.exception("worker init for %s failed; retrying", self.queue.spec.name)
            self._stop.wait(1)
            return None

    def _poll(self, source: LocalLane) -> None:
        handler = None
        switch = self._switches.get(source.arn)
        lane = self.queue.sources.index(source)
        self._poller.lane = lane
        while not self._stop.is_set():
            if handler is None:
                handler = self._start_environment()
                continue
            if switch is not None and not switch.enabled():
                self._stop.wait(PAUSED_POLL_S)  # paused: no receives, as a disabled mapping makes none
                continue
            if lane and not self._urgent_lanes_idle(lane):
                continue
            try:
                messages = self._receive_batch(source)
            except Exception:
                if self._stop.is_set():
                    return
                log.exception("receive from %s failed; retrying", self.queue.spec.name)
                time.sleep(1)
                continue
            if not messages:
                continue
            with self._lanes_changed:
                self._in_flight[lane] += 1
            try:
                if self._invoke(handler, messages, source).crashed:
                    handler = None  # Lambda replaces an environment that died
            finally:
                with self._lanes_changed:
                    self._in_flight[lane] -= 1
                    self._lanes_changed.notify_all()

    def poller_lane(self) -> int | None:
        """The lane (index in queue.sources, 0 the most urgent) the calling poller thread polls; None elsewhere."""
        return getattr(self._poller, "lane", None)

    def wait_for_urgent_lanes(self, lane: int, timeout_s: float = URGENT_WAIT_S) -> None:
        """Wait (at most `timeout_s`) until no lane more urgent than `lane` has a batch in flight."""
        deadline = time.monotonic() + timeout_s
        with self._lanes_changed:
            while any(self._in_flight[:lane]) and (left_s := deadline - time.monotonic()) > 0:
                self._lanes_changed.wait(left_s)

    def _urgent_lanes_idle(self, lane: int) -> bool:
        """Whether no lane more urgent than `lane` has a batch in flight; else waits a little for one to end."""
        with self._lanes_changed:
            if not any(self._in_flight[:lane]):
                return True
            self._lanes_changed.wait(PAUSED_POLL_S)
            return False

    def poll_once(self, handler: Handler, timeout_s: float | None = None) -> Invocation | None:
        """Receive one batch and invoke the handler on it, in the caller's thread (tests, step-by-step runs): of the
        most urgent priority lane that has one (each lane but the last asked without waiting). `timeout_s`
        overrides the function timeout the context counts down from."""
        sources = self.queue.sources
        for index, source in enumerate(sources):
            messages = self._receive_batch(source, 0 if index < len(sources) - 1 else None)
            if messages:
                return self._invoke(handler, messages, source, timeout_s)
        return None

    def _invoke(
        self, handler: Handler, messages: list[dict[str, Any]], source: LocalLane, timeout_s: float | None = None
    ) -> Invocation:
        spec = self.queue.spec
        event = sqs_event(messages, source.arn)
        context = LocalLambdaContext(
            function_name=self._function_name,
            timeout_s=spec.function_timeout_s if timeout_s is None else timeout_s,
            memory_limit_in_mb=spec.memory_mb,
            region=self.queue.arn.split(":")[3],
            account_id=self.queue.arn.split(":")[4],
        )
        started = time.monotonic()
        failed_ids: set[str] | None
        response: Mapping[str, Any] = {}
        try:
            response = handler(event, context)
            failed_ids = {item["itemIdentifier"] for item in response.get("batchItemFailures", [])}
        except Exception:
            log.exception("worker invocation for %s raised: the whole batch fails", spec.name)
            failed_ids = None
        timed_out = time.monotonic() - started > context.timeout_s
        with self.stats.lock:
            self.stats.invocations += 1
            self.stats.records += len(messages)
            self.stats.last_invocation_at = time.time()
            if timed_out:
                self.stats.timeouts += 1
            if failed_ids is None:
                self.stats.invocation_errors += 1
        invocation = Invocation(event=event, response=response, raised=failed_ids is None, timed_out=timed_out)
        if failed_ids is None or timed_out:
            return invocation  # Lambda deletes nothing from a failed or timed-out invocation.
        done = [message for message in messages if message["MessageId"] not in failed_ids]
        if self._chaos is not None and self._chaos.crash_after(len(done)):
            with self.stats.lock:
                self.stats.crashes += 1
            invocation.crashed = True
            return invocation  # died before answering: as a failed invocation, nothing is deleted
        self._delete(source, done)
        invocation.deleted = [message["MessageId"] for message in done]
        with self.stats.lock:
            self.stats.deleted += len(done)
            self.stats.failed_records += len(messages) - len(done)
            if done:
                self.stats.last_success_at = time.time()
        return invocation

    def _delete(self, source: LocalLane, messages: list[dict[str, Any]]) -> None:
        for start in range(0, len(messages), SQS_RECEIVE_MAX):
            chunk = messages[start : start + SQS_RECEIVE_MAX]
            response = self._sqs.delete_message_batch(
                QueueUrl=source.url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(chunk)],
            )
            for failure in response.get("Failed", []):
                log.warning("delete failed on %s: %s", self.queue.spec.name, failure)
