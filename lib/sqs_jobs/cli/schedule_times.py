"""When an EventBridge Scheduler expression fires next: `at(...)`, `rate(...)` and six-field `cron(...)` in a
time zone. The local engine fires schedules by it, and `jobctl schedules list` shows the next run.

The catalog (functions.catalog.schedule_expression_problem) has already refused malformed expressions; this
module reads valid ones. Rate schedules count from their start (the schedule's creation), as AWS does.
"""

from __future__ import annotations

import calendar
import re
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from sqs_jobs.schedule_expressions import CRON_MONTHS, CRON_WEEKDAYS, cron_value, schedule_expression_problem

_AT = re.compile(r"^at\((\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})\)$")
_RATE = re.compile(r"^rate\((\d+) (minute|hour|day)s?\)$")
_UNIT_S = {"minute": 60, "hour": 3600, "day": 86400}
# How far ahead a cron expression is searched: beyond that it never fires (e.g. a year field in the past).
_HORIZON_DAYS = 5 * 366


class ScheduleExpressionError(ValueError):
    """An expression this module can't read."""


def at_time(expression: str, timezone: str = "UTC") -> datetime | None:
    """The moment of an `at(...)` expression, or None for any other kind."""
    match = _AT.fullmatch(expression)
    if not match:
        return None
    return datetime.fromisoformat(match.group(1)).replace(tzinfo=ZoneInfo(timezone)).astimezone(UTC)


def next_fire(
    expression: str, after: datetime, timezone: str = "UTC", start: datetime | None = None
) -> datetime | None:
    """The first time strictly after `after` (aware) that `expression` fires, in UTC; None if it never will.
    `start` anchors rate schedules (their creation); default `after`."""
    once = at_time(expression, timezone)
    if once is not None:
        return once if once > after else None
    rate = _RATE.fullmatch(expression)
    if rate:
        period = timedelta(seconds=int(rate.group(1)) * _UNIT_S[rate.group(2)])
        anchor = start or after
        steps = max(1, int((after - anchor) / period) + 1)
        return anchor + steps * period
    problem = schedule_expression_problem(expression)
    if problem:
        raise ScheduleExpressionError(problem)
    return _next_cron(expression[5:-1].split(), after, ZoneInfo(timezone))


def _next_cron(fields: list[str], after: datetime, zone: ZoneInfo) -> datetime | None:
    minutes, hours, dom, months, dow, years = fields
    minute_set = _values(minutes, 0, 59, ())
    hour_set = _values(hours, 0, 23, ())
    month_set = _values(months, 1, 12, CRON_MONTHS)
    local_after = after.astimezone(zone)
    day = local_after.date()
    for _ in range(_HORIZON_DAYS):
        if day.month in month_set and _year_matches(years, day.year) and _day_matches(dom, dow, day):
            for hour in sorted(hour_set):
                for minute in sorted(minute_set):
                    candidate = datetime(day.year, day.month, day.day, hour, minute, tzinfo=zone)
                    if candidate > local_after:
                        return candidate.astimezone(UTC)
        day += timedelta(days=1)
    return None


def _year_matches(field: str, year: int) -> bool:
    return field == "*" or year in _values(field, 1970, 2199, ())


def _values(field: str, low: int, high: int, names: tuple[str, ...]) -> set[int]:
    """The numbers a plain field (`*`, lists, ranges, steps, names) stands for."""
    found: set[int] = set()
    for part in field.split(","):
        span, _, step_text = part.partition("/")
        step = int(step_text) if step_text else 1
        if span in ("*", "?"):
            first, last = low, high
        elif "-" in span:
            first_text, last_text = span.split("-", 1)
            first, last = _number(first_text, low, high, names), _number(last_text, low, high, names)
        else:
            first = _number(span, low, high, names)
            last = high if step > 1 else first
        found.update(range(first, last + 1, step))
    return found


def _number(text: str, low: int, high: int, names: tuple[str, ...]) -> int:
    value = cron_value(text, low, high, names)
    if value is None:  # the catalog refused it already; an expression from elsewhere may not have been checked
        raise ScheduleExpressionError(f"{text!r} is not a value in {low}-{high}")
    return value


def _day_matches(dom: str, dow: str, day: date) -> bool:
    """Day of month and day of week; exactly one of them is `?` (the catalog checked it)."""
    if dom != "?":
        return _dom_matches(dom, day)
    return _dow_matches(dow, day)


def _dom_matches(field: str, day: date) -> bool:
    last = calendar.monthrange(day.year, day.month)[1]
    for part in field.split(","):
        if part == "L":
            if day.day == last:
                return True
        elif part == "LW":
            if day == _nearest_weekday(date(day.year, day.month, last)):
                return True
        elif part.endswith("W"):
            target = date(day.year, day.month, min(int(part[:-1]), last))
            if day == _nearest_weekday(target):
                return True
        elif day.day in _values(part, 1, 31, ()):
            return True
    return False


def _nearest_weekday(target: date) -> date:
    """The weekday nearest `target` within its month (cron's W)."""
    if target.weekday() == 5:  # Saturday: Friday, unless that leaves the month
        return target - timedelta(days=1) if target.day > 1 else target + timedelta(days=2)
    if target.weekday() == 6:  # Sunday: Monday, unless that leaves the month
        last = calendar.monthrange(target.year, target.month)[1]
        return target + timedelta(days=1) if target.day < last else target - timedelta(days=2)
    return target


def _cron_weekday(day: date) -> int:
    """Cron's day of week: 1 = Sunday ... 7 = Saturday."""
    return (day.weekday() + 1) % 7 + 1


def _dow_matches(field: str, day: date) -> bool:
    weekday = _cron_weekday(day)
    last = calendar.monthrange(day.year, day.month)[1]
    for part in field.split(","):
        if part == "L":
            if weekday == 7:
                return True
        elif "#" in part:
            wanted, nth = part.split("#", 1)
            if weekday == _number(wanted, 1, 7, CRON_WEEKDAYS) and (day.day - 1) // 7 + 1 == int(nth):
                return True
        elif part.endswith("L") and len(part) > 1:
            if weekday == _number(part[:-1], 1, 7, CRON_WEEKDAYS) and day.day + 7 > last:
                return True
        elif weekday in _values(part, 1, 7, CRON_WEEKDAYS):
            return True
    return False
