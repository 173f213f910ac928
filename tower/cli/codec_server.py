"""`tower codec-server`: Temporal's remote codec endpoint (POST /encode and /decode, bodies
``{"payloads": [...]}`` in protobuf JSON form) for the Web UI and CLI (docs/operations.md).

Whoever can call /decode reads every run's payloads, so every request shows the server's
token, compared in constant time: as ``Authorization: Bearer TOKEN``, or as the path's first
part (``/TOKEN/decode``) for the dev server's UI, which cannot add headers. A browser is
served from the Web UI's own origin only (CORS and the ``Origin`` header). The keys never
leave this process, and nothing about a payload is logged.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import os
import secrets
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import click
from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads

from tower.cli.errors import CliError
from tower.cli.output import json_option, print_json
from tower.temporal.codec import CodecError, EncryptionCodec

DEFAULT_ORIGINS = ("http://localhost:8233",)
MAX_BODY = 8 * 1024 * 1024
MIN_TOKEN_CHARS = 16


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of a URL: what a browser sends as ``Origin``."""
    parts = urlsplit(url)
    if not parts.scheme or not parts.netloc:
        raise ValueError(f"{url!r} is not an absolute URL (like http://localhost:8233)")
    return f"{parts.scheme}://{parts.netloc}"


def build_server(codec: EncryptionCodec, *, token: str, host: str = "127.0.0.1",
                 port: int = 8081,
                 origins: Iterable[str] = DEFAULT_ORIGINS) -> ThreadingHTTPServer:
    if len(token) < MIN_TOKEN_CHARS or not token.replace("-", "").replace("_", "").isalnum():
        raise ValueError(f"the codec server's token must be at least {MIN_TOKEN_CHARS} "
                         "letters, digits, '-' or '_'")
    allowed = frozenset(o.rstrip("/") for o in origins)
    expected = token.encode()

    class Handler(BaseHTTPRequestHandler):
        def do_OPTIONS(self) -> None:  # noqa: N802  (the browser's CORS preflight)
            self._reply(200 if self._origin_ok() else 403, b"")

        def do_POST(self) -> None:  # noqa: N802
            if not self._origin_ok():
                return self._error(403, "origin not allowed")
            path = self._authenticated_path()
            if path is None:
                return self._error(401, "missing or wrong codec token")
            apply = {"/encode": codec.encrypt, "/decode": codec.decrypt}.get(path)
            if apply is None:
                return self._error(404, "no such endpoint: use /encode or /decode")
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

        def _authenticated_path(self) -> str | None:
            """The endpoint asked for, once the token is shown; None without it."""
            path = self.path.split("?", 1)[0].rstrip("/")
            scheme, _, given = self.headers.get("Authorization", "").partition(" ")
            if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(),
                                                                  expected):
                return path
            first, _, rest = path.lstrip("/").partition("/")
            if hmac.compare_digest(first.encode(), expected):
                return "/" + rest
            return None

        def _origin_ok(self) -> bool:
            origin = self.headers.get("Origin")
            return origin is None or origin.rstrip("/") in allowed  # None: not a browser

        def _error(self, status: int, message: str) -> None:
            self._reply(status, json.dumps({"error": message}).encode())

        def _reply(self, status: int, body: bytes) -> None:
            self.send_response(status)
            origin = self.headers.get("Origin", "")
            if origin and self._origin_ok():
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
            pass  # the path may hold the token and payloads must not reach logs

    return ThreadingHTTPServer((host, port), Handler)


@click.command("codec-server", help=(
    "Serve Temporal's remote codec protocol (POST /encode, /decode) with the keys in "
    "TOWER_CODEC_KEYS (id=base64key,...; the first encrypts). Every request needs the "
    "server's token (TOWER_CODEC_TOKEN, else a random one printed at start): as "
    "'Authorization: Bearer TOKEN' (`temporal --codec-auth`), or in the endpoint URL "
    "printed for `tower dev --ui-codec-endpoint`. Browsers are served for the Web UI's "
    "origin only."))
@click.option("--port", type=click.IntRange(0, 65535), default=8081, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="address to listen on")
@click.option("--ui-url", metavar="URL",
              help="the Web UI whose pages may call this server (default: TOWER_UI_URL, else "
                   "the dev server's UI)")
@click.option("--origin", "origins", multiple=True,
              help="another origin allowed to call from a browser (repeatable)")
@click.option("--new-key", is_flag=True,
              help="print a fresh random key for TOWER_CODEC_KEYS and exit")
@json_option("print the key, or the server's addresses, as JSON")
async def command(port: int, host: str, ui_url: str | None, origins: tuple[str, ...],
                  new_key: bool, as_json: bool) -> int:
    from tower.temporal.codec import KeyRing, codec_from_env
    from tower.temporal.codec import new_key as make_key

    if new_key:
        key = make_key()
        print_json({"key": key}, line=True) if as_json else print(key)
        return 0
    codec = codec_from_env()
    if codec is None:
        raise CliError("TOWER_CODEC_KEYS is not set; make a key with "
                       "`tower codec-server --new-key` and set TOWER_CODEC_KEYS=k1=<key>")
    ui = ui_url or await _dev_ui()
    allowed = [origin_of(u) for u in (ui, *origins) if u]
    token = os.environ.get("TOWER_CODEC_TOKEN", "").strip() or secrets.token_urlsafe(24)
    server = build_server(codec, token=token, host=host, port=port, origins=allowed)
    ring: KeyRing = codec.ring
    url = f"http://{host}:{server.server_address[1]}"
    info = {"url": url, "ui_codec_endpoint": f"{url}/{token}", "allowed_origins": allowed,
            "encrypting_with": ring.current, "keys": list(ring.keys)}
    if as_json:
        print_json(info, line=True)
    else:
        print(f"codec server on {url} (encrypting with key {ring.current!r}; keys: "
              f"{', '.join(ring.keys)}) for pages of {', '.join(allowed) or 'no browser'}")
        print(f"  the Web UI: tower dev --ui-codec-endpoint {info['ui_codec_endpoint']}")
        print(f"  temporal CLI: --codec-endpoint {url} --codec-auth 'Bearer {token}'",
              flush=True)
    try:
        await asyncio.to_thread(server.serve_forever)
    finally:
        server.shutdown()
        server.server_close()
    return 0


async def _dev_ui() -> str | None:
    from tower.cli.ui import default_ui, ui_base
    from tower.client import connect
    from tower.client.connection import ServerUnreachable, connect_config

    try:
        client = await connect(check_namespace=False)
    except ServerUnreachable:  # no server yet: the UI it will have by default
        return default_ui(connect_config()["target_host"])
    return await ui_base(client)
