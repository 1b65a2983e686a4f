"""The names the runtime and its readers agree on: metric names and their reasons, pseudo-jobs, the service and
namespace. Dependency-free (the standard library only), so the stack (`sqs_jobs.cdk`) and the operator's tools
(`jobctl`) import them without loading Powertools or the runtime."""

from __future__ import annotations

import hashlib
import json
import zlib
from enum import StrEnum

SERVICE_NAME = "sqs-jobs"
METRICS_NAMESPACE = "SqsJobs"

# Metric names (EMF, dimensions: service, queue, job; counts with a reason also per reason).
SUCCEEDED = "JobSucceeded"
DUPLICATE = "JobDuplicate"
FAILED = "JobFailed"  # every failed run: retried or dead-lettered
RETRIED = "JobRetried"
DEAD_LETTERED = "JobDeadLettered"  # per Failure
DEFERRED = "JobDeferred"  # handed back unrun, per DeferReason
DURATION = "JobDuration"  # milliseconds of each run that ran the job
# Per failed run that will be retried: which attempt of its key it was (1 = its first run). Its Maximum says how
# many times in a row the most-failing job of a window has failed, before it is dead-lettered.
RETRY_ATTEMPT = "RetryAttempt"
HEARTBEAT = "Heartbeat"  # a heartbeat canary message went through the queue and the worker
# The runtime's own AWS resources failed it (idempotency table, DLQ, its queue), per reason; counted under the
# pseudo-job RUNTIME_JOB, since the fault is the deployment's, not a job's.
RUNTIME_FAULT = "RuntimeFault"
# A run's result could not be kept in its idempotency record (the run still counts as completed), per reason:
# not_json, too_large (sqs_jobs.worker.results).
RESULT_DROPPED = "ResultDropped"
# A circuit breaker of a job's downstream opened (counted under RUNTIME_JOB, per reason: the downstream's name,
# an HTTP host or an AWS service); the records that needed it are handed back as JobDeferred, CIRCUIT_OPEN.
CIRCUIT_OPENED = "CircuitOpened"
# A run cut at its time limit called a downstream after the cut or got an answer to a call that was in flight at
# the cut (per CutRunCallReason): its effect may have happened after the record was settled.
CUT_RUN_CALL = "CutRunCall"
# A record the runtime's flow control held back (counted under RUNTIME_JOB, per reason: what held it, a breaker's
# downstream or a limit's name, sqs_jobs.flow_control); the record is also JobDeferred with its DeferReason.
HELD = "JobHeld"
# Per hold, the share of its bound (max_hold_s) the key will have been held by the time it is due again: its
# Maximum nearing 1 means keys are about to spend attempts on refusals (the hold alarm).
HOLD_SHARE = "HoldShare"
# Per run that waited for a rate limit's token inside its invocation: how long, in milliseconds.
LIMIT_WAIT = "LimitWait"
# A copy of a key an operator cancelled, acknowledged without running (a run stopped by the cancel is
# JobDeadLettered, reason cancelled).
CANCELLED_COPY = "JobCancelled"
# A copy of a unique or debounced job acknowledged without running, per DropReason (sqs_jobs.worker.uniqueness).
DROPPED = "JobDropped"
# A durable job's record started its durable execution (or found it started) and was acknowledged
# (sqs_jobs.worker.durable_start); the execution's own end is JobSucceeded or JobDeadLettered, counted by its
# durable function.
DURABLE_STARTED = "DurableStarted"

# A batch member's end counted in its batch (per reason: succeeded, dead), and a batch's callback published (per
# reason: success, complete), counted under the member's job (sqs_jobs.worker.batch_members).
BATCH_MEMBER_ENDED = "BatchMemberEnded"
BATCH_CALLBACK_PUBLISHED = "BatchCallbackPublished"
# Follow-up jobs (`context.then`) published after a run succeeded, per follow-up, by the job that asked.
FOLLOW_UP_PUBLISHED = "FollowUpPublished"
# Per heartbeat, under RUNTIME_JOB: how many open batches had no member end for STALLED_AFTER_S (sqs_jobs.batches).
STALLED_BATCHES = "StalledBatches"
# What the worker logs when its heartbeat publishes a batch callback a failed count left (BatchMembers.watch_open).
FINISHED_BY_HEARTBEAT = "published a batch callback its last count left"

# What operators' tools show as the error type of a dead letter the runtime didn't write (no evidence attributes).
NO_EVIDENCE = "(no evidence: not dead-lettered by the runtime)"

# Pseudo-jobs the runtime counts under: its own faults, and messages whose job can't be read.
RUNTIME_JOB = "(runtime)"
UNPARSEABLE_JOB = "(unparseable)"


