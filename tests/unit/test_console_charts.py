"""The overview's charts can be read: a scale from 0 to a round number above the peak, so a flat series at its
peak is drawn inside the frame (it was drawn on the frame's edge: a queue with 4 dead letters showed an empty box);
zero sits on the axis; the latest point is marked."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from sqs_jobs.cli.console.charts import HEIGHT, LEFT, TOP, WIDTH, Series, scale_top

START = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
END = START + timedelta(hours=3)


def _ys(points: str) -> list[float]:
    return [float(pair.split(",")[1]) for pair in points.split()]


def _xs(points: str) -> list[float]:
    return [float(pair.split(",")[0]) for pair in points.split()]


@pytest.mark.parametrize(
    ("peak", "top"), [(0, 1), (0.5, 1), (1, 2), (4, 5), (8, 10), (40, 50), (99, 200), (1200, 2000)]
)
def test_the_scale_tops_out_at_a_round_number_a_quarter_above_the_peak(peak: float, top: float) -> None:
    assert scale_top(peak) == top


def test_a_flat_series_at_its_peak_is_a_line_inside_the_frame_not_on_its_edge() -> None:
    four_dead_letters = Series("DLQ depth", [(START + timedelta(minutes=minute), 4.0) for minute in range(0, 180, 5)])

    chart = four_dead_letters.chart(START, END)

    assert chart is not None and chart.top == 5
    ys = set(_ys(chart.points))
    assert ys == {round(TOP + HEIGHT - 4 / 5 * HEIGHT, 1)}
    assert chart.top_y < min(ys) and max(ys) < chart.zero_y  # between the top line and the axis, visibly
    assert (chart.latest_x, chart.latest_y) == (round(max(_xs(chart.points)), 1), round(min(ys), 1))


def test_zero_is_on_the_axis_and_time_runs_left_to_right_across_the_range() -> None:
    chart = Series("failed", [(START, 0.0), (START + timedelta(minutes=90), 2.0), (END, 0.0)]).chart(START, END)

    assert chart is not None
    assert _ys(chart.points)[0] == _ys(chart.points)[-1] == chart.zero_y
    assert _xs(chart.points) == [LEFT, LEFT + WIDTH / 2, LEFT + WIDTH]


def test_a_lone_point_is_a_short_stroke_and_no_data_is_no_chart() -> None:
    lone = Series("backlog", [(END, 3.0)]).chart(START, END)
    assert lone is not None and len(lone.points.split()) == 2
    assert Series("backlog", []).chart(START, END) is None


def test_a_count_is_zero_in_the_minutes_nothing_was_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    # CloudWatch returns no datapoint for a quiet minute: the chart must not carry the last busy minute to "now".
    import boto3
    from moto import mock_aws

    from sqs_jobs.cli.console.charts import queue_charts
    from sqs_jobs.cli.status import job_metric
    from sqs_jobs.specs import JobSpec, QueueSpec
    from sqs_jobs.worker.names import FAILED

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    spec = QueueSpec(name="q", jobs=(JobSpec(name="j", handler="a.b"),))
    now = datetime.now(UTC).replace(second=30, microsecond=0)
    with mock_aws():
        cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
        metric = job_metric("q", "j", FAILED)
        cloudwatch.put_metric_data(
            Namespace=metric["Namespace"],
            MetricData=[
                {
                    "MetricName": FAILED,
                    "Dimensions": metric["Dimensions"],
                    "Timestamp": now - timedelta(minutes=5),
                    "Value": 3,
                }
            ],
        )
        _, charts = queue_charts(cloudwatch, spec, "q", "q-dlq", now)

    failed = next(series for series in charts if series.label.startswith("failed"))
    assert failed.latest == 0 and failed.peak == 3
    assert len(failed.points) >= 181  # a point a minute over 3 hours (and the one counted)
    processed = next(series for series in charts if series.label.startswith("processed"))
    assert processed.points == []  # never counted: no data, not a row of zeros
