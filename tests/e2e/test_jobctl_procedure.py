"""The operator's procedure through jobctl on the local engine, step by step on one DLQ: redrive what was fixed
(and verify it), discard the malformed with an archive, then redrive the rest. A module of its own: its engine
changes the DLQ, and moto's state is process-wide, so no other engine may be up beside it in the process (pytest
ends a module's engine before the next module's tests start)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from sqs_jobs.local.engine import LocalEngine
from tests.e2e.jobctl_runs import as_json, engine_with_dead_letters, run

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def procedure_engine() -> Iterator[LocalEngine]:
    with engine_with_dead_letters() as running:
        yield running


def test_the_procedure_redrives_the_fixed_discards_the_malformed_then_redrives_the_rest(
    procedure_engine: LocalEngine, tmp_path: Path
) -> None:
    _filtered_redrive_moves_only_the_matching_and_verifies_them(procedure_engine)
    _discard_with_archive_keeps_a_faithful_copy(procedure_engine, tmp_path)
    _redrive_all_falls_back_to_client_side_on_the_local_engine(procedure_engine)


def _filtered_redrive_moves_only_the_matching_and_verifies_them(engine: LocalEngine) -> None:
    assert engine.deployment is not None
    # The fix for one of the three: order 501 now exists.
    engine.clients()("dynamodb").put_item(
        TableName=engine.deployment.resources["orders_table"],
        Item={"order_id": {"S": "501"}, "email": {"S": "fixed@example.com"}},
    )
    result = run(
        engine,
        "--output",
        "json",
        "dlq",
        "redrive",
        "orders",
        "--error-type",
        "OrderNotFoundError",
        "--yes",
        "--verify-timeout",
        "60",
    )
    payload = as_json(result)
    assert payload["moved"] == 3 and payload["matched"] == 3 and payload["method"] == "client"
    assert payload["verified"] is True
    # No terminal, so no progress bar: stderr says what it waits for, and for how long at most.
    assert "verifying: waiting up to 60s for 3 job(s) to be processed" in result.stderr
    assert payload["returned_to_dlq"] == 2  # 502 and 503 still don't exist
    assert sorted(letter["id"] for letter in payload["returned"]) == ["502", "503"]
    assert result.exit_code == 1  # something came back: a problem to look at
    mails = [mail for mail in engine.sent_mail() if "fixed@example.com" in mail["destinations"]["ToAddresses"]]
    assert len(mails) == 1
    # The malformed message never matched the filter, so it never moved.
    left = as_json(run(engine, "--output", "json", "dlq", "list", "orders"))
    assert {g["error_type"]: g["count"] for g in left["groups"]} == {"OrderNotFoundError": 2, "EnvelopeNotJSONError": 1}


def _discard_with_archive_keeps_a_faithful_copy(engine: LocalEngine, tmp_path: Path) -> None:
    archive = tmp_path / "discarded.jsonl"
    result = run(
        engine,
        "--output",
        "json",
        "dlq",
        "discard",
        "orders",
        "--error-type",
        "EnvelopeNotJSONError",
        "--yes",
        "--archive",
        str(archive),
    )
    assert result.exit_code == 0, result.output
    payload = as_json(result)
    assert payload["discarded"] == 1
    [line] = archive.read_text(encoding="utf-8").splitlines()
    record = json.loads(line)
    assert record["body"] == "not json"
    assert record["error_type"] == "EnvelopeNotJSONError"
    assert record["message_id"] == payload["messages"][0]["message_id"]
    assert "EnvelopeNotJSONError" not in json.dumps(as_json(run(engine, "--output", "json", "dlq", "list", "orders")))


def _redrive_all_falls_back_to_client_side_on_the_local_engine(engine: LocalEngine) -> None:
    result = run(engine, "--output", "json", "dlq", "redrive", "orders", "--all", "--yes", "--no-verify")
    assert result.exit_code == 0, result.output
    assert "no StartMessageMoveTask: moving client side instead" in result.output
    payload = json.loads(result.output[result.output.index("{") :])
    assert payload["method"] == "client" and payload["moved"] == payload["matched"] == 2
