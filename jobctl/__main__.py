"""`python -m jobctl` is the `jobctl` command."""

from jobctl.cli import main

main()
