"""What the stack provides for each resource a job may need (`sqs_jobs.catalog.RESOURCES`).

Each resource is created here once and handed to a worker as the value of its environment variable
(`resource_env_name(name)`) plus a grant of exactly what the job does with it. Adding a resource to the
catalog means adding one entry to `provided` below; synth fails with a clear message until then.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import jsii
from aws_cdk import ArnFormat, IStableStringProducer, Lazy, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_ses as ses
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct, IValidation

from functions.jobs.generate_invoice import KEY_PREFIX as INVOICE_KEY_PREFIX
from infra.naming import physical_queue_name
from infra.secure_table import SecureTable
from sqs_jobs.catalog import RESOURCES, Catalog

ORDERS_PARTITION_KEY = "order_id"
INVOICES_PARTITION_KEY = "invoice_id"


@dataclass(frozen=True)
class ProvidedResource:
    """How one resource reaches a worker: the environment variable's value and the grant."""

    value: str
    grant: Callable[[iam.IGrantable], object]


class MissingResourceError(LookupError):
    """The catalog names a resource that the stack does not provide."""


def _no_grant(_grantee: iam.IGrantable) -> None:
    """For a resource that is only a value (a URL): nothing in AWS to allow."""


class InvoicesBucket(Construct):
    """Where generate_invoice stores invoice PDFs: private, encrypted, TLS-only, versioned, never deleted by CDK.

    Always RETAIN, whatever `retain_data` says: invoices are accounting records that must outlive any stack.
    The alternatives are worse: DESTROY makes `cdk destroy` fail as soon as one PDF exists (CloudFormation
    deletes only empty buckets, and a versioned bucket is never empty once used), and `auto_delete_objects`
    adds a custom-resource Lambda whose bucket policy lets it delete every object, which it does on a destroy
    or a replacement. `cdk destroy` leaves the bucket; empty and delete it by hand when it's really not needed.
    """

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            # SSE-S3: encrypted at rest with no key policy to maintain and no KMS grant for the worker.
            encryption=s3.BucketEncryption.S3_MANAGED,
            # A bucket policy denying any request not over TLS 1.2 or later.
            enforce_ssl=True,
            minimum_tls_version=1.2,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            # ACLs off: the bucket's policy and IAM decide everything.
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            # An overwritten or deleted PDF stays recoverable.
            versioned=True,
            removal_policy=RemovalPolicy.RETAIN,
        )

    def grant_put_pdfs(self, grantee: iam.IGrantable) -> iam.Grant:
        # PutObject under the job's prefix only: no reads, no deletes, no other prefix. (Bucket.grant_put would
        # add the legal-hold, retention and tagging Put* actions and s3:Abort*, none of which the job uses.)
        return iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["s3:PutObject"],
            resource_arns=[self.bucket.arn_for_objects(f"{INVOICE_KEY_PREFIX}*")],
        )


# Reading a DLQ without consuming it: receive (and count), hand the message straight back, read the queue's counts.
DLQ_REVIEW_ACTIONS = ("sqs:ReceiveMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes")
# What a publisher to an SNS topic encrypted with a customer-managed key calls KMS for (SNS does, on its behalf).
TOPIC_KEY_ACTIONS = ("kms:GenerateDataKey", "kms:Decrypt")


@jsii.implements(IStableStringProducer)
class _Render:
    def __init__(self, render: Callable[[], str]) -> None:
        self._render = render

    def produce(self) -> str:
        return self._render()


@jsii.implements(IValidation)
class _Problems:
    def __init__(self, problems: Callable[[], list[str]]) -> None:
        self._problems = problems

    def validate(self) -> list[str]:
        return self._problems()


class DeadLetterQueueIndex:
    """The `dead_letter_queues` resource: every catalog queue's DLQ URL and worker role ID, as one JSON object.

    A worker's resources exist before its queue (and the queues of the catalog after it), so `value` is rendered
    at synth, from the queues the stack `add`s as it builds them, in catalog order; once a worker is granted the
    resource, synth fails if a queue is missing. `grant` names each DLQ's ARN from its physical name (as the
    redrive-allow policy does): it needs no queue yet.
    """

    def __init__(self, scope: Construct, *, stack_name: str, catalog: Catalog) -> None:
        self._scope = scope
        self._stack_name = stack_name
        self._catalog = catalog
        self._queues: dict[str, tuple[sqs.IQueue, iam.Role]] = {}
        self._granted = False
        self.value = Lazy.string(_Render(self._render))
        scope.node.add_validation(_Problems(self._missing))

    def add(self, queue_name: str, dead_letter_queue: sqs.IQueue, worker_role: iam.Role) -> None:
        self._queues[queue_name] = (dead_letter_queue, worker_role)

    def grant(self, grantee: iam.IGrantable) -> iam.Grant:
        self._granted = True
        stack = Stack.of(self._scope)
        arns = [
            stack.format_arn(
                service="sqs",
                resource=physical_queue_name(self._stack_name, spec.name, dlq=True, fifo=spec.fifo),
                arn_format=ArnFormat.NO_RESOURCE_NAME,
            )
            for spec in self._catalog
        ]
        return iam.Grant.add_to_principal(grantee=grantee, actions=list(DLQ_REVIEW_ACTIONS), resource_arns=arns)

    def _render(self) -> str:
        index: dict[str, dict[str, str]] = {}
        for spec in self._catalog:
            if spec.name in self._queues:  # a missing one has failed validation already
                dead_letter_queue, worker_role = self._queues[spec.name]
                index[spec.name] = {"dlq_url": dead_letter_queue.queue_url, "worker_role_id": worker_role.role_id}
        return Stack.of(self._scope).to_json_string(index)

    def _missing(self) -> list[str]:
        return [
            f"dead_letter_queues has no DLQ of queue {spec.name!r}: the stack must add every queue "
            "(JobResources.dead_letter_queues.add)"
            for spec in self._catalog
            if self._granted and spec.name not in self._queues
        ]


