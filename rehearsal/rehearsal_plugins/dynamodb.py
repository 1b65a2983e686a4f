"""DynamoDB served entirely by LocalStack's bundled moto: no DynamoDB Local, no Java, no download."""

from localstack.aws.api.dynamodb import DynamodbApi
from localstack.services.plugins import Service, aws_provider


class MotoDynamoDB(DynamodbApi):
    """Implements nothing itself: every operation raises NotImplementedError and so falls through to moto."""


@aws_provider(api="dynamodb", name="rehearsal")
def dynamodb_on_moto() -> Service:
    from localstack.services.moto import MotoFallbackDispatcher

    return Service.for_provider(MotoDynamoDB(), dispatch_table_factory=MotoFallbackDispatcher)
