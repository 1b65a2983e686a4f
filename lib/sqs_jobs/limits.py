"""SQS, Lambda and CloudWatch limits the catalog is checked against, and the runtime's own margins."""

from __future__ import annotations

import re

# Names of queues, jobs, schedules and resources: parts of physical names, environment variables and context keys.
NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")

MINUTE = 60
HOUR = 60 * MINUTE
DAY = 24 * HOUR

# SQS and Lambda hard limits the catalog is checked against.
SQS_MAX_VISIBILITY_S = 12 * HOUR
# SQS's longest DelaySeconds for a message.
SQS_MAX_DELAY_S = 15 * MINUTE
SQS_MAX_RETENTION_S = 14 * DAY
SQS_MIN_RETENTION_S = MINUTE
SQS_MAX_RECEIVE_COUNT = 1000
# Message attributes per message (the SQS Developer Guide, "Amazon SQS message attributes").
SQS_MAX_MESSAGE_ATTRIBUTES = 10
# Messages per SendMessageBatch, ReceiveMessage or DeleteMessageBatch call.
SQS_BATCH_MAX = 10
# A queue's MaximumMessageSize: the body plus every attribute's name, data type and value (UTF-8; binary values as
# raw bytes). SQS accepts 1 KiB to 1 MiB; 256 KiB was its default until 2025 and is what older queues have.
SQS_MIN_MESSAGE_BYTES = 1024
SQS_MAX_MESSAGE_BYTES = 1024 * 1024
SQS_DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024
# What a dead letter may need beyond its original message: the evidence and the packing of the producer's
# attributes, both bounded in sqs_jobs.worker.deadletter (tests/unit/test_deadletter.py proves the bound). A
# queue's limit leaves this much room below its DLQ's, SQS's largest.
DEAD_LETTER_HEADROOM_BYTES = 16 * 1024
LAMBDA_MAX_TIMEOUT_S = 15 * MINUTE
ESM_MIN_CONCURRENCY = 2
ESM_MAX_CONCURRENCY = 1000
SQS_MAX_BATCH_SIZE = 10_000
SQS_MAX_BATCH_WITHOUT_WINDOW = 10
ESM_MAX_BATCHING_WINDOW_S = 5 * MINUTE
# Time a record needs inside the invocation beyond its job's time limit, to be settled after a cut run
# (dead-letter with evidence, change its visibility).
SETTLE_MARGIN_S = 2
# What an invocation uses before its first record can start: the runtime's start and the batch's parse. A job's
# time limit plus the settle margin plus this must fit the function timeout, or even a fresh invocation would
# hand the record back unrun.
INVOCATION_START_S = 1
# How late CloudWatch may show SQS's and the runtime's metrics (observed up to about 2 minutes; AWS publishes no
# bound). The stalled and heartbeat alarms leave this much room (docs/monitoring.md).
METRIC_LAG_S = 2 * MINUTE
# A heartbeat may land in the minute after the one it was due in (delivery and the worker's start).
HEARTBEAT_JITTER_S = MINUTE
# Records of one batch run at once unless a queue says otherwise: a whole default batch (see QueueSpec).
DEFAULT_PARALLEL_RECORDS = 10
# Each record running at once is a thread in one execution environment, and a connection to each downstream.
MAX_PARALLEL_RECORDS = 100
# Receives a message may spend without running beyond its runs (QueueSpec.receive_limit): handed back unrun (no
# time left, its key busy, an open breaker) or, on a FIFO queue, skipped behind a failed message of its group.
HAND_BACK_RECEIVES = 100
