"""jobctl's commands, one module each, loaded only when run (sqs_jobs.cli.cli lists them)."""
