"""Benchmark (g): a rate limit shared by every worker, through the local engine.

    python -m bench.rate_limit [--jobs 2000] [--json]

`generate_invoice` jobs go through a fresh `LocalEngine` with the shipped catalog: the invoicing endpoint's
`RateLimit(per_second=10, burst=20)`, the fake invoicing API enforcing its own limit (10 a second, burst 25:
429 beyond it). bench.throughput's engine run publishes them with a backlog of 50 kept outstanding, so both of
the invoices queue's pollers always find a full batch (every poller busy), seeds the invoices and checks that every
job completed exactly once. Unlimited, the engine runs these jobs at about 27 a second (docs/benchmarks.md (d)),
so the limit is what paces them.

Measured from the fake API's own record of when each POST arrived, and from the workers' limiter store:
- the most calls that arrived in any 1 s window (sliding): goal at most per_second + burst = 30;
- the calls per second while a backlog existed (from the first call to the last: the publisher keeps the backlog
  until every job is sent): goal at least 90 % of the limit, 9 a second;
- the calls the API refused for its own limit: goal 0;
- the limiter's DynamoDB writes per job (granted and refused conditional writes): goal at most 0.2; reads beside.
Exits 1 when a job did not complete exactly once or a goal is missed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from bench.throughput import DEFAULT_BACKLOGS, REQUESTS, run_engine

JOB = "generate_invoice"
ENDPOINT = "invoicing_api_url"
DEFAULT_JOBS = 2000
STALL_S = 60.0
WINDOW_S = 1.0
MIN_SHARE = 0.9
MAX_WRITES_PER_JOB = 0.2


class StoreCounter:
    """Counts every limiter store write and read of every worker in this process (the engine's workers run here)."""

    def __init__(self) -> None:
        self.writes = 0
        self.reads = 0
        self._lock = threading.Lock()

    def install(self) -> None:
        from sqs_jobs.worker.rate_limit import TokenBucketStore

        counter = self
        count_write, read = TokenBucketStore._count, TokenBucketStore._read

        def counted_write(store: TokenBucketStore) -> None:
            with counter._lock:
                counter.writes += 1
            count_write(store)

        def counted_read(store: TokenBucketStore, limit_name: str, key: str) -> float:
            with counter._lock:
                counter.reads += 1
            return read(store, limit_name, key)

        TokenBucketStore._count = counted_write  # type: ignore[method-assign,assignment]
        TokenBucketStore._read = counted_read  # type: ignore[method-assign,assignment]


def measure(jobs: int) -> dict[str, Any]:
    from functions.catalog import CATALOG

    endpoint = CATALOG.resource(ENDPOINT)
    limit = getattr(endpoint, "rate_limit", None)
    if limit is None:
        raise SystemExit(f"the catalog's {ENDPOINT} has no rate_limit: nothing to measure")
    store = StoreCounter()
    store.install()
    apis: list[Any] = []
    result = run_engine(
        JOB,
        jobs,
        DEFAULT_BACKLOGS[0],
        STALL_S,
        catalog=CATALOG,
        setup=lambda engine: apis.append(engine.standins[ENDPOINT]),
    )
    [api] = apis
    arrivals = api.arrivals()
    span_s = arrivals[-1] - arrivals[0] if len(arrivals) > 1 else 0.0
    per_s = (len(arrivals) - 1) / span_s if span_s else 0.0
    bound = limit.per_second * WINDOW_S + limit.burst
    most = api.most_calls_within(WINDOW_S)
    refused = api.stats()["over_rate"]
    writes_per_job = store.writes / jobs
    problems = list(result.problems)
    if most > bound:
        problems.append(f"{most} calls in one {WINDOW_S:g} s window, above per_second + burst ({bound:g})")
    if per_s < MIN_SHARE * limit.per_second:
        problems.append(f"{per_s:.2f} calls/s with a backlog, under {MIN_SHARE:.0%} of the limit")
    if refused:
        problems.append(f"the API refused {refused} call(s) for its own rate limit")
    if writes_per_job > MAX_WRITES_PER_JOB:
        problems.append(f"{writes_per_job:.3f} limiter writes per job, above {MAX_WRITES_PER_JOB}")
    return {
        "limit": {"per_second": limit.per_second, "burst": limit.burst, "lease_tokens": limit.lease_tokens},
        "jobs": jobs,
        "completed": result.completed,
        "elapsed_s": round(result.elapsed_s, 1),
        "calls": len(arrivals),
        "most_calls_in_1s": most,
        "goal_most_calls_in_1s": bound,
        "calls_per_s_with_backlog": round(per_s, 2),
        "goal_calls_per_s": MIN_SHARE * limit.per_second,
        "api_refused_over_its_limit": refused,
        "limiter_writes": store.writes,
        "limiter_writes_per_job": round(writes_per_job, 3),
        "goal_writes_per_job": MAX_WRITES_PER_JOB,
        "limiter_reads": store.reads,
        "notes": result.notes,
        "problems": problems,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.rate_limit", description="(g) A rate limit shared by every worker, on the local engine."
    )
    parser.add_argument("--jobs", type=int, default=DEFAULT_JOBS, help=f"invoices (default {DEFAULT_JOBS})")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    args = parser.parse_args(argv)
    if not 20 <= args.jobs <= 100_000:
        parser.error("--jobs must be 20..100000")
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    REQUESTS.install()
    started = time.monotonic()
    figures = measure(args.jobs)
    figures["machine"] = {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "wall_s": round(time.monotonic() - started, 1),
    }
    if args.json:
        json.dump(figures, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(f"(g) rate limit {figures['limit']} on {ENDPOINT}, {figures['jobs']} jobs, every poller busy")
        print(
            f"    most calls in any 1 s window  {figures['most_calls_in_1s']:>6}   "
            f"goal <= {figures['goal_most_calls_in_1s']:g}"
        )
        print(
            f"    calls/s with a backlog        {figures['calls_per_s_with_backlog']:>6}   "
            f"goal >= {figures['goal_calls_per_s']:g}"
        )
        print(f"    refused by the API's own limit {figures['api_refused_over_its_limit']:>5}   goal 0")
        print(
            f"    limiter writes per job        {figures['limiter_writes_per_job']:>6}   "
            f"goal <= {figures['goal_writes_per_job']} ({figures['limiter_reads']} reads beside)"
        )
        for problem in figures["problems"]:
            print(f"    PROBLEM: {problem}")
    return 1 if figures["problems"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
