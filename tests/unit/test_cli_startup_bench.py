"""bench.cli_startup runs what it says it measures: the figures' commands all run, and the ratio is theirs."""

from __future__ import annotations

import sys

from bench import cli_startup


def test_the_benchmark_times_help_against_import_boto3() -> None:
    timed = cli_startup.commands()
    assert timed[cli_startup.SUBJECT] == [sys.executable, "-m", "sqs_jobs.cli", "--help"]
    assert [sys.executable, "-c", "import boto3"] in timed.values()
    result = cli_startup.measure(runs=1)
    best, ratio = result["best_ms"], result["ratio_to_import_boto3"]
    assert isinstance(best, dict) and isinstance(ratio, dict)
    assert set(best) == set(timed) and all(value > 0 for value in best.values())
    assert ratio["best"] == best[cli_startup.SUBJECT] / best['python -c "import boto3"']
