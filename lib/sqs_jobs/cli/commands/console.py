"""`jobctl console`: the operator console in the browser (docs/console.md)."""

from __future__ import annotations

import signal
from pathlib import Path
from types import FrameType

import click

from sqs_jobs.cli.cli_globals import JobctlCommand
from sqs_jobs.cli.cli_support import Options, fail, operator_errors
from sqs_jobs.cli.console.server import DEFAULT_ARCHIVE_DIR, DEFAULT_HOST, DEFAULT_PORT, ConsoleServer
from sqs_jobs.cli.errors import EXIT_FAILED


@click.command(cls=JobctlCommand)
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True)
@click.option(
    "--host", default=DEFAULT_HOST, show_default=True, help="Address to listen on; off loopback a token is required."
)
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    metavar="NAME",
    help="Another name browsers may use for this console (repeatable); required with --host 0.0.0.0.",
)
@click.option(
    "--archive-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_ARCHIVE_DIR,
    show_default=True,
    help="Where discarded messages are archived before they are deleted.",
)
@click.pass_obj
def console(options: Options, port: int, host: str, allow_hosts: tuple[str, ...], archive_dir: Path) -> None:
    """Serve the operator console: queues, dead letters, redrive, discard, pause, in the browser."""
    with operator_errors():
        try:
            server = ConsoleServer(
                options.client,
                options.stack,
                host,
                port,
                allow_hosts,
                archive_dir,
                catalog=options.catalog(),
                durable_api=options.durable_api,
            )
        except OSError as error:
            fail(f"cannot listen on {host}:{port}: {error.strerror}", EXIT_FAILED)
    click.echo(f"jobctl console for stack {options.stack}: {server.url}", err=True)
    # On loopback too: another account on this host reaches 127.0.0.1 as well.
    click.echo("keep this URL private: its token is the console's password; Ctrl-C stops it", err=True)
    # Ctrl-C and a supervisor's SIGTERM both stop it, even where the shell started it with SIGINT ignored (a
    # background job of a non-interactive shell: Python then installs no KeyboardInterrupt of its own).
    for stopping in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stopping, _interrupt)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


def _interrupt(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt
