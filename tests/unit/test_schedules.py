"""Catalog schedules: which expressions and time zones are accepted (one clear line for the rest), and when
each fires next."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from functions.catalog import CATALOG
from sqs_jobs.cli.schedule_times import next_fire
from sqs_jobs.schedule_expressions import schedule_expression_problem
from sqs_jobs.specs import Catalog, CatalogError, JobSpec, QueueSpec, Schedule

WEDNESDAY = datetime(2026, 12, 2, 4, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "expression",
    [
        "rate(1 minute)",
        "rate(5 minutes)",
        "rate(1 hour)",
        "rate(7 days)",
        "cron(0 9 ? * MON *)",
        "cron(0/15 * * * ? *)",
        "cron(0 18 ? * MON-FRI *)",
        "cron(0 9 ? * 2#1 *)",
        "cron(0 10 L * ? *)",
        "cron(0 10 LW * ? *)",
        "cron(0 0 15W * ? *)",
        "cron(30 6 ? JAN-MAR 6L 2027-2030)",
        "cron(5,35 14 * * ? *)",
    ],
)
def test_accepted_expressions(expression: str) -> None:
    assert schedule_expression_problem(expression) is None


@pytest.mark.parametrize(
    ("expression", "needle"),
    [
        ("rate(1 minutes)", "use the singular unit for 1 and the plural otherwise"),
        ("rate(5 minute)", "use the singular unit for 1 and the plural otherwise"),
        ("rate(0 minutes)", "is not rate(<value> <minute(s)|hour(s)|day(s)>)"),
        ("rate(5 weeks)", "is not rate(<value> <minute(s)|hour(s)|day(s)>)"),
        ("cron(0 9 * * MON *)", "exactly one of day-of-month and day-of-week must be '?'"),
        ("cron(0 9 ? * ? *)", "exactly one of day-of-month and day-of-week must be '?'"),
        ("cron(* * * * *)", "has 5 fields; cron takes 6"),
        ("cron(0 25 ? * MON *)", "hours '25' is not a value in 0-23"),
        ("cron(0 9 ? * FUNDAY *)", "day-of-week 'FUNDAY' is not a value in 1-7 or SUN-SAT"),
        ("cron(0 9 ? 13 MON *)", "month '13' is not a value in 1-12 or JAN-DEC"),
        ("cron(0 9 ? * MON#6 *)", "<weekday>#<1-5> expected"),
        ("cron(0/0 9 ? * MON *)", "minutes step '0' must be a positive number"),
        ("at(2026-12-24T09:00:00)", "neither rate(...) nor cron(...)"),
        ("every monday", "neither rate(...) nor cron(...)"),
    ],
)
def test_refused_expressions_name_the_problem_in_one_line(expression: str, needle: str) -> None:
    problem = schedule_expression_problem(expression)
    assert problem is not None and needle in problem and "\n" not in problem


def _catalog_with(schedule: Schedule) -> Catalog:
    job = JobSpec(name="tick", handler="functions.jobs.tick", schedules=(schedule,))
    return Catalog(queues=(QueueSpec(name="clock", jobs=(job,)),))


def test_a_bad_time_zone_or_name_fails_the_catalog() -> None:
    with pytest.raises(CatalogError, match=r"time zone 'Mars/Olympus' is not an IANA time zone name, e\.g\. UTC"):
        _catalog_with(Schedule(name="daily", expression="cron(0 9 * * ? *)", timezone="Mars/Olympus"))
    with pytest.raises(CatalogError, match=r"schedule name 'Daily!' must match"):
        _catalog_with(Schedule(name="Daily!", expression="rate(1 day)"))
    with pytest.raises(CatalogError, match=r"schedule 'daily': 'cron\(0 9 \* \* MON \*\)': exactly one"):
        _catalog_with(Schedule(name="daily", expression="cron(0 9 * * MON *)"))


def test_two_schedules_of_a_job_need_two_names() -> None:
    twice = JobSpec(
        name="tick",
        handler="functions.jobs.tick",
        schedules=(Schedule("daily", "rate(1 day)"), Schedule("daily", "cron(0 9 * * ? *)")),
    )
    with pytest.raises(CatalogError, match="has two schedules named 'daily'"):
        Catalog(queues=(QueueSpec(name="clock", jobs=(twice,)),))


def test_the_dlq_review_runs_mondays_at_nine_utc_by_default() -> None:
    [schedule] = CATALOG.queue("maintenance").job("dlq_review").schedules
    assert (schedule.expression, schedule.timezone) == ("cron(0 9 ? * MON *)", "UTC")


@pytest.mark.parametrize(
    ("expression", "timezone", "after", "expected"),
    [
        ("cron(0 9 ? * MON *)", "UTC", WEDNESDAY, datetime(2026, 12, 7, 9, 0, tzinfo=UTC)),
        ("cron(0 9 ? * MON *)", "Asia/Tokyo", WEDNESDAY, datetime(2026, 12, 7, 0, 0, tzinfo=UTC)),
        # Daylight saving: 09:00 in Berlin is 07:00 UTC in summer, 08:00 in winter.
        ("cron(0 9 * * ? *)", "Europe/Berlin", datetime(2026, 7, 1, tzinfo=UTC), datetime(2026, 7, 1, 7, tzinfo=UTC)),
        ("cron(0 9 * * ? *)", "Europe/Berlin", WEDNESDAY, datetime(2026, 12, 2, 8, tzinfo=UTC)),
        ("cron(0/15 * * * ? *)", "UTC", WEDNESDAY, datetime(2026, 12, 2, 4, 15, tzinfo=UTC)),
        ("cron(0 10 L * ? *)", "UTC", WEDNESDAY, datetime(2026, 12, 31, 10, tzinfo=UTC)),
        ("cron(0 9 ? * MON#2 *)", "UTC", WEDNESDAY, datetime(2026, 12, 14, 9, tzinfo=UTC)),
        ("cron(0 18 ? * 6L *)", "UTC", WEDNESDAY, datetime(2026, 12, 25, 18, tzinfo=UTC)),
        # The 1st of August 2026 is a Saturday: the nearest weekday in the month is Monday the 3rd.
        ("cron(0 0 1W * ? *)", "UTC", datetime(2026, 7, 15, tzinfo=UTC), datetime(2026, 8, 3, tzinfo=UTC)),
        ("cron(0 0 1 1 ? 2020)", "UTC", WEDNESDAY, None),
        ("at(2026-12-24T09:00:00)", "Europe/Berlin", WEDNESDAY, datetime(2026, 12, 24, 8, tzinfo=UTC)),
        ("at(2026-12-01T09:00:00)", "UTC", WEDNESDAY, None),
    ],
)
def test_next_fire(expression: str, timezone: str, after: datetime, expected: datetime | None) -> None:
    assert next_fire(expression, after, timezone) == expected


def test_rate_schedules_count_from_their_start() -> None:
    start = datetime(2026, 12, 2, 4, 0, 30, tzinfo=UTC)
    assert next_fire("rate(5 minutes)", start, start=start) == datetime(2026, 12, 2, 4, 5, 30, tzinfo=UTC)
    later = datetime(2026, 12, 2, 4, 12, tzinfo=UTC)
    assert next_fire("rate(5 minutes)", later, start=start) == datetime(2026, 12, 2, 4, 15, 30, tzinfo=UTC)
