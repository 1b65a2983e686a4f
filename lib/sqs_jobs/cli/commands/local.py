"""`jobctl local`: the local engine in the foreground (imports moto: loaded only when this command runs)."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from types import FrameType
from typing import TYPE_CHECKING, TextIO

import click

from sqs_jobs.cli.cli_globals import JobctlCommand
from sqs_jobs.cli.cli_support import Options, fail
from sqs_jobs.local.chaos import ChaosSettings, ChaosSpecError
from sqs_jobs.local.engine import DEFAULT_PORT, LocalEngine
from sqs_jobs.local.scheduler import FastClock
from sqs_jobs.local.standins import StandInError, parse_standin_option

if TYPE_CHECKING:
    from sqs_jobs.local.provision import LocalDeployment


def _standin_options(values: tuple[str, ...]) -> dict[str, dict[str, str]]:
    options: dict[str, dict[str, str]] = {}
    for value in values:
        try:
            name, parsed = parse_standin_option(value)
        except StandInError as error:
            raise click.BadParameter(str(error)) from None
        options.setdefault(name, {}).update(parsed)
    return options


def _chaos_settings(spec: str | None) -> ChaosSettings | None:
    if spec is None:
        return None
    try:
        return ChaosSettings.parse(spec)
    except ChaosSpecError as error:
        raise click.BadParameter(str(error)) from None


@click.command(cls=JobctlCommand)
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True)
@click.option("--concurrency", type=click.IntRange(1, 64), help="Pollers per queue (default: the catalog's).")
@click.option(
    "--standin",
    "standins",
    metavar="NAME:KEY=VALUE,...",
    multiple=True,
    callback=lambda _ctx, _param, values: _standin_options(values),
    help="Options of the stand-in of endpoint NAME (the catalog's Endpoint.standin), e.g. "
    "payments_api:mode=down,port=8081; repeat for several endpoints.",
)
@click.option(
    "--chaos",
    metavar="SPEC",
    callback=lambda _ctx, _param, value: _chaos_settings(value),
    help="Inject faults, e.g. transient=0.1,hang=0.01,crash=0.01,duplicate=0.05[,hang_s=5][,seed=7]: rates per "
    "call a job makes, AWS or HTTP (transient, hang), per record run (crash before the ack), per delivery "
    "(duplicate), per new environment (slow_start, slow_start_s), per idempotency-table write (slow_store, "
    "slow_store_s), per stand-in answer (drip, drip_s), per AWS call of the runtime's own, after a job's success too "
    "(runtime). See docs/chaos.md.",
)
@click.option(
    "--scheduler-speed",
    type=click.FloatRange(1, 100_000),
    default=1.0,
    show_default=True,
    help="Run the scheduler's clock N times faster than real time, to watch delayed and recurring jobs arrive.",
)
@click.option(
    "--traces",
    metavar="PATH",
    type=click.File("a", lazy=False),
    help="Write the spans of the traced queues' runs and durable steps (QueueSpec(tracing=True)) as JSON lines to "
    "PATH, or to the console with '-'.",
)
@click.pass_obj
def local(
    options: Options,
    port: int,
    concurrency: int | None,
    standins: dict[str, dict[str, str]],
    chaos: ChaosSettings | None,
    scheduler_speed: float,
    traces: TextIO | None,
) -> None:
    """Run the local engine: moto server + the real workers behind an SQS event source emulator, every resource
    of the catalog, and a stand-in of each endpoint that declares one."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    stop = threading.Event()

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        click.echo(f"\n{signal.Signals(signum).name}: no new batches; finishing the batches in flight...", err=True)
        stop.set()

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    provider = None
    if traces is not None:
        from sqs_jobs.local.traces import export_traces

        provider = export_traces(traces)
    try:
        engine = LocalEngine(
            port=port,
            catalog=options.catalog(),
            stack_name=options.stack,
            concurrency=concurrency,
            standin_options=standins,
            chaos=chaos,
            scheduler_clock=FastClock(scheduler_speed) if scheduler_speed != 1 else None,
        )
        engine.start()
    except StandInError as error:
        fail(str(error))
    except OSError as error:
        fail(f"cannot start the local engine (port {port}, or a stand-in's port): {error.strerror}")
    assert engine.deployment is not None
    click.echo(f"local engine ready at {engine.endpoint_url} (region {engine.region}, stack {engine.stack_name})")
    for line in queue_lines(engine.deployment):
        click.echo(line)
    for name, value in engine.deployment.resources.items():
        kind = engine.catalog.resource(name).kind
        shown = f"{value}  (stand-in)" if name in engine.standins else value
        click.echo(f"  {kind} {name}: {shown}")
    if chaos is not None:
        click.echo(f"  chaos: {chaos.describe()}")
    if engine.durables is not None:
        # Where a service's Lambda client sends durable jobs' events (JobPublisher.send_event): not the engine's
        # endpoint above, whose Lambda has no durable executions (jobctl finds this itself).
        url = engine.durables.serve_callbacks()
        click.echo(f"  durable executions' callbacks (a publisher's lambda_client endpoint_url): {url}")
    # boto3 reads AWS_DEFAULT_REGION (AWS_REGION only in newer SDKs and the CLI): both, so either works. Any
    # credentials do against the engine; a shell without any would stop at "Unable to locate credentials".
    click.echo(
        f"  export AWS_ENDPOINT_URL={engine.endpoint_url} AWS_DEFAULT_REGION={engine.region} AWS_REGION={engine.region}"
        " AWS_ACCESS_KEY_ID=${AWS_ACCESS_KEY_ID:-local} AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY:-local}"
    )
    click.echo("  Ctrl-C stops polling, finishes the batches in flight and exits.", err=False)
    sys.stdout.flush()
    while not stop.wait(0.5):  # a timed wait keeps the main thread responsive to signals
        pass
    engine.stop()
    if provider is not None:
        provider.shutdown()
    click.echo("local engine stopped", err=True)


def queue_lines(deployment: LocalDeployment) -> list[str]:
    """The banner's line per queue, and one per priority lane other than the queue's own (its default lane's)."""
    lines = []
    for name, queue in deployment.queues.items():
        default = queue.spec.default_lane
        lane = f"the {default} lane; " if default else ""
        lines.append(f"  queue {name}: {queue.url}  ({lane}DLQ {queue.dlq_url})")
        lines += [f"    lane {other.name}: {other.url}" for other in queue.lanes if other.url != queue.url]
    return lines
