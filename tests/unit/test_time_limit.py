"""The time limit interrupts the job's own code only, never the runtime around it."""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any, cast

from functions.worker.jobs import JobContext, LoadedJob
from functions.worker.runtime import _inside_job, _run_job
from sqs_jobs.catalog import JobSpec
from sqs_jobs.envelope import Envelope


def test_only_frames_below_the_jobs_entry_count_as_the_job() -> None:
    frames: dict[str, FrameType] = {}

    def helper() -> None:
        frames["called by the job"] = sys._getframe()

    def run(_envelope: Envelope, _context: JobContext) -> None:
        frames["job"] = sys._getframe()
        frames["entry"] = sys._getframe(1)  # _run_job itself: the job not started yet, or already returned
        helper()

    job = LoadedJob(spec=JobSpec(name="x", handler="x.y"), run=run, key_function=lambda envelope: envelope.id)
    _run_job(job, Envelope(job="x", id="1"), cast(Any, None))

    assert frames["entry"].f_code is _run_job.__code__
    assert _inside_job(frames["job"])
    assert _inside_job(frames["called by the job"])
    assert not _inside_job(frames["entry"])
    assert not _inside_job(sys._getframe())  # the runtime, outside any job
    assert not _inside_job(None)
