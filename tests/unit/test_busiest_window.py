"""The fake invoicing API's busiest window (bench.rate_limit's and the soak's figure): counted over sliding windows,
ends included."""

from __future__ import annotations

from example.standins.invoicing import most_in_any_window


def test_the_busiest_window_is_found_wherever_it_starts() -> None:
    # 0.5 .. 1.4 holds four events; no fixed second (0-1, 1-2) holds more than three.
    times = [0.1, 0.5, 0.9, 1.0, 1.4, 2.6]

    assert most_in_any_window(times, 1.0) == 4
    assert most_in_any_window(times, 0.0) == 1
    assert most_in_any_window([], 1.0) == 0


def test_both_ends_of_a_window_count() -> None:
    assert most_in_any_window([0.0, 1.0], 1.0) == 2
