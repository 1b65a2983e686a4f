"""LocalStack, a second AWS emulator beside moto, as a child process of the test run.

It runs from its own locked environment (`rehearsal/`, synced into `.venv-rehearsal` by `make rehearse`) on a free
127.0.0.1 port, without Docker and offline, with every file it writes under one scratch folder. It is stopped on
the way out whatever happened, and dies with the test run if that is killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3

ROOT = Path(__file__).resolve().parents[2]
PYTHON = ROOT / ".venv-rehearsal" / "bin" / "python"
REGION = "us-east-1"
# LocalStack's fixed test credentials: any key is accepted, and this account is what they map to.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"}
STARTUP_TIMEOUT_S = 60
STOP_TIMEOUT_S = 20


class EmulatorError(Exception):
    """LocalStack could not be used."""


class EmulatorNotInstalledError(EmulatorError):
    """The rehearsal environment is missing."""


class EmulatorStartError(EmulatorError):
    """LocalStack did not come up healthy."""


@dataclass(frozen=True)
class Emulator:
    endpoint_url: str
    region: str
    log_path: Path

    def aws_environment(self) -> dict[str, str]:
        """This process's environment with every AWS setting replaced, so that nothing reaches a real account:
        fixed test credentials, this endpoint for every service, and no profile or config file of the user's."""
        env = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")}
        return (
            env
            | CREDENTIALS
            | {
                "AWS_REGION": self.region,
                "AWS_DEFAULT_REGION": self.region,
                "AWS_ENDPOINT_URL": self.endpoint_url,
                "AWS_CONFIG_FILE": os.devnull,
                "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            }
        )

    def client(self, service: str, credentials: Mapping[str, str] | None = None) -> Any:
        """A boto3 client of the emulator: the test credentials, or `credentials` (as STS returns them)."""
        keys = credentials or {
            "AccessKeyId": CREDENTIALS["AWS_ACCESS_KEY_ID"],
            "SecretAccessKey": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        }
        return boto3.client(  # type: ignore[call-overload]
            service,
            endpoint_url=self.endpoint_url,
            region_name=self.region,
            aws_access_key_id=keys["AccessKeyId"],
            aws_secret_access_key=keys["SecretAccessKey"],
            aws_session_token=keys.get("SessionToken"),
        )


def _settings(port: int, scratch: Path) -> dict[str, str]:
    return {
        # Run on the host, not as in its container (this machine has /.dockerenv).
        "OVERRIDE_IN_DOCKER": "0",
        # The default server ignores the host part of GATEWAY_LISTEN; hypercorn binds where told.
        "GATEWAY_SERVER": "hypercorn",
        "GATEWAY_LISTEN": f"127.0.0.1:{port}",
        "DNS_ADDRESS": "0",
        "DISABLE_EVENTS": "1",
        "SKIP_SSL_CERT_DOWNLOAD": "1",
        # Everything it writes (else under /var/lib/localstack and /tmp).
        "FILESYSTEM_ROOT": str(scratch / "filesystem"),
        "TMPDIR": str(scratch / "tmp"),
        # The plugins of rehearsal/rehearsal_plugins: DynamoDB on moto, SQS with the SenderId AWS sets, Lambda
        # functions that never run.
        "PROVIDER_OVERRIDE_DYNAMODB": "rehearsal",
        "PROVIDER_OVERRIDE_SQS": "rehearsal",
        "LAMBDA_RUNTIME_EXECUTOR": "rehearsal",
    }


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def dies_with_parent(command: list[str]) -> list[str]:
    """`command`, killed by the kernel if this process dies before it (util-linux's setpriv, where there is one:
    Linux). SIGKILL, not SIGTERM: LocalStack's clean shutdown can hang while CloudFormation is at work, and
    whatever it leaves is scratch."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig=KILL", "--", *command] if setpriv else command


def _healthy(endpoint_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{endpoint_url}/_localstack/health", timeout=2) as response:
            return bool(json.load(response).get("services"))
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _log_tail(log_path: Path, lines: int = 40) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(log_path.read_text(errors="replace").splitlines()[-lines:])
    return "(no log)"


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to its process group (LocalStack shuts down cleanly), SIGKILL if it lingers."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(STOP_TIMEOUT_S)
    # Whatever it started in its group goes too.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


@contextlib.contextmanager
def running_localstack(scratch: Path, python: Path = PYTHON) -> Iterator[Emulator]:
    """LocalStack on a free port, healthy, with its files and log (`localstack.log`) in `scratch` (emptied first)."""
    if not python.exists():
        raise EmulatorNotInstalledError(f"{python} is missing: run `make rehearse` (it syncs rehearsal/uv.lock)")
    shutil.rmtree(scratch, ignore_errors=True)
    (scratch / "tmp").mkdir(parents=True)
    port = _free_port()
    emulator = Emulator(endpoint_url=f"http://127.0.0.1:{port}", region=REGION, log_path=scratch / "localstack.log")
    env = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")}
    with emulator.log_path.open("wb") as log:
        process = subprocess.Popen(
            dies_with_parent([str(python), "-m", "localstack.runtime.main"]),
            cwd=scratch,
            env=env | _settings(port, scratch),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so it and its children stop together
        )
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not _healthy(emulator.endpoint_url):
            if process.poll() is not None:
                raise EmulatorStartError(
                    f"LocalStack exited with {process.returncode} while starting; its log:\n"
                    + _log_tail(emulator.log_path)
                )
            if time.monotonic() > deadline:
                raise EmulatorStartError(
                    f"LocalStack not healthy after {STARTUP_TIMEOUT_S}s; its log:\n" + _log_tail(emulator.log_path)
                )
            time.sleep(0.2)
        yield emulator
    finally:
        _stop(process)
