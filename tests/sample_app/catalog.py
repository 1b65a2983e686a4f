"""The images team's catalog: what a team writes, and nothing else."""

from __future__ import annotations

from sqs_jobs.flow_control import KeyConcurrency
from sqs_jobs.resources import Access, Bucket, Endpoint, KeyType, MailSender, Network, Secret, Table
from sqs_jobs.specs import Catalog, JobSpec, QueueSpec

THUMBNAILS_PREFIX = "thumbnails/"
# What the local engine stores as the API key, and what the stand-in accepts.
LOCAL_API_KEY = "local-thumbnail-key"

RESOURCES = (
    Table(
        name="images_table",
        description="image records (partition key image_id), read and marked done by make_thumbnail",
        partition_key="image_id",
        access=Access.READ_WRITE,
    ),
    # Belongs to the accounts service: deployed with `-c users_table=<its name>`, never created here.
    Table(
        name="users_table",
        description="the accounts service's users (partition key tenant, sort key user_no), read only",
        partition_key="tenant",
        sort_key="user_no",
        sort_key_type=KeyType.NUMBER,
    ),
    Bucket(
        name="media_bucket",
        description="uploaded media; make_thumbnail writes under thumbnails/",
        prefix=THUMBNAILS_PREFIX,
        access=Access.READ_WRITE,
    ),
    Endpoint(
        name="thumbnail_api",
        description="the thumbnail rendering API (POST <url>/render)",
        default_url="https://thumbnails.example.com",
        standin="tests.sample_app.thumbnail_standin:standin",
    ),
    Secret(name="thumbnail_api_key", description="the thumbnail API's key", local_value=LOCAL_API_KEY),
    MailSender(name="images_sender", description="where image notices come from", default_address="img@example.org"),
    # The accounts database (PostgreSQL behind RDS Proxy) is in the account's VPC: its subnets and security groups
    # come from context (`-c accounts_network=subnet-...,subnet-...,sg-...`); its credentials are a secret, JSON
    # in the shape RDS keeps them (username, password, host, port, dbname).
    Network(name="accounts_network", description="the VPC subnets and security group that reach the accounts database"),
    Secret(name="accounts_db", description="the accounts database's credentials (RDS's JSON secret shape)"),
)

CATALOG = Catalog(
    resources=RESOURCES,
    queues=(
        QueueSpec(
            name="images",
            description="Thumbnails of uploaded images.",
            jobs=(
                JobSpec(
                    name="make_thumbnail",
                    handler="tests.sample_app.make_thumbnail",
                    description="Render an image's thumbnail through the API and store it.",
                    resources=("images_table", "users_table", "media_bucket", "thumbnail_api", "thumbnail_api_key"),
                    # At most two of a user's images at once, however many they upload.
                    concurrency=KeyConcurrency(limit=2, per="user"),
                ),
            ),
        ),
        # Its own queue: the worker runs in the VPC, which the thumbnail job (an API on the internet) doesn't need.
        QueueSpec(
            name="accounts",
            description="Changes to accounts in the accounts database.",
            jobs=(
                JobSpec(
                    name="close_account",
                    handler="tests.sample_app.close_account",
                    description="Re-read an account's row and close it, once.",
                    resources=("accounts_network", "accounts_db"),
                ),
            ),
        ),
    ),
)
