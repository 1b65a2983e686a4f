"""Durable jobs: a job that runs as a Lambda durable execution, in checkpointed steps, past Lambda's 15 minutes.

Its queue's worker only starts the execution (an asynchronous Invoke named from the job's key) and acknowledges the
record; the job's code runs in the job's own durable function, step by step (sqs_jobs.durable). Bounds are
AWS's: DurableConfig's ExecutionTimeout is 1..31,622,400 s (366 days) and RetentionPeriodInDays 1..90
(https://docs.aws.amazon.com/lambda/latest/api/API_DurableConfig.html). docs/workflows.md, "Durable jobs".
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from sqs_jobs.limits import DAY, LAMBDA_MAX_TIMEOUT_S, MINUTE, SETTLE_MARGIN_S

# DurableConfig's bounds (API_DurableConfig): an execution may run up to a year of 366 days, and its history is kept
# 1 to 90 days after it ends.
DURABLE_MAX_EXECUTION_TIMEOUT_S = 31_622_400
DURABLE_MAX_RETENTION_DAYS = 90
# A durable execution's name (the Invoke's DurableExecutionName): 1..64 of [a-zA-Z0-9-_] (API_Execution).
EXECUTION_NAME_MAX = 64


@dataclass(frozen=True)
class Durable:
    """How a durable job's execution runs. Its steps are retried by the queue's rules (max_attempts, backoff_base_s,
    backoff_cap_s, the project's classification of errors), each within `step_time_limit_s`."""

    # The whole execution's limit (DurableConfig.ExecutionTimeout), across every invocation and wait.
    execution_timeout_s: int = DAY
    # How long Lambda keeps a finished execution's history (DurableConfig.RetentionPeriodInDays).
    retention_days: int = 14
    # One invocation of the durable function: a step must finish within one (the SDK checkpoints between steps).
    function_timeout_s: int = LAMBDA_MAX_TIMEOUT_S
    # One step's time limit: cut there, the step fails as a transient error and is retried after a backoff.
    step_time_limit_s: int = 5 * MINUTE
    memory_mb: int = 512

    def problems(self, where: str) -> list[str]:
        found: list[str] = []
        if not 1 <= self.execution_timeout_s <= DURABLE_MAX_EXECUTION_TIMEOUT_S:
            found.append(
                f"{where}: durable.execution_timeout_s {self.execution_timeout_s} is outside "
                f"1..{DURABLE_MAX_EXECUTION_TIMEOUT_S} (366 days, Lambda's DurableConfig.ExecutionTimeout)"
            )
        if not 1 <= self.retention_days <= DURABLE_MAX_RETENTION_DAYS:
            found.append(
                f"{where}: durable.retention_days {self.retention_days} is outside 1..{DURABLE_MAX_RETENTION_DAYS} "
                "(Lambda's DurableConfig.RetentionPeriodInDays)"
            )
        if not 1 <= self.function_timeout_s <= LAMBDA_MAX_TIMEOUT_S:
            found.append(
                f"{where}: durable.function_timeout_s {self.function_timeout_s} is outside 1..{LAMBDA_MAX_TIMEOUT_S}"
            )
        elif not 1 <= self.step_time_limit_s <= self.function_timeout_s - SETTLE_MARGIN_S:
            found.append(
                f"{where}: durable.step_time_limit_s {self.step_time_limit_s} must be 1..function_timeout_s - "
                f"{SETTLE_MARGIN_S} ({self.function_timeout_s - SETTLE_MARGIN_S}): a step runs within one invocation, "
                "with time left to checkpoint its failure"
            )
        if not 128 <= self.memory_mb <= 10_240:
            found.append(f"{where}: durable.memory_mb {self.memory_mb} is outside 128..10240")
        return found


def durable_job_problems(where: str, durable: object, *, fifo: bool, limited: bool, exclusive: bool) -> list[str]:
    """A job's `durable` setting: of its type, within AWS's bounds, and not where its promise can't be kept."""
    if durable is None:
        return []
    if not isinstance(durable, Durable):
        return [f"{where}: durable must be a Durable(...) or None, not {type(durable).__name__}"]
    found = durable.problems(where)
    if fifo:
        found.append(
            f"{where}: durable jobs can't be on a FIFO queue: the worker acknowledges the record when the execution "
            "starts, so the next of its message group would not wait for it to end"
        )
    if limited:
        found.append(
            f"{where}: durable jobs take no rate_limit or concurrency: those admit runs in the queue's worker, "
            "and a durable job's steps run in its own durable function"
        )
    if exclusive:
        found.append(
            f"{where}: durable jobs take no unique_for_s or debounce_s: the execution's name, from the job's key, "
            "already runs one execution per key"
        )
    return found


_NOT_NAME = re.compile(r"[^a-zA-Z0-9_-]")


def execution_name(key: str, generation: int) -> str:
    """The durable execution's name for a job key (`<job>:<key>`) and the key's generation: readable (the job's name
    first), within Lambda's 64 characters of [a-zA-Z0-9-_], and the same for the same key and generation, so a
    second start is Lambda's no-op. A digest of the whole key, not the key itself: keys may hold any character."""
    job = _NOT_NAME.sub("_", key.split(":", 1)[0])[:30]
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:24]
    return f"{job}-{digest}-g{generation}"[:EXECUTION_NAME_MAX]


__all__ = ["Durable", "durable_job_problems", "execution_name"]
