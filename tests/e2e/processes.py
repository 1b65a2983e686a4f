"""Running `jobctl local` as a separate process, as a user would, for the e2e tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def cli_env() -> dict[str, str]:
    """This environment with throwaway credentials and no endpoint override: jobctl must find its own way."""
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_REGION": "us-east-1"}
    env.pop("AWS_ENDPOINT_URL", None)
    return env


@contextmanager
def jobctl_local(*args: str) -> Iterator[subprocess.Popen[str]]:
    """`python -m jobctl local ARGS`, stdout and stderr merged; killed on the way out if still running."""
    process = subprocess.Popen(
        [sys.executable, "-m", "sqs_jobs.cli", "local", *args],
        cwd=ROOT,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
