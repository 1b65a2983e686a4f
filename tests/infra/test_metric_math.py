"""The test evaluator (tests/infra/metric_math.py) against AWS's own examples: "Using metric math" (comparison and
logical operators, IF, arithmetic, FILL) and "Configuring how CloudWatch alarms treat missing data" (the two tables
of alarm states). If the evaluator drifts from the documented rules, the alarm tests built on it mean nothing."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from tests.infra.metric_math import (
    MINUTE,
    Alarm,
    Evaluation,
    MetricMathError,
    MetricStat,
    Sample,
    evaluate,
    evaluate_series,
    run,
    state,
)

GRID = (0, 60, 120, 180, 240)


def series(values: Sequence[float | None]) -> dict[int, float]:
    """A series on GRID from the docs' notation: a number, or None for "-" (no value at that timestamp)."""
    return {GRID[index]: float(value) for index, value in enumerate(values) if value is not None}


def on_grid(expression: str, grid: Sequence[int] = GRID, **metrics: Sequence[float | None]) -> list[float | None]:
    result = evaluate_series(expression, {key: series(values) for key, values in metrics.items()}, grid)
    return [result.get(timestamp) for timestamp in grid]


# --- "Comparison and logical operators": metric1 = [30, 20, 0, 0], metric2 = [20, -, 20, -] -------------------


@pytest.mark.parametrize(
    ("expression", "output"),
    [
        ("metric1 < metric2", [0, 0, 1, 0]),
        ("metric1 >= 30", [1, 0, 0, 0]),
        ("metric1 > 15 AND metric2 > 15", [1, 0, 0, 0]),
    ],
)
def test_comparisons_treat_a_missing_value_as_0(expression: str, output: list[float]) -> None:
    grid = GRID[:4]
    assert on_grid(expression, grid, metric1=[30, 20, 0, 0], metric2=[20, None, 20, None]) == output


def test_or_is_1_where_either_side_holds() -> None:
    assert on_grid("a > 0 OR b > 0", a=[1, 0, None, 0, None], b=[0, 0, 1, None, None]) == [1, 0, 1, 0, None]


# --- "Using IF expressions": metric1 = [1, 1, 0, 0, -], metric2 = [30, -, 0, 0, 30], metric3 = [0, 0, 20, -, 20]


IF_METRICS: dict[str, Sequence[float | None]] = {
    "metric1": [1, 1, 0, 0, None],
    "metric2": [30, None, 0, 0, 30],
    "metric3": [0, 0, 20, None, 20],
}


@pytest.mark.parametrize(
    ("expression", "output"),
    [
        ("IF(metric1, metric2, metric3)", [30, 0, 20, None, None]),
        ("IF(metric1, 5, metric3)", [5, 5, 20, None, None]),
        ("IF(metric1, metric2, 5)", [30, 0, 5, 5, None]),
        # The false branch omitted: its points are dropped.
        ("IF(metric1, metric2)", [30, 0, None, None, None]),
    ],
)
def test_if_follows_the_documented_tables(expression: str, output: list[float | None]) -> None:
    assert on_grid(expression, GRID, **IF_METRICS) == output


def test_if_on_a_comparison_of_a_series_and_a_number() -> None:
    # "IF(latency>threshold, 1, 0)": 1 or 0 wherever latency has a point, nothing where it has none.
    assert on_grid("IF(latency > 100, 1, 0)", latency=[50, 150, None, 100, 101]) == [0, 1, None, 0, 1]


# --- "Basic arithmetic functions": missing values are 0; a division by zero drops the point ---------------------


def test_arithmetic_treats_a_missing_value_as_0_on_every_timestamp_either_series_has() -> None:
    assert on_grid("a + b", a=[1, None, 3, None, 5], b=[10, 20, None, None, 50]) == [11, 20, 3, None, 55]
    assert on_grid("a - 2 * b", a=[1, None, 3, None, 5], b=[10, 20, None, None, 50]) == [-19, -40, 3, None, -95]


def test_a_division_by_zero_drops_the_point_instead_of_failing() -> None:
    assert on_grid("a / b", a=[6, 6, None, 0, 6], b=[3, 0, 2, None, None]) == [2, None, 0, None, None]


def test_a_series_and_a_number_give_points_where_the_series_has_them() -> None:
    assert on_grid("a / 60", a=[60, None, 120, None, 0]) == [1, None, 2, None, 0]
    assert on_grid("-a", a=[1, None, -2, None, None]) == [-1, None, 2, None, None]


