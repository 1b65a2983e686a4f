"""The contract between what the worker emits and what the alarms and the dashboard watch.

CloudWatch treats every unique combination of namespace, metric name and dimensions (names and values) as a
metric of its own ("Metrics concepts: Dimensions",
https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/cloudwatch_concepts.html#Dimension): an alarm on
`JobFailed {queue, job, service}` sees nothing of `JobFailed {queue, job, service, env}` or of a job the worker
reports under another name. An alarm on a metric nobody emits is silent, not broken, so nothing else would notice.

The worker here is the one Lambda runs: `sqs_jobs.worker.entry.handler`, built from the environment the synthesized
template gives each worker (its values for this account taken from `provision()`, as `WorkerSettings.to_environ`
writes them), on its role's credentials, with its production flush to stdout. moto stands in for SQS, DynamoDB,
SES and SNS, the local fake for the invoicing API. For every catalog queue it drives each outcome the alarms and
the dashboard watch: a success, a permanent failure, a transient failure that is retried, attempts run out, an
unreadable message, a heartbeat, a downstream that opens its circuit breaker and the records then held, an
endpoint's rate limit holding a record, and the runtime's own store failing. Every EMF document printed is read as
CloudWatch Logs reads it (one JSON object per log line; per directive, each dimension set with each metric;
"Specification: Embedded metric format",
https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html),
and every metric an alarm or a dashboard widget reads in the runtime's namespace must be among those series.

Why it fails when either side changes: the comparison is of whole series, (namespace, name, dimension set with its
values). A job renamed on one side changes the `job` value of that side's series only; a dimension added on one
side (the worker's `add_dimension`, the stack's `dimensions_map`) changes that side's dimension sets only. Either
way a watched series has no emitted twin and `unwatched` names it. The last tests show it on the real sets.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import botocore.handlers
import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders
from moto import mock_aws

import sqs_jobs.worker.entry
from example.orders_csv import orders_csv
from example.records import invoice_item
from example.standins.invoicing import FakeInvoicingApi
from functions.catalog import CATALOG
from sqs_jobs.cdk.naming import queue_signals
from sqs_jobs.flow_control import endpoint_rate_limit_name
from sqs_jobs.local.emulator import EventSourceMapping, Invocation
from sqs_jobs.local.moto_senders import record_senders
from sqs_jobs.local.provision import LocalDeployment, provision
from sqs_jobs.maintenance import dlq_review
from sqs_jobs.specs import HEARTBEAT_JOB, QueueSpec
from sqs_jobs.worker.clients import ClientFactory, new_session
from sqs_jobs.worker.names import FLOW_TAT, METRICS_NAMESPACE, flow_bucket_id
from sqs_jobs.worker.observability import Observability
from tests.infra.cfn import durable_ids, of_type, props, render, worker_id
from tests.infra.conftest import Synth
from tests.infra.dashboard_checks import dashboard_body, plain_metrics

REGION = "us-east-1"
Series = tuple[str, str, frozenset[tuple[str, str]]]  # namespace, metric name, dimensions with their values


def series(namespace: str, name: str, dimensions: Mapping[str, str]) -> Series:
    return namespace, name, frozenset(dimensions.items())


def describe(item: Series) -> str:
    namespace, name, dimensions = item
    return f"{namespace}/{name} {dict(sorted(dimensions))}"


def unwatched(watched: set[Series], emitted: set[Series]) -> list[str]:
    """Every series an alarm or widget reads that the worker never emitted, exactly as CloudWatch matches them."""
    return sorted(describe(item) for item in watched - emitted)


# --- what the stack watches -----------------------------------------------------------------------------------


def watched_by_alarms(resources: Mapping[str, Any]) -> dict[Series, set[str]]:
    """Each series in the runtime's namespace an alarm reads, with the alarms that read it."""
    found: dict[Series, set[str]] = {}
    for key in of_type(resources, "AWS::CloudWatch::Alarm"):
        alarm = props(resources, key)
        stats = [query["MetricStat"]["Metric"] for query in alarm.get("Metrics", []) if "MetricStat" in query]
        if "MetricName" in alarm:
            stats.append(alarm)
        for stat in stats:
            if stat["Namespace"] == METRICS_NAMESPACE:
                dimensions = {item["Name"]: render(item["Value"]) for item in stat.get("Dimensions", [])}
                found.setdefault(series(METRICS_NAMESPACE, stat["MetricName"], dimensions), set()).add(
                    alarm["AlarmName"]
                )
    return found


