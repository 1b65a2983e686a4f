"""The catalog of bench.priorities (and of the end-to-end test of priority lanes): one queue with two lanes, "high"
and "normal" (the default), and one job that notes when each of its runs ended (bench.priority_job)."""

from __future__ import annotations

from sqs_jobs.specs import Catalog, JobSpec, QueueSpec

QUEUE = "lanes"
JOB = "timed"

CATALOG = Catalog(
    queues=(
        QueueSpec(
            name=QUEUE,
            description="A queue whose urgent jobs overtake a backlog of routine ones.",
            jobs=(JobSpec(name=JOB, handler="bench.priority_job"),),
            priorities=("high", "normal"),
            # The job waits on nothing, so it has nothing to overlap: one record at a time, as docs/catalog.md says
            # for CPU-bound jobs (bench.priorities --parallel-records 10 shows the engine's cost of more).
            parallel_records=1,
        ),
    )
)