def test_sum_of_an_array_adds_what_is_there() -> None:
    assert on_grid("SUM([a, b])", a=[1, None, 3, None, None], b=[2, 5, None, None, None]) == [3, 5, 3, None, None]
    assert on_grid("MAX([a, b])", a=[1, None, 3, None, None], b=[2, 5, None, None, None]) == [2, 5, 3, None, None]


def test_functions_that_depend_on_how_much_data_the_alarm_fetches_are_refused() -> None:
    # SUM / MAX of one series is one number over the whole query: AWS advises against it in alarms.
    with pytest.raises(MetricMathError, match="use an array"):
        on_grid("MAX(a)", a=[1, 2, 3, 4, 5])


# --- FILL: a value at every timestamp of the query grid, the newest one included ---------------------------------


def test_fill_gives_the_latest_minute_a_value_even_before_its_datapoint_arrived() -> None:
    # The page's warning: metrics published with a delay, and FILL turns the newest minute into the fill value.
    assert on_grid("FILL(a, 0)", a=[5, None, 7, None, None]) == [5, 0, 7, 0, 0]
    assert on_grid("FILL(a, b)", a=[5, None, 7, None, None], b=[1, 2, 3, 4, None]) == [5, 2, 7, 4, None]


def test_whether_fill_fills_a_series_without_any_datapoint_is_a_parameter() -> None:
    assert evaluate_series("FILL(a, 0)", {"a": {}}, GRID) == dict.fromkeys(GRID, 0.0)
    assert evaluate_series("FILL(a, 0)", {"a": {}}, GRID, fill_empty=False) == {}


def test_one_timestamp_at_a_time() -> None:
    assert evaluate("IF(a > 0 AND FILL(b, 0) == 0, 1, 0)", {"a": 3, "b": None}) == 1
    assert evaluate("IF(a > 0 AND FILL(b, 0) == 0, 1, 0)", {"a": None, "b": None}) == 0
    assert evaluate("a / b", {"a": 1, "b": 0}) is None
    assert evaluate("FILL(a, 0) / PERIOD(a)", {"a": 600}, {"a": 300}) == 2


def test_an_expression_must_give_a_series() -> None:
    with pytest.raises(MetricMathError, match="one time series"):
        evaluate("PERIOD(a) * 2", {"a": 1}, {"a": 300})


# --- Alarms: "How alarm state is evaluated when data is missing" --------------------------------------------------


def alarm(m: int, n: int, treat: str) -> Alarm:
    """A 5-minute alarm on one metric, breaching above 3 (X in the docs' tables is a breaching value, 0 is not)."""
    return Alarm(
        expression="m",
        metrics={"m": MetricStat("Maximum", 300)},
        period=300,
        evaluation_periods=n,
        datapoints_to_alarm=m,
        threshold=3,
        comparison="GreaterThanThreshold",
        treat_missing_data=treat,
    )


def table_samples(row: str, now: int) -> dict[str, list[Sample]]:
    """The docs' row, oldest first, as datapoints of the 5 periods before `now` ("X" breaching, "0" not)."""
    points = row.split()
    starts = [now - (len(points) - index) * 300 for index in range(len(points))]
    values = {"X": 10.0, "0": 0.0}
    return {
        "m": [Sample(start, values[point], start) for start, point in zip(starts, points, strict=True) if point != "-"]
    }


NOW = 3000 * 60


@pytest.mark.parametrize(
    ("row", "breaching", "not_breaching"),
    [
        ("0 - X - X", "OK", "OK"),
        ("0 - - - -", "OK", "OK"),
        ("- - - - -", "ALARM", "OK"),
        ("0 X X - X", "ALARM", "ALARM"),
        ("- - - - X", "ALARM", "OK"),
        ("X - - - -", "ALARM", "OK"),
    ],
)
def test_three_of_three_with_five_datapoints_fetched(row: str, breaching: str, not_breaching: str) -> None:
    evaluation = Evaluation(retrieved=5, aligned=True)
    assert state(alarm(3, 3, "breaching"), table_samples(row, NOW), NOW, evaluation) == breaching
    assert state(alarm(3, 3, "notBreaching"), table_samples(row, NOW), NOW, evaluation) == not_breaching