def watched_by_dashboard(resources: Mapping[str, Any]) -> dict[Series, set[str]]:
    """Each series in the runtime's namespace a dashboard widget draws or computes with, with the widgets' titles."""
    found: dict[Series, set[str]] = {}
    for widget in dashboard_body(resources)["widgets"]:
        if "metrics" not in widget.get("properties", {}):
            continue
        for namespace, name, dimensions, _ in plain_metrics(widget):
            if namespace == METRICS_NAMESPACE:
                found.setdefault(series(namespace, name, dimensions), set()).add(widget["properties"]["title"])
    return found


# --- what the worker emits --------------------------------------------------------------------------------------


def emf_series(output: str) -> set[Series]:
    """Every series of every EMF document printed, as CloudWatch Logs extracts them: a log line that is one JSON
    object with `_aws.CloudWatchMetrics`; per directive, every dimension set (dimension names, valued from the
    document's members) with every metric of that directive."""
    found: set[Series] = set()
    for line in output.splitlines():
        if '"_aws"' not in line:
            continue
        document = json.loads(line)  # a document spread over lines would not parse: CloudWatch would drop it
        for directive in document["_aws"]["CloudWatchMetrics"]:
            for dimension_set in directive["Dimensions"]:
                dimensions = {name: str(document[name]) for name in dimension_set}
                for metric in directive["Metrics"]:
                    assert metric["Name"] in document, f"EMF document without a value for {metric['Name']}"
                    found.add(series(directive["Namespace"], metric["Name"], dimensions))
    return found


