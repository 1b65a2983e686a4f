"""`jobctl`: the operator's command line. Options behave like the `aws` CLI's; errors are one line.

Exit codes: 0 ok, 1 the operation failed or found a problem, 2 bad usage.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from types import FrameType

import click

from jobctl.cli_support import EXIT_FAILED, Options, emit, operator_errors
from jobctl.discovery import find_queues
from jobctl.local.chaos import ChaosSettings, ChaosSpecError
from jobctl.local.engine import DEFAULT_PORT, LocalEngine
from jobctl.local.fake_invoicing import MODES as INVOICING_MODES
from jobctl.local.provision import DEFAULT_STACK_NAME
from sqs_jobs.catalog import CATALOG
from sqs_jobs.publisher import JobPublisher


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--profile", envvar="AWS_PROFILE", help="AWS profile (as the aws CLI).")
@click.option("--region", envvar=["AWS_REGION", "AWS_DEFAULT_REGION"], help="AWS region (as the aws CLI).")
@click.option("--endpoint-url", envvar="AWS_ENDPOINT_URL", help="Endpoint, e.g. the local engine's.")
@click.option("--stack", default=DEFAULT_STACK_NAME, show_default=True, help="Stack whose queues to use.")
@click.option("--output", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.pass_context
def main(
    ctx: click.Context, profile: str | None, region: str | None, endpoint_url: str | None, stack: str, output: str
) -> None:
    """Operate background-job queues: publish, watch, triage and redrive (AWS or the local engine)."""
    ctx.obj = Options(profile=profile, region=region, endpoint_url=endpoint_url, stack=stack, output=output)


@main.command()
@click.argument("queue")
@click.argument("job")
@click.argument("entity_id", metavar="ID")
@click.option("--key", help="Idempotency key (default: <job>:<id>).")
@click.option("--delay", type=click.IntRange(0, 900), default=0, help="Delay in seconds (0-900).")
@click.pass_obj
def enqueue(options: Options, queue: str, job: str, entity_id: str, key: str | None, delay: int) -> None:
    """Publish one job to QUEUE: {"job": JOB, "id": ID}."""
    with operator_errors():
        spec = CATALOG.queue(queue)
        if job not in spec.job_names:
            raise click.BadParameter(f"job {job!r} is not on queue {queue!r}; accepted: {', '.join(spec.job_names)}")
        locations = find_queues(options.client("ssm"), options.stack)
        publisher = JobPublisher(options.client("sqs"), {name: loc.url for name, loc in locations.items()})
        message_id = publisher.publish(job, entity_id, key=key, delay_s=delay)
        emit(
            options,
            {"queue": queue, "job": job, "id": entity_id, "message_id": message_id},
            lambda: click.echo(f"enqueued {job}:{entity_id} on {queue} as message {message_id}"),
        )


@main.command()
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True)
@click.option("--concurrency", type=click.IntRange(1, 64), help="Pollers per queue (default: the catalog's).")
@click.option(
    "--invoicing-mode",
    type=click.Choice(INVOICING_MODES),
    default="ok",
    show_default=True,
    help="Start the fake invoicing API in this mode (change it later with POST <url>/_control).",
)
@click.option(
    "--invoicing-port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="Port of the fake invoicing API (0: a free one).",
)
@click.option(
    "--chaos",
    metavar="SPEC",
    callback=lambda _ctx, _param, value: _chaos_settings(value),
    help="Inject faults, e.g. transient=0.2,hang=0.01,crash=0.01,duplicate=0.05[,hang_s=5][,seed=7]: rates per "
    "downstream call (transient, hang), per record run (crash before the ack), per delivery (duplicate).",
)
@click.pass_obj
def local(
    options: Options,
    port: int,
    concurrency: int | None,
    invoicing_mode: str,
    invoicing_port: int,
    chaos: ChaosSettings | None,
) -> None:
    """Run the local engine: moto server + the real workers behind an SQS event source emulator, and a fake of
    the invoicing API that generate_invoice calls."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    stop = threading.Event()

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        click.echo(f"\n{signal.Signals(signum).name}: no new batches; finishing the batches in flight...", err=True)
        stop.set()

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    engine = LocalEngine(
        port=port,
        stack_name=options.stack,
        concurrency=concurrency,
        invoicing_mode=invoicing_mode,
        invoicing_port=invoicing_port,
        chaos=chaos,
    )
    try:
        engine.start()
    except OSError as error:
        ports = f"port {port}" + (f" or {invoicing_port}" if invoicing_port else "")
        click.echo(f"jobctl: error: cannot start the local engine on {ports}: {error.strerror}", err=True)
        sys.exit(EXIT_FAILED)
    assert engine.deployment is not None
    click.echo(f"local engine ready at {engine.endpoint_url} (region {engine.region}, stack {engine.stack_name})")
    for name, queue in engine.deployment.queues.items():
        click.echo(f"  queue {name}: {queue.url}  (DLQ {queue.dlq_url})")
    click.echo(
        f"  invoicing API (fake): {engine.invoicing.url}  mode {invoicing_mode}; "
        f"GET {engine.invoicing.url}/_stats, POST {engine.invoicing.url}/_control"
    )
    if chaos is not None:
        click.echo(f"  chaos: {chaos.describe()}")
    click.echo(f"  export AWS_ENDPOINT_URL={engine.endpoint_url} AWS_REGION={engine.region}")
    click.echo("  Ctrl-C stops polling, finishes the batches in flight and exits.", err=False)
    sys.stdout.flush()
    while not stop.wait(0.5):  # a timed wait keeps the main thread responsive to signals
        pass
    engine.stop()
    click.echo("local engine stopped", err=True)


def _chaos_settings(spec: str | None) -> ChaosSettings | None:
    if spec is None:
        return None
    try:
        return ChaosSettings.parse(spec)
    except ChaosSpecError as error:
        raise click.BadParameter(str(error)) from None


def _register() -> None:
    # Imported here: the command modules import cli_support, never this module.
    from jobctl.cli_dlq import dlq
    from jobctl.cli_status import status

    main.add_command(status)
    main.add_command(dlq)


_register()
