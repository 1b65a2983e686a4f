"""Benchmark (j): a durable import of 100,000 rows through the local engine, killed in the middle of a step.

    python -m bench.durable_import [--rows 100000] [--kill-at-chunk 50] [--json]

The local engine (this process) serves S3 and DynamoDB with the stack's resources; `import_orders` runs as a
durable execution in a child process: the job's durable function under AWS's durable execution testing SDK, its
checkpoints in a SQLite store on disk (sqs_jobs.local.durable). The child starts the execution with the payload
the
imports queue's worker would give it. Once the child has begun the chunk step `--kill-at-chunk` and half a chunk's
usual time has passed, it is killed (SIGKILL: no cleanup, no last checkpoint). A new child on the same store
resumes the execution; it runs to its end.

Measured and checked (exit 1 if any check fails):
- the kill landed in the middle of a step: that chunk had begun and not ended, and the table held some but not all
  of its rows;
- the resumed execution ran no finished step again: the plan and the chunks before the killed one ran once, in the
  first process; the killed chunk ran again from its start (steps are at-least-once), then the rest;
- every row is imported exactly once: the table holds 100,000 items, one per order_id of the file, each with its
  amount as in the file (the killed chunk's rows written twice are the same item, keyed by order_id);
- times: the first process until the kill, the resume until the end, rows per second.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from functions.catalog import CATALOG

JOB = "import_orders"
QUEUE = "imports"
IMPORT_ID = "bench-100k"
DEFAULT_ROWS = 100_000
DEFAULT_KILL_AT_CHUNK = 50
RUN_TIMEOUT_S = 1800


# --- the child: the durable function's process ---------------------------------------------------------------------


def child(endpoint: str, environ: dict[str, str], state_dir: Path, progress: Path, resume: bool) -> int:
    """Start (or resume) the import's execution and wait for its end; each chunk's start and end is appended to
    `progress` (flushed at once, so the parent sees it before a kill)."""
    from botocore.config import Config

    from functions.jobs import import_orders
    from sqs_jobs.durable import execution_name
    from sqs_jobs.durable.payload import DurableStart
    from sqs_jobs.durable.runtime import DurableRuntime, DurableSettings
    from sqs_jobs.local.durable import LocalDurableFunctions
    from sqs_jobs.stack_names import durable_function_name
    from sqs_jobs.worker.clients import ClientFactory, new_session
    from sqs_jobs.worker.observability import Observability

    log = progress.open("a", encoding="utf-8")

    def note(line: str) -> None:
        log.write(line + "\n")
        log.flush()

    real_chunk = import_orders.import_chunk
    real_plan = import_orders.plan_chunks

    def counted_chunk(context: Any, bucket: str, key: str, start: int, end: int) -> int:
        note(f"start {start} {time.time():.6f}")
        rows = real_chunk(context, bucket, key, start, end)
        note(f"end {start} {time.time():.6f}")
        return rows

    def counted_plan(s3: Any, bucket: str, key: str) -> list[list[int]]:
        note("plan")
        return real_plan(s3, bucket, key)

    import_orders.import_chunk = counted_chunk
    import_orders.plan_chunks = counted_plan
    settings = DurableSettings.from_environ(environ)
    session = new_session(region_name="us-east-1", aws_access_key_id="local", aws_secret_access_key="local")
    config = Config(retries={"mode": "standard", "max_attempts": 2}, s3={"addressing_style": "path"})
    clients = ClientFactory(session=session, endpoint_url=endpoint, config=config)
    runtime = DurableRuntime(settings, clients, observability=Observability.create(output=open(os.devnull, "w")))  # noqa: SIM115
    functions = LocalDurableFunctions({JOB: (durable_function_name("SqsJobs", JOB), runtime)}, state_dir)
    key = f"{JOB}:{IMPORT_ID}"
    if resume:
        [arn] = functions.resume()
    else:
        start = DurableStart(
            body=json.dumps({"job": JOB, "id": IMPORT_ID}), key=key, generation=0, source_queue="bench"
        )
        found = functions.start(JOB, execution_name(key, 0), start.to_json())
        assert found is not None
        arn = found
    result = functions.wait(JOB, arn, timeout_s=RUN_TIMEOUT_S)
    note(f"done {result.status.value} {json.dumps(result.result)}")
    functions.close()
    return 0 if result.status.value == "SUCCEEDED" else 1


# --- the parent: the engine, the kill and the checks ---------------------------------------------------------------


def chunk_events(progress: Path) -> list[tuple[str, int, float]]:
    events: list[tuple[str, int, float]] = []
    for line in progress.read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if parts and parts[0] in ("start", "end") and len(parts) == 3:
            events.append((parts[0], int(parts[1]), float(parts[2])))
    return events


def count_items(dynamodb: Any, table: str) -> int:
    total = 0
    for page in dynamodb.get_paginator("scan").paginate(TableName=table, Select="COUNT"):
        total += int(page["Count"])
    return total


def kill_mid_step(process: subprocess.Popen[bytes], progress: Path, kill_at_chunk: int) -> int | None:
    """SIGKILL `process` half a chunk's usual time into chunk `kill_at_chunk`; that chunk's start offset, or None
    when the process ended first."""
    while process.poll() is None:
        events = chunk_events(progress)
        begun = [offset for kind, offset, _ in events if kind == "start"]
        if len(begun) > kill_at_chunk:
            killed_in = begun[kill_at_chunk]
            ends = {offset: at for kind, offset, at in events if kind == "end"}
            starts = {offset: at for kind, offset, at in events if kind == "start"}
            durations = [ends[o] - starts[o] for o in ends if o in starts]
            time.sleep(max(0.0, starts[killed_in] + sum(durations) / len(durations) / 2 - time.time()))
            process.send_signal(signal.SIGKILL)
            process.wait()
            return killed_in
        time.sleep(0.005)
    return None


def resumed(lines: list[str], before: int, killed_in: int) -> dict[str, Any]:
    """What ran in each process, from the progress log (`before`: its lines when the first was killed)."""
    after = lines[before:]
    first_starts = [int(line.split()[1]) for line in lines[:before] if line.startswith("start")]
    second_starts = [int(line.split()[1]) for line in after if line.startswith("start")]
    return {
        "resumed_status": next((line.split()[1] for line in after if line.startswith("done")), "none"),
        "plan_runs": sum(1 for line in lines if line == "plan"),
        "chunks_run_by_first_process": len(first_starts),
        "chunks_run_after_resume": len(second_starts),
        "chunks_run_twice": len(set(first_starts) & set(second_starts)),
        "first_chunk_after_resume_is_the_killed_one": bool(second_starts) and second_starts[0] == killed_in,
    }


def verify(dynamodb: Any, table: str, rows: int) -> dict[str, int]:
    """The table against the file: one item per order_id, each with its amount."""
    from example.orders_csv import order_id, row_amount

    items: dict[str, str] = {}
    for page in dynamodb.get_paginator("scan").paginate(TableName=table, ProjectionExpression="order_id, amount"):
        for item in page["Items"]:
            items[item["order_id"]["S"]] = item["amount"]["N"]
    expected = {order_id(IMPORT_ID, row): row_amount(row) for row in range(rows)}
    return {
        "items_in_table": count_items(dynamodb, table),
        "rows_missing": len(set(expected) - set(items)),
        "rows_unexpected": len(set(items) - set(expected)),
        "rows_with_wrong_amount": sum(1 for key, amount in expected.items() if items.get(key) not in (amount, None)),
    }


def checks(figures: dict[str, Any], chunks: int, kill_at_chunk: int) -> dict[str, bool]:
    from functions.jobs.import_orders import CHUNK_ROWS

    return {
        "killed in the middle of a step": figures["killed_mid_step"]
        and 0 < figures["killed_chunk_rows_written_before_kill"] < CHUNK_ROWS,
        "resumed to success": figures["resumed_status"] == "SUCCEEDED",
        "no finished step ran again": figures["plan_runs"] == 1 and figures["chunks_run_twice"] == 1,
        "resumed from the killed step": figures["first_chunk_after_resume_is_the_killed_one"]
        and figures["chunks_run_after_resume"] == chunks - kill_at_chunk,
        "every row imported exactly once": figures["items_in_table"] == figures["rows"]
        and figures["rows_missing"] == figures["rows_unexpected"] == figures["rows_with_wrong_amount"] == 0,
    }


def run(rows: int, kill_at_chunk: int) -> dict[str, Any]:
    from example.orders_csv import orders_csv
    from functions.jobs.import_orders import CHUNK_ROWS, csv_key
    from sqs_jobs.local.engine import LocalEngine
    from sqs_jobs.worker.settings import ENV_DURABLE_JOB

    chunks = -(-rows // CHUNK_ROWS)
    if not 0 < kill_at_chunk < chunks:
        raise SystemExit(f"--kill-at-chunk must be within 1..{chunks - 1} for {rows} rows")
    figures: dict[str, Any] = {"rows": rows, "chunks": chunks, "kill_at_chunk": kill_at_chunk}
    with (
        tempfile.TemporaryDirectory(prefix="bench-durable-") as tmp,
        LocalEngine(port=0, run_workers=False, worker_output=open(os.devnull, "w"), catalog=CATALOG) as engine,
    ):
        assert engine.deployment is not None
        deployment = engine.deployment
        clients = engine.clients()
        clients("s3").put_object(
            Bucket=deployment.resources["imports_bucket"], Key=csv_key(IMPORT_ID), Body=orders_csv(IMPORT_ID, rows)
        )
        table = deployment.resources["imported_orders_table"]
        environ = {**deployment.worker_settings(QUEUE).to_environ(), ENV_DURABLE_JOB: JOB}
        state = Path(tmp) / "state"
        progress = Path(tmp) / "progress.log"
        progress.touch()

        def spawn(resume: bool) -> subprocess.Popen[bytes]:
            command = [sys.executable, "-m", "bench.durable_import", "--child", engine.endpoint_url]
            command += ["--environ", json.dumps(environ), "--state", str(state), "--progress", str(progress)]
            return subprocess.Popen([*command, *(["--resume"] if resume else [])])

        started = time.monotonic()
        first = spawn(resume=False)
        killed_in = kill_mid_step(first, progress, kill_at_chunk)
        figures["first_process_s"] = round(time.monotonic() - started, 2)
        if killed_in is None:
            raise SystemExit("the first process ended before the kill: raise --rows or lower --kill-at-chunk")
        events = chunk_events(progress)
        figures["killed_mid_step"] = not any(kind == "end" and offset == killed_in for kind, offset, _ in events)
        rows_at_kill = count_items(clients("dynamodb"), table)
        figures["rows_at_kill"] = rows_at_kill
        figures["killed_chunk_rows_written_before_kill"] = rows_at_kill - kill_at_chunk * CHUNK_ROWS
        before = len(progress.read_text(encoding="utf-8").splitlines())

        resumed_at = time.monotonic()
        second = spawn(resume=True)
        second.wait(timeout=RUN_TIMEOUT_S)
        figures["resume_s"] = round(time.monotonic() - resumed_at, 2)
        figures.update(resumed(progress.read_text(encoding="utf-8").splitlines(), before, killed_in))
        figures.update(verify(clients("dynamodb"), table, rows))
        figures["total_s"] = round(time.monotonic() - started, 2)
        figures["rows_per_s"] = round(rows / max(0.001, figures["total_s"]), 1)
    figures["checks"] = checks(figures, chunks, kill_at_chunk)
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS)
    parser.add_argument("--kill-at-chunk", type=int, default=DEFAULT_KILL_AT_CHUNK)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--environ", help=argparse.SUPPRESS)
    parser.add_argument("--state", help=argparse.SUPPRESS)
    parser.add_argument("--progress", help=argparse.SUPPRESS)
    parser.add_argument("--resume", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child, json.loads(args.environ), Path(args.state), Path(args.progress), args.resume)
    import logging

    logging.basicConfig(level=logging.ERROR)
    figures = run(args.rows, args.kill_at_chunk)
    figures["machine"] = f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print(
            f"(j) durable import of {figures['rows']:,} rows ({figures['chunks']} steps of 1,000), killed in step "
            f"chunk-{figures['kill_at_chunk']}:"
        )
        for name, value in figures.items():
            if name != "checks":
                print(f"    {name}: {value}")
        for check, passed in figures["checks"].items():
            print(f"  [{'ok' if passed else 'FAILED'}] {check}")
    return 0 if all(figures["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
