"""The job contract a publisher needs from a deployed stack: which jobs exist, which queue takes each, which
queues are FIFO, and which envelope fields its workers reserve. The stack publishes it as an SSM parameter
(`contract_parameter_name`), so a service with an older wheel publishes a job that was added after it was built;
it needs a new wheel only when the envelope contract itself (`CONTRACT_VERSION`) changes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from sqs_jobs.envelope import RESERVED_FIELDS
from sqs_jobs.limits import NAME
from sqs_jobs.specs import LANE_NAME, Catalog, UnknownNameError

# The shape of the published contract; a publisher refuses one of another version. Fields added since are
# optional, so a wheel that doesn't know them reads the contract still (it ignores what it doesn't know).
CONTRACT_VERSION = 1
# The envelope's reserved fields of a contract that doesn't list them: a stack from before `tenant`, whose workers
# read a `tenant` as one of the extra fields.
FIRST_RESERVED_FIELDS = frozenset({"job", "id", "key"})


class ContractError(ValueError):
    """A published contract that can't be used: not JSON of the expected shape, or another version."""


class UnknownContractJobError(UnknownNameError):
    """A job the contract does not list."""


class UnknownPriorityError(UnknownNameError):
    """A priority that is not one of the job's queue's lanes (or any priority, on a queue without lanes)."""


