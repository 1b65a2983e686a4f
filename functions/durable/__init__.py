"""Durable jobs: the job's code as a Lambda durable execution of checkpointed steps (docs/workflows.md)."""
