"""LocalStack's SQS, with SenderId as AWS sets it.

AWS sets a message's SenderId to the sender's IAM identity: a user's ID, or `<role ID>:<session>` for an assumed
role. LocalStack 2026.3.0 puts the account ID on every message, so the worker role's messages would look like any
producer's, and the runtime's provenance check (lib/sqs_jobs/worker/provenance.py) could never be rehearsed. Here
SenderId is what STS GetCallerIdentity answers as UserId for the request's credentials; messages a move task or
the redrive policy carries over keep the SenderId they had.
"""

from localstack.aws.api import RequestContext
from localstack.aws.api.sqs import MessageBodySystemAttributeMap, MessageSystemAttributeName
from localstack.services.plugins import Service, aws_provider
from localstack.services.sqs.provider import SqsProvider
from localstack.services.sts.provider import StsProvider


class SqsWithSenderIds(SqsProvider):
    # StsProvider keeps its state in module-level stores: an instance of our own answers as the running one.
    _sts = StsProvider()

    def _create_message_attributes(
        self,
        context: RequestContext,
        message_system_attributes: MessageBodySystemAttributeMap | None = None,
    ) -> dict[MessageSystemAttributeName, str]:
        attributes = super()._create_message_attributes(context, message_system_attributes)
        attributes[MessageSystemAttributeName.SenderId] = self._sts.get_caller_identity(context)["UserId"]
        return attributes


@aws_provider(api="sqs", name="rehearsal")
def sqs_with_sender_ids() -> Service:
    return Service.for_provider(SqsWithSenderIds())
