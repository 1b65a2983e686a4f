"""The decisions of unique and debounced jobs (lib/sqs_jobs/worker/uniqueness.py): pure functions of the copies' first
sends, their idempotency records and the time. The worker's part, on moto: tests/functional/test_unique_jobs.py."""

from __future__ import annotations

import pytest

from sqs_jobs.envelope import Envelope
from sqs_jobs.specs import JobSpec
from sqs_jobs.worker.errors import IdempotencyKeyError, UniqueKeyError
from sqs_jobs.worker.uniqueness import (
    Claim,
    Copy,
    DebounceState,
    DebounceVerdict,
    FlowKey,
    FlowKind,
    UniqueVerdict,
    debounce_verdict,
    debounced_run_key,
    flow_key,
    unique_verdict,
    wait_s,
)

WINDOW_MS = 60_000
T = 1_800_000_000_000  # a first send, epoch ms
SPEC = JobSpec(name="reindex", handler="functions.jobs.reindex", unique_for_s=60)


def copy(sent_ms: int, record: str = "jobs#a") -> Copy:
    return Copy(sent_ms=sent_ms, record=record)


def claim_by(claimant: Copy) -> Claim:
    return Claim(start_ms=claimant.sent_ms, end_ms=claimant.sent_ms + WINDOW_MS, claimant=claimant)


# --- unique ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sent_ms", "record", "verdict"),
    [
        (T + 1, "jobs#b", UniqueVerdict.DROP),  # another publish within the window
        (T + WINDOW_MS - 1, "jobs#b", UniqueVerdict.DROP),  # the window's last millisecond
        (T + WINDOW_MS, "jobs#b", UniqueVerdict.CLAIM),  # the window has ended: a new one starts here
        (T + 5_000, "jobs#a", UniqueVerdict.CLAIMANT),  # a fresh copy of the claimant (its key, any send)
        (T, "jobs#a", UniqueVerdict.CLAIMANT),  # the claimant redelivered, retried or redriven
        (T - 1, "jobs#b", UniqueVerdict.DROP),  # sent just before the claimant, consumed after it
        (T - WINDOW_MS + 1, "jobs#b", UniqueVerdict.DROP),  # still within a window of the claim
        (T - WINDOW_MS, "jobs#b", UniqueVerdict.EARLIER),  # an earlier window's: it runs, the claim stays
    ],
)
def test_a_copy_within_a_claimed_window_is_dropped_and_the_claimant_always_runs(
    sent_ms: int, record: str, verdict: UniqueVerdict
) -> None:
    assert unique_verdict(claim_by(copy(T)), copy(sent_ms, record), WINDOW_MS) is verdict


def test_with_no_live_claim_the_first_copy_consumed_claims() -> None:
    assert unique_verdict(None, copy(T), WINDOW_MS) is UniqueVerdict.CLAIM
    assert [verdict.runs for verdict in UniqueVerdict] == [True, True, True, False]


# --- debounce --------------------------------------------------------------------------------------------------


def test_a_copy_waits_until_its_window_ends_then_runs_if_still_the_latest() -> None:
    mine = copy(T)
    state = DebounceState(latest=mine)

    assert debounce_verdict(None, mine, WINDOW_MS, T) is DebounceVerdict.WAIT
    assert debounce_verdict(state, mine, WINDOW_MS, T + WINDOW_MS - 1) is DebounceVerdict.WAIT
    assert debounce_verdict(state, mine, WINDOW_MS, T + WINDOW_MS) is DebounceVerdict.RUN
    # No state at all once its window has ended (a backlog delivered it late, its state expired): it runs.
    assert debounce_verdict(None, mine, WINDOW_MS, T + 10 * WINDOW_MS) is DebounceVerdict.RUN


def test_a_later_publish_supersedes_an_earlier_one_in_or_after_its_window() -> None:
    later = DebounceState(latest=copy(T + 1, "jobs#b"))

    assert debounce_verdict(later, copy(T), WINDOW_MS, T + 5) is DebounceVerdict.SUPERSEDED
    assert debounce_verdict(later, copy(T), WINDOW_MS, T + WINDOW_MS) is DebounceVerdict.SUPERSEDED
    # An earlier registration never holds a later copy back.
    assert debounce_verdict(DebounceState(latest=copy(T)), copy(T + 1, "jobs#b"), WINDOW_MS, T + 5) is (
        DebounceVerdict.WAIT
    )


