"""moto's SQS, taught what AWS's does with `SenderId`: record who sent each message.

AWS sets a message's SenderId to the caller's IAM identity (a user's ID, or `<role ID>:<session>` for an
assumed role), and the runtime trusts its `jobs.*` attributes only on messages its own role sent
(sqs_jobs.worker.provenance). moto gives every message one fixed SenderId, which would make a producer and
the worker look alike. This patch fills SenderId from moto's own STS/IAM view of the request's access key: the
same answer `GetCallerIdentity` gives for it, so a worker running on credentials from `AssumeRole` sends as
`<its role's ID>:<session>`, as on AWS. Messages moto creates without a request (its redrive moves the existing
message object) keep what they had.

Used by the local engine and the tests; `record_senders()` is idempotent.
"""

from __future__ import annotations

import contextvars
import functools
import threading
from collections.abc import Callable
from typing import Any

from moto.sqs.models import Message
from moto.sqs.responses import SQSResponse
from moto.sts.models import sts_backends

_SENDER: contextvars.ContextVar[str | None] = contextvars.ContextVar("jobs_sqs_sender", default=None)
_PATCH_LOCK = threading.Lock()
_PATCHED = "_jobs_records_senders"
_SEND_ACTIONS = ("send_message", "send_message_batch")


def caller_user_id(response: SQSResponse) -> str:
    """What STS GetCallerIdentity answers as UserId for the request's access key, in moto's backends."""
    backend = sts_backends[response.current_account][response.partition]
    user_id, _arn, _account = backend.get_caller_identity(response.get_access_key(), response.region)
    return str(user_id)


def _with_sender(action: Callable[[SQSResponse], Any]) -> Callable[[SQSResponse], Any]:
    @functools.wraps(action)
    def send(self: SQSResponse) -> Any:
        token = _SENDER.set(caller_user_id(self))
        try:
            return action(self)
        finally:
            _SENDER.reset(token)

    return send


def _stamping(init: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(init)
    def stamped(self: Message, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        sender = _SENDER.get()
        if sender:
            self.sender_id = sender

    return stamped


def record_senders() -> None:
    """Patch moto's SQS, once per process, so that SenderId names the IAM identity that sent each message."""
    with _PATCH_LOCK:
        if getattr(SQSResponse, _PATCHED, False):
            return
        for name in _SEND_ACTIONS:
            setattr(SQSResponse, name, _with_sender(getattr(SQSResponse, name)))
        Message.__init__ = _stamping(Message.__init__)  # type: ignore[method-assign]
        setattr(SQSResponse, _PATCHED, True)
