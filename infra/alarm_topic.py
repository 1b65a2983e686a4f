"""The SNS topic every alarm notifies, encrypted with a key CloudWatch is allowed to use."""

from __future__ import annotations

from aws_cdk import ArnFormat, Aws, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

CLOUDWATCH = "cloudwatch.amazonaws.com"


class AlarmTopic(Construct):
    """`topic` (TLS only, KMS-encrypted) and its customer-managed `key` (rotated yearly).

    Only alarms whose names start with `alarm_name_prefix`, in this account, may publish. An `email`
    gets a subscription (confirm it from the mail SNS sends).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        alarm_name_prefix: str,
        email: str | None,
        retain: bool,
    ) -> None:
        super().__init__(scope, construct_id)
        self.key = kms.Key(
            self,
            "Key",
            description="Encrypts the job alarms' SNS topic",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY,
        )
        # CloudWatch can't publish to a topic encrypted with the AWS-managed SNS key (its policy can't be
        # changed), hence this customer-managed key. In a key policy the resource "*" means this key. No
        # aws:SourceArn condition here: a condition the KMS request doesn't carry would drop every alarm
        # silently; the topic policy below is what limits who may publish, and this key encrypts nothing else.
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowCloudWatchAlarmsToUseTheKey",
                principals=[iam.ServicePrincipal(CLOUDWATCH)],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],
            )
        )
        self.topic = sns.Topic(
            self,
            "Topic",
            display_name="Job alarms",
            master_key=self.key,
            enforce_ssl=True,
        )
        alarm_arns = Stack.of(self).format_arn(
            service="cloudwatch",
            resource="alarm",
            resource_name=f"{alarm_name_prefix}*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowThisStacksAlarmsToPublish",
                principals=[iam.ServicePrincipal(CLOUDWATCH)],
                actions=["sns:Publish"],
                resources=[self.topic.topic_arn],
                conditions={
                    "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
                    "ArnLike": {"aws:SourceArn": alarm_arns},
                },
            )
        )
        if email:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))
