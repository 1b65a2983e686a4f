"""The error types of the job contract, shared by publishers and the worker. Behaviour follows the type, never
the message text. The worker's own types build on these (sqs_jobs.worker.errors)."""

from __future__ import annotations


class JobError(Exception):
    """Base of every error the job runtime raises or understands."""


class PermanentError(JobError):
    """A failure that cannot succeed later: never retried, dead-lettered at once (BullMQ's UnrecoverableError)."""


class TransientError(JobError):
    """A failure that may succeed later (timeouts, throttling, outages): retried up to the queue's max attempts."""


class EnvelopeError(PermanentError):
    """The message body breaks the job contract; the same error at publish time and at consume time."""


class EnvelopeNotJSONError(EnvelopeError):
    """The body is not valid UTF-8 JSON."""


class EnvelopeNotObjectError(EnvelopeError):
    """The body is JSON, but not an object."""


class EnvelopeFieldError(EnvelopeError):
    """A field is missing, empty, of the wrong type, duplicated or not allowed."""


class EnvelopeTooLargeError(EnvelopeError):
    """The body is over the ID-only size limit."""


class UnknownJobError(EnvelopeError):
    """The job type is not in the catalog, or not on this queue."""
