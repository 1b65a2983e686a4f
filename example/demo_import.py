"""`make demo`'s durable import: a small CSV imported by import_orders, a durable execution of 1,000-row steps, on
the local engine (the durable execution testing SDK runs it, no AWS)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from example.orders_csv import order_id, orders_csv, row_amount
from functions.durable.record import DurableRecords
from functions.jobs.import_orders import csv_key
from sqs_jobs.durable import execution_name
from sqs_jobs.publisher import JobPublisher

if TYPE_CHECKING:
    from example.demo import DemoResult
    from jobctl.local.engine import LocalEngine

IMPORT_ID = "demo-2026-12"
ROWS = 2_500


def run_import(engine: LocalEngine, result: DemoResult) -> None:
    assert engine.deployment is not None and engine.durables is not None
    deployment = engine.deployment
    clients = engine.clients()
    clients("s3").put_object(
        Bucket=deployment.resources["imports_bucket"], Key=csv_key(IMPORT_ID), Body=orders_csv(IMPORT_ID, ROWS)
    )
    publisher = JobPublisher(clients("sqs"), {name: queue.url for name, queue in deployment.queues.items()})
    print(f"publishing import_orders {IMPORT_ID}: {ROWS} rows in {csv_key(IMPORT_ID)}, a durable execution")
    publisher.publish("import_orders", IMPORT_ID)
    publisher.publish("import_orders", IMPORT_ID)  # a second publish of the key: the same execution
    result.check(
        "imports queue drained (the worker started the execution and acknowledged)", engine.wait_until_idle(60)
    )
    name = execution_name(f"import_orders:{IMPORT_ID}", 0)
    executions = [e for e in engine.durables.executions("import_orders") if e.start_input.execution_name == name]
    result.check("one durable execution for the two publishes", len(engine.durables.executions("import_orders")) == 1)
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
