"""A background loop for the local engine's stand-ins of AWS's own timers (CloudWatch's sampling, the scheduler)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("sqs_jobs.local")


class Ticker:
    """Calls `tick` every `interval_s` in a daemon thread until `stop()`. A failing tick is logged and the loop
    goes on, as AWS's timers do; one that fails while stopping (the server already gone) is not reported."""

    def __init__(self, name: str, tick: Callable[[], object], interval_s: float) -> None:
        self._name = name
        self._tick = tick
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self._tick()
            except Exception:
                if self._stop.is_set():
                    return
                log.exception("%s: tick failed", self._name)
