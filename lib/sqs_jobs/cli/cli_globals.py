"""What every jobctl command line shares, importable without boto3 (so `jobctl --help` stays fast): the global
options, accepted before or after any subcommand as the aws CLI's are; the command classes that add them and list
them apart in help; subcommands loaded on first use; exit codes.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from click.shell_completion import CompletionItem

from sqs_jobs.catalog_ref import ENV_CATALOG, PROJECT_SETTING, NoCatalogError, Project, find_project
from sqs_jobs.cli.errors import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    OperatorUnreachableError,
    OperatorUsageError,
)
from sqs_jobs.stack_names import DEFAULT_STACK_NAME

if TYPE_CHECKING:
    from sqs_jobs.specs import Catalog

OUTPUTS = ("table", "json", "text")
DEFAULT_OUTPUT = "table"
# The stack's default name, the publisher's and the local engine's too (one definition, in sqs_jobs).
DEFAULT_STACK = DEFAULT_STACK_NAME

EXIT_CODES_HELP = f"""\b
Exit codes:
  {EXIT_OK}  ok
  {EXIT_FAILED}  the command ran and found or caused a problem: an unhealthy queue,
     redriven jobs back in the DLQ, a failed move or publish, no such message
  {EXIT_USAGE}  bad usage: options, unknown queue or job names, filters, values
  {EXIT_UNREACHABLE}  could not check: AWS or the endpoint unreachable, credentials, access
     denied, throttled, the stack's SSM parameters not found
"""


@dataclass
class Options:
    """The global options as given: environment first, then each level of the command line in order, so a value
    given after the subcommand wins over one given before it."""

    profile: str | None = None
    region: str | None = None
    endpoint_url: str | None = None
    stack: str = DEFAULT_STACK
    output: str = DEFAULT_OUTPUT
    query: Any = None  # a compiled JMESPath expression
    query_text: str | None = None
    progress: bool | None = None  # None: shown when stderr is a terminal
    debug: bool = False
    # Said once, when a command runs: set by an AWS_DEFAULT_OUTPUT jobctl lacks, cleared by an explicit --output.
    output_warning: str | None = None
    # The project's catalog as `package.module:NAME` (--catalog, $JOBS_CATALOG); None: the project's setting.
    catalog_ref: str | None = None
    # Whether --catalog named it (else $JOBS_CATALOG or the project's setting): what an error names as its source.
    _catalog_from_option: bool = field(default=False, repr=False, compare=False)
    # The catalog loaded, with the reference it was loaded for: a command asks for it several times, and finding
    # the project's setting reads pyproject.toml files.
    _loaded: tuple[str | None, Catalog] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Options:
        env = os.environ if environ is None else environ
        options = cls(
            profile=env.get("AWS_PROFILE") or None,
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None,
            endpoint_url=env.get("AWS_ENDPOINT_URL") or None,
            catalog_ref=env.get(ENV_CATALOG, "").strip() or None,
        )
        output = env.get("AWS_DEFAULT_OUTPUT", "").strip()
        if output in OUTPUTS:
            options.output = output
        elif output:
            # The aws CLI has more formats (yaml, yaml-stream): an aws user's setting must not break jobctl.
            options.output_warning = (
                f"jobctl: warning: AWS_DEFAULT_OUTPUT={output} is not a jobctl output ({', '.join(OUTPUTS)}); "
                f"using {DEFAULT_OUTPUT}"
            )
        return options

    def catalog(self) -> Catalog:
        """The project's catalog: --catalog, else $JOBS_CATALOG, else `[tool.sqs-jobs] catalog` in the nearest
        pyproject.toml above the working directory (whose directory is put on the import path). None found, or one
        that can't be loaded, is a usage error naming what is accepted."""
        from sqs_jobs.catalog_ref import CatalogRefError, load_catalog

        if self._loaded is not None and self._loaded[0] == self.catalog_ref:
            return self._loaded[1]
        project = find_project(Path.cwd())
        try:
            ref = self.resolved_catalog_ref(project)
            catalog = load_catalog(ref, search_path=project.root if project else Path.cwd())
        except NoCatalogError as error:
            raise CatalogOptionError(str(error)) from None
        except CatalogRefError as error:
            raise CatalogOptionError(f"{self._catalog_source()}: {error}") from None
        self._loaded = (self.catalog_ref, catalog)
        return catalog

    def _catalog_source(self) -> str:
        """Where the reference came from, as an operator would look for it."""
        if self.catalog_ref is None:
            return f"{PROJECT_SETTING} in pyproject.toml"
        return "--catalog" if self._catalog_from_option else f"${ENV_CATALOG}"

    def resolved_catalog_ref(self, project: Project | None = None) -> str:
        """Which catalog `catalog()` loads, as `package.module:NAME`; NoCatalogError when nothing names one.
        `project`: the one the working directory is in, when the caller has found it already."""
        if self.catalog_ref:
            return self.catalog_ref
        project = project or find_project(Path.cwd())
        if project is None:
            raise NoCatalogError(
                f"no catalog: this directory is in no project naming one ({PROJECT_SETTING} = "
                "'package.module:NAME' in its pyproject.toml); pass --catalog MODULE:NAME, set $JOBS_CATALOG, or "
                "start a project with `jobctl init PATH`"
            )
        return project.catalog_ref

    @property
    def show_progress(self) -> bool:
        return self.progress if self.progress is not None else sys.stderr.isatty()

    def client(self, service: str, endpoint_url: str | None = None) -> Any:
        """A client of `service` at `endpoint_url`, else at --endpoint-url (else AWS's)."""
        # Imported here: the CLI's help, version and completion never load boto3.
        import boto3
        import botocore.exceptions

        session = boto3.session.Session(profile_name=self.profile, region_name=self.region)
        try:
            return session.client(service, endpoint_url=endpoint_url or self.endpoint_url)  # type: ignore[call-overload]
        except ValueError as error:
            # botocore rejects a malformed endpoint URL with a bare ValueError; its own errors keep their types.
            if isinstance(error, botocore.exceptions.BotoCoreError) or self.endpoint_url is None:
                raise
            raise EndpointError(f"--endpoint-url {self.endpoint_url!r}: {error}") from None

    def durable_api(self) -> Any:
        """A Lambda client for durable executions' callbacks and stops: Lambda's; on the local engine
        (--endpoint-url), its durable functions', whose URL the engine names in its SSM parameter."""
        from sqs_jobs.stack_names import local_callbacks_parameter_name

        if self.endpoint_url is None:
            return self.client("lambda")
        parameter = self.client("ssm").get_parameter(Name=local_callbacks_parameter_name(self.stack))
        return self.client("lambda", endpoint_url=parameter["Parameter"]["Value"])


