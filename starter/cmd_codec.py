"""`tower codec-server`: decrypt payloads for the Web UI (and encrypt for it)."""

from __future__ import annotations

import click

from starter.errors import CliError
from starter.output import json_option, print_json


@click.command("codec-server", help=(
    "Serve Temporal's remote codec protocol (POST /encode, /decode) with the keys in "
    "TOWER_CODEC_KEYS (id=base64key,...; the first encrypts). Start the dev server with "
    "`tower dev --ui-codec-endpoint http://127.0.0.1:PORT` so the Web UI decodes through it."))
@click.option("--port", type=click.IntRange(0, 65535), default=8081, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="address to listen on")
@click.option("--origin", "origins", multiple=True,
              help="a Web UI origin allowed by CORS (repeatable; default the dev server's UI "
                   "on :8233)")
@click.option("--new-key", is_flag=True,
              help="print a fresh random key for TOWER_CODEC_KEYS and exit")
@json_option("print the key, or the server's address, as JSON")
def command(port: int, host: str, origins: tuple[str, ...], new_key: bool,
            as_json: bool) -> int:
    from activities.codec import CodecError, KeyRing, codec_from_env
    from activities.codec import new_key as make_key
    from starter.codec_server import DEFAULT_ORIGINS, build_server

    if new_key:
        key = make_key()
        print_json({"key": key}, line=True) if as_json else print(key)
        return 0
    try:
        codec = codec_from_env()
    except CodecError as exc:
        raise CliError(str(exc)) from None
    if codec is None:
        raise CliError("TOWER_CODEC_KEYS is not set; make a key with "
                       "`tower codec-server --new-key` and set TOWER_CODEC_KEYS=k1=<key>")
    server = build_server(codec, host=host, port=port, origins=origins or DEFAULT_ORIGINS)
    ring: KeyRing = codec.ring
    url = f"http://{host}:{server.server_address[1]}"
    if as_json:
        print_json({"url": url, "encrypting_with": ring.current, "keys": list(ring.keys)},
                   line=True)
    else:
        print(f"codec server on {url} (encrypting with key {ring.current!r}; keys: "
              f"{', '.join(ring.keys)})", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0
