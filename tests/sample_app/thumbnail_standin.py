"""The images team's local stand-in of the thumbnail API: renders a fixed PNG for a request with the right key,
answers 401 to any other."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.sample_app.catalog import LOCAL_API_KEY

PNG = b"\x89PNG\r\n\x1a\nthumbnail"


class ThumbnailStandIn:
    def __init__(self, host: str, api_key: str) -> None:
        self.api_key = api_key
        self.renders: list[str] = []
        self.refused = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Authorization") != f"Bearer {outer.api_key}":
                    outer.refused += 1
                    self.send_response(401)
                    self.end_headers()
                    return
                outer.renders.append(body.decode())
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                self.send_header("Content-Length", str(len(PNG)))
                self.end_headers()
                self.wfile.write(PNG)

            def log_message(self, *_args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((host, 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def standin(host: str, chaos: object = None, api_key: str = LOCAL_API_KEY) -> ThumbnailStandIn:
    return ThumbnailStandIn(host, api_key)
