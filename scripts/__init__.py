"""Developer scripts run with `python -m scripts.<name>` (Makefile targets)."""
