"""The CDK app: the stack (`sqs_jobs.cdk.stack`) composes one construct per file, all read from `functions.catalog`.

`sqs_jobs.cdk.naming` and `sqs_jobs.cdk.context` import no CDK and may be used by `jobctl` and the local engine.
"""
