"""EventBridge Scheduler's recurring expressions, checked as AWS's cron and rate reference describes them."""

from __future__ import annotations

import re

# EventBridge Scheduler's recurring expressions: rate(<value> <unit>) and a six-field cron(...).
_RATE = re.compile(r"^rate\((?P<value>[1-9][0-9]{0,5}) (?P<unit>minutes?|hours?|days?)\)$")
_CRON = re.compile(r"^cron\((?P<fields>[^()]+)\)$")
CRON_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
CRON_WEEKDAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
# Per cron field: its name, the numbers it takes, names it takes instead, and the special characters it allows
# besides `, - * /` (AWS's cron reference for EventBridge).
_CRON_FIELDS = (
    ("minutes", 0, 59, (), ""),
    ("hours", 0, 23, (), ""),
    ("day-of-month", 1, 31, (), "?LW"),
    ("month", 1, 12, CRON_MONTHS, ""),
    ("day-of-week", 1, 7, CRON_WEEKDAYS, "?L#"),
    ("year", 1970, 2199, (), ""),
)


def _cron_field_problem(text: str, name: str, low: int, high: int, names: tuple[str, ...], special: str) -> str | None:
    """Why one cron field is invalid, or None."""
    if text == "*" or (text == "?" and "?" in special):
        return None
    for part in text.split(","):
        value = part
        if "/" in value:
            value, step = value.split("/", 1)
            if not step.isdigit() or int(step) < 1:
                return f"{name} step {step!r} must be a positive number"
            if value == "*":
                continue
        if "#" in value and "#" in special:
            day, nth = value.split("#", 1)
            if not (nth.isdigit() and 1 <= int(nth) <= 5) or cron_value(day, low, high, names) is None:
                return f"{name} {part!r}: <weekday>#<1-5> expected"
            continue
        if value in ("L", "LW") and "L" in special:
            continue
        if value.endswith(("L", "W")) and value[:-1] and value[-1] in special:
            value = value[:-1]
        bounds = value.split("-", 1)
        if any(cron_value(bound, low, high, names) is None for bound in bounds):
            accepted = f"{low}-{high}" + (f" or {names[0]}-{names[-1]}" if names else "")
            return f"{name} {part!r} is not a value in {accepted}"
    return None


def cron_value(text: str, low: int, high: int, names: tuple[str, ...]) -> int | None:
    """The number a cron field's value stands for (a number in low..high, or one of `names` counted from low)."""
    if text.upper() in names:
        return names.index(text.upper()) + low
    if text.isdigit() and low <= int(text) <= high:
        return int(text)
    return None


def schedule_expression_problem(expression: str) -> str | None:
    """Why `expression` is not an EventBridge Scheduler rate(...) or cron(...) expression, or None if it is."""
    rate = _RATE.fullmatch(expression)
    if rate:
        value, unit = int(rate["value"]), rate["unit"]
        if (value == 1) == unit.endswith("s"):
            return f"rate({value} {unit}): use the singular unit for 1 and the plural otherwise, e.g. rate(5 minutes)"
        return None
    if expression.startswith("rate("):
        return f"{expression!r} is not rate(<value> <minute(s)|hour(s)|day(s)>), e.g. rate(5 minutes)"
    cron = _CRON.fullmatch(expression)
    if not cron:
        return f"{expression!r} is neither rate(...) nor cron(...), e.g. cron(0 9 ? * MON *)"
    fields = cron["fields"].split()
    if len(fields) != len(_CRON_FIELDS):
        return (
            f"{expression!r} has {len(fields)} fields; cron takes 6: minutes hours day-of-month month day-of-week "
            "year, e.g. cron(0 9 ? * MON *)"
        )
    for text, spec in zip(fields, _CRON_FIELDS, strict=True):
        problem = _cron_field_problem(text, *spec)
        if problem:
            return f"{expression!r}: {problem}"
    if (fields[2] == "?") == (fields[4] == "?"):
        return f"{expression!r}: exactly one of day-of-month and day-of-week must be '?'"
    return None
