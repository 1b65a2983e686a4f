"""bench.debounce's goals and argument checks (its figures are make bench's; the burst itself is tested on the real
worker in tests/functional/test_unique_jobs.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench.debounce import Result, main, render

MET = Result(
    publishes=100,
    window_s=5,
    publish_s=0.2,
    runs=1,
    run_keys=["debounced:42@2026-12-03T13:22:15.855Z"],
    run_after_last_publish_s=5.9,
    superseded=99,
    waits=38,
    receives=138,
    state_writes=138,
    state_writes_refused=99,
    run_writes=2,
    wall_s=10.0,
)


def test_the_goals_are_one_run_after_the_window_and_at_most_two_state_writes_per_delivery() -> None:
    assert MET.met() == {"runs": True, "after the window": True, "state writes per delivery": True}
    assert MET.state_writes_per_delivery == 1.0
    assert replace(MET, runs=2).met()["runs"] is False
    assert replace(MET, run_after_last_publish_s=4.99).met()["after the window"] is False
    assert replace(MET, run_after_last_publish_s=None).met()["after the window"] is False
    assert replace(MET, state_writes=277).met()["state writes per delivery"] is False
    assert "NOT met" in render(replace(MET, runs=2)) and "NOT met" not in render(MET)


@pytest.mark.parametrize(
    ("argv", "problem"), [(["--publishes", "0"], "--publishes"), (["--window-s", "900"], "--window-s")]
)
def test_bad_arguments_are_named(argv: list[str], problem: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)

    assert exited.value.code == 2
    assert problem in capsys.readouterr().err
