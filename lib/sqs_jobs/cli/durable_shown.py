"""A durable job's execution as `jobctl job show` and the console say it, from its durable record
(sqs_jobs.durable.record): status, steps done, the step running or retrying, its next retry, the heartbeat."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqs_jobs.durable.record import DurableState

# A running execution whose record has not been written for this long says so (the heartbeat): its step may be
# long, or its invocation was lost and Lambda replays it soon, or it timed out (no code runs then).
STALE_BEAT_S = 15 * 60


def _at(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, tz=UTC).isoformat(timespec="seconds")


def durable_lines(state: DurableState, now: datetime) -> list[str]:
    """What the record says, one fact a line."""
    if state.status is None:
        return [f"durable execution: none started for this key (generation {state.generation})"]
    name = state.execution_name or "(unknown)"
    lines = [f"durable execution {name}: {state.status}, {state.steps_done} step(s) done"]
    if state.step is not None and state.status in ("RUNNING", "STARTING"):
        attempt = f" (attempt {state.step_attempt})" if state.step_attempt is not None else " (done)"
        lines.append(f"  current step: {state.step}{attempt}")
    if state.next_retry_at is not None and state.status == "RUNNING":
        lines.append(f"  next retry:   {_at(state.next_retry_at)}")
    if state.waiting_for is not None and state.status == "RUNNING":
        since = f" since {_at(state.waiting_since)}" if state.waiting_since is not None else ""
        until = f", until {_at(state.waiting_until)}" if state.waiting_until is not None else ""
        lines.append(f"  waiting for:  event {state.waiting_for!r}{since}{until} (jobctl job event sends it)")
    if state.last_error_type is not None:
        lines.append(f"  last error:   {state.last_error_type}: {state.last_error or ''}")
    if state.execution_arn:
        lines.append(f"  execution:    {state.execution_arn}")
    if state.note:
        lines.append(f"  progress:     {state.note}")
    if state.started_at is not None:
        lines.append(f"  started at:   {_at(state.started_at)}")
    if state.ended_at is not None:
        lines.append(f"  ended at:     {_at(state.ended_at)}")
    if state.beat_at is not None:
        age_s = now.timestamp() - state.beat_at
        beat = f"  heartbeat:    {_at(state.beat_at)} ({age_s:.0f} s ago)"
        waits = state.next_retry_at is not None or state.waiting_for is not None
        if state.status == "RUNNING" and age_s > STALE_BEAT_S and not waits:
            beat += "; stale: a long step, a lost invocation Lambda replays, or a timed-out execution"
        lines.append(beat)
    if state.status == "FAILED":
        lines.append(f"  a redrive of its dead letter starts execution generation {state.generation}")
    return lines
