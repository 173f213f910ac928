"""A remote codec endpoint for the Temporal Web UI and CLI: POST /encode and /decode.

The protocol is Temporal's: a JSON body ``{"payloads": [...]}`` in protobuf JSON form,
answered in the same form. The browser calls it from the UI's page, so CORS lets the
UI's origins in (and only them); the keys never leave this process.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads

from activities.codec import CodecError, EncryptionCodec

DEFAULT_ORIGINS = ("http://localhost:8233", "http://127.0.0.1:8233")
MAX_BODY = 8 * 1024 * 1024


def build_server(codec: EncryptionCodec, *, host: str = "127.0.0.1", port: int = 8081,
                 origins: Iterable[str] = DEFAULT_ORIGINS) -> ThreadingHTTPServer:
    allowed = frozenset(o.rstrip("/") for o in origins)

    class Handler(BaseHTTPRequestHandler):
        def do_OPTIONS(self) -> None:  # noqa: N802  (the browser's CORS preflight)
            self._reply(200 if self._origin_ok() else 403, b"")

        def do_POST(self) -> None:  # noqa: N802
            apply = {"/encode": codec.encrypt, "/decode": codec.decrypt}.get(
                self.path.rstrip("/").rsplit("?", 1)[0])
            if apply is None:
                return self._error(404, f"no such endpoint {self.path!r}: use /encode or /decode")
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                return self._error(413, f"body over {MAX_BODY} bytes")
            try:
                payloads = json_format.Parse(self.rfile.read(length), Payloads())
                out = Payloads(payloads=[apply(p) for p in payloads.payloads])
            except json_format.ParseError as exc:
                return self._error(400, f"body is not a Payloads JSON object: {exc}")
            except CodecError as exc:
                return self._error(400, str(exc))
            self._reply(200, json_format.MessageToJson(out).encode())

        def _origin_ok(self) -> bool:
            return self.headers.get("Origin", "").rstrip("/") in allowed

        def _error(self, status: int, message: str) -> None:
            self._reply(status, json.dumps({"error": message}).encode())

        def _reply(self, status: int, body: bytes) -> None:
            self.send_response(status)
            origin = self.headers.get("Origin", "")
            if self._origin_ok():
                self.send_header("Access-Control-Allow-Origin", origin)
                self.send_header("Access-Control-Allow-Methods", "POST, OPTIONS")
                self.send_header("Access-Control-Allow-Headers",
                                 "Content-Type, X-Namespace, Authorization")
                self.send_header("Access-Control-Allow-Credentials", "true")
                self.send_header("Vary", "Origin")
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # payload contents must not end up in logs; status lines are not needed

    return ThreadingHTTPServer((host, port), Handler)


def serve_in_thread(server: ThreadingHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return thread
