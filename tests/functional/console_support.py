"""What a test of the console's job page gives `create_app` for a backend: its catalog and its lookups, as far as
that page reads them (the real ConsoleBackend finds the stack's queues and table on AWS)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqs_jobs.cli.job_lookup import JobLookup
from sqs_jobs.specs import Catalog

# A test's own lookup: (job, ID, the publisher's key) -> what `jobctl job show` finds.
Lookup = Callable[[str, str, "str | None"], JobLookup]


@dataclass
class JobPageBackend:
    catalog: Catalog
    lookup: Lookup
    stack: str = "SqsJobs"

    def find_job(self, queue: str, job: str, entity_id: str, key: str | None, tenant: str | None = None) -> JobLookup:
        return self.lookup(job, entity_id, key)
