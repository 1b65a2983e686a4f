"""A chain chosen while running: `step_one` names `step_two` as its next step (`context.then`); an ID starting
"rogue" names a job its catalog entry does not let it publish. Every run is recorded."""

from __future__ import annotations

from functions.worker.jobs import JobContext
from sqs_jobs.envelope import Envelope

RUNS: list[str] = []


def run(envelope: Envelope, context: JobContext) -> str:
    RUNS.append(f"{envelope.job}:{envelope.id}")
    if envelope.job == "step_one":
        context.then("step_two" if not envelope.id.startswith("rogue") else "step_one", envelope.id, key=None)
    return f"{envelope.job} done"