class JobResources(Construct):
    """The example jobs' resources: the orders table and the SES identity mail is sent from (order_confirmation);
    the invoices table, the invoices bucket and the invoicing API's URL (generate_invoice).

    The SES identity is created only with `create_mail_identity`: CloudFormation can't adopt one that already
    exists, and the deploy would fail. `mail_sandbox_recipients` are the verified recipients the worker may send
    to while the account is in the SES sandbox, where SES authorizes against each recipient's identity too.

    For the runtime's own jobs: the alarm topic (`alarm_topic`, its key if the stack created it) and every
    queue's DLQ (`dead_letter_queues`: the stack adds each queue as it builds it)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        mail_sender: str,
        invoicing_api_url: str,
        retain: bool,
        stack_name: str,
        catalog: Catalog,
        alarm_topic: sns.ITopic,
        alarm_topic_key: kms.IKey | None,
        create_mail_identity: bool = False,
        mail_sandbox_recipients: Sequence[str] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        self._alarm_topic = alarm_topic
        self._alarm_topic_key = alarm_topic_key
        self.dead_letter_queues = DeadLetterQueueIndex(self, stack_name=stack_name, catalog=catalog)
        orders = SecureTable(self, "OrdersTable", partition_key=ORDERS_PARTITION_KEY, retain=retain)
        self.orders_table = orders.table
        self.mail_identity: ses.EmailIdentity | None = None
        if create_mail_identity:
            # Creating the identity sends AWS's verification mail to the address; SES refuses to send until
            # it is confirmed (and, in the SES sandbox, until each recipient is verified too).
            self.mail_identity = ses.EmailIdentity(self, "MailSender", identity=ses.Identity.email(mail_sender))
        self._mail_sender = mail_sender
        self._sandbox_recipients = tuple(mail_sandbox_recipients)
        invoices = SecureTable(self, "InvoicesTable", partition_key=INVOICES_PARTITION_KEY, retain=retain)
        self.invoices_table = invoices.table
        self.invoices_bucket = InvoicesBucket(self, "InvoicesBucket")
        self.provided: Mapping[str, ProvidedResource] = {
            "orders_table": ProvidedResource(
                value=self.orders_table.table_name,
                # The job re-reads the order by its ID (the article's rule 2) and never writes it.
                grant=lambda grantee: self.orders_table.grant(grantee, "dynamodb:GetItem"),
            ),
            "mail_sender": ProvidedResource(value=mail_sender, grant=self._grant_send_mail),
            "invoices_table": ProvidedResource(
                value=self.invoices_table.table_name,
                # The job re-reads the invoice by its ID and never writes it.
                grant=lambda grantee: self.invoices_table.grant(grantee, "dynamodb:GetItem"),
            ),
            "invoices_bucket": ProvidedResource(
                value=self.invoices_bucket.bucket.bucket_name, grant=self.invoices_bucket.grant_put_pdfs
            ),
            # Outside AWS: the worker only needs the address (and outbound HTTPS, which Lambda has).
            "invoicing_api_url": ProvidedResource(value=invoicing_api_url, grant=_no_grant),
            "alarm_topic": ProvidedResource(value=alarm_topic.topic_arn, grant=self._grant_publish_alarm),
            "dead_letter_queues": ProvidedResource(
                value=self.dead_letter_queues.value, grant=self.dead_letter_queues.grant
            ),
        }
        missing = sorted(set(RESOURCES) - set(self.provided))
        if missing:
            where = "JobResources.provided in infra/job_resources.py"
            raise MissingResourceError(f"the stack provides no {', '.join(missing)}: add it to {where}")

    def _grant_publish_alarm(self, grantee: iam.IGrantable) -> iam.Grant:
        # Publish to this one topic. The stack's own topic is encrypted with its customer-managed key, which SNS
        # uses on the publisher's behalf: that key too, by ARN (its policy delegates to IAM). An existing topic's
        # key is unknown at synth (no lookups): if it has one, its key policy must allow the worker's role
        # (docs/infrastructure.md).
        grant = iam.Grant.add_to_principal(
            grantee=grantee, actions=["sns:Publish"], resource_arns=[self._alarm_topic.topic_arn]
        )
        if self._alarm_topic_key is not None:
            grant = grant.combine(
                iam.Grant.add_to_principal(
                    grantee=grantee, actions=list(TOPIC_KEY_ACTIONS), resource_arns=[self._alarm_topic_key.key_arn]
                )
            )
        return grant

    def _grant_send_mail(self, grantee: iam.IGrantable) -> iam.Grant:
        # SES authorizes SendEmail against the identity that verified the sender: the address itself, or
        # its domain when the domain is the verified identity. Both are named, and in the sandbox the verified
        # recipients; nothing else is.
        stack = Stack.of(self)
        identities = [
            stack.format_arn(
                service="ses",
                resource="identity",
                resource_name=name,
                arn_format=ArnFormat.SLASH_RESOURCE_NAME,
            )
            for name in (self._mail_sender, self._mail_sender.rpartition("@")[2], *self._sandbox_recipients)
        ]
        return iam.Grant.add_to_principal(
            grantee=grantee, actions=["ses:SendEmail", "ses:SendRawEmail"], resource_arns=identities
        )
