"""Serving the console: Werkzeug's threaded server, on the operator's machine, for the operator.

One person's console, not a public web service: Werkzeug's server (what Flask runs on) is enough, and needs
nothing to install. A thread per request, so a page stays usable while a redrive runs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from werkzeug.serving import BaseWSGIServer, make_server

from sqs_jobs.cli.console.app import create_app
from sqs_jobs.cli.console.backend import ConsoleBackend
from sqs_jobs.cli.console.security import Guard
from sqs_jobs.specs import Catalog

DEFAULT_PORT = 8080
DEFAULT_HOST = "127.0.0.1"
# Where a discard's archives are written before the messages are deleted (relative to the working directory).
DEFAULT_ARCHIVE_DIR = Path("jobctl-archives")


class ConsoleServer:
    def __init__(
        self,
        client: Callable[[str], Any],
        stack: str,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        allow_hosts: Iterable[str] = (),
        archive_dir: Path = DEFAULT_ARCHIVE_DIR,
        *,
        catalog: Catalog,
        durable_api: Callable[[], Any] | None = None,
    ) -> None:
        # The guard is made before the bind so a bad --host fails before any port is taken.
        self.guard = Guard.for_bind(host, port, allow_hosts)
        self.archive_dir = archive_dir
        app = create_app(ConsoleBackend(client, stack, catalog, durable_api=durable_api), self.guard, archive_dir)
        # Werkzeug logs every request; an operator's terminal wants errors only.
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        self._server: BaseWSGIServer = make_server(host, port, app, threaded=True)
        self.guard.port = self._server.server_port  # port 0: the one the OS chose
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """With the access token: open it once, then `base_url` and its pages carry the cookie."""
        return self.guard.url

    @property
    def base_url(self) -> str:
        return self.guard.base_url

    def url_for(self, path: str) -> str:
        return self.guard.url_for(path)

    def start(self) -> ConsoleServer:
        """Serve in a background thread (tests, the demo); `stop()` ends it."""
        self._thread = threading.Thread(target=self._server.serve_forever, name="console", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._server.serve_forever()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> ConsoleServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
