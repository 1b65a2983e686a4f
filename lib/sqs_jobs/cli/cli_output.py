"""How jobctl prints: `--output table|json|text` and `--query` on stdout, progress on stderr.

Every command builds one JSON payload. `json` prints it; `text` flattens it (the rule below, as the aws CLI's
text output); `table` calls the command's own renderer. `--query` (JMESPath) is applied to the payload first;
with `table`, its result is printed as JSON, since a query's result has no renderer of its own.

Text flattening (docs/jobctl.md), fields separated by tabs, one record per line:
- a scalar is one line: its value (null is `None`, booleans `True`/`False`, as the aws CLI prints them);
- an object is one line of its scalar values in the order of their sorted keys, then each of its lists and
  objects, in key order, on their own lines, each line prefixed with that key upper-cased;
- a list of objects is one line per object, the columns the sorted union of the objects' scalar keys (a missing
  one is `None`), each object's own lists and objects on the lines after it;
- a list of scalars is one line of its values; lists within lists are flattened the same way, line by line;
- tabs, newlines and backslashes within a value are written `\\t`, `\\n`, `\\\\`, so a record stays one line;
  every other control, format or line-separator character as its escape (`\\x1b`, `\\u202e`), never raw.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import click

from sqs_jobs.cli.cli_globals import Options
from sqs_jobs.cli.errors import EXIT_USAGE
from sqs_jobs.visible import visible

Scalar = str | int | float | bool | None


def emit(options: Options, payload: Any, table: Callable[[], None]) -> None:
    """Print a command's result in the chosen output; `table` renders `payload` for people."""
    if options.output == "table" and options.query is None:
        table()
        return
    data = _queried(options, json.loads(json.dumps(payload, default=str)))
    if options.output == "text":
        for line in text_lines(data):
            click.echo(line)
    else:
        click.echo(json.dumps(data, indent=2, sort_keys=True))


def _queried(options: Options, data: Any) -> Any:
    if options.query is None:
        return data
    import jmespath.exceptions  # type: ignore[import-untyped]

    try:
        return options.query.search(data)
    except jmespath.exceptions.JMESPathError as error:  # e.g. a function given the wrong type
        click.echo(f"jobctl: error: --query {options.query_text!r}: {str(error).splitlines()[0]}", err=True)
        sys.exit(EXIT_USAGE)


def age_text(seconds: float | None) -> str:
    """A span as a table shows it: `45 s`, `12.5 min`; `?` when unknown."""
    if seconds is None:
        return "?"
    return f"{seconds / 60:.1f} min" if seconds >= 120 else f"{seconds:.0f} s"


def relative_text(moment: datetime | None, now: datetime, missing: str = "never") -> str:
    """`12.5 min ago`, or `in 30 s` for a moment still to come; `missing` for none."""
    if moment is None:
        return missing
    seconds = (now - moment).total_seconds()
    return f"{age_text(seconds)} ago" if seconds >= 0 else f"in {age_text(-seconds)}"


def _is_scalar(value: Any) -> bool:
    return not isinstance(value, dict | list)


def _field(value: Scalar) -> str:
    text = value if isinstance(value, str) else str(value)  # None, True, 1.5: as Python (and the aws CLI) print
    escaped = text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    # Every other hidden character (ESC, C1, bidi, zero-width) as its escape: never emitted (sqs_jobs.visible).
    return visible(escaped)


def _line(prefix: str | None, values: list[Any]) -> str:
    return "\t".join(([prefix] if prefix else []) + [_field(value) for value in values])


def text_lines(data: Any, prefix: str | None = None) -> Iterator[str]:
    """`data` (JSON-ready) as the aws CLI's text output: see the module's docstring."""
    if isinstance(data, dict):
        yield from _object_lines(data, prefix, sorted(key for key, value in data.items() if _is_scalar(value)))
    elif isinstance(data, list):
        objects = [item for item in data if isinstance(item, dict)]
        # A key that holds a list or object in any of them is printed on its own lines, never as a column (a
        # progress that is null in one record and an object in another).
        nested = {key for item in objects for key, value in item.items() if not _is_scalar(value)}
        columns = sorted({key for item in objects for key, value in item.items() if _is_scalar(value)} - nested)
        scalars = [item for item in data if _is_scalar(item)]
        if scalars:
            yield _line(prefix, scalars)
        for item in data:
            if isinstance(item, dict):
                yield from _object_lines(item, prefix, columns)
            elif isinstance(item, list):
                yield from text_lines(item, prefix)
    else:
        yield _line(prefix, [data])


def _object_lines(data: dict[str, Any], prefix: str | None, columns: list[str]) -> Iterator[str]:
    if columns:
        yield _line(prefix, [data.get(key) for key in columns])
    for key in sorted(data):
        if not _is_scalar(data[key]):
            yield from text_lines(data[key], key.upper())


class ProgressBar:
    """One progress line on stderr, or nothing when progress is off."""

    def __init__(self, progress: Any = None, task: Any = None) -> None:
        self._progress = progress
        self._task = task

    def advance(self, amount: int = 1) -> None:
        if self._progress is not None:
            self._progress.advance(self._task, amount)

    def update(self, completed: int, total: int | None = None, description: str | None = None) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=completed, total=total, description=description)


@contextmanager
def progress_bar(options: Options, description: str, total: int | None = None) -> Iterator[ProgressBar]:
    """Progress of a long operation on stderr, so stdout stays clean for scripts: shown when stderr is a
    terminal, or when forced with --progress; removed when done. `total` None: a spinner and a count."""
    if not options.show_progress:
        yield ProgressBar()
        return
    with live_progress(force=bool(options.progress)) as progress:
        yield ProgressBar(progress, progress.add_task(description, total=total))


@contextmanager
def live_progress(force: bool) -> Iterator[Any]:
    """A rich Progress on stderr (also used by the soak); `force` renders it even when stderr is no terminal."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    console = Console(stderr=True, force_terminal=True if force else None)
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    # stdout stays the command's own: not routed through the (stderr) console while the bar shows.
    with Progress(*columns, TimeElapsedColumn(), console=console, transient=True, redirect_stdout=False) as progress:
        yield progress
