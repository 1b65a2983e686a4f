"""Benchmark (k): a high-priority job behind a backlog of normal ones, on the local engine.

    python -m bench.priorities [--backlog 5000] [--samples 15] [--parallel-records 1] [--skip-unprioritized]
                               [--json]

One queue with two priority lanes, "high" and "normal" (bench.priority_catalog: max_concurrency 5, so the high
lane's event source may run 5 workers and the normal lane's 3), and a job that only notes when it ended, one record
at a time (`parallel_records` 1: the job waits on nothing). On a fresh `LocalEngine(port=0)`:

1. empty queue: `samples` high jobs, one after another (each published once the one before has ended, after two
   not counted, which start the environments), each timed from `publish(..., priority="high")` to its run's end;
2. behind a backlog: the workers stopped, `backlog` normal jobs published (publish_many), the workers started
   again; once the first 100 are done, `samples` high jobs timed the same way, each 0.4 s after the one before
   ended, while the backlog drains (its batches in flight when each comes);
3. (unless --skip-unprioritized) the same job published without a priority at that point, to the normal lane, behind
   what is left of the backlog: what a queue without lanes gives an urgent job.

The goal (issue 34): the median of (2) within 2x the median of (1). Benchmarks, not tests: exit code 1 if the goal
is not met.

The engine runs the publisher, moto and every worker in one interpreter: with `--parallel-records 10` the normal
lane's 3 workers run 30 records at once, whose threads the high job's share the interpreter with, which AWS's
separate execution environments don't (docs/benchmarks.md gives both figures).
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from bench import priority_job
from bench.priority_catalog import CATALOG, JOB, QUEUE

DEFAULT_BACKLOG = 5000
DEFAULT_SAMPLES = 15
WARM_UP = 2
GOAL_RATIO = 2.0
# The backlog is draining once this many of it are done (the workers' environments started).
DRAINING_AFTER = 100
WAIT_S = 120.0
# Between two high jobs behind the backlog, the backlog runs alone for this long: urgent jobs come now and then,
# while the routine ones keep draining (their batches in flight when an urgent one comes).
SPACING_S = 0.4


def _wait_done(entity_id: str, timeout_s: float = WAIT_S) -> float:
    deadline = time.monotonic() + timeout_s
    while (ended := priority_job.ended_at(entity_id)) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {entity_id} did not end within {timeout_s:g} s")
        time.sleep(0.0005)
    return ended


def _timed(publisher: Any, entity_id: str, priority: str | None) -> float:
    """Seconds from the publish to the run's end."""
    started = time.monotonic()
    publisher.publish(JOB, entity_id, priority=priority)
    return _wait_done(entity_id) - started


def _waiting(engine: Any) -> int:
    """Normal jobs of the backlog not done yet."""
    return sum(engine.queue_counts()[QUEUE].values())


def measure(
    backlog: int, samples: int, unprioritized: bool = True, parallel_records: int | None = None
) -> dict[str, Any]:
    from sqs_jobs.local.engine import LocalEngine
    from sqs_jobs.publisher import JobPublisher
    from sqs_jobs.specs import Catalog

    catalog = CATALOG
    if parallel_records is not None:
        catalog = Catalog(queues=(dataclasses.replace(CATALOG.queue(QUEUE), parallel_records=parallel_records),))
    priority_job.clear()
    with LocalEngine(catalog, port=0, worker_output=io.StringIO(), heartbeat_interval_s=3600.0) as engine:
        clients = engine.clients()
        publisher = JobPublisher.from_stack(clients("ssm"), clients("sqs"))
        for index in range(WARM_UP):
            _timed(publisher, f"warm-{index}", "high")
        empty = [_timed(publisher, f"empty-{index}", "high") for index in range(samples)]

        engine.stop_workers()
        started = time.monotonic()
        publisher.publish_many([(JOB, f"normal-{index}") for index in range(backlog)])
        published_s = time.monotonic() - started
        engine.start_workers()
        done_before = len(priority_job.order())
        while len(priority_job.order()) - done_before < min(DRAINING_AFTER, backlog // 2):
            time.sleep(0.01)
        behind: list[float] = []
        left: list[int] = []
        for index in range(samples):
            time.sleep(SPACING_S)
            behind.append(_timed(publisher, f"behind-{index}", "high"))
            left.append(backlog - sum(1 for entity in priority_job.order() if entity.startswith("normal-")))
        without_lanes = None
        if unprioritized:
            without_lanes = _timed(publisher, "without-lanes", None)
        engine.wait_until_idle(timeout_s=WAIT_S)
    empty_median, behind_median = statistics.median(empty), statistics.median(behind)
    ratio = behind_median / empty_median
    return {
        "backlog": backlog,
        "samples": samples,
        "lane_concurrency": {lane: catalog.queue(QUEUE).lane_concurrency(lane) for lane in catalog.queue(QUEUE).lanes},
        "parallel_records": catalog.queue(QUEUE).parallel_records,
        "backlog_published_s": round(published_s, 1),
        "high_empty_queue_s": {"median": round(empty_median, 4), "max": round(max(empty), 4)},
        "high_behind_backlog_s": {"median": round(behind_median, 4), "max": round(max(behind), 4)},
        "normal_jobs_left_when_high_ended": {"min": min(left), "max": max(left)},
        "same_job_without_priority_s": round(without_lanes, 2) if without_lanes is not None else None,
        "ratio": round(ratio, 2),
        "goal_ratio": GOAL_RATIO,
        "met": ratio <= GOAL_RATIO,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.priorities", description="(k) A high-priority job behind a backlog of normal ones."
    )
    parser.add_argument("--backlog", type=int, default=DEFAULT_BACKLOG, help=f"normal jobs ({DEFAULT_BACKLOG})")
    parser.add_argument("--samples", type=int, default=DEFAULT_SAMPLES, help=f"high jobs timed ({DEFAULT_SAMPLES})")
    parser.add_argument("--parallel-records", type=int, default=None, help="the queue's parallel_records (1)")
    parser.add_argument(
        "--skip-unprioritized", action="store_true", help="skip timing a job without priority behind the backlog"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    args = parser.parse_args(argv)
    if args.backlog < 2 or args.samples < 1:
        parser.error("--backlog must be at least 2 and --samples at least 1")
    figures = measure(
        args.backlog, args.samples, unprioritized=not args.skip_unprioritized, parallel_records=args.parallel_records
    )
    if args.json:
        json.dump(figures, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0 if figures["met"] else 1
    empty, behind = figures["high_empty_queue_s"], figures["high_behind_backlog_s"]
    left = figures["normal_jobs_left_when_high_ended"]
    print(
        f"(k) priority lanes on the local engine: {args.samples} high jobs on an empty queue, then behind "
        f"{args.backlog} normal ones (lanes' concurrency {figures['lane_concurrency']}, parallel_records "
        f"{figures['parallel_records']})"
    )
    print(f"    high, empty queue, publish to done     median {empty['median']:.3f} s   max {empty['max']:.3f} s")
    print(
        f"    high, behind the backlog               median {behind['median']:.3f} s   max {behind['max']:.3f} s   "
        f"({figures['ratio']}x; goal <= {GOAL_RATIO:g}x: {'met' if figures['met'] else 'NOT met'})"
    )
    print(f"    normal jobs still waiting as each ended {left['min']}..{left['max']}")
    if figures["same_job_without_priority_s"] is not None:
        print(f"    the same job without a priority         {figures['same_job_without_priority_s']:.1f} s")
    return 0 if figures["met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
