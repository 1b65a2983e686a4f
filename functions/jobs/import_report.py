"""The callback of a batch of imports: mail the operators how the imports ended.

`JobPublisher.batch([("import_orders", id), ...], on_complete=("import_report", <name>), description=...)` runs
it once every import of the batch has ended (succeeded or dead-lettered); it reads the batch's status
(`context.batch()`) and mails a summary from and to the mail sender's address (the operators' mailbox).
"""

from __future__ import annotations

from sqs_jobs.envelope import Envelope
from sqs_jobs.worker.errors import PermanentError
from sqs_jobs.worker.jobs import JobContext


class NotABatchCallbackError(PermanentError):
    """Published by hand, not as a batch's callback: there is no batch to report on."""


def run(envelope: Envelope, context: JobContext) -> dict[str, int]:
    status = context.batch()
    if status is None:
        raise NotABatchCallbackError(
            f"import_report {envelope.id!r} is not a batch's callback (or its batch has expired); publish it as "
            "on_complete of a JobPublisher.batch of import_orders"
        )
    address = context.resource("mail_sender")
    failed = len(status.dead)
    summary = f"{len(status.succeeded)} of {status.size} imports succeeded, {failed} dead-lettered"
    body = f"{status.description or envelope.id}: {summary}."
    if failed:
        body += f"\nSee them with: jobctl dlq list imports (batch {status.batch_id})."
    context.client("ses").send_email(
        Source=address,
        Destination={"ToAddresses": [address]},
        Message={
            "Subject": {"Data": f"Imports {envelope.id}: {summary}", "Charset": "UTF-8"},
            "Body": {"Text": {"Data": body + "\n", "Charset": "UTF-8"}},
        },
    )
    return {"size": status.size, "succeeded": len(status.succeeded), "dead": failed}
