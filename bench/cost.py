"""Cost per million jobs from the catalog's settings: benchmark (e) of issue 6.

`python -m bench.cost --help`. Arithmetic, not a measurement of a bill: each queue's settings (batch size, memory,
FIFO, jobs on the queue) and a few stated assumptions (average run time, retries, log bytes, monthly volume) give
the requests and units each service bills, times public us-east-1 list prices. Every price and assumption is a flag.
Free tiers are ignored. The formula is printed with the figures (`FORMULA`) and explained in docs/benchmarks.md.

Prices: the public AWS pricing pages for us-east-1 as read on PRICES_AS_OF (sqs, lambda, dynamodb, cloudwatch,
eventbridge /pricing/). They change: check them before relying on a figure.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from functions.catalog import CATALOG
from sqs_jobs.cdk.naming import QUEUE_SIGNALS, queue_signals
from sqs_jobs.specs import Catalog, QueueSpec

PRICES_AS_OF = "2026-11-29"
MILLION = 1_000_000
HOURS_PER_MONTH = 730
MINUTES_PER_MONTH = HOURS_PER_MONTH * 60
SQS_CHUNK_BYTES = 64 * 1024  # SQS bills each 64 KiB of a request's payload as one request
# The stack's alarms per queue: one per queue signal (age, DLQ depth, backlog, DLQ arrivals, failure rate, stalled,
# heartbeat missing, runtime faults, circuit open, retrying, held near bound, ...) and 1 per job (its p99 duration
# against its time limit). A queue that never retries (max_attempts 1) has no retrying alarm: `queue_signals`.
ALARMS_PER_QUEUE = len(QUEUE_SIGNALS)
ALARMS_PER_JOB = 1
# The runtime's EMF metrics per job (JobSucceeded, JobDuplicate, JobFailed, JobRetried, JobDeadLettered x2 reasons,
# JobDeferred x2 reasons, JobDuration ...): an upper bound; CloudWatch bills a metric only in the hours it is sent,
# so the ones only an incident sends (RuntimeFault, CircuitOpened, CutRunCall and their reasons) are left out.
METRICS_PER_JOB = 10
# Per queue: Heartbeat, and the `(unparseable)` job's JobFailed and JobDeadLettered.
METRICS_PER_QUEUE = 3


@dataclass(frozen=True)
class Prices:
    """us-east-1 list prices in USD, as of PRICES_AS_OF. Check https://aws.amazon.com/<service>/pricing/."""

    sqs_standard_per_million_requests: float = 0.40
    sqs_fifo_per_million_requests: float = 0.50
    lambda_per_million_requests: float = 0.20
    lambda_per_gb_second: float = 0.0000133334  # arm64 (the stack's ARCHITECTURE), first 6 billion GB-s a month
    dynamodb_per_million_wru: float = 0.625  # on-demand, standard table class (after the November 2024 cut)
    dynamodb_per_million_rru: float = 0.125
    cloudwatch_per_alarm_month: float = 0.10  # standard resolution, per metric the alarm references
    cloudwatch_per_metric_month: float = 0.30  # custom metrics, first 10,000
    cloudwatch_logs_per_gb_ingested: float = 0.50  # standard log class
    scheduler_per_million_invocations: float = 1.00  # EventBridge Scheduler, after 14 million free a month


@dataclass(frozen=True)
class Assumptions:
    """What the catalog does not say; each a flag."""

    duration_ms_per_job: float = 100.0  # average run of one job, idempotency calls included
    # Share of a run spent waiting on I/O (a DynamoDB read, an SES send): with records side by side the waits of a
    # batch's records overlap, so the invocation, which Lambda bills, lasts for one of them, not their sum.
    io_wait_share: float = 0.9
    overhead_ms_per_invocation: float = 20.0  # per batch: handler entry, EMF flush, partial-batch response
    batch_fill: float = 1.0  # share of batch_size an average invocation receives (low traffic: far below 1)
    retries_per_job: float = 0.0  # average failed attempts per job (each: 1 ChangeMessageVisibility + a rerun)
    duplicates_per_job: float = 0.0  # average duplicate deliveries per job (each: 1 conditional check write)
    message_bytes: int = 1024  # the envelope is at most 1 KiB
    # From bench.writes (c): the worker's own log lines and EMF per job (measured ~1,141 at batch 10), plus
    # Lambda's START/END/REPORT lines per invocation.
    log_bytes_per_job: float = 1150.0
    platform_log_bytes_per_invocation: float = 350.0
    # From bench.writes (c): per new job 2 idempotency writes and 1 read of the job's own table; a record under
    # 1 KiB is 1 WRU; an eventually consistent read under 4 KiB is 0.5 RRU, strongly consistent 1 (assumed).
    idempotency_writes_per_job: float = 2.0
    # The sparse index of keys in flight (jobs-by-life), billed as table writes: a new key's first run enters it
    # only once it has lasted the queue's `list_running_after_s`, by a write of its own (1 WRU, and 1 WRU for the
    # index's entry) and leaves it with its completion (1 WRU for the index); the share of first runs that do
    # (None: all if duration_ms_per_job reaches it, else none). A retry is listed as it fails and as it starts
    # again: about 3 index writes a retry (a changed index key is a delete and a put).
    listed_share: float | None = None
    index_writes_per_retry: float = 3.0
    reads_per_job: float = 1.0
    jobs_per_month: float = 1_000_000.0  # spreads the fixed monthly costs (alarms, metrics, heartbeats)


