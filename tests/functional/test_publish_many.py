"""JobPublisher.publish_many: an invalid entry raises the error `publish` would, in one line naming the entry's
index, job and ID, and nothing of the batch is sent."""

from __future__ import annotations

import pytest

from functions.catalog import CATALOG
from sqs_jobs.envelope import MAX_ID_CHARS, Envelope
from sqs_jobs.errors import EnvelopeFieldError, UnknownJobError
from sqs_jobs.publisher import InvalidDelayError, JobPublisher, QueueNotConfiguredError
from tests.functional.conftest import Harness

GOOD = ("order_confirmation", "1001")


def _publisher(harness: Harness, queues: tuple[str, ...] = ("orders", "order_updates")) -> JobPublisher:
    return JobPublisher(
        harness.clients("sqs"), {queue: harness.deployment.queues[queue].url for queue in queues}, catalog=CATALOG
    )


def _nothing_sent(harness: Harness) -> bool:
    return all(harness.queue_counts(queue) == (0, 0) for queue in ("orders", "order_updates"))


def test_an_unknown_job_names_its_entry(harness: Harness) -> None:
    with pytest.raises(UnknownJobError) as raised:
        _publisher(harness).publish_many([GOOD, GOOD, ("send_fax", "12"), GOOD])

    message = str(raised.value)
    assert message.startswith("publish_many entry 2 (job 'send_fax', id '12'): unknown job type 'send_fax'; accepted:")
    assert "\n" not in message
    assert _nothing_sent(harness)


def test_a_hand_built_envelope_names_its_entry_with_its_id_escaped(harness: Harness) -> None:
    hidden = Envelope(job="order_confirmation", id="txt\u202egpj.exe")  # past build_envelope's checks

    with pytest.raises(EnvelopeFieldError) as raised:
        _publisher(harness).publish_many([Envelope(*GOOD), hidden])

    message = str(raised.value)
    assert message.startswith("publish_many entry 1 (job 'order_confirmation', id 'txt\\u202egpj.exe'): field 'id'")
    assert "\u202e" not in message and "\n" not in message
    assert _nothing_sent(harness)


def test_an_empty_id_and_a_long_one_name_their_entries_briefly(harness: Harness) -> None:
    with pytest.raises(EnvelopeFieldError, match=r"^publish_many entry 1 \(job 'order_confirmation', id ''\): "):
        _publisher(harness).publish_many([GOOD, ("order_confirmation", "")])

    long_id = "9" * (MAX_ID_CHARS + 1)
    with pytest.raises(EnvelopeFieldError) as raised:
        _publisher(harness).publish_many([("order_confirmation", long_id)])
    assert str(raised.value).startswith(f"publish_many entry 0 (job 'order_confirmation', id '{'9' * 64}'): ")
    assert len(str(raised.value)) < 300
    assert _nothing_sent(harness)


def test_a_job_whose_queue_has_no_url_names_its_entry(harness: Harness) -> None:
    with pytest.raises(QueueNotConfiguredError, match=r"^publish_many entry 1 \(job 'generate_invoice', id '7'\): "):
        _publisher(harness).publish_many([GOOD, ("generate_invoice", "7")])
    assert _nothing_sent(harness)


def test_a_delay_on_a_fifo_job_names_its_entry_before_anything_is_sent(harness: Harness) -> None:
    # The standard queue's entry comes first: it was sent before the FIFO entry raised
    jobs = [GOOD, ("order_update_mail", "701")]

    with pytest.raises(InvalidDelayError, match=r"^publish_many entry 1 \(job 'order_update_mail', id '701'\): "):
        _publisher(harness).publish_many(jobs, delay_s=5)

    assert _nothing_sent(harness)


def test_an_entry_of_the_wrong_shape_names_its_index_and_what_is_accepted(harness: Harness) -> None:
    with pytest.raises(TypeError) as raised:
        _publisher(harness).publish_many([GOOD, ("order_confirmation",)])  # type: ignore[list-item]

    assert str(raised.value) == (
        "publish_many entry 1 is ('order_confirmation',); accepted: a (job, id) pair or an Envelope"
    )
    assert _nothing_sent(harness)


def test_valid_entries_are_all_sent_in_order(harness: Harness) -> None:
    sent = _publisher(harness).publish_many([GOOD, ("order_update_mail", "701"), ("order_confirmation", "1002")])

    assert len(sent) == 3
    assert harness.queue_counts("orders") == (2, 0) and harness.queue_counts("order_updates") == (1, 0)
