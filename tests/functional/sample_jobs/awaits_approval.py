"""A durable job that waits for an approval: a step, then `context.wait_for_event("approved")`, then a step that
uses the event's payload. IDs starting `patient-` wait WAIT_S; others SHORT_WAIT_S (the timeout tests). RAN[id] records
the steps that ran. sample_jobs/awaits_approval_again.py is the same job, its EventTimeoutError transient."""

from __future__ import annotations

from typing import Any

from sqs_jobs.envelope import Envelope

WAIT_S = 120
SHORT_WAIT_S = 1
RAN: dict[str, list[str]] = {}


def run(envelope: Envelope, context: Any) -> dict[str, Any]:
    context.step("prepare", lambda: RAN.setdefault(envelope.id, []).append("prepare"))
    timeout_s = WAIT_S if envelope.id.startswith("patient-") else SHORT_WAIT_S
    decision = context.wait_for_event("approved", timeout_s=timeout_s)

    def apply() -> dict[str, Any]:
        RAN.setdefault(envelope.id, []).append("apply")
        return {"decision": decision}

    applied: dict[str, Any] = context.step("apply", apply)
    return applied
