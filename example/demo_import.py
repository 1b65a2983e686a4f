"""`make demo`'s durable imports: two CSV files imported by import_orders as one batch, each a durable execution of
1,000-row steps, on the local engine (the durable execution testing SDK runs them, no AWS). One file has a broken
row: its import is dead-lettered with evidence, and once both have ended the batch's completion callback,
import_report, mails how they went."""

from __future__ import annotations

from typing import TYPE_CHECKING

from example.orders_csv import order_id, orders_csv, row_amount
from functions.jobs.import_orders import csv_key
from sqs_jobs.durable import execution_name
from sqs_jobs.durable.record import DurableRecords
from sqs_jobs.publisher import JobPublisher

if TYPE_CHECKING:
    from example.demo import DemoResult
    from sqs_jobs.local.engine import LocalEngine

IMPORT_ID = "demo-2026-12"
ROWS = 2_500
# A second file, whose row 10 has an amount that is not a number: its import fails for good.
BROKEN_ID = "demo-2026-12-late"
BROKEN_ROWS = 20
REPORT_ID = "demo-december"


def run_import(engine: LocalEngine, result: DemoResult) -> None:
    assert engine.deployment is not None and engine.durables is not None
    deployment = engine.deployment
    clients = engine.clients()
    clients("s3").put_object(
        Bucket=deployment.resources["imports_bucket"], Key=csv_key(IMPORT_ID), Body=orders_csv(IMPORT_ID, ROWS)
    )
    clients("s3").put_object(
        Bucket=deployment.resources["imports_bucket"],
        Key=csv_key(BROKEN_ID),
        Body=orders_csv(BROKEN_ID, BROKEN_ROWS, bad_row=10),
    )
    publisher = JobPublisher.from_stack(
        clients("ssm"), clients("sqs"), stack_name=engine.stack_name, dynamodb_client=clients("dynamodb")
    )
    print(f"publishing a batch of two imports: {ROWS} rows in {csv_key(IMPORT_ID)}, a broken file {csv_key(BROKEN_ID)}")
    batch_id = publisher.batch(
        [("import_orders", IMPORT_ID), ("import_orders", BROKEN_ID)],
        on_complete=("import_report", REPORT_ID),
        description="December's order files",
    )
    print(f"    batch {batch_id}: on_complete import_report {REPORT_ID} (jobctl batch show {batch_id})")
    publisher.publish("import_orders", IMPORT_ID)  # a second publish of the key: the same execution
    result.check(
        "imports queue drained (the worker started the executions and acknowledged)", engine.wait_until_idle(60)
    )
    name = execution_name(f"import_orders:{IMPORT_ID}", 0)
    executions = [e for e in engine.durables.executions("import_orders") if e.start_input.execution_name == name]
    result.check("one durable execution per file, the second publish none", len(executions) == 1)
    if len(executions) != 1:
        return
    outcome = engine.durables.wait("import_orders", executions[0].durable_execution_arn, timeout_s=120)
    steps = sorted(str(operation.name) for operation in outcome.get_all_operations())
    print(f"    execution {name}: {outcome.status.value}, steps {', '.join(steps)}")
    result.check("the import's execution succeeded", outcome.status.value == "SUCCEEDED")
    table = deployment.resources["imported_orders_table"]
    count = clients("dynamodb").scan(TableName=table, Select="COUNT")["Count"]
    sample = clients("dynamodb").get_item(TableName=table, Key={"order_id": {"S": order_id(IMPORT_ID, 1234)}})
    result.check(f"{ROWS} orders imported, each once", count == ROWS)
    result.check(
        "an imported row as in the file", sample.get("Item", {}).get("amount", {}).get("N") == row_amount(1234)
    )
    records = DurableRecords(lambda: clients("dynamodb"), deployment.idempotency_table, 3600)
    state = records.read(f"import_orders:{IMPORT_ID}")
    print(f"    job show: {state.status}, {state.steps_done} steps done, last {state.step}")
    result.check(
        "its record says SUCCEEDED after 5 steps (plan, 3 chunks, summary)",
        (state.status, state.steps_done) == ("SUCCEEDED", 5),
    )
    _report(engine, result, batch_id)


def _report(engine: LocalEngine, result: DemoResult, batch_id: str) -> None:
    """The broken file's import is dead-lettered; once both imports have ended, import_report mails the summary."""
    assert engine.deployment is not None and engine.durables is not None
    broken = execution_name(f"import_orders:{BROKEN_ID}", 0)
    [execution] = [e for e in engine.durables.executions("import_orders") if e.start_input.execution_name == broken]
    outcome = engine.durables.wait("import_orders", execution.durable_execution_arn, timeout_s=120)
    result.check("the broken file's import failed (a permanent failure)", outcome.status.value == "FAILED")
    result.check("the batch's callback ran (imports queue drained)", engine.wait_until_idle(60))
    subjects = [str(mail["subject"]) for mail in engine.sent_mail() if REPORT_ID in str(mail.get("subject", ""))]
    for subject in subjects:
        print(f"    import_report mailed: {subject}")
    result.check(
        "import_report mailed once: 1 of 2 imports succeeded, 1 dead-lettered",
        len(subjects) == 1 and "1 of 2 imports succeeded, 1 dead-lettered" in subjects[0],
    )
