"""What keeps the console the operator's own: it acts with the operator's AWS rights, so a page elsewhere in
the browser, or a machine on the network, must not be able to drive it.

- Host check: a request whose Host header is not an address the console serves is refused (403), so a DNS
  rebinding page (attacker.example resolving to 127.0.0.1) can't read it or post to it.
- Access token, always, on loopback too (another account on the same host reaches 127.0.0.1 as well): every
  request needs the token the command prints. The URL carries it once; the console answers with an HttpOnly,
  SameSite=Strict cookie and a redirect to the same page without it, so it leaves the address bar and history.
  Without it, 401.
- Cross-site refusal on every route, reads too: a request the browser marks as coming from another site
  (`Sec-Fetch-Site: cross-site` or `same-site`) or whose Origin is another one is refused (403); each read scans
  a DLQ with the operator's credentials, and concurrent scans hide messages from one another.
- CSRF: every state-changing request is a POST carrying the per-process token that only the console's own pages
  contain (403 without it).
- Headers: no framing (clickjacking), a content security policy with no scripts at all, no caching, no referrer
  beyond the console itself.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from sqs_jobs.cli.errors import OperatorUsageError

ACCESS_COOKIE = "jobctl_console_access"
CSRF_FIELD = "csrf_token"
SAFE_METHODS = frozenset({"GET", "HEAD"})
_LOOPBACK_NAMES = ("localhost",)


class ConsoleBindError(OperatorUsageError, ValueError):
    """The console was asked to listen somewhere it can't do so safely as asked."""


def is_loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


@dataclass
class Guard:
    """The checks for one running console, bound to `host`:`port`."""

    host: str
    port: int
    extra_hosts: tuple[str, ...] = ()
    csrf_token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    access_token: str = field(default_factory=lambda: secrets.token_urlsafe(24))

    @classmethod
    def for_bind(cls, host: str, port: int, extra_hosts: Iterable[str] = ()) -> Guard:
        extra = tuple(extra_hosts)
        if host in ("0.0.0.0", "::") and not extra:
            raise ConsoleBindError(
                f"--host {host} listens on every interface, but browsers send the name they used as Host: "
                "add --allow-host NAME for each name operators will use (e.g. --allow-host console.internal)"
            )
        return cls(host=host, port=port, extra_hosts=extra)

    @property
    def allowed_hosts(self) -> frozenset[str]:
        names = {self.host, *self.extra_hosts}
        if is_loopback(self.host):
            names |= {"127.0.0.1", "localhost", "::1"}
        names.discard("0.0.0.0")
        names.discard("::")
        return frozenset(_host_port(name, self.port).lower() for name in names)

    @property
    def base_url(self) -> str:
        name = self.extra_hosts[0] if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{_host_port(name, self.port)}/"

    @property
    def url(self) -> str:
        """The URL the command prints: the console with its access token, exchanged at once for a cookie."""
        return self.url_for("")

    def url_for(self, path: str) -> str:
        """A page of the console (e.g. "queues/<name>") with the access token, for a browser without the cookie."""
        return f"{self.base_url}{path}?token={self.access_token}"

    def host_allowed(self, host_header: str | None) -> bool:
        return bool(host_header) and host_header.lower() in self.allowed_hosts  # type: ignore[union-attr]

    def origin_allowed(self, origin: str | None) -> bool:
        """A request's Origin, when the browser sends one, must be this console."""
        if not origin:
            return True
        parts = urlsplit(origin)
        return parts.scheme == "http" and parts.netloc.lower() in self.allowed_hosts

    @staticmethod
    def fetch_site_allowed(fetch_site: str | None) -> bool:
        """The browser's own account of where a request comes from (Fetch Metadata): this console's pages
        ("same-origin"), or the operator typing or bookmarking a URL ("none"). Not every client sends it."""
        return fetch_site in (None, "same-origin", "none")

    def csrf_valid(self, submitted: str | None) -> bool:
        return bool(submitted) and hmac.compare_digest(submitted.encode(), self.csrf_token.encode())  # type: ignore[union-attr]

    def access_valid(self, cookie: str | None, query_token: str | None) -> bool:
        return any(
            bool(given) and hmac.compare_digest(given.encode(), self.access_token.encode())  # type: ignore[union-attr]
            for given in (cookie, query_token)
        )


SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; "
    "script-src 'none'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    # same-origin, not no-referrer: under no-referrer Chromium sends `Origin: null` with form POSTs.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