class DeferReason(StrEnum):
    """Why a record was handed back unrun (JobDeferred's reason): none of these spends an attempt."""

    NO_TIME = "no_time"  # the invocation had no time left for the job's time limit
    IN_PROGRESS = "in_progress"  # another run holds the job's key
    CIRCUIT_OPEN = "circuit_open"  # an open breaker refused a call the job needed
    RATE_LIMITED = "rate_limited"  # a rate limit had no token for it in time (sqs_jobs.flow_control)
    KEY_BUSY = "key_busy"  # its key had as many runs as its concurrency limit allows
    RUNTIME_FAULT = "runtime_fault"  # the runtime's own store failed before the run
    DEBOUNCE = "debounce"  # a debounced job's publish waits until its window ends


class DropReason(StrEnum):
    """Why a copy was acknowledged without running (JobDropped's reason): its job's flow setting said so."""

    UNIQUE = "unique"  # another publish of its unique key claimed the window it was sent in
    SUPERSEDED = "superseded"  # a later publish of its debounced key came within its window


class DeadLetterFailure(StrEnum):
    """Why a message was dead-lettered (JobDeadLettered's reason and the `jobs.failure` evidence)."""

    PERMANENT = "permanent"
    RETRIES_EXHAUSTED = "retries_exhausted"
    CANCELLED = "cancelled"  # an operator cancelled the key while it ran (JobCancelledError)
    TIMED_OUT = "timed_out"  # a durable execution ran past its execution timeout (sqs_jobs.durable.sweep)
    STOPPED = "stopped"  # a durable execution was stopped (StopDurableExecution; sqs_jobs.durable.sweep)


class CutRunCallReason(StrEnum):
    REFUSED = "refused"  # the cut run's call after the cut was refused by the fence
    ENDED = "ended"  # a call in flight at the cut got its answer


# A unique or debounced key's state, in the idempotency table beside the key records (sqs_jobs.worker.uniqueness
# writes it, jobctl job show reads it): one item per key and kind, `<prefix><sha256 of the key>`, expiring with the
# table's TTL attribute.
FLOW_UNIQUE_PREFIX = "flow#unique#"
FLOW_DEBOUNCE_PREFIX = "flow#debounce#"
FLOW_JOB = "flow_job"
FLOW_KEY = "flow_key"
FLOW_TENANT = "flow_tenant"
# unique: the window the claiming copy opened (epoch ms, from its first send) and whose it is (its idempotency key's
# record ID, the key itself and its message), and when it claimed it (epoch seconds).
WINDOW_START_MS = "window_start_ms"
WINDOW_END_MS = "window_end_ms"
CLAIMANT = "claimant"
CLAIMANT_KEY = "claimant_key"
CLAIMANT_MESSAGE = "claimant_message"
CLAIMED_AT = "claimed_at"
# debounce: the latest copy registered (its first send, epoch ms, its idempotency key's record ID, the key and its
# message), and the copy that last ran at its window's end (`fired_*`, with the key it ran under).
LATEST_SENT_MS = "latest_sent_ms"
LATEST_RECORD = "latest_record"
LATEST_KEY = "latest_key"
LATEST_MESSAGE = "latest_message"
FIRED_SENT_MS = "fired_sent_ms"
FIRED_RECORD = "fired_record"
FIRED_RUN_KEY = "fired_run_key"
FIRED_AT = "fired_at"

# A run's progress (context.progress) in its key's idempotency record: the runtime writes them, jobctl reads them.
PROGRESS_DONE = "progress_done"
PROGRESS_TOTAL = "progress_total"
PROGRESS_NOTE = "progress_note"
PROGRESS_AT = "progress_at"
PROGRESS_RUN = "progress_run"

# A key's record also says whose it is and where it stands, for the operator's lists (sqs_jobs.cli.job_life)
# without a
# scan: the run ledger writes them in the writes it makes anyway (sqs_jobs.worker.run_ledger).
RECORD_QUEUE = "queue"
RECORD_JOB = "job"
RECORD_JOB_ID = "job_id"
RECORD_JOB_KEY = "job_key"
# The tenant whose job ran under the key ("" for none): what tells a record of `<job>:<key>` a runtime with
# tenant-scoped keys wrote for a job without a tenant from one an older runtime wrote for anybody's.
RECORD_TENANT = "tenant"
STARTED_AT = "started_at"  # when the key's newest run started (epoch seconds)
RUN_BY = "run_by"  # which worker runs it: the Lambda log stream and request ID
# The trace the key's newest run is a span of (a queue with `tracing`: 32 hex digits, W3C's trace-id).
TRACE_ID = "trace_id"
NEXT_RETRY_AT = "next_retry_at"  # when a failed or held key's message is due again (epoch seconds)
# A durable job waiting for an event (DurableJobContext.wait_for_event), in its durable record: the event's name,
# the callback Lambda completes the wait with (only the event's sender reads it: sqs_jobs.events), since when and
# until when (epoch seconds). Removed once the event came, the wait timed out or the execution ended.
WAITING_FOR = "waiting_for"
CALLBACK_ID = "callback_id"
WAITING_SINCE = "waiting_since"
WAITING_UNTIL = "waiting_until"


