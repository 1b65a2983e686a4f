"""Long console actions (redrive, discard) run in a thread; their page follows the progress and shows the result.

Kept in memory for the console's lifetime: the console is one operator's process, and every result that matters
is also in SQS (what moved, what came back) or in the archive the operator downloads.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"


@dataclass
class Operation:
    id: str
    kind: str
    queue: str
    total: int
    done: int = 0
    phase: str = "starting"
    state: str = RUNNING
    result: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    # A discard's archive file (JSON Lines), offered as a download once it finished.
    archive: str | None = None
    started_at: float = field(default_factory=time.time)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def advance(self, count: int) -> None:
        with self._lock:
            self.done += count

    def enter(self, phase: str) -> None:
        with self._lock:
            self.phase = phase

    @property
    def finished(self) -> bool:
        return self.state != RUNNING


# What an operation runs: gets the Operation to report progress on, returns the result to show.
Work = Callable[[Operation], dict[str, Any]]


class Operations:
    def __init__(self, describe_error: Callable[[BaseException], str | None]) -> None:
        self._operations: dict[str, Operation] = {}
        self._lock = threading.Lock()
        # Turns an error the operator can act on into one line; None for a bug (shown as such, logged by Flask).
        self._describe_error = describe_error

    def start(self, kind: str, queue: str, total: int, work: Work) -> Operation:
        operation = Operation(id=secrets.token_hex(8), kind=kind, queue=queue, total=total)
        with self._lock:
            self._operations[operation.id] = operation
        thread = threading.Thread(target=self._run, args=(operation, work), name=f"console-{kind}", daemon=True)
        thread.start()
        return operation

    def _run(self, operation: Operation, work: Work) -> None:
        try:
            operation.result = work(operation)
            operation.state = SUCCEEDED if not operation.result.get("problem") else FAILED
        except Exception as error:
            operation.error = self._describe_error(error) or f"unexpected error: {type(error).__name__}"
            operation.state = FAILED
        operation.enter("finished")

    def get(self, operation_id: str) -> Operation | None:
        with self._lock:
            return self._operations.get(operation_id)
