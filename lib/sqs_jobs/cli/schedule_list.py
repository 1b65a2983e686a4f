"""The stack's schedules as an operator reads them (`jobctl schedules list`, the console's jobs page): recurring
ones from the catalog and pending one-time ones (delayed jobs), with their next run, soonest first.

Cost: one ListSchedules per 100 schedules and one GetSchedule per schedule (the input, which names the job, is
only in GetSchedule's answer); `limit` bounds a page's reads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqs_jobs.cli.schedule_times import ScheduleExpressionError, next_fire
from sqs_jobs.stack_names import ONE_TIME_PREFIX, SCHEDULED_TIME, schedule_group_name


@dataclass(frozen=True)
class Schedules:
    rows: list[dict[str, Any]]
    # More schedules than `limit` were in the group: the rows are the first `limit` listed, not the soonest.
    truncated: bool = False


def schedule_row(schedule: dict[str, Any], now: datetime) -> dict[str, Any]:
    target = schedule.get("Target") or {}
    try:
        envelope = json.loads(target.get("Input") or "{}")
    except ValueError:
        envelope = {}
    if not isinstance(envelope, dict):  # a publisher may write any input: shown as missing, never a crash
        envelope = {}
    zone = schedule.get("ScheduleExpressionTimezone") or "UTC"
    created = schedule.get("CreationDate")
    try:
        upcoming = next_fire(schedule["ScheduleExpression"], now, zone, start=created if created else None)
    except ScheduleExpressionError:
        upcoming = None
    entity = envelope.get("id")
    return {
        "name": schedule["Name"],
        "kind": "one-time" if schedule["Name"].startswith(ONE_TIME_PREFIX) else "recurring",
        "expression": schedule["ScheduleExpression"],
        "timezone": zone,
        "state": schedule.get("State", "ENABLED"),
        "job": envelope.get("job"),
        "id": "(the scheduled time)" if entity == SCHEDULED_TIME else entity,
        "queue": str(target.get("Arn", "")).rsplit(":", 1)[-1],
        "next_run": upcoming.isoformat() if upcoming and schedule.get("State") != "DISABLED" else None,
    }


def list_schedules(scheduler: Any, stack: str, *, limit: int | None = None, now: datetime | None = None) -> Schedules:
    """Every schedule of the stack's group (at most `limit`), soonest first."""
    group = schedule_group_name(stack)
    now = now or datetime.now(UTC)
    rows: list[dict[str, Any]] = []
    truncated = False
    for page in scheduler.get_paginator("list_schedules").paginate(GroupName=group):
        for item in page.get("Schedules", []):
            if limit is not None and len(rows) >= limit:
                truncated = True
                break
            rows.append(schedule_row(scheduler.get_schedule(Name=item["Name"], GroupName=group), now))
        if truncated:
            break
    rows.sort(key=lambda row: (row["next_run"] is None, row["next_run"] or "", row["name"]))
    return Schedules(rows=rows, truncated=truncated)
