"""A batch of 1,000 members under chaos: each callback exactly once (issue 23's benchmark).

`python -m bench.batch --help`. Under moto's `mock_aws` (no AWS), the local engine's parts run the real workers:
`provision()` makes the two queues and the idempotency table, its event source emulator delivers real SQS event
JSON to the real `Worker`, and its chaos (`sqs_jobs.local.chaos`) fails 10 % of the jobs' AWS calls with their
service's throttling error (transient: retried after a backoff) and, with `--duplicate`, delivers messages twice.
2 % of the members fail permanently (their entity "can't be processed"): dead-lettered at their first run.

The goals: the complete callback runs exactly once, after the last member ended; the success callback never
(some members are dead-lettered); then, the permanent failures fixed and their dead letters redriven, the success
callback runs exactly once, and the complete callback not again.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bench import batch_member
from bench.writes import REGION, _fake_credentials
from sqs_jobs.specs import Catalog, CircuitBreakerSpec, JobSpec, QueueSpec

MEMBERS = 1000
PERMANENT_SHARE = 0.02
TRANSIENT_RATE = 0.10
SEED = 20261203
HANDLER = "bench.batch_member"
SUCCEEDED_JOB, COMPLETED_JOB = batch_member.CALLBACK_JOBS
CATALOG = Catalog(
    queues=(
        QueueSpec(
            name="bench_members",
            # Short backoffs and no breakers: the chaos's throttling would open the SQS breaker and hold everything.
            max_attempts=10,
            backoff_base_s=1,
            backoff_cap_s=1,
            circuit_breaker=CircuitBreakerSpec(enabled=False),
            jobs=(JobSpec(name="bench_member", handler=HANDLER, publishes=batch_member.CALLBACK_JOBS),),
        ),
        QueueSpec(
            name="bench_callbacks",
            circuit_breaker=CircuitBreakerSpec(enabled=False),
            jobs=tuple(JobSpec(name=job, handler=HANDLER) for job in batch_member.CALLBACK_JOBS),
        ),
    )
)


@dataclass(frozen=True)
class Result:
    members: int
    permanent: int
    transient_injected: int
    duplicates_injected: int
    member_runs: int
    dead_lettered: int
    complete_runs_first: int
    success_runs_first: int
    complete_after_last_member: bool
    ended_when_completed: int
    redriven: int
    success_runs_after: int
    complete_runs_after: int
    seconds: float

    @property
    def met(self) -> bool:
        return (
            self.complete_runs_first == 1
            and self.complete_after_last_member
            and self.ended_when_completed == self.members
            and self.success_runs_first == 0
            and self.success_runs_after == 1
            and self.complete_runs_after == 1
        )


def run(members: int = MEMBERS, duplicate: float = 0.0) -> Result:
    from moto import mock_aws

    from sqs_jobs.cli.batch_lookup import look_up_batch
    from sqs_jobs.local.chaos import Chaos, ChaosSettings
    from sqs_jobs.local.moto_locks import serialize_moto
    from sqs_jobs.local.provision import provision
    from sqs_jobs.publisher import BatchTable, JobPublisher
    from sqs_jobs.worker.clients import ClientFactory, new_session

    for collected in (batch_member.RUNS, batch_member.CALLBACK_AT, batch_member.FIXED):
        collected.clear()
    batch_member.LAST_MEMBER_RUN_AT[0] = 0.0
    permanent = [f"perm-{n}" for n in range(round(members * PERMANENT_SHARE))]
    ids = permanent + [f"ok-{n}" for n in range(members - len(permanent))]
    started = time.monotonic()
    serialize_moto()  # conditional writes atomic, as on DynamoDB
    with _fake_credentials(), mock_aws():
        clients = ClientFactory(session=new_session(region_name=REGION))
        chaos = Chaos(ChaosSettings(transient=TRANSIENT_RATE, duplicate=duplicate, seed=SEED))
        engine = _Engine(clients, provision(clients, catalog=CATALOG), chaos)
        table = engine.deployment.idempotency_table
        publisher = JobPublisher(
            engine.sqs,
            {queue: local.url for queue, local in engine.deployment.queues.items()},
            catalog=CATALOG,
            batches=BatchTable(clients("dynamodb"), table),
        )
        batch_id = publisher.batch(
            [("bench_member", entity_id) for entity_id in ids],
            on_success=(SUCCEEDED_JOB, "bench"),
            on_complete=(COMPLETED_JOB, "bench"),
            description="bench.batch",
        )
        engine.drain()
        first = dict(batch_member.RUNS)
        completed_at = list(batch_member.CALLBACK_AT.get(COMPLETED_JOB, []))
        last_member_run = batch_member.LAST_MEMBER_RUN_AT[0]
        view = look_up_batch(clients("dynamodb"), table, batch_id)
        batch_member.FIXED.update(permanent)
        redriven = engine.redrive("bench_members")
        engine.drain()
        injected = chaos.injected()
        return Result(
            members=members,
            permanent=len(permanent),
            transient_injected=sum(n for fault, n in injected.items() if fault.startswith("transient")),
            duplicates_injected=injected.get("duplicate", 0),
            member_runs=first.get("bench_member", 0),
            dead_lettered=view.count("dead"),
            complete_runs_first=first.get(COMPLETED_JOB, 0),
            success_runs_first=first.get(SUCCEEDED_JOB, 0),
            complete_after_last_member=bool(completed_at) and completed_at[0] > last_member_run,
            ended_when_completed=view.count("succeeded") + view.count("dead"),
            redriven=redriven,
            success_runs_after=batch_member.RUNS.get(SUCCEEDED_JOB, 0),
            complete_runs_after=batch_member.RUNS.get(COMPLETED_JOB, 0),
            seconds=time.monotonic() - started,
        )


def _returning(handle: Callable[..., Any]) -> Callable[[], Callable[..., Any]]:
    return lambda: handle


class _Engine:
    """The catalog's workers on their roles' credentials, each behind the local engine's event source emulator,
    the chaos hooked on their clients."""

    def __init__(self, clients: Any, deployment: Any, chaos: Any) -> None:
        from sqs_jobs.local.emulator import EventSourceMapping
        from sqs_jobs.worker.clients import ClientFactory
        from sqs_jobs.worker.observability import Observability
        from sqs_jobs.worker.runtime import Worker

        self.deployment = deployment
        self.sqs = clients("sqs")
        self.workers: dict[str, tuple[Any, Any]] = {}
        for queue in CATALOG.queue_names:
            session = deployment.worker_session(clients("sts"), queue, f"bench-{queue}-worker")
            worker_clients = ClientFactory(session=session)
            chaos.register_aws(worker_clients)
            worker = Worker(
                deployment.worker_settings(queue), worker_clients, Observability.create(output=io.StringIO())
            )
            mapping = EventSourceMapping(
                queue=deployment.queues[queue],
                sqs_client=self.sqs,
                handler_factory=_returning(worker.handle),
                function_name=f"bench-{queue}-worker",
                concurrency=1,
                wait_time_s=0,
                chaos=chaos,
            )
            self.workers[queue] = (worker, mapping)

    def drain(self) -> None:
        """Until every queue is empty, each record handed back visible again at once (its backoff waited out)."""
        busy = True
        while busy:
            busy = False
            for queue, (worker, mapping) in self.workers.items():
                invocation = mapping.poll_once(worker.handle)
                if invocation is None:
                    continue
                busy = True
                for record in invocation.event["Records"]:
                    if record["messageId"] not in invocation.deleted:
                        self.sqs.change_message_visibility(
                            QueueUrl=self.deployment.queues[queue].url,
                            ReceiptHandle=record["receiptHandle"],
                            VisibilityTimeout=0,
                        )

    def redrive(self, queue: str) -> int:
        from sqs_jobs.cli.dlq import DeadLetterQueue, Filter
        from sqs_jobs.worker.provenance import Provenance

        local = self.deployment.queues[queue]
        dead_letters = DeadLetterQueue(
            self.sqs, local.dlq_url, local.url, Provenance.of([local.worker_role_id]), receive_wait_s=0
        )
        return int(dead_letters.move(Filter()).moved)


def render(result: Result) -> str:
    rows: list[tuple[str, Any]] = [
        ("members", f"{result.members:,} ({result.permanent} failing permanently, 2 %)"),
        ("transient faults injected (10 % of the jobs' AWS calls)", f"{result.transient_injected:,}"),
        ("messages delivered twice (chaos)", f"{result.duplicates_injected:,}"),
        ("member runs that succeeded, first pass", f"{result.member_runs:,}"),
        ("members dead-lettered", f"{result.dead_lettered}"),
        ("members ended when on_complete ran", f"{result.ended_when_completed:,} of {result.members:,}"),
        ("on_complete runs (goal 1)", f"{result.complete_runs_first}"),
        ("on_complete ran after the last member's run", "yes" if result.complete_after_last_member else "NO"),
        ("on_success runs before the redrive (goal 0)", f"{result.success_runs_first}"),
        ("dead letters redriven, fixed", f"{result.redriven}"),
        ("on_success runs after (goal 1)", f"{result.success_runs_after}"),
        ("on_complete runs after (goal 1)", f"{result.complete_runs_after}"),
        ("wall time", f"{result.seconds:.1f} s"),
        ("goals", "met" if result.met else "NOT met"),
    ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name.ljust(width)}  {value}" for name, value in rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.batch",
        description="A batch of members under chaos on the real workers (moto, no AWS): each callback once.",
    )
    parser.add_argument("--members", type=int, default=MEMBERS, help=f"members (default {MEMBERS})")
    parser.add_argument("--duplicate", type=float, default=0.0, help="chaos: share of messages delivered twice")
    args = parser.parse_args(argv)
    if not 50 <= args.members <= 1000:
        parser.error("--members must be 50 to 1000 (2 % of them fail permanently)")
    result = run(args.members, args.duplicate)
    print("Batch of members under chaos: 2 % permanent failures, 10 % transient faults (bench.batch, moto)")
    print(render(result))
    return 0 if result.met else 1


if __name__ == "__main__":
    sys.exit(main())
