"""CloudWatch metric math and alarm evaluation as AWS documents them, so tests check what an alarm does with the
datapoints it gets (late, missing, sparse), not how its expression is spelled.

Metric math ("Using metric math", https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/using-metric-math.html).
A time series maps timestamps to values; a timestamp it lacks is a missing value.

- Arithmetic `+ - * /`: a missing value is 0. Two series give a point wherever either has one, a series and a
  number wherever the series has one. A division by zero drops the point.
- Comparisons `== != < <= > >=` and `AND`/`OR`: 1 or 0, on the same points, a missing value treated as 0 (the
  page's example: `metric1 > 15 AND metric2 > 15` is 0 where metric2 has no value).
- `IF(cond, a, b)`, per point of `cond` (no point, no output): true takes `a`, 0 where a series `a` lacks the point;
  false takes `b`, dropped where a series `b` lacks the point or `b` is omitted.
- `FILL(series, number)`: a value at every timestamp of the query's grid, the newest included ("FILL replaces that
  missing data point with the requested value... the latest data point for the metric [is] always the FILL
  value"). Whether CloudWatch fills a series with no datapoint at all is not written down: `fill_empty` says.
- `SUM`, `MAX`, `MIN`, `AVG` of an array: per timestamp, over the series that have a point there (missing = 0 for
  SUM and AVG). Of a single series they return one number over the whole query, which depends on how many
  datapoints the alarm fetches: the page advises against them in alarms, so they are refused here.
- `PERIOD(m)`: the metric's period in seconds.

Alarm evaluation ("Alarm evaluation" and "Configuring how CloudWatch alarms treat missing data",
https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarms-and-missing-data.html): the alarm fetches
more periods than its N (`EvaluationPeriods`), the *evaluation range*, whose size AWS does not publish (`retrieved`
here, so tests try several). If at least N points exist in the range, the N newest existing ones are evaluated and
`TreatMissingData` is ignored; otherwise the missing ones needed to make N are filled as `TreatMissingData` says.
ALARM when at least M (`DatapointsToAlarm`) of the N breach.

Not written down, and chosen here: only complete periods count (an alarm's reason lists, for a query at 11:26:05,
one-minute datapoints up to 11:25), the alarm is evaluated once a minute, and a longer period ends at the minute
of the evaluation (sliding) unless `aligned` puts its boundaries at multiples of the period.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

MINUTE = 60
Number = float


class Series(dict[int, float]):
    """One time series: timestamp (epoch seconds) -> value."""


Value = Number | Series | list[Series]

_ARITHMETIC: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}
_COMPARE: dict[type[ast.cmpop], Callable[[float, float], bool]] = {
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}


class MetricMathError(AssertionError):
    """An expression this evaluator (or CloudWatch) can't compute the way an alarm needs."""


def evaluate_series(
    expression: str,
    metrics: Mapping[str, Mapping[int, float]],
    grid: Sequence[int],
    periods: Mapping[str, int] | None = None,
    *,
    fill_empty: bool = True,
) -> Series:
    """The time series `expression` computes on the query's `grid` from each metric ID's datapoints."""
    python = re.sub(r"\bAND\b", "and", re.sub(r"\bOR\b", "or", expression))
    tree = ast.parse(python, mode="eval")
    evaluator = _Evaluator({key: Series(value) for key, value in metrics.items()}, grid, periods or {}, fill_empty)
    result = evaluator.eval(tree.body)
    if not isinstance(result, Series):
        raise MetricMathError(f"an alarm's expression must give one time series, not {type(result).__name__}")
    on_grid = set(grid)
    return Series({timestamp: value for timestamp, value in result.items() if timestamp in on_grid})


def evaluate(
    expression: str, values: Mapping[str, float | None], periods: Mapping[str, int] | None = None
) -> float | None:
    """The value of `expression` at one timestamp where metric ID `x` has the datapoint `values[x]` (None: none)."""
    metrics = {key: {} if value is None else {0: float(value)} for key, value in values.items()}
    return evaluate_series(expression, metrics, (0,), periods).get(0)


