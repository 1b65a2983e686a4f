"""What a job returns, as its idempotency record keeps it: one rule, applied after the run and before the record
is written, so that nothing a job returns can fail the write that marks its side effect done.

- `None`: nothing is kept.
- Any other value is kept if it converts to JSON: mappings (keys as text), lists, tuples, sets (as lists), text,
  whole numbers, booleans, finite floats; `Decimal` (a whole one as a number, else as text, so nothing is
  rounded), `datetime`/`date`/`time` (ISO 8601), `UUID`, `Path` and `bytes` (base64) as text, `Enum` as its value,
  dataclasses and pydantic models as their fields. A job may return a plain string, such as a message ID.
- A result that doesn't convert (an object of another type, a float that is NaN or infinite, nesting deeper than
  MAX_DEPTH, a cycle) or whose JSON is over MAX_RESULT_BYTES is dropped: the run still counts as completed,
  nothing is kept, and the worker logs a warning and counts `ResultDropped` (reason `not_json` or `too_large`).
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import json
import math
import uuid
from collections.abc import Mapping
from decimal import Decimal
from enum import Enum
from pathlib import PurePath
from typing import Any

# Far below DynamoDB's 400 KB per item: the record also holds the key, status and the run's bookkeeping.
MAX_RESULT_BYTES = 64 * 1024
MAX_DEPTH = 32

NOT_JSON = "not_json"
TOO_LARGE = "too_large"


class ResultNotStorableError(ValueError):
    """A job's result that the rule above can't keep; `reason` is NOT_JSON or TOO_LARGE."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def storable(result: Any) -> Any:
    """`result` converted to JSON-safe values, or ResultNotStorableError saying where and why not."""
    if result is None:
        return None
    converted = _convert(result, "result", 0, set())
    size = len(json.dumps(converted, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))
    if size > MAX_RESULT_BYTES:
        raise ResultNotStorableError(TOO_LARGE, f"result is {size} bytes as JSON; at most {MAX_RESULT_BYTES} are kept")
    return converted


def _convert(value: Any, path: str, depth: int, seen: set[int]) -> Any:
    if depth > MAX_DEPTH:
        raise ResultNotStorableError(NOT_JSON, f"{path}: nested deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return int(value)  # an IntEnum or an int subclass, as a plain number
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ResultNotStorableError(NOT_JSON, f"{path}: {value!r} has no JSON form")
        return value
    if isinstance(value, Enum):
        return _convert(value.value, path, depth + 1, seen)
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ResultNotStorableError(NOT_JSON, f"{path}: Decimal {value} has no JSON form")
        return int(value) if value == value.to_integral_value() else str(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID | PurePath):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if id(value) in seen:
        raise ResultNotStorableError(NOT_JSON, f"{path}: refers to itself")
    seen = seen | {id(value)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}
        return _convert(fields, path, depth + 1, seen)
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump) and not isinstance(value, type):
        return _convert(model_dump(mode="json"), path, depth + 1, seen)
    if isinstance(value, Mapping):
        return {str(key): _convert(item, f"{path}[{key!r}]", depth + 1, seen) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_convert(item, f"{path}[{index}]", depth + 1, seen) for index, item in enumerate(value)]
    if isinstance(value, set | frozenset):
        items = [_convert(item, f"{path}[...]", depth + 1, seen) for item in value]
        return sorted(items, key=lambda item: json.dumps(item, sort_keys=True, default=str))
    raise ResultNotStorableError(NOT_JSON, f"{path}: a {type(value).__name__} has no JSON form")
