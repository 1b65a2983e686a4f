"""Lambda's view of SQS: the event a worker receives for a batch, and the context it runs with.

The shape follows the event Lambda's SQS event source mapping sends (see tests/events/sqs_event.json, a real
one): camelCase record keys, string-valued system attributes, message attributes in camelCase.
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# System attributes Lambda passes on, in the order it lists them.
_SYSTEM_ATTRIBUTES = (
    "ApproximateReceiveCount",
    "SentTimestamp",
    "SenderId",
    "ApproximateFirstReceiveTimestamp",
    "SequenceNumber",
    "MessageGroupId",
    "MessageDeduplicationId",
    "AWSTraceHeader",
    "DeadLetterQueueSourceArn",
)


def _message_attribute(attribute: Mapping[str, Any]) -> dict[str, Any]:
    converted: dict[str, Any] = {
        "stringListValues": [],
        "binaryListValues": [],
        "dataType": attribute["DataType"],
    }
    if "StringValue" in attribute:
        converted["stringValue"] = attribute["StringValue"]
    if "BinaryValue" in attribute:
        raw = attribute["BinaryValue"]
        converted["binaryValue"] = base64.b64encode(raw).decode() if isinstance(raw, bytes) else raw
    return converted


def sqs_record(message: Mapping[str, Any], queue_arn: str) -> dict[str, Any]:
    """One ReceiveMessage message (requested with all attributes) as a Lambda SQS event record."""
    system = message.get("Attributes", {})
    record: dict[str, Any] = {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": {name: str(system[name]) for name in _SYSTEM_ATTRIBUTES if name in system},
        "messageAttributes": {
            name: _message_attribute(value) for name, value in (message.get("MessageAttributes") or {}).items()
        },
        "md5OfBody": message.get("MD5OfBody"),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": queue_arn.split(":")[3],
    }
    if message.get("MD5OfMessageAttributes"):
        record["md5OfMessageAttributes"] = message["MD5OfMessageAttributes"]
    return record


def sqs_event(messages: Iterable[Mapping[str, Any]], queue_arn: str) -> dict[str, Any]:
    return {"Records": [sqs_record(message, queue_arn) for message in messages]}


@dataclass
class LocalLambdaContext:
    """A Lambda context whose remaining time counts down from the function timeout, as in Lambda."""

    function_name: str
    timeout_s: float
    memory_limit_in_mb: int = 256
    region: str = "us-east-1"
    account_id: str = "123456789012"
    function_version: str = "$LATEST"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    _deadline: float = field(default=0.0, repr=False)

    def __post_init__(self) -> None:
        self._deadline = time.monotonic() + self.timeout_s

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:{self.region}:{self.account_id}:function:{self.function_name}"

    @property
    def log_group_name(self) -> str:
        return f"/aws/lambda/{self.function_name}"

    @property
    def log_stream_name(self) -> str:
        return f"local/{self.aws_request_id}"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))
