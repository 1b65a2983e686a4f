"""What the stack provides for each resource a job may need (`sqs_jobs.catalog.RESOURCES`).

Each resource is created here once and handed to a worker as the value of its environment variable
(`resource_env_name(name)`) plus a grant of exactly what the job does with it. Adding a resource to the
catalog means adding one entry to `provided` below; synth fails with a clear message until then.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from aws_cdk import ArnFormat, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_ses as ses
from constructs import Construct

from functions.jobs.generate_invoice import KEY_PREFIX as INVOICE_KEY_PREFIX
from infra.secure_table import SecureTable
from sqs_jobs.catalog import RESOURCES

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


class JobResources(Construct):
    """The example jobs' resources: the orders table and the SES identity mail is sent from (order_confirmation);
    the invoices table, the invoices bucket and the invoicing API's URL (generate_invoice).

    The SES identity is created only with `create_mail_identity`: CloudFormation can't adopt one that already
    exists, and the deploy would fail. `mail_sandbox_recipients` are the verified recipients the worker may send
    to while the account is in the SES sandbox, where SES authorizes against each recipient's identity too."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        mail_sender: str,
        invoicing_api_url: str,
        retain: bool,
        create_mail_identity: bool = False,
        mail_sandbox_recipients: Sequence[str] = (),
    ) -> None:
        super().__init__(scope, construct_id)
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
        }
        missing = sorted(set(RESOURCES) - set(self.provided))
        if missing:
            where = "JobResources.provided in infra/job_resources.py"
            raise MissingResourceError(f"the stack provides no {', '.join(missing)}: add it to {where}")

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