FORMULA = """\
per job, for a queue with batch size B, fill f, memory M MB, run d ms, overhead o ms per invocation, retries r,
duplicates u, message S bytes (attempts a = 1 + r, invocations per job i = a / (B x f)):
  SQS requests      = ceil(S / 64 KiB) x (1 send) + i x (1 receive + 1 delete batch) + r x (1 ChangeMessageVisibility)
  Lambda requests   = i
  Lambda GB-s       = (M / 1024) x (a x d x ((1 - w) + w / p) + i x o) / 1000, w = share of a run waiting on I/O,
                      p = records side by side (min(records_in_parallel, B x f)): their waits overlap
  DynamoDB WRU      = a x idempotency writes per job (2, from bench.writes) + u x 1 (conditional check)
                      + listing writes: 3 x the share of first runs that outlast list_running_after_s (the
                      listing, the index's entry in, and out at completion; none if d is shorter) + 3 x r
  DynamoDB RRU      = a x reads per job (1)
  Logs GB           = (log bytes per job + i x platform bytes per invocation) / 2^30
fixed per month, spread over jobs_per_month:
  alarms            = ALARMS (one fewer if max_attempts is 1) + 1 x jobs on the queue
  metrics           = 3 + 10 x jobs on the queue (an upper bound)
  heartbeats        = 43,800 min / interval (EventBridge Scheduler invocations; each also 1 send, 1 receive,
                      1 delete and 1 Lambda invocation)
cost = units x price; per million jobs = per job x 1,000,000""".replace("ALARMS", str(ALARMS_PER_QUEUE))


@dataclass(frozen=True)
class QueueCost:
    """USD per million jobs for one queue, by component, with the units behind it."""

    queue: str
    sqs: float
    lambda_requests: float
    lambda_duration: float
    dynamodb: float
    cloudwatch_logs: float
    cloudwatch_alarms: float
    cloudwatch_metrics: float
    heartbeats: float
    units: dict[str, float]

    @property
    def total(self) -> float:
        return float(sum(getattr(self, name) for name, _ in _COMPONENTS))

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "total": self.total}


def queue_cost(spec: QueueSpec, prices: Prices = Prices(), assume: Assumptions = Assumptions()) -> QueueCost:
    """USD per million jobs on `spec`'s queue (see FORMULA)."""
    attempts = 1 + assume.retries_per_job
    per_batch = max(1.0, spec.batch_size * assume.batch_fill)
    invocations = attempts / per_batch
    chunks = max(1, math.ceil(assume.message_bytes / SQS_CHUNK_BYTES))
    sqs_requests = chunks + invocations * 2 + assume.retries_per_job
    side_by_side = min(float(spec.records_in_parallel), per_batch)
    billed_ms_per_run = assume.duration_ms_per_job * ((1 - assume.io_wait_share) + assume.io_wait_share / side_by_side)
    gb_seconds = (
        (spec.memory_mb / 1024)
        * (attempts * billed_ms_per_run + invocations * assume.overhead_ms_per_invocation)
        / 1000
    )
    listed = assume.listed_share
    if listed is None:
        listed = float(assume.duration_ms_per_job >= spec.list_running_after_s * 1000)
    index_writes = 3 * listed + assume.index_writes_per_retry * assume.retries_per_job
    wru = attempts * assume.idempotency_writes_per_job + index_writes + assume.duplicates_per_job
    rru = attempts * assume.reads_per_job
    log_gb = (assume.log_bytes_per_job + invocations * assume.platform_log_bytes_per_invocation) / 2**30
    sqs_price = prices.sqs_fifo_per_million_requests if spec.fifo else prices.sqs_standard_per_million_requests

    months_per_million_jobs = MILLION / assume.jobs_per_month
    alarms = len(queue_signals(spec)) + ALARMS_PER_JOB * len(spec.jobs)
    metrics = METRICS_PER_QUEUE + METRICS_PER_JOB * len(spec.jobs)
    heartbeats_per_month = MINUTES_PER_MONTH * 60 / spec.alarms.heartbeat_interval_s
    heartbeat_usd_per_month = (
        heartbeats_per_month
        * (prices.scheduler_per_million_invocations + 3 * sqs_price + prices.lambda_per_million_requests)
        / MILLION
        + heartbeats_per_month
        * (spec.memory_mb / 1024)
        * (assume.overhead_ms_per_invocation / 1000)
        * prices.lambda_per_gb_second
    )

    return QueueCost(
        queue=spec.name,
        sqs=sqs_requests * sqs_price,
        lambda_requests=invocations * prices.lambda_per_million_requests,
        lambda_duration=gb_seconds * MILLION * prices.lambda_per_gb_second,
        dynamodb=wru * prices.dynamodb_per_million_wru + rru * prices.dynamodb_per_million_rru,
        cloudwatch_logs=log_gb * MILLION * prices.cloudwatch_logs_per_gb_ingested,
        cloudwatch_alarms=alarms * prices.cloudwatch_per_alarm_month * months_per_million_jobs,
        cloudwatch_metrics=metrics * prices.cloudwatch_per_metric_month * months_per_million_jobs,
        heartbeats=heartbeat_usd_per_month * months_per_million_jobs,
        units={
            "sqs_requests_per_job": sqs_requests,
            "lambda_invocations_per_job": invocations,
            "lambda_gb_seconds_per_job": gb_seconds,
            "dynamodb_wru_per_job": wru,
            "dynamodb_rru_per_job": rru,
            "log_bytes_per_job": log_gb * 2**30,
            "alarms": alarms,
            "metrics": metrics,
            "heartbeats_per_month": heartbeats_per_month,
        },
    )


