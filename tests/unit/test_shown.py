"""jobctl's tables: cells are text (no markup), and on a pipe they are wide enough for whole error types."""

from __future__ import annotations

import io

import pytest
from rich.table import Table

from sqs_jobs.cli import shown


def test_a_table_on_a_pipe_keeps_long_cells_whole_and_prints_markup_as_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    error_type = "InvoicingUpstreamUnavailableBecauseTheRegionalGatewayRejectedTheRequestError"
    view = Table()
    view.add_column("error type")
    view.add_column("job")
    view.add_row(shown.cell(error_type), shown.cell("[/bold][link=https://evil.example]x[/link]"))
    out = io.StringIO()
    console = shown.console()
    console.file = out

    console.print(view)

    assert error_type in out.getvalue()
    assert "[/bold][link=https://evil.example]x[/link]" in out.getvalue()
    assert console.width == shown.PIPE_WIDTH
