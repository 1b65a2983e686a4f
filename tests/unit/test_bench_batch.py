"""bench.batch on a small batch: each callback exactly once, on the real workers under the engine's chaos."""

from __future__ import annotations

import pytest

from bench import batch


@pytest.mark.slow
def test_a_small_batch_under_chaos_calls_back_exactly_once() -> None:
    result = batch.run(members=50)
    assert (result.permanent, result.dead_lettered, result.redriven) == (1, 1, 1)
    assert (result.complete_runs_first, result.success_runs_first) == (1, 0)
    assert (result.complete_runs_after, result.success_runs_after) == (1, 1)
    assert result.complete_after_last_member and result.ended_when_completed == 50
    assert result.met