def estimate(
    catalog: Catalog = CATALOG, prices: Prices = Prices(), assume: Assumptions = Assumptions()
) -> list[QueueCost]:
    return [queue_cost(spec, prices, assume) for spec in catalog]


_COMPONENTS = (
    ("sqs", "SQS requests"),
    ("lambda_requests", "Lambda requests"),
    ("lambda_duration", "Lambda GB-seconds"),
    ("dynamodb", "DynamoDB on-demand"),
    ("cloudwatch_logs", "CloudWatch Logs ingestion"),
    ("cloudwatch_alarms", "CloudWatch alarms (fixed)"),
    ("cloudwatch_metrics", "CloudWatch metrics (fixed)"),
    ("heartbeats", "heartbeats (fixed)"),
)


def render(costs: Sequence[QueueCost], catalog: Catalog = CATALOG) -> str:
    header = ("USD per million jobs", *(c.queue for c in costs))
    rows = [(label, *(f"{getattr(c, name):.4f}" for c in costs)) for name, label in _COMPONENTS]
    rows.append(("total", *(f"{c.total:.4f}" for c in costs)))
    settings = [
        (
            "settings",
            *(
                f"batch {s.batch_size}, {s.memory_mb} MB, {'FIFO' if s.fifo else 'standard'}, {len(s.jobs)} job(s)"
                for s in catalog
            ),
        )
    ]
    widths = [max(len(str(row[i])) for row in (header, *rows, *settings)) for i in range(len(header))]

    def line(row: Sequence[str]) -> str:
        return " | ".join(str(cell).rjust(widths[i]) if i else str(cell).ljust(widths[i]) for i, cell in enumerate(row))

    out = [line(header), "-+-".join("-" * w for w in widths), *map(line, rows), line(settings[0])]
    return "\n".join(out)


def _add_flags(parser: argparse.ArgumentParser, defaults: object, group_title: str) -> None:
    group = parser.add_argument_group(group_title)
    for f in fields(defaults):  # type: ignore[arg-type]
        value = getattr(defaults, f.name)
        group.add_argument(
            "--" + f.name.replace("_", "-"),
            type=float if value is None else type(value),
            default=value,
            metavar="N",
            help=f"default {value}",
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.cost",
        description=f"Cost per million jobs for each catalog queue (us-east-1 list prices as of {PRICES_AS_OF}).",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--no-formula", action="store_true", help="do not print the formula")
    _add_flags(parser, Prices(), "prices (USD, us-east-1; check them)")
    _add_flags(parser, Assumptions(), "assumptions")
    args = parser.parse_args(argv)
    values = vars(args)
    prices = replace(Prices(), **{f.name: values[f.name] for f in fields(Prices)})
    assume = replace(Assumptions(), **{f.name: values[f.name] for f in fields(Assumptions)})
    if assume.jobs_per_month <= 0 or not 0 < assume.batch_fill <= 1:
        parser.error("--jobs-per-month must be positive and --batch-fill in (0, 1]")
    costs = estimate(CATALOG, prices, assume)
    if args.json:
        json.dump(
            {
                "prices_as_of": PRICES_AS_OF,
                "prices": asdict(prices),
                "assumptions": asdict(assume),
                "queues": [c.as_dict() for c in costs],
            },
            sys.stdout,
            indent=2,
        )
        sys.stdout.write("\n")
        return 0
    print(f"(e) cost per million jobs, us-east-1 list prices as of {PRICES_AS_OF} (check them), free tiers ignored")
    print(
        f"assumptions: {assume.duration_ms_per_job:g} ms per job ({assume.io_wait_share:.0%} of it waiting on I/O), "
        f"{assume.overhead_ms_per_invocation:g} ms per "
        f"invocation, batch fill {assume.batch_fill:g}, {assume.retries_per_job:g} retries and "
        f"{assume.duplicates_per_job:g} duplicates per job, {assume.log_bytes_per_job:g} log bytes per job, "
        f"{assume.jobs_per_month:,.0f} jobs a month per queue"
    )
    print(render(costs))
    if not args.no_formula:
        print()
        print(FORMULA)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
