"""The SNS topic every alarm notifies: the stack's own (encrypted with a key CloudWatch may use), or yours."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import ArnFormat, Aws, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

CLOUDWATCH = "cloudwatch.amazonaws.com"


@dataclass(frozen=True)
class NewAlarmTopic:
    """The settings of a topic the stack creates."""

    # Only alarms whose names start with this, in this account, may publish.
    alarm_name_prefix: str
    # Subscribed by e-mail (confirm it from the mail SNS sends); None: no subscription.
    email: str | None
    # Keep the topic's KMS key when the stack is deleted.
    retain: bool


class AlarmTopic(Construct):
    """`topic`: either an existing topic (`existing_topic_arn`) or a new one (`new`), exactly one of them.

    A new topic is TLS only and encrypted with its customer-managed `key` (rotated yearly); an existing one is
    used as it is (`key` is None): its owner lets CloudWatch publish to it, and subscribes to it.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        existing_topic_arn: str | None = None,
        new: NewAlarmTopic | None = None,
    ) -> None:
        if (existing_topic_arn is None) == (new is None):
            raise ValueError(
                "AlarmTopic takes either existing_topic_arn (use that topic) or new (create one), exactly one"
            )
        super().__init__(scope, construct_id)
        self.key: kms.IKey | None = None
        self.topic: sns.ITopic
        if existing_topic_arn is not None:
            self.topic = sns.Topic.from_topic_arn(self, "Existing", existing_topic_arn)
        elif new is not None:
            self.topic = self._create(new)

    def _create(self, new: NewAlarmTopic) -> sns.Topic:
        self.key = key = kms.Key(
            self,
            "Key",
            description="Encrypts the job alarms' SNS topic",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.RETAIN if new.retain else RemovalPolicy.DESTROY,
        )
        # CloudWatch can't publish to a topic encrypted with the AWS-managed SNS key (its policy can't be
        # changed), hence this customer-managed key. In a key policy the resource "*" means this key. No
        # aws:SourceArn condition here: a condition the KMS request doesn't carry would drop every alarm
        # silently; the topic policy below is what limits who may publish, and this key encrypts nothing else.
        key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowCloudWatchAlarmsToUseTheKey",
                principals=[iam.ServicePrincipal(CLOUDWATCH)],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],
            )
        )
        topic = sns.Topic(
            self,
            "Topic",
            display_name="Job alarms",
            master_key=key,
            enforce_ssl=True,
        )
        alarm_arns = Stack.of(self).format_arn(
            service="cloudwatch",
            resource="alarm",
            resource_name=f"{new.alarm_name_prefix}*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowThisStacksAlarmsToPublish",
                principals=[iam.ServicePrincipal(CLOUDWATCH)],
                actions=["sns:Publish"],
                resources=[topic.topic_arn],
                conditions={
                    "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
                    "ArnLike": {"aws:SourceArn": alarm_arns},
                },
            )
        )
        if new.email:
            topic.add_subscription(subscriptions.EmailSubscription(new.email))
        return topic
