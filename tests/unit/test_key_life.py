"""The key's life: docs/key-life.md's table of transitions is key_life.TRANSITIONS, row for row, and the one codec
reads every state a record can be in."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from sqs_jobs.worker.key_life import FINAL_STATES, TRANSITIONS, KeyRecord, KeyState, Writer

DOC = Path(__file__).resolve().parents[2] / "docs" / "key-life.md"
NOW = 1_800_000_000.0


def _documented() -> list[tuple[str, str, str]]:
    text = DOC.read_text(encoding="utf-8")
    table = text.split("## The transitions", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in table.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[0] not in ("From", "") and not set(cells[0]) <= {"-"}:
            rows.append((cells[0], cells[1], cells[2]))
    return rows


def test_the_documented_transitions_are_the_codes_row_for_row() -> None:
    assert _documented() == [(source.value, target.value, writer.value) for source, target, writer in TRANSITIONS]


def test_no_writer_moves_a_key_out_of_a_final_state_but_its_expiry_and_the_operators_undo() -> None:
    leaving = {(source, writer) for source, _, writer in TRANSITIONS if source in FINAL_STATES}
    assert {writer for _, writer in leaving} <= {Writer.EXPIRY, Writer.UNDO}
    assert (KeyState.COMPLETED, Writer.UNDO) not in leaving


def test_every_state_is_documented_in_the_states_table() -> None:
    states = DOC.read_text(encoding="utf-8").split("## The states", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `([a-z ]+)` \|", states, flags=re.MULTILINE))
    assert listed == {state.value for state in KeyState}


def _item(**attributes: Any) -> dict[str, Any]:
    item: dict[str, Any] = {"id": {"S": "jobs#x"}, "expiration": {"N": str(int(NOW) + 3600)}}
    for name, value in attributes.items():
        item[name] = {"N": str(value)} if isinstance(value, int | float) else {"S": value}
    return item


@pytest.mark.parametrize(
    ("item", "state"),
    [
        (None, KeyState.NEW),
        ({**_item(status="COMPLETED"), "expiration": {"N": str(int(NOW) - 1)}}, KeyState.NEW),
        (_item(status="INPROGRESS", runs=1, in_progress_expiration=int(NOW * 1000) + 5000), KeyState.RUNNING),
        (
            _item(status="INPROGRESS", runs=1, in_progress_expiration=int(NOW * 1000) + 5000, cancel_requested_at=NOW),
            KeyState.CANCEL_REQUESTED,
        ),
        (_item(status="INPROGRESS", runs=2, in_progress_expiration=int(NOW * 1000) - 1), KeyState.STALLED),
        (
            _item(status="INPROGRESS", runs=2, in_progress_expiration=int(NOW * 1000) - 1, cancel_requested_at=NOW),
            KeyState.CANCELLED,
        ),
        (_item(status="FAILED", runs=1), KeyState.RETRYING),
        (_item(status="FAILED", runs=1, cancel_requested_at=NOW), KeyState.CANCELLED),
        (_item(status="FAILED", runs=3, pending_dead_letter="permanent"), KeyState.DEAD_LETTER_PENDING),
        (_item(status="FAILED", runs=3, dead_lettered_at=NOW, ending_message="m-1"), KeyState.ENDING),
        (_item(status="COMPLETED", runs=0, completed_run=1), KeyState.COMPLETED),
        (_item(status="COMPLETED", runs=1), KeyState.COMPLETED),
        (_item(status="CANCELLED", runs=2), KeyState.CANCELLED),
    ],
    ids=lambda value: value.value if isinstance(value, KeyState) else "",
)
def test_the_codec_reads_each_state(item: dict[str, Any] | None, state: KeyState) -> None:
    assert KeyRecord.from_item("jobs#x", item).state(NOW) is state


@pytest.mark.parametrize(
    "item",
    [_item(status="COMPLETED", runs=2), _item(status="COMPLETED", runs=0, completed_run=2)],
    ids=["as written since 0.3.0", "as written before"],
)
def test_a_completion_reads_as_its_runs_number_and_no_count_left(item: dict[str, Any]) -> None:
    """A completion keeps its run's number in `runs` (the three attributes Powertools' own completion sets); a
    runtime before 0.3.0 set `runs` back to 0 and kept the number in `completed_run`. Both read the same."""
    record = KeyRecord.from_item("jobs#x", item)
    assert (record.completed_run, record.runs) == (2, 0)


def test_a_record_that_started_from_an_old_completion_reads_its_own_count() -> None:
    # An old completion's key run again by a runtime before 0.3.0 kept the stale `completed_run`; the run's own
    # `runs` wins once it completes.
    record = KeyRecord.from_item("jobs#x", _item(status="COMPLETED", runs=1, completed_run=3))
    assert (record.completed_run, record.runs) == (1, 0)


def test_the_codec_keeps_what_a_record_says() -> None:
    record = KeyRecord.from_item(
        "jobs#x",
        _item(
            status="FAILED",
            runs=2,
            last_error_type="TimeoutError",
            last_error="read timed out",
            progress_done=3,
            progress_total=10,
            progress_run=2,
            progress_at=NOW,
            job="mail",
            job_id="9001",
        ),
    )
    assert (record.runs, record.last_error_type, record.last_error) == (2, "TimeoutError", "read timed out")
    assert (record.progress_done, record.progress_total, record.progress_run) == (3.0, 10.0, 2)
    assert (record.job, record.job_id) == ("mail", "9001")