@dataclass
class Faults:
    """Errors some AWS calls answer with, switched on and off between invocations: a real botocore error path for
    every client created while it is installed (as moto installs its own stub), the worker's included."""

    answers: dict[str, str] = field(default_factory=dict)  # "ses.SendEmail" -> error code

    def handlers(self) -> list[tuple[str, Any]]:
        return [(f"before-call.{operation}", self._answer) for operation in ("ses.SendEmail", "sns.Publish")]

    def _answer(self, event_name: str = "", **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        code = self.answers.get(event_name.removeprefix("before-call."))
        if code is None:
            return None
        parsed = {
            "Error": {"Code": code, "Message": f"injected {code}"},
            "ResponseMetadata": {"HTTPStatusCode": 400, "HTTPHeaders": {}},
        }
        return AWSResponse(url="https://aws.local/", status_code=400, headers=HTTPHeaders(), raw=None), parsed


@dataclass
class Account:
    """The provisioned account, a producer's clients and the worker's environment per queue."""

    clients: ClientFactory
    deployment: LocalDeployment
    synth: Synth
    api: FakeInvoicingApi
    faults: Faults
    monkeypatch: pytest.MonkeyPatch

    def send(self, queue: str, body: str, group: str = "contract") -> None:
        local = self.deployment.queues[queue]
        fifo = {"MessageGroupId": group} if local.spec.fifo else {}
        self.clients("sqs").send_message(QueueUrl=local.url, MessageBody=body, **fifo)

    def job(self, queue: str, job: str, entity_id: str, key: str | None = None) -> None:
        body = {"job": job, "id": entity_id, **({"key": key} if key is not None else {})}
        # On a FIFO queue each job is its own group: one failing never holds back another of this test.
        self.send(queue, json.dumps(body), group=f"{entity_id}.{key}")

    def environment(self, spec: QueueSpec) -> dict[str, str]:
        """The worker's environment as the template sets it: literal values as they are, the deployment's
        resources (CloudFormation references there) from provision()."""
        template = props(self.synth.resources, worker_id(self.synth.resources, spec))["Environment"]["Variables"]
        local = self.deployment.worker_settings(spec.name).to_environ()
        unresolved = {name for name, value in template.items() if not isinstance(value, str)} - set(local)
        assert not unresolved, f"the template sets {sorted(unresolved)}, which WorkerSettings doesn't write"
        assert set(local) <= set(template), f"WorkerSettings writes {sorted(set(local) - set(template))} too"
        return {name: local.get(name, value) for name, value in template.items()}

    def run_durable(self, spec: QueueSpec, job: str, import_id: str, csv: bytes) -> None:
        """One durable execution of `job` to its end, in a fresh environment of its durable function."""
        from aws_durable_execution_sdk_python_testing import DurableFunctionTestRunner

        import sqs_jobs.durable.entry
        from functions.jobs.import_orders import csv_key
        from sqs_jobs.durable.payload import DurableStart

        self.clients("s3").put_object(
            Bucket=self.deployment.resources["imports_bucket"], Key=csv_key(import_id), Body=csv
        )
        self.become_worker(spec)
        durable = props(self.synth.resources, durable_ids(self.synth, job)["function"])["Environment"]["Variables"]
        local = self.deployment.worker_settings(spec.name).to_environ()
        for name, value in durable.items():
            self.monkeypatch.setenv(name, local.get(name, value) if not isinstance(value, str) else value)
        self.monkeypatch.setattr(sqs_jobs.durable.entry, "_runtime", None)
        start = DurableStart(
            body=json.dumps({"job": job, "id": import_id}),
            key=f"{job}:{import_id}",
            generation=0,
            source_queue=self.deployment.queues[spec.name].arn,
        )
        with DurableFunctionTestRunner(sqs_jobs.durable.entry.handler, skip_time=True) as runner:
            runner.run(input=start.to_json(), execution_timeout=120, execution_name=import_id)

    def become_worker(self, spec: QueueSpec) -> None:
        """A fresh execution environment of the queue's worker: its environment, its role's credentials (as Lambda
        sets them), no worker built yet."""
        session = self.deployment.worker_session(self.clients("sts"), spec.name, f"contract-{spec.name}")
        found = session.get_credentials()
        assert found is not None
        credentials = found.get_frozen_credentials()
        lambda_environment = {
            "AWS_ACCESS_KEY_ID": str(credentials.access_key),
            "AWS_SECRET_ACCESS_KEY": str(credentials.secret_key),
            "AWS_SESSION_TOKEN": str(credentials.token or ""),
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_LAMBDA_FUNCTION_NAME": f"contract-{spec.name}-worker",
        }
        for name, value in {**lambda_environment, **self.environment(spec)}.items():
            self.monkeypatch.setenv(name, value)
        self.monkeypatch.setattr(sqs_jobs.worker.entry, "_worker", None)

    def deliver(self, spec: QueueSpec) -> Invocation:
        """One batch of the queue to the production handler, as Lambda's event source mapping would."""
        mapping = EventSourceMapping(
            queue=self.deployment.queues[spec.name],
            sqs_client=self.clients("sqs"),
            handler_factory=lambda: sqs_jobs.worker.entry.handler,
            function_name=f"contract-{spec.name}-worker",
            concurrency=1,
            wait_time_s=0,
        )
        invocation = mapping.poll_once(sqs_jobs.worker.entry.handler)
        assert invocation is not None, f"nothing to deliver on {spec.name}"
        assert not invocation.raised, f"the {spec.name} worker's invocation raised"
        return invocation

    def ran_before(self, key: str, runs: int) -> None:
        """What `runs` runs of the job key leave when their environments die before reporting: counted in the
        key's record (lib/sqs_jobs/worker/run_ledger.py), so the next delivery is its run `runs + 1`."""
        from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig

        from sqs_jobs.worker.run_ledger import RunLedger
        from sqs_jobs.worker.settings import IDEMPOTENCY_KEY_PREFIX

        ledger = RunLedger(self.deployment.idempotency_table, lambda _: self.clients("dynamodb"))
        ledger.configure(IdempotencyConfig(event_key_jmespath="key"), key_prefix=IDEMPOTENCY_KEY_PREFIX)
        for _ in range(runs):
            ledger.prepare(max_runs=runs + 1, time_left=lambda: 5.0)
            ledger.save_inprogress(data={"key": key}, remaining_time_in_millis=-1)  # its deadline has passed


def put_order(account: Account, order_id: str) -> None:
    account.clients("dynamodb").put_item(
        TableName=account.deployment.resources["orders_table"],
        Item={"order_id": {"S": order_id}, "email": {"S": "buyer@example.com"}},
    )


def put_invoice(account: Account, invoice_id: str) -> None:
    account.clients("dynamodb").put_item(
        TableName=account.deployment.resources["invoices_table"],
        Item=invoice_item(invoice_id),
    )


def common_outcomes(account: Account, spec: QueueSpec) -> None:
    """An unreadable message, a job this queue doesn't run, and a heartbeat, in one batch."""
    account.send(spec.name, "not json")
    account.job(spec.name, "no_such_job", "1")
    account.job(spec.name, HEARTBEAT_JOB, "2026-12-01T12:00:00Z")
    account.deliver(spec)


def drive_orders(account: Account, spec: QueueSpec) -> None:
    (job,) = spec.job_names
    common_outcomes(account, spec)
    put_order(account, "ok-1")
    account.job(spec.name, job, "ok-1")  # succeeds
    account.job(spec.name, job, "missing-1")  # no such order: permanent, dead-lettered
    account.deliver(spec)
    put_order(account, "last-1")
    account.job(spec.name, job, "last-1")
    account.ran_before(f"{job}:last-1", spec.max_attempts - 1)
    account.faults.answers["ses.SendEmail"] = "Throttling"
    account.deliver(spec)  # its last attempt fails: dead-lettered, retries exhausted
    for n in range(spec.circuit_breaker.failure_threshold):
        put_order(account, f"down-{n}")
        account.job(spec.name, job, f"down-{n}")
    account.deliver(spec)  # each retried; SES's breaker opens
    put_order(account, "held-1")
    account.job(spec.name, job, "held-1")
    account.deliver(spec)  # refused by the open breaker: held back
    account.faults.answers.clear()


def drive_order_updates(account: Account, spec: QueueSpec) -> None:
    """The FIFO example: the same outcomes as the orders queue's, each update named by its key."""
    (job,) = spec.job_names
    common_outcomes(account, spec)
    put_order(account, "u-ok")
    account.job(spec.name, job, "u-ok", key="u-ok-u1")  # succeeds
    account.job(spec.name, job, "u-missing", key="u-missing-u1")  # no such order: permanent, dead-lettered
    account.deliver(spec)
    put_order(account, "u-last")
    account.job(spec.name, job, "u-last", key="u-last-u1")
    account.ran_before(f"{job}:u-last-u1", spec.max_attempts - 1)
    account.faults.answers["ses.SendEmail"] = "Throttling"
    account.deliver(spec)  # its last attempt fails: dead-lettered, retries exhausted
    for n in range(spec.circuit_breaker.failure_threshold):
        put_order(account, f"u-down-{n}")
        account.job(spec.name, job, f"u-down-{n}", key=f"u-down-{n}-u1")
    account.deliver(spec)  # each retried; SES's breaker opens
    put_order(account, "u-held")
    account.job(spec.name, job, "u-held", key="u-held-u1")
    account.deliver(spec)  # refused by the open breaker: held back
    account.faults.answers.clear()


def drive_invoices(account: Account, spec: QueueSpec) -> None:
    (job,) = spec.job_names
    common_outcomes(account, spec)
    put_invoice(account, "INV-ok")
    account.job(spec.name, job, "INV-ok")
    account.job(spec.name, job, "INV-missing")
    account.deliver(spec)
    account.api.set_mode("503")
    put_invoice(account, "INV-last")
    account.job(spec.name, job, "INV-last")
    account.ran_before(f"{job}:INV-last", spec.max_attempts - 1)
    account.deliver(spec)
    for n in range(spec.circuit_breaker.failure_threshold):
        put_invoice(account, f"INV-down-{n}")
        account.job(spec.name, job, f"INV-down-{n}")
    account.deliver(spec)
    put_invoice(account, "INV-held")
    account.job(spec.name, job, "INV-held")
    account.deliver(spec)
    account.api.set_mode("ok")
    # The invoicing endpoint's rate limit has no token for an hour (its bucket in the shared table says so): the
    # next invoice, in a fresh environment (no tokens leased yet), is held by it.
    account.become_worker(spec)
    account.clients("dynamodb").put_item(
        TableName=account.deployment.idempotency_table,
        Item={
            "id": {"S": flow_bucket_id(endpoint_rate_limit_name("invoicing_api_url"), "")},
            FLOW_TAT: {"N": f"{time.time() + 3600:.3f}"},
        },
    )
    put_invoice(account, "INV-rate-limited")
    account.job(spec.name, job, "INV-rate-limited")
    account.deliver(spec)


def drive_maintenance(account: Account, spec: QueueSpec) -> None:
    (job,) = spec.job_names
    common_outcomes(account, spec)
    account.job(spec.name, job, "2026-11-30T09:00:00Z")  # the weekly review: succeeds
    account.deliver(spec)
    account.faults.answers["sns.Publish"] = "Throttling"
    account.job(spec.name, job, "2026-12-07T09:00:00Z")
    account.ran_before(f"{job}:2026-12-07T09:00:00Z", spec.max_attempts - 1)
    account.deliver(spec)  # its summary can't be published on its last attempt: dead-lettered
    for n in range(spec.circuit_breaker.failure_threshold + 1):
        account.job(spec.name, job, f"2026-12-{14 + n:02d}T09:00:00Z")
    account.deliver(spec)  # one at a time: five fail and open SNS's breaker, the sixth is held
    account.faults.answers.clear()


def drive_imports(account: Account, spec: QueueSpec) -> None:
    """The durable import. Its worker only starts executions (moto has no durable functions: the start fails, a
    runtime fault, and the record is handed back); the job's steps run in its durable function: the production
    handler (sqs_jobs.durable.entry) under AWS's durable execution testing SDK, in the environment the template
    gives that function. A success, a permanent failure, and a step failing transiently until its attempts run out."""
    from functions.jobs import import_orders

    job = "import_orders"
    common_outcomes(account, spec)
    account.job(spec.name, job, "contract-start")
    account.deliver(spec)
    account.run_durable(spec, job, "imp-ok", orders_csv("imp-ok", 10))
    account.run_durable(spec, job, "imp-bad", orders_csv("imp-bad", 10, bad_row=3))

    def unanswered(*_: Any) -> int:
        raise TimeoutError("the table did not answer")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(import_orders, "import_chunk", unanswered)
        account.run_durable(spec, job, "imp-down", orders_csv("imp-down", 10))
    drive_import_report(account, spec)


def report_batch(account: Account, name: str) -> str:
    """A batch of one import, defined as JobPublisher.batch writes it, with import_report as its completion
    callback: the key that callback is published with."""
    from sqs_jobs.batches import COMPLETE, callback_key, definition_items, new_batch_id

    batch_id = new_batch_id()
    items = definition_items(
        batch_id, [("import_orders", name)], {"on_complete": ("import_report", name)}, "contract", int(time.time())
    )
    for item in items:
        account.clients("dynamodb").put_item(TableName=account.deployment.idempotency_table, Item=item)
    return callback_key(batch_id, COMPLETE)


def drive_import_report(account: Account, spec: QueueSpec) -> None:
    """The imports' batch callback, an ordinary job that mails through SES: the orders queue's outcomes."""
    job = "import_report"
    account.job(spec.name, job, "r-ok", key=report_batch(account, "r-ok"))  # succeeds
    account.job(spec.name, job, "r-orphan")  # not a batch's callback: permanent, dead-lettered
    account.deliver(spec)
    last = report_batch(account, "r-last")
    account.job(spec.name, job, "r-last", key=last)
    account.ran_before(f"{job}:{last}", spec.max_attempts - 1)
    account.faults.answers["ses.SendEmail"] = "Throttling"
    account.deliver(spec)  # its last attempt fails: dead-lettered, retries exhausted
    for n in range(spec.circuit_breaker.failure_threshold):
        account.job(spec.name, job, f"r-down-{n}", key=report_batch(account, f"r-down-{n}"))
        account.deliver(spec)  # one at a time (the queue runs one record at once): each retried; SES's opens
    account.job(spec.name, job, "r-held", key=report_batch(account, "r-held"))
    account.deliver(spec)  # refused by the open breaker: held back
    account.faults.answers.clear()


DRIVERS = {
    "orders": drive_orders,
    "order_updates": drive_order_updates,
    "invoices": drive_invoices,
    "imports": drive_imports,
    "maintenance": drive_maintenance,
}


@pytest.fixture(scope="module")
def emitted(synth: Synth) -> Iterator[set[Series]]:
    """Every series the production worker printed while every catalog queue went through its outcomes."""
    assert set(DRIVERS) == set(CATALOG.queue_names), "a catalog queue without a driver here"
    stdout = io.StringIO()
    faults = Faults()
    with pytest.MonkeyPatch.context() as monkeypatch, FakeInvoicingApi() as api:
        for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
            monkeypatch.setenv(name, value)
        for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL", "POWERTOOLS_DEV"):
            monkeypatch.delenv(name, raising=False)
        # The weekly review's receives of empty DLQs answer at once, not after a long poll: same metrics, less time.
        monkeypatch.setattr(dlq_review, "RECEIVE_WAIT_S", 0)
        monkeypatch.setattr(
            botocore.handlers, "BUILTIN_HANDLERS", [*botocore.handlers.BUILTIN_HANDLERS, *faults.handlers()]
        )
        record_senders()
        with mock_aws(), contextlib.redirect_stdout(stdout):
            session = new_session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION)
            clients = ClientFactory(session=session)
            account = Account(
                clients=clients,
                deployment=provision(clients, catalog=CATALOG, settings={"invoicing_api_url": api.url}),
                synth=synth,
                api=api,
                faults=faults,
                monkeypatch=monkeypatch,
            )
            for spec in CATALOG:
                account.become_worker(spec)
                DRIVERS[spec.name](account, spec)
            # The runtime's own store failing it: the idempotency table is gone.
            clients("dynamodb").delete_table(TableName=account.deployment.idempotency_table)
            for spec in CATALOG:
                account.become_worker(spec)
                account.job(spec.name, spec.job_names[0], "after-the-table", key="after-the-table-1")
                account.deliver(spec)
        monkeypatch.setattr(sqs_jobs.worker.entry, "_worker", None)
    yield emf_series(stdout.getvalue())