class EndpointError(OperatorUnreachableError):
    """The endpoint URL can't be used."""


class CatalogOptionError(OperatorUsageError):
    """The project's catalog can't be loaded (--catalog, $JOBS_CATALOG, or its pyproject.toml's setting)."""


def root_options(ctx: click.Context) -> Options:
    """The one Options of this command line, kept on the root context."""
    root = ctx.find_root()
    if not isinstance(root.obj, Options):
        root.obj = Options.from_environment()
    return root.obj


def _store(name: str) -> Any:
    def callback(ctx: click.Context, _param: click.Parameter, value: Any) -> None:
        if value is None:
            return
        options = root_options(ctx)
        setattr(options, name, value)
        if name == "output":
            options.output_warning = None
        if name == "catalog_ref":
            options._catalog_from_option = True

    return callback


def _compile_query(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is None:
        return
    import jmespath  # type: ignore[import-untyped]
    import jmespath.exceptions  # type: ignore[import-untyped]

    try:
        compiled = jmespath.compile(value)
    except jmespath.exceptions.ParseError as error:
        # Its str() spans lines (expression and caret): one line here.
        incomplete = isinstance(error, jmespath.exceptions.IncompleteExpressionError)
        reason = "incomplete expression" if incomplete else error.msg
        raise click.BadParameter(
            f"{value!r} is not a JMESPath expression: {reason} at column {error.lex_position}",
            ctx=ctx,
            param=param,
        ) from None
    options = root_options(ctx)
    options.query, options.query_text = compiled, value


def _debug(ctx: click.Context, _param: click.Parameter, value: bool | None) -> None:
    if value:
        root_options(ctx).debug = True
        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")


def print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from importlib.metadata import PackageNotFoundError, version

    try:
        click.echo(f"jobctl {version('sqs-jobs')}")
    except PackageNotFoundError:
        click.echo("jobctl 0+unknown")  # run from a source tree that was never installed
    ctx.exit(EXIT_OK)


class GlobalOption(click.Option):
    """An option every jobctl command takes, wherever it stands on the line; it updates the shared Options."""


def global_params() -> list[click.Parameter]:
    """Fresh global options for one command (a Parameter belongs to one command)."""
    specs: list[tuple[Sequence[str], dict[str, Any]]] = [
        (["--profile"], {"metavar": "NAME", "help": "AWS profile, as the aws CLI's. [default: $AWS_PROFILE]"}),
        (
            ["--region"],
            {"metavar": "REGION", "help": "AWS region. [default: $AWS_REGION, else $AWS_DEFAULT_REGION]"},
        ),
        (
            ["--endpoint-url"],
            {
                "metavar": "URL",
                "help": "Endpoint of every AWS call, e.g. the local engine's. [default: $AWS_ENDPOINT_URL]",
            },
        ),
        (["--stack"], {"metavar": "NAME", "help": f"Stack whose queues to use. [default: {DEFAULT_STACK}]"}),
        (
            ["--catalog"],
            {
                "metavar": "MODULE:NAME",
                "callback": _store("catalog_ref"),
                "help": "The project's catalog, e.g. functions.catalog:CATALOG. [default: $JOBS_CATALOG, else "
                "[tool.sqs-jobs] catalog in the project's pyproject.toml]",
            },
        ),
        (
            ["--output"],
            {
                "type": click.Choice(OUTPUTS),
                "help": f"Output format. [default: $AWS_DEFAULT_OUTPUT, else {DEFAULT_OUTPUT}]",
            },
        ),
        (
            ["--query"],
            {
                "metavar": "JMESPATH",
                "callback": _compile_query,
                "help": "JMESPath expression applied to the JSON output (with table: printed as JSON).",
            },
        ),
        (
            ["--progress/--no-progress"],
            {"default": None, "help": "Progress on stderr. [default: when stderr is a terminal]"},
        ),
        (["--debug"], {"is_flag": True, "default": None, "callback": _debug, "help": "Log every AWS call."}),
    ]
    params: list[click.Parameter] = []
    for declarations, settings in specs:
        name = declarations[0].split("/")[0].removeprefix("--").replace("-", "_")
        settings.setdefault("callback", _store(name))
        params.append(GlobalOption(list(declarations), expose_value=False, **settings))
    return params


def _format_options(command: click.Command, ctx: click.Context, formatter: click.HelpFormatter) -> None:
    own: list[tuple[str, str]] = []
    shared: list[tuple[str, str]] = []
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is not None and not isinstance(param, click.Argument):
            (shared if isinstance(param, GlobalOption) else own).append(record)
    for title, records in (("Options", own), ("Global options (before or after the command)", shared)):
        if records:
            with formatter.section(title):
                formatter.write_dl(records)


class JobctlCommand(click.Command):
    """A command with the global options."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.extend(global_params())

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        _format_options(self, ctx, formatter)

    def invoke(self, ctx: click.Context) -> Any:
        options = root_options(ctx)
        if options.output_warning:
            click.echo(options.output_warning, err=True)
            options.output_warning = None
        return super().invoke(ctx)


class JobctlGroup(click.Group):
    """A group with the global options, whose subcommands and subgroups get them too."""

    command_class = JobctlCommand
    group_class = type  # subgroups of this same class

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.extend(global_params())

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        _format_options(self, ctx, formatter)
        self.format_commands(ctx, formatter)

    def invoke(self, ctx: click.Context) -> Any:
        root_options(ctx)  # exists before any subcommand's context copies it
        return super().invoke(ctx)


@dataclass(frozen=True)
class LazyCommand:
    """A subcommand imported when first used: "module:attribute", and its short help for listing it unloaded."""

    target: str
    help: str


class LazyGroup(JobctlGroup):
    """Imports a subcommand's module only when that subcommand runs, so help, version and completion of the
    command names load neither boto3 nor the local engine (click's "Lazily loading subcommands")."""

    def __init__(self, *args: Any, lazy_commands: Mapping[str, LazyCommand], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy_commands:
            module, _, attribute = self.lazy_commands[cmd_name].target.partition(":")
            command = getattr(importlib.import_module(module), attribute)
            if not isinstance(command, click.Command):
                raise TypeError(f"{self.lazy_commands[cmd_name].target} is not a click command")
            self.add_command(command, cmd_name)
        return self.commands.get(cmd_name)

    def _short_help(self, name: str, limit: int) -> str:
        loaded = self.commands.get(name)
        if loaded is not None:
            return loaded.get_short_help_str(limit)
        # Shortened as click shortens a loaded command's help.
        return click.Command(name, help=self.lazy_commands[name].help).get_short_help_str(limit)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = [name for name in self.list_commands(ctx) if not self._hidden(name)]
        if not names:
            return
        limit = formatter.width - 6 - max(map(len, names))
        with formatter.section("Commands"):
            formatter.write_dl([(name, self._short_help(name, limit)) for name in names])

    def _hidden(self, name: str) -> bool:
        loaded = self.commands.get(name)
        return loaded is not None and loaded.hidden

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        items = [
            CompletionItem(name, help=self._short_help(name, 45))
            for name in self.list_commands(ctx)
            if name.startswith(incomplete) and not self._hidden(name)
        ]
        # The options, without Group.shell_complete's loading of every subcommand.
        items.extend(click.Command.shell_complete(self, ctx, incomplete))
        return items

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.exceptions.NoSuchCommand as error:
            # Click suggests from the loaded commands only: suggest from all of them.
            raise click.exceptions.NoSuchCommand(
                args[0], possibilities=self.list_commands(ctx), ctx=ctx
            ) from error.__cause__


def _completion_catalog(ctx: click.Context) -> Catalog | None:
    try:
        return root_options(ctx).catalog()
    except CatalogOptionError:
        return None  # a completion never fails: it offers nothing


def complete_queue(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    catalog = _completion_catalog(ctx)  # boto3-free and cheap
    names = catalog.queue_names if catalog is not None else ()
    return [CompletionItem(name) for name in names if name.startswith(incomplete)]


def complete_job(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """The jobs of the queue already on the line, else every job."""
    from sqs_jobs.specs import UnknownQueueError

    catalog = _completion_catalog(ctx)
    if catalog is None:
        return []
    queue = ctx.params.get("queue")
    try:
        names = catalog.queue(queue).job_names if queue else catalog.job_names
    except UnknownQueueError:
        names = catalog.job_names
    return [CompletionItem(name) for name in names if name.startswith(incomplete)]
