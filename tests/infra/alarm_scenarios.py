"""A queue's metrics minute by minute, as SQS, Lambda and the runtime send them, late by a given lag, and the
alarm of a synthesized template run over them (tests/infra/metric_math.py) to say when it would page.

SQS and Lambda publish one datapoint per minute, which CloudWatch shows `lag` minutes after the minute ends. The
runtime's EMF values carry the instant they were flushed and show `lag` minutes after it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from tests.infra.alarm_checks import QueueUnderTest
from tests.infra.metric_math import MINUTE, Alarm, AlarmRun, Evaluation, Sample, run

# The lags each alarm must cope with: SQS's metrics are observed up to 2 minutes late.
LAGS = (0, 1, 2)
# An hour boundary (so 5-minute alignment is a multiple too), well after the epoch.
T0 = 1_800_000_000 // 3600 * 3600
Key = tuple[str, str]


@dataclass
class Scenario:
    """What each metric received, by (metric name, subject): see `QueueUnderTest.model`."""

    lag_min: int
    samples: dict[Key, list[Sample]] = field(default_factory=dict)

    def per_minute(self, metric: str, subject: str, start: int, end: int, value: Callable[[int], float | None]) -> None:
        """One datapoint per minute from `start` to `end` (the minute's value, or None for none)."""
        for minute in range(start, end, MINUTE):
            at = value(minute)
            if at is not None:
                shown = minute + MINUTE + self.lag_min * MINUTE
                self.samples.setdefault((metric, subject), []).append(Sample(minute, at, shown))

    def emitted(self, metric: str, subject: str, values: Iterable[tuple[float, float]]) -> None:
        """EMF values (instant, value) the worker flushed."""
        for at, value in values:
            self.samples.setdefault((metric, subject), []).append(Sample(at, value, at + self.lag_min * MINUTE))


def evaluations(alarm: Alarm) -> list[Evaluation]:
    """Evaluation ranges AWS might use (more than N periods, how many unpublished) and, for periods longer than a
    minute, both places their boundaries might be."""
    n = alarm.evaluation_periods
    alignments = (False,) if alarm.period == MINUTE else (False, True)
    return [Evaluation(retrieved=r, aligned=a) for r in sorted({n + 1, n + 3, 2 * n + 2}) for a in alignments]


def run_alarm(
    under_test: QueueUnderTest, signal: str, scenario: Scenario, start: float, end: float, evaluation: Evaluation
) -> AlarmRun:
    """The template's alarm, evaluated every minute over the scenario."""
    alarm, reads = under_test.model(signal)
    samples = {key: scenario.samples.get(read, []) for key, read in reads.items()}
    return run(alarm, samples, start, end, evaluation)


def first_alarm(
    under_test: QueueUnderTest, signal: str, scenario: Scenario, start: float, end: float, evaluation: Evaluation
) -> float | None:
    return run_alarm(under_test, signal, scenario, start, end, evaluation).first("ALARM")
