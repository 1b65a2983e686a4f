"""Debounce (issue 22): a burst of publishes of one key within its window runs the job once, after the window.

`python -m bench.debounce --help`. Under moto's `mock_aws` (no AWS), the real `Worker` drains a standard queue
holding one debounced job (`JobSpec(debounce_s=--window-s)`, bench/debounced_job.py, which records its runs)
through the local engine's event source emulator, as tests/functional's Harness does: real ReceiveMessage, the
Lambda SQS event, deletes of what succeeded, and a copy handed back comes back when SQS makes it visible again. In
real time: `--publishes` (100) publishes of one entity are sent (SendMessageBatch, 10 a call), all within the
window, then the queue is polled until it is empty.

Counted: the job's runs (goal: 1), when its run began after the last publish's send (goal: once that publish's
window has ended, and no later than a poll after), the copies acknowledged unrun as superseded and handed back to
wait (the worker's own EMF metrics), the receives, and the worker's writes of the debounce state (one conditional
UpdateItem per delivery, two at most: the goal) beside the run's own two writes. Exits 1 if the job did not run
exactly once.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from bench.writes import REGION, _fake_credentials

QUEUE = "debounce"
JOB = "debounced"
ENTITY = "42"
SEND_BATCH = 10  # SendMessageBatch's maximum
GOAL_RUNS = 1
GOAL_STATE_WRITES_PER_DELIVERY = 1
MAX_STATE_WRITES_PER_DELIVERY = 2
# How long after the last window the queue may still hold a message before the run is abandoned.
STALL_S = 30.0


@dataclass(frozen=True)
class Result:
    publishes: int
    window_s: int
    publish_s: float  # from the first send to the last one's answer
    runs: int
    run_keys: list[str]
    # The run's start less the last publish's SentTimestamp: at least the window.
    run_after_last_publish_s: float | None
    superseded: int  # JobDropped, reason superseded
    waits: int  # JobDeferred, reason debounce: hand-backs until a window ended
    receives: int
    state_writes: int  # conditional UpdateItems of the debounce state (flow#debounce#...)
    state_writes_refused: int
    run_writes: int  # the run's own writes to the idempotency table (its start and completion)
    wall_s: float

    @property
    def state_writes_per_delivery(self) -> float:
        return self.state_writes / self.receives if self.receives else 0.0

    def met(self) -> dict[str, bool]:
        after = self.run_after_last_publish_s
        return {
            "runs": self.runs == GOAL_RUNS,
            "after the window": after is not None and after >= self.window_s,
            "state writes per delivery": self.state_writes_per_delivery <= MAX_STATE_WRITES_PER_DELIVERY,
        }

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "state_writes_per_delivery": self.state_writes_per_delivery, "met": self.met()}


class _StateWrites:
    """Counts the worker's writes of debounce state (items `flow#debounce#...`), and those refused on their
    condition, apart from the run's own writes of its key record."""

    def __init__(self, table: str) -> None:
        self.table = table
        self.state: Counter[str] = Counter()
        self.run_writes = 0

    def attach(self, clients: Any) -> None:
        clients.register("provide-client-params.dynamodb.*", self._before)
        clients.register("after-call.dynamodb.*", self._after)

    def _before(self, params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        if params.get("TableName") != self.table or model.name not in ("PutItem", "UpdateItem", "DeleteItem"):
            return
        key = params.get("Key") or params.get("Item") or {}
        is_state = str(key.get("id", {}).get("S", "")).startswith("flow#debounce#")
        context["bench_state_write"] = is_state
        if is_state:
            self.state["writes"] += 1
        else:
            self.run_writes += 1

    def _after(self, parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        refused = parsed.get("Error", {}).get("Code") == "ConditionalCheckFailedException"
        if context.get("bench_state_write") and refused:
            self.state["refused"] += 1


def _counts(log: str, metric: str, reason: str) -> int:
    """A count from the worker's EMF documents, for one reason."""
    total = 0
    for line in log.splitlines():
        if f'"{metric}"' not in line:
            continue
        document = json.loads(line)
        if document.get("reason") == reason:
            value = document[metric]
            total += int(sum(value) if isinstance(value, list) else value)
    return total


def measure(publishes: int = 100, window_s: int = 5) -> Result:
    """Publish `publishes` copies of one debounced job within its window and drain the queue in real time."""
    from moto import mock_aws

    from bench import debounced_job
    from sqs_jobs.local.emulator import EventSourceMapping
    from sqs_jobs.local.moto_locks import serialize_moto
    from sqs_jobs.local.provision import provision
    from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
    from sqs_jobs.worker.clients import ClientFactory, new_session
    from sqs_jobs.worker.observability import Observability
    from sqs_jobs.worker.runtime import Worker

    # A batch's records register side by side: their conditional writes must be atomic, as DynamoDB's are (moto's
    # are not; the local engine and the functional tests serialize them the same way).
    serialize_moto()

    catalog = Catalog(
        queues=(QueueSpec(name=QUEUE, jobs=(JobSpec(name=JOB, handler="bench.debounced_job", debounce_s=window_s),)),)
    )
    debounced_job.RUNS.clear()
    started = time.monotonic()
    with _fake_credentials(), mock_aws():
        clients = ClientFactory(session=new_session(region_name=REGION))
        deployment = provision(clients, catalog=catalog)
        settings = deployment.worker_settings(QUEUE)
        writes = _StateWrites(settings.idempotency_table)
        writes.attach(clients)
        log = io.StringIO()
        worker = Worker(settings=settings, clients=clients, observability=Observability.create(output=log))
        sqs, url = clients("sqs"), deployment.queues[QUEUE].url
        mapping = EventSourceMapping(
            queue=deployment.queues[QUEUE],
            sqs_client=sqs,
            handler_factory=lambda: worker.handle,
            function_name=f"bench-{QUEUE}-worker",
            concurrency=1,
            wait_time_s=0,
        )
        body = json.dumps({"job": JOB, "id": ENTITY})
        first_send = time.monotonic()
        for start in range(0, publishes, SEND_BATCH):
            entries = [{"Id": str(n), "MessageBody": body} for n in range(start, min(publishes, start + SEND_BATCH))]
            sqs.send_message_batch(QueueUrl=url, Entries=entries)
        publish_s = time.monotonic() - first_send
        receives, last_sent_ms = _drain(mapping, worker, sqs, url, window_s)
    runs = list(debounced_job.RUNS)
    output = log.getvalue()
    return Result(
        publishes=publishes,
        window_s=window_s,
        publish_s=round(publish_s, 3),
        runs=len(runs),
        run_keys=[key for _, key in runs],
        run_after_last_publish_s=round(runs[0][0] - last_sent_ms / 1000, 3) if runs and last_sent_ms else None,
        superseded=_counts(output, "JobDropped", "superseded"),
        waits=_counts(output, "JobDeferred", "debounce"),
        receives=receives,
        state_writes=writes.state["writes"],
        state_writes_refused=writes.state["refused"],
        run_writes=writes.run_writes,
        wall_s=round(time.monotonic() - started, 3),
    )


def _drain(mapping: Any, worker: Any, sqs: Any, url: str, window_s: int) -> tuple[int, int]:
    """Poll until the queue is empty (waiting copies come back when SQS makes them visible); the receives, and the
    latest SentTimestamp seen."""
    receives, last_sent_ms = 0, 0
    give_up = time.monotonic() + window_s + STALL_S
    while time.monotonic() < give_up:
        invocation = mapping.poll_once(worker.handle)
        if invocation is not None:
            records = invocation.event["Records"]
            receives += len(records)
            last_sent_ms = max([last_sent_ms, *(int(record["attributes"]["SentTimestamp"]) for record in records)])
            continue
        attributes = sqs.get_queue_attributes(
            QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        )["Attributes"]
        if not int(attributes["ApproximateNumberOfMessages"]) + int(
            attributes["ApproximateNumberOfMessagesNotVisible"]
        ):
            return receives, last_sent_ms
        time.sleep(0.1)
    raise RuntimeError(f"the queue still held messages {STALL_S:g} s after the window ended")


def render(result: Result) -> str:
    met = result.met()
    after = result.run_after_last_publish_s
    rows = [
        (
            "publishes of one key",
            f"{result.publishes} in {result.publish_s:.2f} s",
            f"within the {result.window_s} s window",
            "",
        ),
        ("runs of the job", str(result.runs), str(GOAL_RUNS), "met" if met["runs"] else "NOT met"),
        (
            "run began after the last publish's send",
            "-" if after is None else f"{after:.2f} s",
            f">= {result.window_s} s (its window)",
            "met" if met["after the window"] else "NOT met",
        ),
        ("acknowledged unrun, superseded", str(result.superseded), str(result.publishes - GOAL_RUNS), ""),
        ("handed back to wait (no run spent)", str(result.waits), "", ""),
        ("receives", str(result.receives), "", ""),
        (
            "debounce state writes per delivery",
            f"{result.state_writes_per_delivery:.2f} ({result.state_writes}, {result.state_writes_refused} refused)",
            f"{GOAL_STATE_WRITES_PER_DELIVERY} (at most {MAX_STATE_WRITES_PER_DELIVERY})",
            "met" if met["state writes per delivery"] else "NOT met",
        ),
        ("the run's own writes", str(result.run_writes), "2 (start, completion)", ""),
        ("wall time", f"{result.wall_s:.1f} s", "", ""),
    ]
    header = ("", "measured", "goal", "")
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    lines = [" | ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in (header, *rows)]
    lines.insert(1, "-+-".join("-" * width for width in widths))
    lines.append("")
    lines.append("run under: " + ", ".join(result.run_keys))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.debounce", description=__doc__.splitlines()[0])
    parser.add_argument("--publishes", type=int, default=100, help="publishes of one key (100)")
    parser.add_argument("--window-s", type=int, default=5, help="the job's debounce_s (5)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    if args.publishes < 1:
        parser.error("--publishes must be at least 1")
    if not 1 <= args.window_s < 900:
        parser.error("--window-s must be 1..899 (less than the queue's oldest-message alarm)")
    result = measure(args.publishes, args.window_s)
    if args.json:
        print(json.dumps(result.as_dict(), indent=2))
    else:
        print(
            f"Debounce: {args.publishes} publishes of one key within its {args.window_s} s window (moto, real worker)"
        )
        print(render(result))
    return 0 if result.runs == GOAL_RUNS else 1


if __name__ == "__main__":
    sys.exit(main())
