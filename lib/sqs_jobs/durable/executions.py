"""What Lambda says of a durable job's executions, for the sweep (sqs_jobs.durable.sweep): which ended since a
time, how each ended, and which of the runtime's own steps it got through.

`DurableExecutions` is the interface: `LambdaDurableExecutions` asks Lambda (ListDurableExecutionsByFunction,
GetDurableExecution, GetDurableExecutionHistory); sqs_jobs.local.durable answers from AWS's durable execution
testing SDK. Both hand the same wire shapes (the APIs' response documents) to the parsers here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from sqs_jobs.durable.ending import DEAD_LETTER_STEP, END_STEP, OUTCOME_STEP

# The statuses of an execution that ended other than SUCCEEDED (API_Execution's Status): FAILED "completed with an
# error", TIMED_OUT "exceeded its execution timeout", STOPPED "A StopDurableExecution request stopped the
# execution" (ListDurableExecutionsByFunction's Statuses).
FAILED = "FAILED"
TIMED_OUT = "TIMED_OUT"
STOPPED = "STOPPED"
ENDED_UNSUCCESSFULLY = (FAILED, TIMED_OUT, STOPPED)
# A history event of a step that succeeded (GetDurableExecutionHistory's EventType), with its result in
# StepSucceededDetails.Result.Payload when IncludeExecutionData is true.
STEP_SUCCEEDED = "StepSucceeded"
# The most a page of ListDurableExecutionsByFunction or GetDurableExecutionHistory may hold (MaxItems 1-1000).
PAGE_MAX = 1000


@dataclass(frozen=True)
class EndedExecution:
    arn: str
    name: str
    status: str
    started_at: float | None
    ended_at: float | None


@dataclass(frozen=True)
class ExecutionEnd:
    """GetDurableExecution of an execution that ended: its input (the dispatcher's payload) and its error."""

    status: str
    input_payload: str | None
    error_type: str | None
    error_message: str | None
    stack_trace: str
    ended_at: float | None


@dataclass(frozen=True)
class RuntimeSteps:
    """Which of the runtime's own steps succeeded, with their checkpointed results: `outcome` (jobs.outcome's
    document) and `dead_letter_id` (jobs.dead_letter's) are None where that step never succeeded, or Lambda
    truncated its result in the history; `ended`: jobs.end succeeded."""

    outcome: str | None = None
    dead_letter_id: str | None = None
    ended: bool = False
    # jobs.outcome succeeded but the history holds no readable result (Lambda truncated it): never guessed at.
    outcome_unreadable: bool = False


class DurableExecutions(Protocol):
    """A durable job's executions, by the job's name."""

    def ended(self, job: str, started_after: datetime) -> Iterable[EndedExecution]:
        """Executions of the job started after `started_after` that ended FAILED, TIMED_OUT or STOPPED."""
        ...

    def end_of(self, job: str, arn: str) -> ExecutionEnd: ...

    def runtime_steps(self, job: str, arn: str) -> RuntimeSteps: ...


def ended_of(summary: Mapping[str, Any]) -> EndedExecution:
    """An `Execution` of ListDurableExecutionsByFunction's DurableExecutions."""
    return EndedExecution(
        arn=str(summary["DurableExecutionArn"]),
        name=str(summary.get("DurableExecutionName") or ""),
        status=str(summary["Status"]),
        started_at=_epoch(summary.get("StartTimestamp")),
        ended_at=_epoch(summary.get("EndTimestamp")),
    )


def end_of(response: Mapping[str, Any]) -> ExecutionEnd:
    """GetDurableExecution's response."""
    error: Mapping[str, Any] = response.get("Error") or {}
    return ExecutionEnd(
        status=str(response["Status"]),
        input_payload=response.get("InputPayload"),
        error_type=error.get("ErrorType"),
        error_message=error.get("ErrorMessage"),
        stack_trace="".join(error.get("StackTrace") or []),
        ended_at=_epoch(response.get("EndTimestamp")),
    )


def runtime_steps_of(events: Iterable[Mapping[str, Any]]) -> RuntimeSteps:
    """The runtime's steps that succeeded, from GetDurableExecutionHistory's Events (in any order)."""
    results: dict[str, str | None] = {}
    for event in events:
        name = event.get("Name")
        if event.get("EventType") != STEP_SUCCEEDED or name not in (OUTCOME_STEP, DEAD_LETTER_STEP, END_STEP):
            continue
        result: Mapping[str, Any] = (event.get("StepSucceededDetails") or {}).get("Result") or {}
        payload = result.get("Payload")
        results[str(name)] = None if result.get("Truncated") or payload is None else _step_result(payload)
    return RuntimeSteps(
        outcome=results.get(OUTCOME_STEP),
        dead_letter_id=results.get(DEAD_LETTER_STEP),
        ended=END_STEP in results,
        outcome_unreadable=OUTCOME_STEP in results and results[OUTCOME_STEP] is None,
    )


class LambdaDurableExecutions:
    """Lambda's durable execution APIs. `functions`: per durable job, its function's alias ARN (the worker's
    JOBS_DURABLE_FUNCTION_<JOB>); the list asks for the function unqualified, so executions of every version come
    back, the ones started before a deploy moved the alias too."""

    def __init__(self, client: Callable[[], Any], functions: Mapping[str, str]) -> None:
        self._client = client
        self._functions = functions

    def ended(self, job: str, started_after: datetime) -> Iterator[EndedExecution]:
        request: dict[str, Any] = {
            "FunctionName": unqualified(self._functions[job]),
            "Statuses": list(ENDED_UNSUCCESSFULLY),
            "StartedAfter": started_after,
            "MaxItems": PAGE_MAX,
        }
        while True:
            response = self._client().list_durable_executions_by_function(**request)
            yield from (ended_of(summary) for summary in response.get("DurableExecutions", []))
            if not response.get("NextMarker"):
                return
            request["Marker"] = response["NextMarker"]

    def end_of(self, job: str, arn: str) -> ExecutionEnd:
        return end_of(self._client().get_durable_execution(DurableExecutionArn=arn, IncludeExecutionData=True))

    def runtime_steps(self, job: str, arn: str) -> RuntimeSteps:
        """Newest events first ("When set to true, returns the history events in reverse chronological order"):
        an execution that ended itself shows `jobs.end` on the first page, and the pages after are not read. Any
        other is read whole, so the answer never depends on the order."""
        request: dict[str, Any] = {
            "DurableExecutionArn": arn,
            "IncludeExecutionData": True,
            "MaxItems": PAGE_MAX,
            "ReverseOrder": True,
        }
        events: list[Mapping[str, Any]] = []
        while True:
            response = self._client().get_durable_execution_history(**request)
            events.extend(response.get("Events", []))
            steps = runtime_steps_of(events)
            if steps.ended or not response.get("NextMarker"):
                return steps
            request["Marker"] = response["NextMarker"]


def unqualified(function_arn: str) -> str:
    """A function's ARN without its version or alias (`arn:aws:lambda:<region>:<account>:function:<name>`)."""
    parts = function_arn.split(":")
    return ":".join(parts[:7]) if len(parts) > 7 and parts[5] == "function" else function_arn


def _step_result(payload: str) -> str | None:
    """A step's checkpointed result as the SDK serialized it (JSON): the runtime's steps return strings."""
    try:
        value = json.loads(payload)
    except ValueError:
        return None
    return value if isinstance(value, str) else None


def _epoch(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.timestamp()
    return float(value)
