"""The example app's pieces that don't run in Lambda: the stand-in of its invoicing API for the local engine,
its end-to-end demo (`make demo`) and its chaos soak (`make soak`) with their job fixtures. The app's catalog is
functions/catalog.py and its jobs are functions/jobs/; nothing of the framework (sqs_jobs.cdk,
sqs_jobs.worker,
sqs_jobs.cli) imports any of it."""