@dataclass(frozen=True)
class JobContract:
    """Job -> queue, the FIFO queues, and the envelope fields the stack's workers reserve."""

    routes: Mapping[str, str]
    fifo_queues: frozenset[str] = frozenset()
    reserved_fields: frozenset[str] = frozenset(RESERVED_FIELDS)
    # How long each queue's key records (and with them, results) are kept, in seconds; a stack from before results
    # doesn't say.
    expiry_s: Mapping[str, int] = field(default_factory=dict)
    # The durable jobs (their state is their execution's record's, sqs_jobs.results); a stack from before results
    # doesn't say.
    durable_jobs: frozenset[str] = frozenset()
    # Per queue with priority lanes, its lanes (the most urgent first) and its default lane; a queue without lanes,
    # or a stack from before them, is not listed.
    lanes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    default_lanes: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_catalog(cls, catalog: Catalog) -> JobContract:
        return cls(
            routes={job.name: queue.name for queue in catalog for job in queue.jobs},
            fifo_queues=frozenset(queue.name for queue in catalog if queue.fifo),
            expiry_s={queue.name: queue.idempotency_expiry_s for queue in catalog},
            durable_jobs=frozenset(job.name for queue in catalog for job in queue.jobs if job.durable is not None),
            lanes={queue.name: queue.lanes for queue in catalog if queue.lanes},
            default_lanes={queue.name: queue.default_lane for queue in catalog if queue.default_lane is not None},
        )

    def lane(self, queue: str, priority: str | None) -> str | None:
        """The lane a publish to `queue` with `priority` goes to: its default lane when None, None for a queue
        without lanes. UnknownPriorityError names the lanes it has."""
        lanes = self.lanes.get(queue, ())
        if priority is None:
            return self.default_lanes.get(queue) if lanes else None
        if priority not in lanes:
            accepted = f"its lanes are {', '.join(lanes)}" if lanes else "it has no lanes (publish without one)"
            raise UnknownPriorityError(f"unknown priority {priority!r} for queue {queue!r}; {accepted}")
        return priority

    @property
    def job_names(self) -> tuple[str, ...]:
        return tuple(self.routes)

    @property
    def queue_names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.routes.values()))

    def queue_for_job(self, job: str) -> str:
        try:
            return self.routes[job]
        except KeyError:
            raise UnknownContractJobError(
                f"unknown job {job!r}; the stack's contract has: {', '.join(self.routes)}"
            ) from None

    def is_fifo(self, queue: str) -> bool:
        return queue in self.fifo_queues

    @property
    def knows_tenants(self) -> bool:
        """Whether the stack's workers read `tenant` as the tenant (else as an extra field)."""
        return "tenant" in self.reserved_fields

    def to_json(self) -> str:
        queues: dict[str, dict[str, object]] = {queue: {"fifo": self.is_fifo(queue)} for queue in self.queue_names}
        for queue, seconds in self.expiry_s.items():
            if queue in queues:
                queues[queue]["expiry_s"] = seconds
        for queue, lanes in self.lanes.items():
            if queue in queues:
                queues[queue]["lanes"] = list(lanes)
                queues[queue]["default_lane"] = self.default_lanes[queue]
        document = {
            "version": CONTRACT_VERSION,
            "jobs": dict(self.routes),
            "queues": queues,
            "reserved_fields": sorted(self.reserved_fields),
        }
        if self.durable_jobs:
            document["durable_jobs"] = sorted(self.durable_jobs)
        return json.dumps(document, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> JobContract:
        """The contract a stack published; ContractError names what is wrong with one that can't be used."""
        try:
            document = json.loads(text)
        except ValueError:
            raise ContractError("the job contract is not JSON") from None
        if not isinstance(document, dict) or document.get("version") != CONTRACT_VERSION:
            found = document.get("version") if isinstance(document, dict) else None
            raise ContractError(
                f"the job contract has version {found!r}; this sqs-jobs reads version {CONTRACT_VERSION}: install "
                "the wheel built with the deployed stack"
            )
        jobs, queues = document.get("jobs"), document.get("queues")
        if not isinstance(jobs, dict) or not isinstance(queues, dict):
            raise ContractError("the job contract needs objects 'jobs' (job -> queue) and 'queues'")
        routes: dict[str, str] = {}
        for job, queue in jobs.items():
            if not (NAME.fullmatch(job) and isinstance(queue, str) and queue in queues):
                raise ContractError(f"the job contract routes {job!r} to {queue!r}, which it does not declare")
            routes[job] = queue
        fifo = set()
        expiry: dict[str, int] = {}
        lanes: dict[str, tuple[str, ...]] = {}
        default_lanes: dict[str, str] = {}
        for queue, settings in queues.items():
            if not (NAME.fullmatch(queue) and isinstance(settings, dict) and isinstance(settings.get("fifo"), bool)):
                raise ContractError(f"the job contract's queue {queue!r} needs a name and a boolean 'fifo'")
            if settings["fifo"]:
                fifo.add(queue)
            seconds = settings.get("expiry_s")
            if seconds is not None:
                if not (isinstance(seconds, int) and not isinstance(seconds, bool) and seconds > 0):
                    raise ContractError(f"the job contract's queue {queue!r} has 'expiry_s' {seconds!r}: seconds > 0")
                expiry[queue] = seconds
            named = settings.get("lanes")
            if named is not None:
                default = settings.get("default_lane")
                if not (
                    isinstance(named, list)
                    and len(named) >= 2
                    and all(isinstance(lane, str) and LANE_NAME.fullmatch(lane) for lane in named)
                    and default in named
                ):
                    raise ContractError(
                        f"the job contract's queue {queue!r} needs 'lanes' (a list of lane names) and a "
                        "'default_lane' among them"
                    )
                lanes[queue] = tuple(named)
                default_lanes[queue] = str(default)
        reserved = document.get("reserved_fields", sorted(FIRST_RESERVED_FIELDS))
        if not (isinstance(reserved, list) and all(isinstance(name, str) for name in reserved)):
            raise ContractError("the job contract's 'reserved_fields' must be a list of field names")
        durable = document.get("durable_jobs", [])
        if not (isinstance(durable, list) and all(isinstance(job, str) and job in routes for job in durable)):
            raise ContractError("the job contract's 'durable_jobs' must be a list of the jobs it routes")
        return cls(
            routes=routes,
            fifo_queues=frozenset(fifo),
            reserved_fields=frozenset(reserved),
            expiry_s=expiry,
            durable_jobs=frozenset(durable),
            lanes=lanes,
            default_lanes=default_lanes,
        )
