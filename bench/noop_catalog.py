"""The catalog of bench.overhead's "no feature on" figures: one queue, one job that does nothing, no resource, and
none of the features a queue may declare (rate limits, key concurrency, uniqueness, batches, durable jobs,
schedules). Its worker is what a team's plainest queue deploys."""

from __future__ import annotations

from sqs_jobs.specs import Catalog, JobSpec, QueueSpec

CATALOG = Catalog(queues=(QueueSpec(name="bench", jobs=(JobSpec(name="noop", handler="bench.noop_job"),)),))
