"""What the runtime before the binary packing wrote, for tests that feed the new one messages written by it: such
messages are in queues and DLQs when the new runtime is deployed."""

from __future__ import annotations

import base64
import json

from sqs_jobs.worker.provenance import Attributes


def legacy_packing(attributes: Attributes) -> str:
    """`jobs.original_attributes` as that runtime wrote it: a String of JSON (ASCII-escaped), binary values as
    base64 text."""
    values = {}
    for name, attribute in attributes.items():
        value = dict(attribute)
        if isinstance(value.get("BinaryValue"), bytes):
            value["BinaryValue"] = base64.b64encode(value["BinaryValue"]).decode("ascii")
        values[name] = value
    return json.dumps(values, separators=(",", ":"), sort_keys=True)
