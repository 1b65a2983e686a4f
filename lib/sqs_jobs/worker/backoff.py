"""Exponential backoff with full jitter, in whole seconds, for SQS visibility timeouts."""

from __future__ import annotations

import math
import random

from sqs_jobs.limits import SQS_MAX_VISIBILITY_S


def backoff_ceiling_s(attempt: int, base_s: float, cap_s: float) -> float:
    """`min(cap, base * 2^(attempt-1))`, never past SQS's 12-hour visibility limit."""
    exponent = max(0, attempt - 1)
    # 2**exponent overflows float range near exponent 1024: past 60 doublings the cap has long won.
    growth = base_s * (2 ** min(exponent, 60))
    return float(min(cap_s, growth, SQS_MAX_VISIBILITY_S))


def backoff_delay_s(attempt: int, base_s: float, cap_s: float, rng: random.Random, floor_s: float | None = None) -> int:
    """Full jitter: uniform in [0, ceiling] (AWS's "full jitter"), raised to `floor_s` (a Retry-After) if given."""
    ceiling = backoff_ceiling_s(attempt, base_s, cap_s)
    delay = rng.uniform(0, ceiling)
    if floor_s is not None:
        delay = max(delay, min(floor_s, SQS_MAX_VISIBILITY_S))
    return min(SQS_MAX_VISIBILITY_S, math.ceil(delay))
