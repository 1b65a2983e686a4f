"""`jobctl new job NAME --queue QUEUE [--new-queue]`: a job's module and its test, in the project's style, and the
catalog entry to add (the job, or with --new-queue the queue that holds it). Writes new files only; never edits or
overwrites one (the catalog is the team's to edit)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sqs_jobs.cli.errors import OperatorUsageError
from sqs_jobs.limits import NAME
from sqs_jobs.specs import Catalog

_PACKAGE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")

MODULE = '''"""{name}: {description}"""

from __future__ import annotations

from sqs_jobs.envelope import Envelope
from sqs_jobs.worker.errors import RecordNotFoundError
from sqs_jobs.worker.jobs import JobContext


class {title}NotFoundError(RecordNotFoundError):
    """The entity the job names does not exist (permanent: dead-lettered with evidence, never retried)."""


def run(envelope: Envelope, context: JobContext) -> None:
    """Re-read the entity `envelope.id` names (IDs only: its current state lives in its table), then do the one
    side effect, idempotently: a second run for the same key must change nothing more. Use the resources the
    catalog gives the job (`context.resource(...)`, `context.secret(...)`) and the runtime's clients
    (`context.client(...)`, `context.http`), which the time limit and the breakers see."""
    raise NotImplementedError("{name}: write the job, then run its test")
'''

TEST = '''"""{name} on the real worker against moto: published as a service would, delivered as Lambda would."""

from __future__ import annotations

from sqs_jobs.testing import JobHarness


def test_{name}_runs_for_its_id_and_nothing_is_dead_lettered(job_harness: JobHarness) -> None:
    job_harness.publish("{name}", "{example_id}")

    invocation = job_harness.deliver("{queue}")

    assert invocation is not None and invocation.failed_ids == []
    assert job_harness.dead_letters("{queue}") == []
'''

CATALOG_ENTRY = """JobSpec(
    name="{name}",
    handler="{package}.{name}",
    description="{description}",
    resources=(),  # names of the catalog's resources the job uses
),"""


QUEUE_ENTRY = """QueueSpec(
    name="{queue}",
    description="what the queue is for, and why its jobs need a queue of their own.",
    jobs=(
{job}
    ),
),"""


class ScaffoldError(OperatorUsageError, ValueError):
    """The job can't be scaffolded as asked; the message says why and what is accepted."""


@dataclass(frozen=True)
class Scaffold:
    module: Path
    test: Path
    catalog_entry: str
    # The entry is a QueueSpec holding the job (for CATALOG.queues), not a JobSpec for an existing queue's jobs.
    new_queue: bool = False


def scaffold_job(
    catalog: Catalog,
    name: str,
    queue: str,
    *,
    root: Path,
    package: str = "functions.jobs",
    tests: str = "tests/functional",
    description: str = "",
    new_queue: bool = False,
) -> Scaffold:
    """Write `<package>/<name>.py` and `<tests>/test_<name>.py` under `root`; return them and the catalog entry.
    With `new_queue` the queue is not in the catalog yet, and the entry declares it with the job."""
    if not NAME.fullmatch(name):
        raise ScaffoldError(f"job name {name!r} must match {NAME.pattern} (lowercase, digits, '_')")
    if name in catalog.job_names:
        raise ScaffoldError(f"job {name!r} is already in the catalog, on queue {catalog.queue_for_job(name).name!r}")
    if new_queue:
        if queue in catalog.queue_names:
            raise ScaffoldError(f"queue {queue!r} is in the catalog already; add the job to it without --new-queue")
        if not NAME.fullmatch(queue):
            raise ScaffoldError(f"queue name {queue!r} must match {NAME.pattern} (lowercase, digits, '_')")
    else:
        catalog.queue(queue)  # UnknownQueueError names the catalog's queues
    if not _PACKAGE.fullmatch(package):
        raise ScaffoldError(f"package {package!r} is not a dotted module path, e.g. functions.jobs")
    module = root / Path(*package.split(".")) / f"{name}.py"
    test = root / tests / f"test_{name}.py"
    for path in (module, test):
        if path.exists():
            raise ScaffoldError(f"{path.relative_to(root)} exists already; nothing was written")
    text = description.strip() or f"what {name} does, in one sentence."
    title = "".join(part.capitalize() for part in name.split("_"))
    module.parent.mkdir(parents=True, exist_ok=True)
    test.parent.mkdir(parents=True, exist_ok=True)
    module.write_text(MODULE.format(name=name, description=text, title=title))
    test.write_text(TEST.format(name=name, queue=queue, example_id="1001"))
    entry = CATALOG_ENTRY.format(name=name, package=package, description=text.replace('"', "'"))
    if new_queue:
        job = "\n".join(f"        {line}" for line in entry.splitlines())
        entry = QUEUE_ENTRY.format(queue=queue, job=job)
    return Scaffold(module=module, test=test, catalog_entry=entry, new_queue=new_queue)
