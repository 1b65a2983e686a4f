"""Benchmarks (a) and (b): this runtime against a bare Powertools batch + idempotency handler, in the same run.

(a) cold import: a fresh interpreter importing the worker's Lambda entry module vs a bare handler module.
(b) per-record cost: both handlers on the same SQS event shape and the same persistence backend (DynamoDB in
    moto's in-process mock), new records only; the difference is what the runtime adds per record.

    python -m bench.overhead [--records N] [--rounds N] [--imports N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from functions.catalog import RESOURCES as APP_RESOURCES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REGION = "us-east-1"


# Padding frames below the import, one depth per interpreter, the same depths for both modules. CPython 3.11 frees
# a 16 KiB frame-stack chunk whenever the stack drops back below it, so a recursion that straddles a chunk boundary
# (the regex compiler, importing urllib3 under boto3) does an mmap and a munmap per call. Whether it does depends on
# the depth the import starts at: at one depth the bare handler made 727 such calls and the runtime 6,163 (about
# 20 ms), at others the reverse. Spreading the imports over depths measures the modules, not where they land.
DEPTH_STEP = 9


def cold_import_ms(module: str, runs: int) -> list[float]:
    """Wall time of `import module` in fresh interpreters (the interpreter's own start subtracted), the i-th at
    i * DEPTH_STEP padding frames."""
    code = (
        "import sys, time\n"
        "def pad(n):\n"
        "    if n:\n"
        "        return pad(n - 1)\n"
        "    t = time.perf_counter()\n"
        f"    import {module}\n"
        "    return (time.perf_counter() - t) * 1000\n"
        "print(pad(int(sys.argv[1])))\n"
    )
    # Bytecode may be written and read, as on Lambda; a stale cache would only slow the first run.
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    timings = []
    for run in range(runs):
        result = subprocess.run(
            [sys.executable, "-c", code, str(run * DEPTH_STEP)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        timings.append(float(result.stdout.strip().splitlines()[-1]))
    return timings


def _event(records: int, queue_arn: str, job: str) -> dict[str, Any]:
    now_ms = str(int(time.time() * 1000))
    return {
        "Records": [
            {
                "messageId": str(uuid.uuid4()),
                "receiptHandle": "rh",
                "body": json.dumps({"job": job, "id": str(uuid.uuid4())}),
                "attributes": {
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": now_ms,
                    "SenderId": "bench",
                    "ApproximateFirstReceiveTimestamp": now_ms,
                },
                "messageAttributes": {},
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": REGION,
            }
            for _ in range(records)
        ]
    }


def per_record_us(records: int, rounds: int) -> dict[str, list[float]]:
    """Microseconds per record for the bare handler and for this runtime, alternating rounds."""
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION=REGION,
        POWERTOOLS_TRACE_DISABLED="1",
    )
    from moto import mock_aws

    from bench import bare_handler
    from sqs_jobs.local.lambda_events import LocalLambdaContext
    from sqs_jobs.local.provision import provision
    from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
    from sqs_jobs.worker.clients import ClientFactory, new_session
    from sqs_jobs.worker.observability import Observability
    from sqs_jobs.worker.runtime import Worker

    # One record at a time, as the bare handler runs them: what the runtime adds per record, not what running
    # records side by side changes (bench.parallel measures that).
    noop = JobSpec(name="noop", handler="bench.noop_job")
    catalog = Catalog(resources=APP_RESOURCES, queues=(QueueSpec(name="bench", parallel_records=1, jobs=(noop,)),))
    timings: dict[str, list[float]] = {"bare Powertools": [], "this runtime": []}
    with mock_aws(), open(os.devnull, "w") as sink:
        clients = ClientFactory(session=new_session(region_name=REGION))
        deployment = provision(clients, catalog=catalog, settings={"invoicing_api_url": "http://127.0.0.1:9/unused"})
        local = deployment.queues["bench"]
        worker = Worker(
            settings=deployment.worker_settings("bench"),
            clients=clients,
            observability=Observability.create(output=sink),
        )
        bare = bare_handler.build(deployment.idempotency_table, clients("dynamodb"), output=sink)
        runs: dict[str, Callable[[dict[str, Any], Any], Any]] = {
            "bare Powertools": bare,
            "this runtime": worker.handle,
        }
        for round_index in range(rounds + 1):
            for name, handle in runs.items():
                event = _event(records, local.arn, "noop")
                context = LocalLambdaContext(function_name="bench", timeout_s=900)
                started = time.perf_counter()
                response = handle(event, context)
                elapsed = time.perf_counter() - started
                assert not response["batchItemFailures"], f"{name} failed records"
                if round_index:  # the first round warms caches and connections
                    timings[name].append(elapsed / records * 1e6)
    return timings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.overhead", description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200, help="records per event (200)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per handler (5)")
    parser.add_argument(
        "--imports", type=int, default=17, help="fresh interpreters per cold import, one per stack depth (17)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    imports = {
        "bare Powertools (bench.bare_handler)": cold_import_ms("bench.bare_handler", args.imports),
        # The entry and the catalog its first invocation loads (JOBS_CATALOG): both are every cold start's.
        "this runtime (entry + catalog)": cold_import_ms("sqs_jobs.worker.entry, functions.catalog", args.imports),
    }
    records = per_record_us(args.records, args.rounds)
    bare_import, ours_import = (statistics.median(v) for v in imports.values())
    bare_record, ours_record = (statistics.median(v) for v in records.values())
    result = {
        "cold_import_ms": {name: statistics.median(v) for name, v in imports.items()},
        "cold_import_ratio": ours_import / bare_import,
        "per_record_us": {name: statistics.median(v) for name, v in records.items()},
        "per_record_ratio": ours_record / bare_record,
        "records": args.records,
        "rounds": args.rounds,
        "goal_ratio": 1.10,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"(a) cold import, median of {args.imports} fresh interpreters, one per stack depth:")
    for name, values in imports.items():
        print(f"  {name:40} {statistics.median(values):8.1f} ms   (min {min(values):.1f}, max {max(values):.1f})")
    print(f"  ratio {result['cold_import_ratio']:.2f}x (goal <= 1.10x)")
    print(f"(b) per record, {args.records} new records per event, median of {args.rounds} rounds, DynamoDB in moto:")
    for name, values in records.items():
        print(f"  {name:40} {statistics.median(values):8.1f} us   (min {min(values):.1f}, max {max(values):.1f})")
    print(f"  ratio {result['per_record_ratio']:.2f}x (goal <= 1.10x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
