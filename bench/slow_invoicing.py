"""Benchmark (d'): the local engine end to end with the invoicing API slowed, records one at a time and side by side.

    python -m bench.slow_invoicing [--jobs 200] [--delay-s 0.5] [--json]

The same `generate_invoice` jobs go through a fresh `LocalEngine` twice in this process, run by bench.throughput's
engine run (its bounded publisher at a backlog of 50, its seeding and its exactly-once checks), with the fake
invoicing API answering every POST after `delay_s` (its `slow` mode; a ThreadingHTTPServer, so calls in flight
wait side by side):

before   the catalog with the invoices queue at `parallel_records=1`: each poller runs its batch of 10 one record
         at a time, as every queue did before records ran side by side;
after    the shipped catalog (invoices: `parallel_records` 5, so 5 of a batch's 10 records at once).

The invoices queue has `max_concurrency` 2 pollers, so at most pollers x records at once calls wait on the API
together, and no run can beat pollers x records at once / delay_s jobs/s: the ideal bound beside each figure.
Every job must complete exactly once in both runs (one invoice created by the API and one POST per invoice, one S3
object version, no failed invocation, nothing in the DLQ, nothing left in the queue); otherwise the command
prints the problems instead of the figures and exits 1.

The default delay, 0.5 s, is long against the engine's own cost per generate_invoice job (about 37 ms of CPU at
27 jobs/s unslowed, docs/benchmarks.md (d)), so the API's wait dominates both runs; short enough that the before
run of 200 jobs takes about 50 s (200 / 4 jobs/s), which keeps both runs near a minute in all.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from bench.throughput import DEFAULT_BACKLOGS, REQUESTS, RunResult, run_engine, table, without_rate_limits
from functions.catalog import RESOURCES as APP_RESOURCES

if TYPE_CHECKING:
    from sqs_jobs.specs import Catalog

JOB = "generate_invoice"
QUEUE = "invoices"
DEFAULT_JOBS = 200
DEFAULT_DELAY_S = 0.5
BACKLOG = DEFAULT_BACKLOGS[0]  # bench.throughput's: both pollers always find a full batch of 10
STALL_S = 30.0
MAX_JOBS = 10_000
# A batch of 10 run one record at a time waits 10 x delay_s; at 5 s that is 50 s, inside the invoices queue's
# 120 s function timeout, so the before run hands no record back for lack of time.
MAX_DELAY_S = 5.0


def check_arguments(jobs: int, delay_s: float) -> list[str]:
    problems = []
    if not 1 <= jobs <= MAX_JOBS:
        problems.append(f"--jobs {jobs} must be 1..{MAX_JOBS:,}")
    if not 0 < delay_s <= MAX_DELAY_S:
        problems.append(f"--delay-s {delay_s:g} must be above 0 and at most {MAX_DELAY_S:g}")
    return problems


def one_at_a_time(catalog: Catalog, queue: str = QUEUE) -> Catalog:
    """`catalog` with `queue` at parallel_records=1 and every other queue as it is."""
    from sqs_jobs.specs import Catalog

    catalog.queue(queue)  # an unknown queue is an error, not a silent no-op
    return Catalog(
        resources=APP_RESOURCES,
        queues=tuple(replace(spec, parallel_records=1) if spec.name == queue else spec for spec in catalog.queues),
    )


def runs() -> list[tuple[str, Catalog]]:
    """(label, catalog): before, then after."""
    from functions.catalog import CATALOG

    return [("before", one_at_a_time(CATALOG)), ("after", CATALOG)]


def ideal_per_s(pollers: int, records_at_once: int, delay_s: float) -> float:
    """The most jobs/s the API's delay allows: every poller with that many calls waiting at once, nothing else."""
    return pollers * records_at_once / delay_s


def run(label: str, catalog: Catalog, jobs: int, delay_s: float) -> RunResult:
    """One engine run of `jobs` invoices with the API slowed; its exactly-once problems are in the result."""
    spec = catalog.queue(QUEUE)

    def slow_api(engine: Any) -> None:
        engine.standins["invoicing_api_url"].set_mode("slow", delay_s=delay_s)

    # The speed-up of records in parallel, not the API's rate limit: both runs without it.
    result = run_engine(
        JOB,
        jobs,
        BACKLOG,
        STALL_S,
        catalog=without_rate_limits(catalog),
        setup=slow_api,
        standin_options={"invoicing_api_url": {"rate": "off"}},
    )
    result.kind = label
    result.details.update(records_at_once=spec.records_in_parallel, delay_s=delay_s)
    # bench.throughput notes messages left in the queue (every job was seen once); here the run must end clean.
    left = result.details.get("left_in_queue")
    if left != 0:
        result.problems.append(f"{left} message(s) left in the queue")
    if result.completed != jobs:
        result.problems.append(f"{result.completed} of {jobs} jobs completed")
    return result


