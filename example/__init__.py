"""The example app's pieces that don't run in Lambda: the stand-in of its invoicing API for the local engine,
its end-to-end demo (`make demo`) and its chaos soak (`make soak`) with their job fixtures. The app's catalog is
lib/sqs_jobs/catalog.py and its jobs are functions/jobs/; nothing of the framework (infra/, functions/worker/,
jobctl/) imports any of it."""
