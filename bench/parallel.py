"""Records side by side: a batch of 10 I/O-bound jobs against one such job, in the same run.

    python -m bench.parallel [--delay-s 1.0] [--batch 10] [--rounds 3] [--json]

The job is the shipped `generate_invoice`: it reads its invoice (DynamoDB), POSTs to the invoicing API and stores
the PDF (S3). The fake invoicing API answers every POST after `delay_s` (its `slow` mode; a ThreadingHTTPServer,
so calls wait side by side), so each job waits `delay_s` on I/O; DynamoDB and S3 are moto's in-process mock. Each
batch is one real poll of the event source emulator (ReceiveMessage, the Lambda SQS event, deletes of what
succeeded) invoking the real worker, exactly as the functional tests deliver.

Per round, the same worker settings and freshly seeded invoices: one job alone; `batch` jobs one record at a time
(`parallel_records=1`, what every queue did before); `batch` jobs with `parallel_records=batch`. Each run must
complete every job once (one invoice created per key, none failed), or the benchmark fails instead of printing.
The goal (docs/benchmarks.md): the batch side by side in at most 2x the time of one job.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from functions.catalog import RESOURCES as APP_RESOURCES

REGION = "us-east-1"
QUEUE = "invoices"
GOAL_RATIO = 2.0


@dataclass(frozen=True)
class Case:
    label: str
    jobs: int
    parallel_records: int


def cases(batch: int) -> list[Case]:
    return [
        Case("1 job", 1, batch),
        Case(f"{batch} jobs, one record at a time (parallel_records 1)", batch, 1),
        Case(f"{batch} jobs side by side (parallel_records {batch})", batch, batch),
    ]


def check_arguments(delay_s: float, batch: int, rounds: int) -> list[str]:
    problems = []
    if not 0 < delay_s <= 30:
        problems.append(f"--delay-s {delay_s:g} must be above 0 and at most 30")
    if not 2 <= batch <= 10:
        problems.append(f"--batch {batch} must be 2..10 (one SQS receive)")
    if rounds < 1:
        problems.append(f"--rounds {rounds} must be at least 1")
    return problems


def run_cases(delay_s: float, batch: int, rounds: int) -> dict[str, list[float]]:
    """Wall seconds of each case's batch, per round."""
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION=REGION)
    from moto import mock_aws

    from example.standins.invoicing import FakeInvoicingApi
    from functions.catalog import CATALOG
    from sqs_jobs.local.emulator import EventSourceMapping
    from sqs_jobs.local.provision import provision
    from sqs_jobs.specs import Catalog
    from sqs_jobs.worker.clients import ClientFactory, new_session
    from sqs_jobs.worker.observability import Observability
    from sqs_jobs.worker.runtime import Worker

    timings: dict[str, list[float]] = {case.label: [] for case in cases(batch)}
    shipped = CATALOG.queue(QUEUE)
    with mock_aws(), FakeInvoicingApi() as api, open(os.devnull, "w") as sink:
        api.set_mode("slow", delay_s=delay_s)
        clients = ClientFactory(session=new_session(region_name=REGION))
        catalog = Catalog(resources=APP_RESOURCES, queues=(replace(shipped, batch_size=batch),))
        deployment = provision(clients, catalog=catalog, settings={"invoicing_api_url": api.url})
        sqs, dynamodb = clients("sqs"), clients("dynamodb")
        local = deployment.queues[QUEUE]
        mapping = EventSourceMapping(
            queue=local,
            sqs_client=sqs,
            handler_factory=lambda: lambda event, context: {},
            function_name="bench-parallel",
            concurrency=1,
            wait_time_s=0,
        )
        serial = 0
        for _ in range(rounds):
            for case in cases(batch):
                spec = replace(local.spec, parallel_records=case.parallel_records)
                worker = Worker(
                    settings=replace(deployment.worker_settings(QUEUE), queue=spec),
                    clients=clients,
                    observability=Observability.create(output=sink),
                )
                ids = []
                for _ in range(case.jobs):
                    serial += 1
                    invoice_id = f"BENCH-{serial}"
                    ids.append(invoice_id)
                    dynamodb.put_item(
                        TableName=deployment.resources["invoices_table"],
                        Item={
                            "invoice_id": {"S": invoice_id},
                            "customer": {"S": "Bench"},
                            "amount": {"N": "1.00"},
                            "currency": {"S": "EUR"},
                        },
                    )
                    sqs.send_message(
                        QueueUrl=local.url, MessageBody=json.dumps({"job": "generate_invoice", "id": invoice_id})
                    )
                started = time.perf_counter()
                invocation = mapping.poll_once(worker.handle)
                elapsed = time.perf_counter() - started
                _check(case, invocation, api, ids)
                timings[case.label].append(elapsed)
    return timings


def _check(case: Case, invocation: Any, api: Any, ids: Sequence[str]) -> None:
    if invocation is None or len(invocation.event["Records"]) != case.jobs:
        raise SystemExit(f"bench.parallel: {case.label}: the batch did not hold all {case.jobs} jobs")
    if invocation.failed_ids:
        raise SystemExit(f"bench.parallel: {case.label}: {len(invocation.failed_ids)} job(s) failed")
    doubled = [invoice_id for invoice_id in ids if api.created_count(invoice_id) != 1]
    if doubled:
        raise SystemExit(f"bench.parallel: {case.label}: not exactly one invoice for {doubled}")


def summarize(timings: dict[str, list[float]], batch: int, delay_s: float) -> dict[str, Any]:
    medians = {label: statistics.median(values) for label, values in timings.items()}
    one, serial, side_by_side = (medians[case.label] for case in cases(batch))
    return {
        "delay_s": delay_s,
        "batch": batch,
        "rounds": len(next(iter(timings.values()))),
        "median_s": medians,
        "min_s": {label: min(values) for label, values in timings.items()},
        "max_s": {label: max(values) for label, values in timings.items()},
        "ratio_serial": serial / one,
        "ratio_side_by_side": side_by_side / one,
        "goal_ratio": GOAL_RATIO,
        "met": side_by_side / one <= GOAL_RATIO,
    }


def render(summary: dict[str, Any]) -> str:
    lines = [
        f"A batch of {summary['batch']} generate_invoice jobs, each waiting {summary['delay_s']:g} s on the invoicing "
        f"API, against one such job (median of {summary['rounds']} rounds, wall seconds of one invocation):"
    ]
    one = None
    for label, median in summary["median_s"].items():
        one = one or median
        lines.append(
            f"  {label:52} {median:7.2f} s  ({median / one:.2f}x one job; "
            f"min {summary['min_s'][label]:.2f}, max {summary['max_s'][label]:.2f})"
        )
    verdict = "met" if summary["met"] else "NOT met"
    lines.append(
        f"  goal: the batch side by side in at most {summary['goal_ratio']:g}x one job: "
        f"{summary['ratio_side_by_side']:.2f}x, {verdict} (one at a time: {summary['ratio_serial']:.2f}x)"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.parallel", description=__doc__.splitlines()[0])
    parser.add_argument("--delay-s", type=float, default=1.0, help="how long the API takes per call (1.0)")
    parser.add_argument("--batch", type=int, default=10, help="jobs in the batch (10)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, median reported (3)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    problems = check_arguments(args.delay_s, args.batch, args.rounds)
    if problems:
        parser.error("; ".join(problems))
    summary = summarize(run_cases(args.delay_s, args.batch, args.rounds), args.batch, args.delay_s)
    print(json.dumps(summary, indent=2) if args.json else render(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