# --- the contract -------------------------------------------------------------------------------------------------


def test_every_metric_an_alarm_reads_is_one_the_worker_emits(synth: Synth, emitted: set[Series]) -> None:
    watched = watched_by_alarms(synth.resources)

    missing = unwatched(set(watched), emitted)

    assert not missing, "alarms that would never see data:\n" + "\n".join(
        f"{item} <- {sorted(watched[key])}" for key in watched for item in [describe(key)] if item in missing
    )


def test_every_metric_the_dashboard_draws_is_one_the_worker_emits(synth: Synth, emitted: set[Series]) -> None:
    watched = watched_by_dashboard(synth.resources)

    missing = unwatched(set(watched), emitted)

    assert not missing, "dashboard lines that would stay empty:\n" + "\n".join(missing)


def test_the_contract_covers_every_alarm_on_the_runtimes_metrics(synth: Synth) -> None:
    # Per queue: dead letters, failure rate, heartbeat, runtime faults, circuit open, retrying, a hold near its
    # bound, duration per job; for the stack, stalled batches (each queue's heartbeat counts them).
    alarms = set().union(*watched_by_alarms(synth.resources).values())
    per_queue = {
        "dlq-arrivals",
        "failure-rate",
        "heartbeat-missing",
        "runtime-faults",
        "circuit-open",
        "retrying",
        "held-near-bound",
    }
    expected = {
        f"{synth.context.stack_name}-{spec.name}-{signal}"
        for spec in CATALOG
        for signal in (*per_queue, *(f"duration-{job}" for job in spec.job_names))
        # A queue whose jobs are all durable has no breaker or hold alarm (sqs_jobs.cdk.naming.queue_signals).
        if signal in queue_signals(spec) or signal not in ("circuit-open", "held-near-bound")
    }
    assert alarms == expected | {f"{synth.context.stack_name}-batches-stalled"}