@pytest.mark.parametrize(
    ("row", "breaching", "not_breaching"),
    [
        ("0 - X - X", "ALARM", "ALARM"),
        ("0 0 X 0 X", "ALARM", "ALARM"),
        ("0 - X - -", "ALARM", "OK"),
        ("- - - - 0", "ALARM", "OK"),
        ("- - - - X", "ALARM", "OK"),
    ],
)
def test_two_of_three_with_five_datapoints_fetched(row: str, breaching: str, not_breaching: str) -> None:
    evaluation = Evaluation(retrieved=5, aligned=True)
    assert state(alarm(2, 3, "breaching"), table_samples(row, NOW), NOW, evaluation) == breaching
    assert state(alarm(2, 3, "notBreaching"), table_samples(row, NOW), NOW, evaluation) == not_breaching


def test_the_evaluation_range_is_larger_than_the_evaluation_periods() -> None:
    with pytest.raises(MetricMathError, match="more periods than EvaluationPeriods"):
        state(alarm(3, 3, "breaching"), {}, NOW, Evaluation(retrieved=3))


def test_a_datapoint_counts_once_it_is_visible_and_only_for_complete_periods() -> None:
    one_minute = Alarm("m", {"m": MetricStat("Sum", 60)}, 60, 1, 1, 0, "GreaterThanThreshold", "notBreaching")
    late = {"m": [Sample(at=600, value=1, visible_at=600 + 3 * MINUTE)]}

    states = run(one_minute, late, start=600, end=600 + 5 * MINUTE, evaluation=Evaluation(retrieved=3))

    # The minute 600..660 completes at 660; its datapoint shows at 780: ALARM at 780, 840 (still in range).
    assert states.first("ALARM") == 600 + 3 * MINUTE


# --- The breaks of issue 19, on the alarms as main defined them ------------------------------------------------

OLD_STALLED = Alarm(
    expression="IF(visible > 0 AND FILL(deleted, 0) == 0, 1, 0)",
    metrics={"visible": MetricStat("Minimum", 60), "deleted": MetricStat("Sum", 60)},
    period=60,
    evaluation_periods=10,
    datapoints_to_alarm=10,
    threshold=1,
    comparison="GreaterThanOrEqualToThreshold",
    treat_missing_data="notBreaching",
)


def stuck_queue(stopped_at: int, lag_min: int, end: int) -> dict[str, list[Sample]]:
    """SQS's per-minute datapoints of a queue whose consumer stopped at `stopped_at`: 5 waiting, none deleted."""
    samples: dict[str, list[Sample]] = {"visible": [], "deleted": []}
    for minute in range(stopped_at - 30 * MINUTE, end, MINUTE):
        shown = minute + MINUTE + lag_min * MINUTE
        stopped = minute >= stopped_at
        samples["visible"].append(Sample(minute, 5 if stopped else 0, shown))
        samples["deleted"].append(Sample(minute, 0 if stopped else 3, shown))
    return samples


@pytest.mark.parametrize("lag_min", [1, 2])
def test_mains_stalled_alarm_never_fires_when_sqs_metrics_are_late(lag_min: int) -> None:
    stopped = 6000 * MINUTE
    end = stopped + 120 * MINUTE
    states = run(OLD_STALLED, stuck_queue(stopped, lag_min, end), stopped, end, Evaluation(retrieved=15))
    assert states.first("ALARM") is None


def test_mains_heartbeat_alarm_pages_up_to_its_evaluation_range_after_the_last_heartbeat() -> None:
    old = Alarm("m", {"m": MetricStat("Sum", 900)}, 900, 1, 1, 1, "LessThanThreshold", "breaching")
    last = 6000 * MINUTE
    beats = {"m": [Sample(at, 1, at + 10) for at in range(last - 60 * MINUTE, last + 1, 5 * MINUTE)]}
    first_missed = last + 5 * MINUTE

    for retrieved in (2, 3):
        states = run(old, beats, last, last + 120 * MINUTE, Evaluation(retrieved=retrieved))
        fired = states.first("ALARM")
        assert fired is not None
        # A past 15-minute period that holds the last heartbeat is a real, non-breaching datapoint: the alarm
        # stays OK until that period leaves the evaluation range (26 and 41 minutes after the first missed one).
        assert fired == last + retrieved * 900 + MINUTE
        assert fired - first_missed > 15 * MINUTE
