"""What the stack provides for each resource a job may need (`functions.catalog.RESOURCES`).

Each resource is created here once and handed to a worker as the value of its environment variable
(`resource_env_name(name)`) plus a grant of exactly what the job does with it. Adding a resource to the
catalog means adding one entry to `provided` below; synth fails with a clear message until then.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_ses as ses
from constructs import Construct

from functions.catalog import RESOURCES
from infra.secure_table import SecureTable

ORDERS_PARTITION_KEY = "order_id"


@dataclass(frozen=True)
class ProvidedResource:
    """How one resource reaches a worker: the environment variable's value and the grant."""

    value: str
    grant: Callable[[iam.IGrantable], object]


class MissingResourceError(LookupError):
    """The catalog names a resource that the stack does not provide."""


class JobResources(Construct):
    """The example job's resources: the orders table and the SES identity mail is sent from."""

    def __init__(self, scope: Construct, construct_id: str, *, mail_sender: str, retain: bool) -> None:
        super().__init__(scope, construct_id)
        orders = SecureTable(self, "OrdersTable", partition_key=ORDERS_PARTITION_KEY, retain=retain)
        self.orders_table = orders.table
        # Creating the identity sends AWS's verification mail to the address; SES refuses to send until
        # it is confirmed (and, in the SES sandbox, until each recipient is verified too).
        self.mail_identity = ses.EmailIdentity(self, "MailSender", identity=ses.Identity.email(mail_sender))
        self._mail_sender = mail_sender
        self.provided: Mapping[str, ProvidedResource] = {
            "orders_table": ProvidedResource(
                value=self.orders_table.table_name,
                # The job re-reads the order by its ID (the article's rule 2) and never writes it.
                grant=lambda grantee: self.orders_table.grant(grantee, "dynamodb:GetItem"),
            ),
            "mail_sender": ProvidedResource(value=mail_sender, grant=self._grant_send_mail),
        }
        missing = sorted(set(RESOURCES) - set(self.provided))
        if missing:
            where = "JobResources.provided in infra/job_resources.py"
            raise MissingResourceError(f"the stack provides no {', '.join(missing)}: add it to {where}")

    def _grant_send_mail(self, grantee: iam.IGrantable) -> iam.Grant:
        # SES authorizes SendEmail against the identity that verified the sender: the address itself, or
        # its domain when the domain is the verified identity. Both are named; nothing else is.
        stack = Stack.of(self)
        identities = [
            stack.format_arn(
                service="ses",
                resource="identity",
                resource_name=name,
                arn_format=ArnFormat.SLASH_RESOURCE_NAME,
            )
            for name in (self._mail_sender, self._mail_sender.rpartition("@")[2])
        ]
        return iam.Grant.add_to_principal(
            grantee=grantee, actions=["ses:SendEmail", "ses:SendRawEmail"], resource_arns=identities
        )
