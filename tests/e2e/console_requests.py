"""Requests to a running console over real HTTP, as the operator's browser sends them (its Host, its access
cookie), or with the headers a test gives instead (an empty Cookie: no cookie)."""

from __future__ import annotations

import http.client
from urllib.parse import urlencode

from sqs_jobs.cli.console.security import ACCESS_COOKIE
from sqs_jobs.cli.console.server import ConsoleServer


def console_request(
    console: ConsoleServer,
    method: str,
    path: str,
    form: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
    timeout_s: float = 30,
) -> tuple[http.client.HTTPResponse, str]:
    """The response and its page."""
    port = console.guard.port
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    sent = {"Host": f"127.0.0.1:{port}", "Cookie": f"{ACCESS_COOKIE}={console.guard.access_token}", **(headers or {})}
    body = None
    if form is not None:
        body = urlencode(form)
        sent["Content-Type"] = "application/x-www-form-urlencoded"
    connection.request(method, path, body=body, headers=sent)
    response = connection.getresponse()
    return response, response.read().decode("utf-8")
