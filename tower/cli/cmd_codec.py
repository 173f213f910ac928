"""`tower codec-server`: decrypt payloads for the Web UI (and encrypt for it), for holders
of its token only, and only for the Web UI's own origin."""

from __future__ import annotations

import asyncio
import os

import click

from tower.cli.errors import CliError
from tower.cli.output import json_option, print_json


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
    from tower.cli.codec_server import build_server, new_token, origin_of
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
    token = os.environ.get("TOWER_CODEC_TOKEN", "").strip() or new_token()
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
