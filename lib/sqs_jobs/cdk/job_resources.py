"""Every resource the app's catalog declares, each made by the provider of its kind (sqs_jobs.cdk.resource_providers),
with its stack output and its SSM parameter. Nothing here names an app's resource."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sns as sns
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from sqs_jobs.cdk.naming import pascal_case
from sqs_jobs.cdk.resource_providers import (
    DeadLetterQueueIndex,
    MissingResourceError,
    ProvidedResource,
    provide_alarm_topic,
    provide_bucket,
    provide_endpoint,
    provide_mail_sender,
    provide_network,
    provide_secret,
    provide_table,
)
from sqs_jobs.resources import (
    AlarmTopic,
    Bucket,
    DeadLetterQueues,
    Endpoint,
    MailSender,
    Network,
    NetworkPlacement,
    Resource,
    Secret,
    Table,
)
from sqs_jobs.specs import Catalog
from sqs_jobs.stack_names import resource_parameter_name


class UnsupportedResourceError(TypeError):
    """A resource of a kind the stack has no provider for."""


class GivenResourceError(TypeError):
    """A host stack gave a construct for a resource the catalog doesn't declare, or of another kind."""


# A host stack's own construct for a catalog resource: a table (ITable), a bucket (IBucket) or a secret (ISecret).
GivenResource = dynamodb.ITable | s3.IBucket | secretsmanager.ISecret
# What each kind takes, recognized by the attribute the CDK interface defines.
_GIVEN_KINDS: dict[type[Resource], tuple[str, str]] = {
    Table: ("table_arn", "an ITable"),
    Bucket: ("bucket_arn", "an IBucket"),
    Secret: ("secret_arn", "an ISecret"),
}


class JobResources(Construct):
    """The catalog's resources. `settings` holds each resource's context value (an existing table, bucket or
    secret; an endpoint's URL; the mail sender's address), absent for the default (created, or the catalog's
    default). For the runtime's kinds: the alarm topic (its key if the stack created it) and every queue's DLQ
    (`dead_letter_queues`: the stack adds each queue as it builds it). `given`: a host stack's own table, bucket
    or secret for the resource of that name, used (and granted) instead of creating or importing one."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        catalog: Catalog,
        settings: Mapping[str, str],
        retain: bool,
        stack_name: str,
        alarm_topic: sns.ITopic,
        alarm_topic_key: kms.IKey | None,
        create_mail_identity: bool = False,
        mail_sandbox_recipients: Sequence[str] = (),
        given: Mapping[str, GivenResource] | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        given = dict(given or {})
        _check_given(catalog, given)
        self.dead_letter_queues = DeadLetterQueueIndex(self, stack_name=stack_name, catalog=catalog)
        self._alarm_topic = alarm_topic
        self._alarm_topic_key = alarm_topic_key
        self._create_mail_identity = create_mail_identity
        self._sandbox_recipients = tuple(mail_sandbox_recipients)
        self._retain = retain
        self.provided: dict[str, ProvidedResource] = {}
        for spec in catalog.resources:
            provided = self._provide(spec, given.get(spec.name) or settings.get(spec.name))
            self.provided[spec.name] = provided
            if spec.published:
                self._publish(spec, provided, stack_name)

    def _provide(self, spec: Resource, existing: GivenResource | str | None) -> ProvidedResource:
        if isinstance(spec, Table):
            return provide_table(self, spec, existing, retain=self._retain)
        if isinstance(spec, Bucket):
            return provide_bucket(self, spec, existing)
        if isinstance(spec, Secret):
            return provide_secret(self, spec, existing)
        setting = existing if isinstance(existing, str) else None
        if isinstance(spec, Endpoint):
            return provide_endpoint(setting or spec.default_url)
        if isinstance(spec, MailSender):
            return provide_mail_sender(
                self,
                spec,
                setting or spec.default_address,
                create_identity=self._create_mail_identity,
                sandbox_recipients=self._sandbox_recipients,
            )
        if isinstance(spec, Network):
            if setting is None:  # the context parser requires it; a direct caller must pass it too
                raise MissingResourceError(f"network {spec.name!r} needs its subnet and security group IDs in settings")
            return provide_network(self, NetworkPlacement.parse(setting))
        if isinstance(spec, AlarmTopic):
            return provide_alarm_topic(self._alarm_topic, self._alarm_topic_key)
        if isinstance(spec, DeadLetterQueues):
            return self.dead_letter_queues.provided()
        raise UnsupportedResourceError(f"resource {spec.name!r} is a {spec.kind}, which the stack has no provider for")

    def _publish(self, spec: Resource, provided: ProvidedResource, stack_name: str) -> None:
        """Where services that use the same resource find it: a stack output and an SSM parameter."""
        name = pascal_case(spec.name)
        # On the stack, not in this construct: the output keys stay `<Name><suffix>`, e.g. OrdersTableName.
        CfnOutput(Stack.of(self), f"{name}{provided.output_suffix}", value=provided.value, description=spec.description)
        ssm.StringParameter(
            self,
            f"{name}Parameter",
            parameter_name=resource_parameter_name(stack_name, spec.name),
            string_value=provided.value,
            description=f"{spec.kind} {spec.name}: {spec.description}"[:1024],
        )


def _check_given(catalog: Catalog, given: Mapping[str, object]) -> None:
    """Each given construct names a resource of the catalog, of a kind that takes one."""
    declared = {spec.name: spec for spec in catalog.resources}
    for name, construct in given.items():
        spec = declared.get(name)
        if spec is None:
            raise GivenResourceError(
                f"resources={{{name!r}: ...}}: the catalog declares no resource {name!r}; it has: "
                f"{', '.join(declared) or 'none'}"
            )
        kind = _GIVEN_KINDS.get(type(spec))
        if kind is None or not hasattr(construct, kind[0]):
            accepted = kind[1] if kind else "nothing (only tables, buckets and secrets are given as constructs)"
            raise GivenResourceError(
                f"resources={{{name!r}: ...}}: {name!r} is a {spec.kind}, which takes {accepted}; got a "
                f"{type(construct).__name__}"
            )
        if isinstance(spec, Table) and isinstance(construct, dynamodb.Table):
            # A table of the host's stack knows its keys: the job reads by the catalog's (an imported one can't say).
            partition_key = construct.schema().partition_key
            key = partition_key.name if partition_key is not None else None
            if key != spec.partition_key:
                raise GivenResourceError(
                    f"resources={{{name!r}: ...}}: the table's partition key is {key!r}; the catalog's {name!r} "
                    f"reads by {spec.partition_key!r}"
                )
