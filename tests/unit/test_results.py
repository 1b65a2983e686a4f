"""The one rule for what a job's result keeps (lib/sqs_jobs/worker/results.py)."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import dataclass
from decimal import Decimal
from enum import Enum
from pathlib import PurePosixPath
from typing import Any

import pytest

from sqs_jobs.worker.results import (
    MAX_DEPTH,
    MAX_RESULT_BYTES,
    NOT_JSON,
    TOO_LARGE,
    ResultNotStorableError,
    storable,
)


class Colour(Enum):
    RED = "red"


@dataclass
class Receipt:
    message_id: str
    sent_at: dt.datetime


class Model:
    """Looks like a pydantic model to the rule: a model_dump(mode=...) method."""

    def model_dump(self, mode: str) -> dict[str, Any]:
        assert mode == "json"
        return {"total": "12.50"}


SENT_AT = dt.datetime(2026, 12, 2, 9, 30, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("result", "kept"),
    [
        (None, None),
        ("0100018c-ses-message-id", "0100018c-ses-message-id"),  # a plain string, e.g. SES's message ID
        (42, 42),
        (True, True),
        ([1, "a"], [1, "a"]),
        ((1, 2), [1, 2]),
        ({"sent_at": SENT_AT}, {"sent_at": "2026-12-02T09:30:00+00:00"}),
        ({"on": dt.date(2026, 12, 2), "at": dt.time(9, 30)}, {"on": "2026-12-02", "at": "09:30:00"}),
        ({"total": Decimal("12.50"), "count": Decimal("3")}, {"total": "12.50", "count": 3}),
        ({"id": uuid.UUID(int=1)}, {"id": "00000000-0000-0000-0000-000000000001"}),
        ({"path": PurePosixPath("invoices/1.pdf")}, {"path": "invoices/1.pdf"}),
        ({"pdf": b"%PDF"}, {"pdf": "JVBERg=="}),
        ({"colour": Colour.RED}, {"colour": "red"}),
        ({1: "one"}, {"1": "one"}),  # keys as text
        ({"tags": {"b", "a"}}, {"tags": ["a", "b"]}),  # a set, in a stable order
        (Receipt("m-1", SENT_AT), {"message_id": "m-1", "sent_at": "2026-12-02T09:30:00+00:00"}),
        (Model(), {"total": "12.50"}),
    ],
)
def test_json_safe_values_are_kept_as_json(result: Any, kept: Any) -> None:
    assert storable(result) == kept
    json.dumps(kept, allow_nan=False)  # plain JSON, whatever the job returned


@pytest.mark.parametrize(
    "result",
    [
        {"handle": object()},
        {"ratio": float("nan")},
        [float("inf")],
        {"amount": Decimal("NaN")},
        {"client": lambda: None},
    ],
)
def test_a_value_without_a_json_form_drops_the_result(result: Any) -> None:
    with pytest.raises(ResultNotStorableError) as raised:
        storable(result)
    assert raised.value.reason == NOT_JSON
    assert "result" in str(raised.value)  # names where in the result


def test_a_result_that_refers_to_itself_is_dropped_not_looped_on() -> None:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    with pytest.raises(ResultNotStorableError) as raised:
        storable(loop)
    assert raised.value.reason == NOT_JSON


def test_nesting_past_the_limit_is_dropped() -> None:
    deep: Any = "leaf"
    for _ in range(MAX_DEPTH + 2):
        deep = [deep]
    with pytest.raises(ResultNotStorableError) as raised:
        storable(deep)
    assert raised.value.reason == NOT_JSON


def test_a_result_over_the_size_limit_is_dropped_measured_in_utf8_bytes() -> None:
    # 3 bytes per character in UTF-8: under the limit in characters, over it in bytes.
    text = "\u3042" * (MAX_RESULT_BYTES // 3 + 10)
    assert len(text) < MAX_RESULT_BYTES
    with pytest.raises(ResultNotStorableError) as raised:
        storable({"text": text})
    assert raised.value.reason == TOO_LARGE
    assert storable({"text": "\u3042" * (MAX_RESULT_BYTES // 3 - 20)})
