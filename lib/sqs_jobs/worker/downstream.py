"""Every call a job makes to a downstream, through `context.http` or `context.client(...)`, passes here:

- the time limit's fence (sqs_jobs.worker.time_limit): a run that was cut can make no further call, and a
  call that answers after the cut is reported and its answer refused;
- the circuit breakers (sqs_jobs.worker.breaker): one per HTTP host, one per AWS service; an open one
  refuses the call without making it (CircuitOpenError), and each call's outcome feeds its breaker. An HTTP 401
  or 403 (the deployment's credentials refused) opens the host's breaker at once (DownstreamAuthError).

Both act only in a job thread (`current_run()`): the runtime's own calls (idempotency table, DLQ, its queue) on
the same clients pass untouched. AWS calls are seen through botocore's event hooks, registered on every client
the worker's ClientFactory makes; HTTP calls through `guard_http`, which the worker's HttpClient calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

from sqs_jobs.worker.errors import (
    DownstreamAuthError,
    HttpCredentialsRefusedError,
    HttpPermanentError,
    HttpTransientError,
)
from sqs_jobs.worker.time_limit import JobRun, current_run

T = TypeVar("T")

_TICKET = "jobs.breaker_ticket"
# botocore's events: `<name>.<service id>.<operation>`. The check runs on the first event of a call, before any
# before-call hook: botocore calls the handlers of a more specific event name first, and a before-call hook that
# answers itself (an injected fault, a stub) ends the chain, so a generic before-call handler could be skipped.
_BEFORE_CALL = "before-parameter-build"
# Each HTTP attempt of a call, botocore's own retries included: a run cut while its call waited for a retry must
# not send that retry.
_BEFORE_SEND = "before-send"
_AFTER_CALL = "after-call"
_AFTER_CALL_ERROR = "after-call-error"
_HOOK_ID = "jobs.downstream"
# How long a record whose credentials were refused waits when its queue has no breakers: not a busy loop.
UNBROKEN_AUTH_HOLD_S = 30.0


def http_downstream(url: str) -> str:
    """The breaker name of an HTTP call: its scheme, host and port (one per host, whatever the path)."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    default_port = {"http": 80, "https": 443}.get(parts.scheme)
    port = parts.port if parts.port not in (None, default_port) else None
    return f"{parts.scheme}://{host}" + (f":{port}" if port else "")


def guard_http(method: str, url: str, call: Callable[[], T]) -> T:
    """Make one HTTP call of a job through the fence and the host's breaker."""
    run = current_run()
    if run is None:
        return call()
    downstream = http_downstream(url)
    what = f"{method} {downstream}"
    run.refuse_if_cut(what)
    run.raise_if_cancelled()
    run.limit_call(downstream)
    ticket = run.breakers.admit(downstream) if run.breakers is not None else None
    if ticket is not None:
        run.hold(ticket)
    outcome = "raised"
    try:
        result = call()
        outcome = "answered"
    except HttpTransientError as error:
        if ticket is not None:
            ticket.failed(f"{type(error).__name__}: {error}")
        raise
    except HttpCredentialsRefusedError as error:
        outcome = "answered"
        # The deployment's credentials are refused, for every job of this host: the host's breaker opens now and
        # the job is held like the others, spending no attempt (DownstreamAuthError is a breaker's refusal).
        open_for_s = ticket.tripped(str(error)) if ticket is not None else UNBROKEN_AUTH_HOLD_S
        raise DownstreamAuthError(
            f"{error}: the credentials the deployment sends were refused (a wrong, expired or rotated key?); "
            f"calls to {downstream} are held while its breaker is open",
            downstream=downstream,
            retry_after_s=open_for_s,
            open_for_s=open_for_s,
        ) from error
    except HttpPermanentError:
        outcome = "answered"
        if ticket is not None:
            ticket.succeeded()  # an answer, even a refusal, is a downstream that is up
        raise
    except BaseException:
        if ticket is not None:
            ticket.abandoned()
        raise
    else:
        if ticket is not None:
            ticket.succeeded()
    finally:
        if ticket is not None:
            run.release(ticket)
        run.answered_after_cut(what, outcome)
    return result


def register_aws_hooks(events: Any) -> None:
    """Hook a botocore client's events (idempotent). The check runs before the request is built, so a refused call
    is never made, injected faults included."""
    events.register_first(_BEFORE_CALL, _before_call, unique_id=f"{_HOOK_ID}.before")
    events.register_first(_BEFORE_SEND, _before_send, unique_id=f"{_HOOK_ID}.send")
    events.register(_AFTER_CALL, _after_call, unique_id=f"{_HOOK_ID}.after")
    events.register(_AFTER_CALL_ERROR, _after_call_error, unique_id=f"{_HOOK_ID}.error")


def _service(event_name: str) -> str:
    parts = event_name.split(".")
    return parts[1] if len(parts) > 1 else event_name


def _operation(event_name: str) -> str:
    parts = event_name.split(".")
    return ".".join(parts[1:3]) if len(parts) > 2 else event_name


def _job_run() -> JobRun | None:
    """The job's run making this call, if a job's run makes it (not the runtime's own calls from its thread: the
    read of a cancel, a rate limit's lease)."""
    run = current_run()
    return None if run is None or run.runtime_calling else run


def _before_call(event_name: str = "", context: dict[str, Any] | None = None, **_: Any) -> None:
    run = _job_run()
    if run is None:
        return
    run.refuse_if_cut(_operation(event_name))
    run.raise_if_cancelled()
    run.limit_call(_service(event_name))
    ticket = run.breakers.admit(_service(event_name)) if run.breakers is not None else None
    if ticket is not None and context is not None:
        run.hold(ticket)
        context[_TICKET] = ticket


def _before_send(event_name: str = "", **_: Any) -> None:
    run = _job_run()
    if run is not None:
        run.refuse_if_cut(_operation(event_name))


def _after_call(
    event_name: str = "",
    http_response: Any = None,
    parsed: dict[str, Any] | None = None,
    context: dict[str, Any] | None = None,
    **_: Any,
) -> None:
    run = _job_run()
    if run is None:
        return
    ticket = (context or {}).pop(_TICKET, None)
    status = getattr(http_response, "status_code", 0) or 0
    if ticket is not None:
        code = str(((parsed or {}).get("Error") or {}).get("Code", ""))
        if _aws_transient(status, code):
            ticket.failed(f"{_operation(event_name)}: {code or status}")
        else:
            ticket.succeeded()
        run.release(ticket)
    run.answered_after_cut(_operation(event_name), f"answered {status}")


def _after_call_error(
    event_name: str = "", exception: BaseException | None = None, context: dict[str, Any] | None = None, **_: Any
) -> None:
    run = _job_run()
    if run is None:
        return
    ticket = (context or {}).pop(_TICKET, None)
    if ticket is not None:
        from sqs_jobs.worker.classify import classify  # failure path

        if exception is not None and classify(exception).transient:
            ticket.failed(f"{_operation(event_name)}: {type(exception).__name__}")
        else:
            ticket.abandoned()
        run.release(ticket)
    run.answered_after_cut(_operation(event_name), f"raised {type(exception).__name__}")


def _aws_transient(status: int, code: str) -> bool:
    if status >= 500:
        return True
    if status < 400:
        return False
    from sqs_jobs.worker.classify import AWS_TRANSIENT_CODES  # failure path

    return code in AWS_TRANSIENT_CODES