def _truthy(value: float) -> bool:
    # IF: "FALSE if the value of the condition data point is 0, TRUE if ... any other value".
    return value != 0


class _Evaluator:
    def __init__(
        self, metrics: Mapping[str, Series], grid: Sequence[int], periods: Mapping[str, int], fill_empty: bool
    ) -> None:
        self.metrics = metrics
        self.grid = tuple(grid)
        self.periods = periods
        self.fill_empty = fill_empty

    def eval(self, node: ast.expr) -> Value:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return float(node.value)
        if isinstance(node, ast.Name):
            if node.id not in self.metrics:
                raise MetricMathError(f"metric ID {node.id!r} has no datapoints in this test")
            return self.metrics[node.id]
        if isinstance(node, ast.List):
            elements = [self.eval(element) for element in node.elts]
            if not all(isinstance(element, Series) for element in elements):
                raise MetricMathError("an array holds time series")
            return [element for element in elements if isinstance(element, Series)]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return self._combine([self.eval(node.operand)], lambda value: -value[0])
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
            function = _ARITHMETIC[type(node.op)]
            return self._combine([self.eval(node.left), self.eval(node.right)], lambda pair: function(*pair))
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
            check = _COMPARE[type(node.ops[0])]
            operands = [self.eval(node.left), self.eval(node.comparators[0])]
            return self._combine(operands, lambda pair: float(check(*pair)))
        if isinstance(node, ast.BoolOp):
            logic = all if isinstance(node.op, ast.And) else any
            operands = [self.eval(operand) for operand in node.values]
            return self._combine(operands, lambda values: float(logic(_truthy(value) for value in values)))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
            return self._call(node.func.id, node.args)
        raise MetricMathError(f"unsupported metric math: {ast.unparse(node)}")

    def _combine(self, operands: list[Value], function: Callable[[list[float]], float]) -> Value:
        """Apply `function` point by point: on numbers a number; else on every timestamp any series operand has,
        a missing value as 0; a division by zero drops the point."""
        if any(isinstance(operand, list) for operand in operands):
            raise MetricMathError("operators on arrays of time series are not used by this stack")
        series = [operand for operand in operands if isinstance(operand, Series)]
        if not series:
            try:
                return function([operand for operand in operands if isinstance(operand, float)])
            except ZeroDivisionError as exc:
                raise MetricMathError("a division of two numbers by zero") from exc
        timestamps = sorted(set().union(*series))
        result = Series()
        for timestamp in timestamps:
            values = [
                operand.get(timestamp, 0.0) if isinstance(operand, Series) else float(operand)
                for operand in operands
                if not isinstance(operand, list)
            ]
            try:
                result[timestamp] = function(values)
            except ZeroDivisionError:
                continue  # "the data point is dropped"
        return result

    def _call(self, function: str, args: list[ast.expr]) -> Value:
        if function == "IF":
            return self._if(args)
        if function == "FILL":
            return self._fill(args)
        if function in ("SUM", "MAX", "MIN", "AVG"):
            (argument,) = args
            array = self.eval(argument)
            if not isinstance(array, list):
                raise MetricMathError(
                    f"{function} of one series is one number over the whole query, which depends on how many "
                    "datapoints the alarm fetches (AWS advises against it in alarms); use an array"
                )
            return _reduce(function, array)
        if function == "PERIOD":
            (name,) = args
            if not isinstance(name, ast.Name) or name.id not in self.periods:
                raise MetricMathError("PERIOD takes a metric ID whose period the test gives")
            return float(self.periods[name.id])
        raise MetricMathError(f"unsupported metric math function {function}")

    def _if(self, args: list[ast.expr]) -> Value:
        if len(args) not in (2, 3):
            raise MetricMathError("IF takes a condition, a value if true and optionally one if false")
        condition = self.eval(args[0])
        when_true = self.eval(args[1])
        when_false = self.eval(args[2]) if len(args) == 3 else None
        if isinstance(condition, list) or isinstance(when_true, list) or isinstance(when_false, list):
            raise MetricMathError("IF works on time series and numbers, not arrays")
        if not isinstance(condition, Series):
            chosen = when_true if _truthy(condition) else when_false
            return Series() if chosen is None else chosen
        result = Series()
        for timestamp, value in condition.items():
            if _truthy(value):
                result[timestamp] = when_true.get(timestamp, 0.0) if isinstance(when_true, Series) else when_true
            elif isinstance(when_false, Series):
                if timestamp in when_false:
                    result[timestamp] = when_false[timestamp]
            elif when_false is not None:
                result[timestamp] = when_false
        return result

    def _fill(self, args: list[ast.expr]) -> Value:
        if len(args) != 2:
            raise MetricMathError("FILL takes a time series and a filler")
        series, filler = self.eval(args[0]), self.eval(args[1])
        if not isinstance(series, Series):
            raise MetricMathError("FILL fills a time series (arrays are not used by this stack)")
        if not series and not self.fill_empty:
            return Series()
        result = Series(series)
        for timestamp in self.grid:
            if timestamp in result:
                continue
            if isinstance(filler, Series):
                if timestamp in filler:
                    result[timestamp] = filler[timestamp]
            elif isinstance(filler, float):
                result[timestamp] = filler
            else:
                raise MetricMathError("FILL's filler is a number or a time series")
        return result


