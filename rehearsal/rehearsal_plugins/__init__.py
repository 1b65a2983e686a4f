"""LocalStack plugins for the deploy rehearsal (tests/rehearsal): offline, without Docker, and like AWS where the
rehearsal depends on it.

- `dynamodb:rehearsal` (PROVIDER_OVERRIDE_DYNAMODB): DynamoDB from LocalStack's bundled moto, instead of DynamoDB
  Local, which needs Java and a download.
- `sqs:rehearsal` (PROVIDER_OVERRIDE_SQS): SQS with the SenderId AWS sets (the sender's principal), not the
  account ID on every message.
- `rehearsal` (LAMBDA_RUNTIME_EXECUTOR): a Lambda runtime executor that prepares and runs nothing, instead of
  containers with a downloaded runtime: functions deploy and turn Active, every invoke fails.
"""
