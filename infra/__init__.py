"""The CDK app: the stack (`infra.stack`) composes one construct per file, all read from `sqs_jobs.catalog`.

`infra.naming` and `infra.context` import no CDK and may be used by `jobctl` and the local engine.
"""
