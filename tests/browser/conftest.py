"""A real browser for the console: Debian's chromium driven by Playwright (its own browser download is never
used). `make dev` / `make test` install chromium; without it these tests fail, they don't skip."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, Playwright, sync_playwright

from functions.catalog import CATALOG
from sqs_jobs.cli.console.server import ConsoleServer
from sqs_jobs.local.engine import LocalEngine

CHROMIUM = Path("/usr/bin/chromium")
# Without these, chromium here stalls on connections this machine refuses (updates, sync, first-run pings).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="session")
def playwright() -> Iterator[Playwright]:
    assert CHROMIUM.is_file(), f"{CHROMIUM} is missing: run `make dev` (it installs Debian's chromium)"
    with sync_playwright() as driver:
        yield driver


@pytest.fixture
def browser(playwright: Playwright, tmp_path: Path) -> Iterator[BrowserContext]:
    context = playwright.chromium.launch_persistent_context(
        str(tmp_path / "chromium-profile"),
        executable_path=str(CHROMIUM),
        headless=True,
        args=CHROMIUM_ARGS,
        accept_downloads=True,
    )
    context.set_default_timeout(30_000)
    yield context
    context.close()


@pytest.fixture
def engine() -> Iterator[LocalEngine]:
    with LocalEngine(port=0, worker_output=io.StringIO(), heartbeat_interval_s=3600, catalog=CATALOG) as running:
        yield running


@pytest.fixture
def console(engine: LocalEngine, tmp_path: Path) -> Iterator[ConsoleServer]:
    with ConsoleServer(
        engine.clients(), engine.stack_name, port=0, archive_dir=tmp_path / "archives", catalog=CATALOG
    ) as server:
        yield server
