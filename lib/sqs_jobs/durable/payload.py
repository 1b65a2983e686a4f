"""What the dispatcher hands a durable execution: the record's body and what its dead letter needs.

The same record always gives the same payload (nothing of one delivery: no receipt, no receive count), so a second
start under the execution's name is Lambda's no-op: "If you invoke a durable function using a name that already
exists with the same payload, Lambda returns the existing execution instead of creating a duplicate. If the payload
differs, Lambda returns a DurableExecutionAlreadyStartedException error." (the Invoke API's DurableExecutionName,
https://docs.aws.amazon.com/lambda/latest/dg/durable-execution-idempotency.html#durable-idempotency-execution-names).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqs_jobs.worker.provenance import Attributes


@dataclass(frozen=True)
class DurableStart:
    body: str
    # The job key, `<job>:<key>`, and which of its executions this is (sqs_jobs.durable.record).
    key: str
    generation: int
    # The source queue's ARN and the record's message group (a tenant's, or a FIFO group): the dead letter's.
    source_queue: str
    message_group: str | None = None
    # The producer's message attributes, in SendMessage's shape: a dead letter carries them back for a redrive.
    attributes: Attributes = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(
            {
                "body": self.body,
                "key": self.key,
                "generation": self.generation,
                "source_queue": self.source_queue,
                "message_group": self.message_group,
                "attributes": {name: _jsonable(value) for name, value in sorted(self.attributes.items())},
            },
            sort_keys=True,
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, document: str | Mapping[str, Any]) -> DurableStart:
        data = json.loads(document) if isinstance(document, str) else dict(document)
        return cls(
            body=str(data["body"]),
            key=str(data["key"]),
            generation=int(data["generation"]),
            source_queue=str(data.get("source_queue") or ""),
            message_group=data.get("message_group"),
            attributes={name: _attribute(value) for name, value in (data.get("attributes") or {}).items()},
        )


def _jsonable(attribute: Mapping[str, Any]) -> dict[str, str]:
    if "BinaryValue" in attribute:
        return {"DataType": str(attribute["DataType"]), "Base64": base64.b64encode(attribute["BinaryValue"]).decode()}
    return {"DataType": str(attribute["DataType"]), "StringValue": str(attribute.get("StringValue", ""))}


def _attribute(value: Mapping[str, Any]) -> dict[str, Any]:
    if "Base64" in value:
        return {"DataType": value["DataType"], "BinaryValue": base64.b64decode(value["Base64"])}
    return {"DataType": value["DataType"], "StringValue": value.get("StringValue", "")}
