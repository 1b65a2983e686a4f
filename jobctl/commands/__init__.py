"""jobctl's commands, one module each, loaded only when run (jobctl/cli.py lists them)."""