# --- the contract can fail -----------------------------------------------------------------------------------------


def renamed(items: set[Series], old: str, new: str) -> set[Series]:
    return {
        (namespace, name, frozenset((key, new if (key, value) == ("job", old) else value) for key, value in dims))
        for namespace, name, dims in items
    }


def with_dimension(items: set[Series], name: str, value: str) -> set[Series]:
    return {(namespace, metric, dims | {(name, value)}) for namespace, metric, dims in items}


def test_a_job_renamed_on_either_side_breaks_the_contract(synth: Synth, emitted: set[Series]) -> None:
    watched = set(watched_by_alarms(synth.resources))
    assert not unwatched(watched, emitted)

    worker_side = unwatched(watched, renamed(emitted, "order_confirmation", "confirm_order"))
    stack_side = unwatched(renamed(watched, "order_confirmation", "confirm_order"), emitted)

    assert worker_side and all("'job': 'order_confirmation'" in item for item in worker_side)
    assert stack_side and all("'job': 'confirm_order'" in item for item in stack_side)


def test_a_dimension_added_on_either_side_breaks_the_contract(synth: Synth, emitted: set[Series]) -> None:
    watched = set(watched_by_alarms(synth.resources))

    # The worker adds one: every watched series loses its twin.
    assert len(unwatched(watched, with_dimension(emitted, "env", "prod"))) == len(watched)
    # The stack adds one: none of its series is emitted.
    assert len(unwatched(with_dimension(watched, "env", "prod"), emitted)) == len(watched)


# --- the production flush ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "environment",
    [{}, {"POWERTOOLS_DEV": "true"}, {"POWERTOOLS_METRICS_DISABLED": "true"}],
    ids=["production", "powertools-dev", "metrics-disabled"],
)
def test_the_production_flush_prints_one_compact_emf_document_per_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], environment: dict[str, str]
) -> None:
    for name in ("POWERTOOLS_DEV", "POWERTOOLS_METRICS_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    observability = Observability.create()  # no output: stdout, as in Lambda
    observability.metrics.add_dimension(name="queue", value="orders")
    observability.metrics.add_metric(name="JobFailed", unit="Count", value=1)

    observability.flush_metrics()

    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0] == json.dumps(json.loads(lines[0]), separators=(",", ":"))
    assert emf_series(lines[0]) == {series(METRICS_NAMESPACE, "JobFailed", {"queue": "orders", "service": "sqs-jobs"})}
    assert os.environ.get("POWERTOOLS_DEV") == environment.get("POWERTOOLS_DEV")
