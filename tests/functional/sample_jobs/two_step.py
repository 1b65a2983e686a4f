"""A call that may hang (S3 ListBuckets, held by a test's hook), then a side effect (an S3 object): what a run
cut at its limit must never complete after the cut."""

from __future__ import annotations

from sqs_jobs.envelope import Envelope
from sqs_jobs.worker.jobs import JobContext


def run(envelope: Envelope, context: JobContext) -> None:
    s3 = context.client("s3")
    s3.list_buckets()
    s3.put_object(Bucket=context.resource("invoices_bucket"), Key=f"two_step/{envelope.id}", Body=b"done")
