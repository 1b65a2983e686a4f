"""The app: its resources, queues and jobs, declared once. The file a team edits.

The worker Lambda, the CDK app (`sqs_jobs.cdk`), the local engine and `jobctl` all read this catalog; nothing else
lists queues, jobs or resources. Change a setting here and the stack, the local engine and the CLI follow. The
types and their rules are in sqs_jobs.specs and sqs_jobs.resources; docs/catalog.md explains each setting.
"""

from __future__ import annotations

from sqs_jobs.durable import Durable
from sqs_jobs.flow_control import RateLimit
from sqs_jobs.limits import HOUR, MINUTE
from sqs_jobs.maintenance import MAINTENANCE_RESOURCES, maintenance_queue
from sqs_jobs.resources import Access, Bucket, Endpoint, MailSender, Table
from sqs_jobs.specs import Catalog, JobSpec, QueueSpec

# Where generate_invoice stores its PDFs: its grant covers only this prefix.
INVOICES_PREFIX = "invoices/"
# Where import_orders reads its CSV files (imports/<id>.csv): its grant covers only this prefix.
IMPORTS_PREFIX = "imports/"

RESOURCES = (
    Table(
        name="orders_table",
        description="DynamoDB table of orders (partition key order_id), read by the order mails",
        partition_key="order_id",
    ),
    MailSender(
        name="mail_sender",
        description="verified SES identity (e-mail address) that order mails are sent from",
        default_address="jobs@example.com",
    ),
    Table(
        name="invoices_table",
        description="DynamoDB table of invoices (partition key invoice_id), read by generate_invoice",
        partition_key="invoice_id",
    ),
    Bucket(
        name="invoices_bucket",
        description="S3 bucket that generate_invoice stores invoice PDFs in, under invoices/",
        prefix=INVOICES_PREFIX,
        access=Access.WRITE,
    ),
    Endpoint(
        name="invoicing_api_url",
        description="base URL of the external invoicing HTTP API (POST <url>/invoices renders a PDF)",
        default_url="https://invoicing.example.com",
        standin="example.standins.invoicing:standin",
        # The API allows 10 requests a second (429 beyond): every call from every worker stays within it, a burst
        # of 20 leaving a margin below the API's own 25 (docs/flow-control.md).
        rate_limit=RateLimit(per_second=10, burst=20),
    ),
    # The framework's DLQ review reads these (sqs_jobs.maintenance).
    *MAINTENANCE_RESOURCES,
    Bucket(
        name="imports_bucket",
        description="S3 bucket that import_orders reads order CSV files from, under imports/",
        prefix=IMPORTS_PREFIX,
        access=Access.READ,
    ),
    Table(
        name="imported_orders_table",
        description="DynamoDB table of imported orders (partition key order_id), written by import_orders",
        partition_key="order_id",
        access=Access.WRITE,
    ),
)

CATALOG = Catalog(
    resources=RESOURCES,
    queues=(
        QueueSpec(
            name="orders",
            description="Order side effects: confirmation mail.",
            # Each job is a DynamoDB read and an SES send, mostly waiting: a whole batch at once. At most 5 x 10
            # sends in flight, well inside SES's sending rate.
            parallel_records=10,
            jobs=(
                JobSpec(
                    name="order_confirmation",
                    handler="functions.jobs.order_confirmation",
                    description="Send the order confirmation mail through SES (the article's first example).",
                    resources=("orders_table", "mail_sender"),
                ),
            ),
        ),
        # Order matters here: an order's updates are mailed in the order they happened. One message group per order
        # (JobPublisher's default group is the ID), the publisher's key naming the update, so each runs once.
        QueueSpec(
            name="order_updates",
            description="Order update mails, in order per order (FIFO: one message group per order).",
            fifo=True,
            # Up to 10 orders' updates at once; each order's one at a time, in order.
            parallel_records=10,
            jobs=(
                JobSpec(
                    name="order_update_mail",
                    handler="functions.jobs.order_update_mail",
                    description="Mail the customer one update of an order (the key names it: <order>-u<n>), in the "
                    "order the updates were published.",
                    resources=("orders_table", "mail_sender"),
                ),
            ),
        ),
        # The article's incident, replayed: a PDF from an external API that may hang. Each call is bounded by
        # the HTTP client (connect 10 s + read 30 s), each run by the time limit, and at most two workers call
        # the API at once, so one stuck invoice costs one attempt, never the whole queue.
        QueueSpec(
            name="invoices",
            description="Invoice PDFs from the external invoicing API (the article's incident).",
            function_timeout_s=2 * MINUTE,
            max_concurrency=2,
            # The external API is the one that hung: at most 2 x 5 = 10 of its calls in flight.
            parallel_records=5,
            jobs=(
                JobSpec(
                    name="generate_invoice",
                    handler="functions.jobs.generate_invoice",
                    description="Render the invoice PDF through the invoicing API and store it in S3.",
                    resources=("invoices_table", "invoices_bucket", "invoicing_api_url"),
                    # Above one whole HTTP call (10 s connect + 30 s read), well below the function timeout.
                    time_limit_s=MINUTE,
                ),
            ),
        ),
        # Imports run longer than one Lambda invocation: a durable execution each, in checkpointed steps.
        QueueSpec(
            name="imports",
            description="Order imports from CSV files in S3: durable executions of 1,000-row steps.",
            # The worker only starts each import's durable execution: one record at a time is plenty.
            max_concurrency=2,
            parallel_records=1,
            jobs=(
                JobSpec(
                    name="import_orders",
                    handler="functions.jobs.import_orders",
                    description="Import a CSV of orders (imports/<id>.csv) into the imported orders table, 1,000 "
                    "rows a checkpointed step, as a durable execution that may outlast Lambda's 15 minutes.",
                    resources=("imports_bucket", "imported_orders_table"),
                    durable=Durable(execution_timeout_s=6 * HOUR, retention_days=14, step_time_limit_s=5 * MINUTE),
                    # A batch of imports calls back with import_report: the import that ends last publishes it.
                    publishes=("import_report",),
                ),
                JobSpec(
                    name="import_report",
                    handler="functions.jobs.import_report",
                    description="A batch of imports' completion callback: mail the operators how many imports "
                    "succeeded and how many were dead-lettered.",
                    resources=("mail_sender",),
                ),
            ),
        ),
        # The framework's own recurring jobs: the weekly DLQ review.
        maintenance_queue(),
    ),
)