def summarize(before: RunResult, after: RunResult, delay_s: float) -> dict[str, Any]:
    """The figures of both runs, the speed-up after / before and the ideal bounds."""
    rows: list[dict[str, Any]] = []
    for result in (before, after):
        records = int(result.details["records_at_once"])
        ideal = ideal_per_s(result.pollers, records, delay_s)
        rows.append(
            {
                "run": result.kind,
                "jobs": result.jobs,
                "pollers": result.pollers,
                "records_at_once": records,
                "wall_s": round(result.elapsed_s, 2),
                "per_s": round(result.per_s, 2),
                "ideal_per_s": round(ideal, 2),
                "share_of_ideal": round(result.per_s / ideal, 3),
                "cpu_cores": round(result.cpu_cores, 2),
            }
        )
    return {
        "job": JOB,
        "delay_s": delay_s,
        "backlog": BACKLOG,
        "runs": rows,
        "speedup": round(after.per_s / before.per_s, 2) if before.per_s else None,
        "ideal_speedup": round(rows[1]["ideal_per_s"] / rows[0]["ideal_per_s"], 2),
    }


def render(summary: dict[str, Any]) -> str:
    header = ("run", "jobs", "pollers x records at once", "wall s", "jobs/s", "ideal jobs/s", "of ideal", "CPU cores")
    cells = [
        (
            row["run"],
            f"{row['jobs']:,}",
            f"{row['pollers']} x {row['records_at_once']}",
            f"{row['wall_s']:.1f}",
            f"{row['per_s']:.2f}",
            f"{row['ideal_per_s']:.2f}",
            f"{row['share_of_ideal']:.0%}",
            f"{row['cpu_cores']:.2f}",
        )
        for row in summary["runs"]
    ]
    lines = table(header, cells)
    speedup = summary["speedup"]
    lines.append(
        f"speed-up after / before: {speedup:.2f}x (ideal {summary['ideal_speedup']:.2f}x); ideal jobs/s = pollers x "
        f"records at once / {summary['delay_s']:g} s"
        if speedup is not None
        else "speed-up after / before: - (the before run completed nothing)"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.slow_invoicing", description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=DEFAULT_JOBS, help=f"invoices per run (default {DEFAULT_JOBS})")
    parser.add_argument(
        "--delay-s",
        type=float,
        default=DEFAULT_DELAY_S,
        help=f"how long the invoicing API takes per POST (default {DEFAULT_DELAY_S:g})",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    problems = check_arguments(args.jobs, args.delay_s)
    if problems:
        parser.error("; ".join(problems))

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    REQUESTS.install()
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    results = []
    for label, catalog in runs():
        result = run(label, catalog, args.jobs, args.delay_s)
        results.append(result)
        print(f"  ... {label}: {result.per_s:.2f} jobs/s", file=sys.stderr)
    failed = [(result.kind, problem) for result in results for problem in result.problems]
    if failed:
        # No figure from a run that lost or repeated a job.
        for label, problem in failed:
            print(f"bench.slow_invoicing: {label}: PROBLEM: {problem}", file=sys.stderr)
        return 1
    before, after = results
    summary = summarize(before, after, args.delay_s)
    summary["machine"] = {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "load_1min_before": round(load_before, 2),
        "load_1min_after": round(os.getloadavg()[0], 2),
        "wall_s": round(time.monotonic() - started, 1),
    }
    summary["notes"] = {result.kind: result.notes for result in results if result.notes}
    if args.json:
        summary["details"] = {result.kind: result.as_dict() for result in results}
        json.dump(summary, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    print(
        f"(d') {JOB} end to end on the local engine, the invoicing API answering each POST after "
        f"{args.delay_s:g} s (backlog {BACKLOG}): records one at a time (before) and side by side (after)"
    )
    print(render(summary))
    for label, notes in summary["notes"].items():
        print("\n".join(f"    note ({label}): {note}" for note in notes))
    machine = summary["machine"]
    print(
        f"\nevery job once in both runs; {machine['cores']} cores, Python {machine['python']}, "
        f"{machine['wall_s']:.0f} s in all; 1-minute load average {machine['load_1min_before']:.2f} before, "
        f"{machine['load_1min_after']:.2f} after"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
