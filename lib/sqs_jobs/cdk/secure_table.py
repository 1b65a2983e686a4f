"""A DynamoDB table with the project's data-safety settings, in one place for every table."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct


class SecureTable(Construct):
    """On-demand, point-in-time recovery, encrypted with the AWS-managed key.

    `retain` keeps the table (and its data) when the stack is deleted.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        partition_key: str,
        retain: bool,
        partition_key_type: dynamodb.AttributeType = dynamodb.AttributeType.STRING,
        sort_key: str | None = None,
        sort_key_type: dynamodb.AttributeType = dynamodb.AttributeType.STRING,
        time_to_live_attribute: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.table = dynamodb.Table(
            self,
            "Table",
            partition_key=dynamodb.Attribute(name=partition_key, type=partition_key_type),
            sort_key=dynamodb.Attribute(name=sort_key, type=sort_key_type) if sort_key else None,
            # Job traffic is bursty and mostly idle: no capacity to plan or pay for when idle.
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            # Encrypted with a KMS key (visible in CloudTrail) at no key cost or key policy to maintain.
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            time_to_live_attribute=time_to_live_attribute,
            removal_policy=RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY,
        )