class RecordStatus(StrEnum):
    """A key's idempotency record's status: Powertools' INPROGRESS and COMPLETED, and the run ledger's own."""

    INPROGRESS = "INPROGRESS"
    COMPLETED = "COMPLETED"
    # The last run of the key failed and nothing runs it now; the next delivery may start a run.
    FAILED = "FAILED"
    # An operator cancelled the key (jobctl job cancel): every copy of it is acknowledged unrun until it expires.
    CANCELLED = "CANCELLED"


# A running key an operator cancelled gets CANCEL_REQUESTED_AT, which its run sees at its next report or call.
CANCELLED_AT = "cancelled_at"
CANCELLED_BY = "cancelled_by"
CANCEL_REQUESTED_AT = "cancel_requested_at"

# The sparse index of keys in flight: a record carries LIFE only while its key is running, retrying (or held) or
# cancelled, so the index holds those and nothing completed. LIFE is `<queue>#<state>#<shard>`, spread over
# LIFE_SHARDS partition keys: one partition key takes at most 1,000 writes a second, and every run of a queue
# writes its running list twice (4 shards: about 2,000 runs a second per queue). LIFE_AT orders each list (since
# when running, when due again, when cancelled).
LIFE_INDEX = "jobs-by-life"
LIFE = "life"
LIFE_AT = "life_at"
LIFE_SHARDS = 4


class LifeState(StrEnum):
    RUNNING = "running"
    RETRYING = "retrying"
    CANCELLED = "cancelled"


def life_partition(queue: str, state: LifeState, record_id: str) -> str:
    """The index partition a key's record is listed under (its shard from its record ID, so it never moves)."""
    return life_shard_partition(queue, state, zlib.crc32(record_id.encode()) % LIFE_SHARDS)


def life_shard_partition(queue: str, state: LifeState, shard: int) -> str:
    return f"{queue}#{state.value}#{shard}"


# SQS's own metrics of a fair queue: a standard queue whose messages name their tenant as MessageGroupId (AWS/SQS,
# dimension QueueName). SQS counts no backlog per tenant; these say how many tenants it deems noisy and how the
# others fare (the SQS Developer Guide, "Amazon SQS fair queues"; the metric names as AWS announced them on
# 21 July 2025, AWS Compute Blog, "Building resilient multi-tenant systems with Amazon SQS fair queues").
SQS_NOISY_GROUPS = "ApproximateNumberOfNoisyGroups"
SQS_QUIET_OLDEST_AGE = "ApproximateAgeOfOldestMessageInQuietGroups"
SQS_QUIET_VISIBLE = "ApproximateNumberOfMessagesVisibleInQuietGroups"

# Flow control's state in the idempotency table (sqs_jobs.worker.rate_limit and key_concurrency.py), which
# jobctl reads: a rate limit's bucket per key (its GCRA `tat`), and a key's concurrency slots (who holds each, until
# when). Each item also names its limit and its key (the key as text, producer-chosen: shown escaped).
FLOW_TAT = "tat"
FLOW_HOLDER = "holder"
FLOW_UNTIL = "until"
FLOW_LIMIT_NAME = "flow_limit"
FLOW_LIMIT_KEY = "flow_key"


def _flow_digest(limit_name: str, key: str) -> str:
    # Hashed, so a producer's long or odd key value can't make an odd item ID.
    return hashlib.sha256(f"{limit_name}\x00{key}".encode()).hexdigest()[:32]


def flow_bucket_id(limit_name: str, key: str) -> str:
    """The idempotency table's partition key of a rate limit's bucket for one key."""
    return f"flow#rate#{_flow_digest(limit_name, key)}"


# Every slot's partition key starts with it: a worker's one BatchGetItem is granted on these items only.
FLOW_SLOT_PREFIX = "flow#key#"


def flow_slot_id(limit_name: str, key: str, slot: int) -> str:
    """The partition key of slot `slot` (0 .. limit - 1) of a key's concurrency limit."""
    return f"{FLOW_SLOT_PREFIX}{_flow_digest(limit_name, key)}#{slot}"


# Prefix of idempotency records; independent of the function name, so a renamed function keeps its records.
IDEMPOTENCY_KEY_PREFIX = "jobs"


def idempotency_record_id(idempotency_key: str) -> str:
    """The idempotency table's partition key for a job key (`<job>:<key>`), as Powertools writes it with this
    worker's configuration: the prefix, `#`, the MD5 of the key's JSON (tests/functional/test_job_lookup.py
    checks it against records Powertools wrote)."""
    digest = hashlib.md5(json.dumps(idempotency_key, sort_keys=True).encode(), usedforsecurity=False)
    return f"{IDEMPOTENCY_KEY_PREFIX}#{digest.hexdigest()}"


# A durable job's own record, beside its key's: the execution's state (sqs_jobs.durable.record).
DURABLE_RECORD_PREFIX = "durable#"


def durable_record_id(key: str) -> str:
    """The durable record's partition key for a job key (`<job>:<key>`): its own prefix, never a Powertools
    record's."""
    return DURABLE_RECORD_PREFIX + hashlib.sha256(key.encode("utf-8")).hexdigest()
