"""jobctl's reading of a rate limit's bucket: free tokens from its GCRA `tat`, as whole tokens."""

from __future__ import annotations

from sqs_jobs.cli.flow_limits import LimitView, tokens_free
from sqs_jobs.flow_control import DeclaredLimit, RateLimit

T = 1_900_000_000.123457
PACED = RateLimit(per_second=1, burst=4)


def test_a_tat_the_store_rounded_to_microseconds_still_counts_its_whole_tokens() -> None:
    # The runtime writes tat with 6 decimals: three tokens taken at T may read back a hair past T + 3.
    view = LimitView(DeclaredLimit("job:x", PACED), tokens_free=tokens_free(PACED, T + 3.000001, T))

    assert view.state() == "1 of 4 token(s) free now"
    assert view.to_dict()["tokens_free"] == 1


def test_a_bucket_ahead_of_its_capacity_has_no_token_and_an_idle_one_all_of_them() -> None:
    assert tokens_free(PACED, T + 10, T) == 0.0
    assert tokens_free(PACED, T - 100, T) == tokens_free(PACED, None, T) == 4.0
