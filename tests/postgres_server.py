"""A real PostgreSQL server for the tests that need one: Debian's `postgresql` package (make test installs it), a
throwaway cluster in a temporary directory, on a free loopback port, with password (SCRAM) authentication.

PostgreSQL refuses to run as root, so as root the cluster runs as the package's `postgres` user.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

# Debian installs each major version's server programs here, outside PATH.
SERVER_BINARIES = Path("/usr/lib/postgresql")


class PostgresUnavailableError(RuntimeError):
    """No PostgreSQL server programs are installed (make test installs Debian's postgresql package)."""


@dataclass(frozen=True)
class PostgresServer:
    host: str
    port: int
    user: str
    password: str
    database: str


def _server_binaries() -> Path:
    versions = sorted(SERVER_BINARIES.glob("*/bin/initdb"), key=lambda path: int(path.parent.parent.name))
    if not versions:
        raise PostgresUnavailableError(
            f"no PostgreSQL server under {SERVER_BINARIES}: install Debian's postgresql package (make test does)"
        )
    return versions[-1].parent


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def running_postgres(database: str = "jobs", user: str = "jobs") -> Iterator[PostgresServer]:
    binaries = _server_binaries()
    as_root = os.geteuid() == 0
    run_as = ["runuser", "-u", "postgres", "--"] if as_root else []
    password = secrets.token_urlsafe(16)
    workdir = Path(tempfile.mkdtemp(prefix="postgres-"))
    try:
        data, password_file = workdir / "data", workdir / "password"
        password_file.write_text(password)
        if as_root:
            shutil.chown(workdir, "postgres")
            shutil.chown(password_file, "postgres")
        subprocess.run(
            [
                *run_as,
                str(binaries / "initdb"),
                f"--pgdata={data}",
                f"--username={user}",
                f"--pwfile={password_file}",
                "--auth=scram-sha-256",
                "--encoding=UTF8",
                "--no-sync",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        port = _free_port()
        options = f"-c listen_addresses=127.0.0.1 -p {port} -k {workdir} -c fsync=off"
        subprocess.run(
            [
                *run_as,
                str(binaries / "pg_ctl"),
                f"--pgdata={data}",
                "-o",
                options,
                "-w",
                "-t",
                "60",
                "-l",
                str(workdir / "server.log"),
                "start",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        try:
            subprocess.run(
                [*run_as, str(binaries / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", user, database],
                check=True,
                capture_output=True,
                timeout=60,
                env={**os.environ, "PGPASSWORD": password},
            )
            yield PostgresServer(host="127.0.0.1", port=port, user=user, password=password, database=database)
        finally:
            subprocess.run(
                [*run_as, str(binaries / "pg_ctl"), f"--pgdata={data}", "-m", "immediate", "-w", "stop"],
                check=False,
                capture_output=True,
                timeout=60,
            )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
