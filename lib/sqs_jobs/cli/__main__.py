"""`python -m jobctl` is the `jobctl` command."""

from sqs_jobs.cli.cli import main

# Named as the installed script, so help reads `jobctl` and completion uses _JOBCTL_COMPLETE.
main(prog_name="jobctl")
