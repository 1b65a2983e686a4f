"""The baseline for bench.overhead: a bare Powertools SQS handler with batch processing and idempotency on
DynamoDB, as Powertools' documentation writes one, doing no work per record. Imports what such a handler
imports; builds its objects in build() so both handlers are measured the same way."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any, TextIO

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)


def build(table: str, dynamodb: Any, output: TextIO) -> Callable[[dict[str, Any], Any], Any]:
    logger = Logger(service="bare")
    if isinstance(logger.registered_handler, logging.StreamHandler):
        logger.registered_handler.setStream(output)
    Metrics(namespace="Bare", service="bare")
    processor = BatchProcessor(event_type=EventType.SQS)
    config = IdempotencyConfig(event_key_jmespath="id")
    persistence = DynamoDBPersistenceLayer(table_name=table, boto3_client=dynamodb)

    def work(job: dict[str, Any]) -> dict[str, Any]:
        return {"done": job["id"]}

    run: Callable[..., Any] = idempotent_function(
        work, data_keyword_argument="job", persistence_store=persistence, config=config
    )

    def record_handler(record: SQSRecord) -> Any:
        return run(job=json.loads(record.body))

    def handler(event: dict[str, Any], context: Any) -> Any:
        config.register_lambda_context(context)
        return process_partial_response(
            event=event, record_handler=record_handler, processor=processor, context=context
        )

    return handler
