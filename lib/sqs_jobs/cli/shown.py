"""What jobctl shows a person: data as plain text, never as terminal sequences or rich markup.

Dead letters, schedule inputs and error messages carry what a producer (or a job's code) wrote. Every table cell
and line built from such data goes through here: hidden characters (sqs_jobs.visible) are written as escapes,
and a table cell is a rich `Text`, which rich never parses for markup (`[link=...]`, `[/bold]`). JSON output is
left exact: json.dumps escapes what it must.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from sqs_jobs.visible import visible

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text


def shown(value: object, *, keep_newlines: bool = False) -> str:
    """`value` as one safe line (or safe lines, with `keep_newlines`) for click.echo."""
    return visible("" if value is None else value, keep_newlines=keep_newlines)


def attribute_lines(attributes: Mapping[str, Mapping[str, str]]) -> list[str]:
    """Message attributes as JSON output holds them (`portable`: a binary value as base64 text) for a person: one
    `name (Type): value` line each, in name order, every part through `shown`; a binary value is its base64 text,
    said so."""
    lines = []
    for name, attribute in sorted(attributes.items()):
        if "BinaryValue" in attribute:
            value = f"{shown(attribute['BinaryValue'])} (base64)"
        else:
            value = shown(attribute.get("StringValue"))
        lines.append(f"{shown(name)} ({shown(attribute.get('DataType'))}): {value}")
    return lines


def cell(value: object, style: str = "") -> Text:
    """A table cell holding `value` as literal text, styled by jobctl only."""
    from rich.text import Text  # rich loads only when a table is drawn

    return Text(shown(value), style=style)


# A table written to a pipe or a file is as wide as this (rich would take 80 columns and cut error types short);
# COLUMNS, when set, wins, as on a terminal.
PIPE_WIDTH = 320


def console() -> Console:
    """A console that interprets nothing it is given as markup or emoji codes: tables of cells only."""
    from rich.console import Console

    width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else PIPE_WIDTH
    return Console(markup=False, emoji=False, highlight=False, width=width)
