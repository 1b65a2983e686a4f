"""The testing API on a catalog with durable jobs: `deliver` starts the execution in the harness's durable functions
(AWS's durable execution testing SDK), the job waits for its event, the harness's publisher sends it, and
`durable_result` reads how the execution ended; a wait that times out is dead-lettered with its evidence."""

from __future__ import annotations

import json

from sqs_jobs.testing import JobHarness, attributes_of
from tests.functional.sample_jobs import awaits_approval
from tests.functional.test_durable_events import CATALOG, JOB, QUEUE


def test_a_durable_job_waits_for_its_event_and_ends_with_its_payload_through_the_harness() -> None:
    with JobHarness.running(CATALOG) as jobs:
        jobs.publish(JOB, "patient-h1")
        invocation = jobs.deliver(QUEUE)
        assert invocation is not None and invocation.failed_ids == []

        assert jobs.waiting_for(JOB, "patient-h1") == "approved"
        jobs.publisher().send_event(JOB, "patient-h1", "approved", {"by": "a test"})

        ended = jobs.durable_result(JOB, "patient-h1")
        assert ended.status.value == "SUCCEEDED"
        assert json.loads(ended.result) == {"decision": {"by": "a test"}}
        assert jobs.publisher().result(JOB, "patient-h1").state.value == "succeeded"


def test_a_durable_jobs_timed_out_wait_is_dead_lettered_with_its_evidence_through_the_harness() -> None:
    with JobHarness.running(CATALOG) as jobs:
        jobs.publish(JOB, "hasty-h2")
        assert jobs.deliver(QUEUE) is not None

        assert jobs.durable_result(JOB, "hasty-h2").status.value == "FAILED"
        [dead] = jobs.dead_letters(QUEUE)
        evidence = attributes_of(dead)
        assert evidence["jobs.error_type"] == "EventTimeoutError"
        assert f"came within {awaits_approval.SHORT_WAIT_S} s" in evidence["jobs.error_message"]