def test_copies_sent_in_the_same_millisecond_are_ordered_by_their_idempotency_record() -> None:
    assert copy(T, "jobs#a") < copy(T, "jobs#b")
    registered = DebounceState(latest=copy(T, "jobs#b"))

    assert debounce_verdict(registered, copy(T, "jobs#a"), WINDOW_MS, T) is DebounceVerdict.SUPERSEDED
    assert debounce_verdict(registered, copy(T, "jobs#b"), WINDOW_MS, T) is DebounceVerdict.WAIT
    # One publish in two messages (a redelivery, a fresh copy): alike in both, whatever their message IDs.
    assert Copy(T, "jobs#b", message_id="m1") == Copy(T, "jobs#b", message_id="m2")


def test_the_copy_that_fired_runs_again_after_a_failed_run_even_once_a_later_one_registered() -> None:
    winner = copy(T)
    fired = DebounceState(latest=copy(T + 2 * WINDOW_MS, "jobs#b"), fired=winner)

    assert debounce_verdict(fired, winner, WINDOW_MS, T + 2 * WINDOW_MS + 5) is DebounceVerdict.RUN
    # ...but not an older copy that never fired.
    assert debounce_verdict(fired, copy(T - 1), WINDOW_MS, T + 2 * WINDOW_MS + 5) is DebounceVerdict.SUPERSEDED


@pytest.mark.parametrize(("now_ms", "seconds"), [(T, 60), (T + 59_001, 1), (T + 59_999, 1), (T + 500, 60)])
def test_a_waiting_copy_is_handed_back_for_the_whole_seconds_left_in_its_window(now_ms: int, seconds: int) -> None:
    assert wait_s(copy(T), WINDOW_MS, now_ms) == seconds


def test_a_debounced_run_the_runtime_keyed_runs_under_a_key_of_its_own_first_send() -> None:
    assert debounced_run_key("reindex:42", copy(1_767_225_600_123)) == "reindex:42@2026-01-01T00:00:00.123Z"


# --- keys ------------------------------------------------------------------------------------------------------


def _unique_key_of(envelope: Envelope) -> str:
    return str(envelope.extra["document"])


def test_the_unique_key_is_the_entity_id_within_the_job_and_tenant_unless_the_job_names_it() -> None:
    plain = Envelope(job="reindex", id="42", key="v7")
    tenanted = Envelope(job="reindex", id="42", extra={"tenant": "acme", "document": "d-1"})

    assert flow_key(SPEC, None, plain) == FlowKey("reindex", "42")  # never the publisher's idempotency key
    assert flow_key(SPEC, None, tenanted) == FlowKey("reindex", "42", "acme")
    assert flow_key(SPEC, _unique_key_of, tenanted) == FlowKey("reindex", "d-1", "acme")
    assert FlowKey("reindex", "42").text == "reindex:42"


def test_keys_that_would_read_alike_joined_are_kept_apart() -> None:
    ids = {
        FlowKey("reindex", "a:b").record_id(FlowKind.UNIQUE),
        FlowKey("reindex", "a", "b").record_id(FlowKind.UNIQUE),
        FlowKey("reindex:a", "b").record_id(FlowKind.UNIQUE),
        FlowKey("reindex", "a:b").record_id(FlowKind.DEBOUNCE),
    }
    assert len(ids) == 4
    assert FlowKey("reindex", "42").record_id(FlowKind.DEBOUNCE).startswith("flow#debounce#")


def _raises(envelope: Envelope) -> str:
    raise KeyError("document")


@pytest.mark.parametrize(
    ("function", "message"),
    [
        (_raises, "job 'reindex' unique_key raised KeyError: 'document'"),
        (lambda envelope: " ", "job 'reindex' produced unique key ' '; it must be a non-blank string"),
        (lambda envelope: 42, "job 'reindex' produced unique key 42; it must be a non-blank string"),
    ],
)
def test_a_unique_key_function_that_fails_is_a_unique_key_error(function: object, message: str) -> None:
    with pytest.raises(UniqueKeyError) as caught:
        flow_key(SPEC, function, Envelope(job="reindex", id="42"))  # type: ignore[arg-type]

    assert str(caught.value) == message
    assert isinstance(caught.value, IdempotencyKeyError)  # dead-lettered as a bad idempotency key is