def _reduce(function: str, array: list[Series]) -> Series:
    result = Series()
    for timestamp in sorted(set().union(*array)):
        present = [series[timestamp] for series in array if timestamp in series]
        if function == "SUM":
            result[timestamp] = sum(present)
        elif function == "AVG":
            result[timestamp] = sum(present) / len(array)  # missing values count as 0
        elif function == "MAX":
            result[timestamp] = max(present)
        else:
            result[timestamp] = min(present)
    return result


# --- alarms --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """A value a metric received for the instant `at`, which CloudWatch can show from `visible_at` on."""

    at: float
    value: float
    visible_at: float


@dataclass(frozen=True)
class MetricStat:
    statistic: str
    period: int


@dataclass(frozen=True)
class Alarm:
    """What CloudWatch evaluates of one AWS::CloudWatch::Alarm (PutMetricAlarm's fields)."""

    expression: str
    metrics: Mapping[str, MetricStat]
    period: int
    evaluation_periods: int
    datapoints_to_alarm: int
    threshold: float
    comparison: str
    treat_missing_data: str

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> Alarm:
        """Read a plain-metric or metric-math alarm from its CloudFormation properties."""
        if "Metrics" not in properties:
            statistic = properties.get("Statistic") or properties["ExtendedStatistic"]
            period = int(properties["Period"])
            return cls._with(properties, "m", {"m": MetricStat(statistic, period)}, period)
        queries = properties["Metrics"]
        (returned,) = [query for query in queries if query.get("ReturnData", True)]
        metrics = {
            query["Id"]: MetricStat(query["MetricStat"]["Stat"], int(query["MetricStat"]["Period"]))
            for query in queries
            if "MetricStat" in query
        }
        periods = {stat.period for stat in metrics.values()}
        if len(periods) != 1:
            raise MetricMathError("CloudWatch: every metric of an alarm's expression must use the same period")
        (period,) = periods
        return cls._with(properties, str(returned.get("Expression", returned["Id"])), metrics, period)

    @classmethod
    def _with(
        cls, properties: Mapping[str, Any], expression: str, metrics: Mapping[str, MetricStat], period: int
    ) -> Alarm:
        n = int(properties["EvaluationPeriods"])
        return cls(
            expression=expression,
            metrics=metrics,
            period=period,
            evaluation_periods=n,
            datapoints_to_alarm=int(properties.get("DatapointsToAlarm", n)),
            threshold=float(properties["Threshold"]),
            comparison=str(properties["ComparisonOperator"]),
            treat_missing_data=str(properties.get("TreatMissingData", "missing")),
        )

    def breaches(self, value: float) -> bool:
        return _THRESHOLD_CHECKS[self.comparison](value, self.threshold)


_THRESHOLD_CHECKS: dict[str, Callable[[float, float], bool]] = {
    "GreaterThanThreshold": operator.gt,
    "GreaterThanOrEqualToThreshold": operator.ge,
    "LessThanThreshold": operator.lt,
    "LessThanOrEqualToThreshold": operator.le,
}


def aggregate(statistic: str, values: Sequence[float]) -> float:
    """One datapoint of `values` by the statistic; percentiles by nearest rank."""
    if statistic == "Sum":
        return float(sum(values))
    if statistic == "Maximum":
        return float(max(values))
    if statistic == "Minimum":
        return float(min(values))
    if statistic == "Average":
        return float(sum(values)) / len(values)
    if statistic == "SampleCount":
        return float(len(values))
    if statistic.startswith("p"):
        ordered = sorted(values)
        rank = max(1, math.ceil(float(statistic[1:]) / 100 * len(ordered)))
        return float(ordered[rank - 1])
    raise MetricMathError(f"unknown statistic {statistic}")


@dataclass(frozen=True)
class Evaluation:
    """How CloudWatch looks at one alarm: the evaluation range's size and where periods start."""

    # Periods fetched: AWS says more than EvaluationPeriods and not how many.
    retrieved: int
    aligned: bool = False
    # Whether FILL gives values for a series with no datapoint in the query (not documented either way).
    fill_empty: bool = True

    def grid(self, alarm: Alarm, now: float) -> list[int]:
        if self.retrieved <= alarm.evaluation_periods:
            raise MetricMathError("CloudWatch fetches more periods than EvaluationPeriods")
        step = alarm.period if self.aligned else MINUTE
        end = int(now // step) * step
        return [end - count * alarm.period for count in range(self.retrieved, 0, -1)]


@dataclass
class AlarmRun:
    """The alarm over a stretch of time: its state at each minute it was evaluated."""

    states: list[tuple[float, str]] = field(default_factory=list)

    def first(self, state: str) -> float | None:
        return next((at for at, seen in self.states if seen == state), None)


def datapoints(samples: Sequence[Sample], stat: MetricStat, grid: Sequence[int], now: float) -> Series:
    """The datapoints CloudWatch has, at `now`, for each period of the grid."""
    result = Series()
    for start in grid:
        values = [s.value for s in samples if start <= s.at < start + stat.period and s.visible_at <= now]
        if values:
            result[start] = aggregate(stat.statistic, values)
    return result


def state(alarm: Alarm, samples: Mapping[str, Sequence[Sample]], now: float, evaluation: Evaluation) -> str:
    """The alarm's state when evaluated at `now` from the samples each of its metric IDs received."""
    grid = evaluation.grid(alarm, now)
    metrics = {key: datapoints(samples.get(key, ()), stat, grid, now) for key, stat in alarm.metrics.items()}
    periods = {key: stat.period for key, stat in alarm.metrics.items()}
    result = evaluate_series(alarm.expression, metrics, grid, periods, fill_empty=evaluation.fill_empty)
    existing = [result[timestamp] for timestamp in grid if timestamp in result]
    n, m = alarm.evaluation_periods, alarm.datapoints_to_alarm
    if len(existing) >= n:
        # Enough real points in the range: the N newest are evaluated and TreatMissingData is not needed.
        breaching = sum(alarm.breaches(value) for value in existing[-n:])
    elif alarm.treat_missing_data == "breaching":
        breaching = sum(alarm.breaches(value) for value in existing) + (n - len(existing))
    elif alarm.treat_missing_data == "notBreaching":
        breaching = sum(alarm.breaches(value) for value in existing)
    else:
        raise MetricMathError(f"TreatMissingData {alarm.treat_missing_data} is not used by this stack")
    return "ALARM" if breaching >= m else "OK"


def run(
    alarm: Alarm,
    samples: Mapping[str, Sequence[Sample]],
    start: float,
    end: float,
    evaluation: Evaluation,
) -> AlarmRun:
    """Evaluate the alarm once a minute, on the minute, from `start` to `end`."""
    result = AlarmRun()
    now = math.ceil(start / MINUTE) * MINUTE
    while now <= end:
        result.states.append((now, state(alarm, samples, now, evaluation)))
        now += MINUTE
    return result
