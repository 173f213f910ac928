"""`tower codec-server`: decrypt payloads for the Web UI (and encrypt for it)."""

from __future__ import annotations

import argparse

from activities.codec import CodecError, KeyRing, codec_from_env, new_key
from starter.codec_server import DEFAULT_ORIGINS, build_server
from starter.common import CliError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "codec-server", help="serve /encode and /decode so the Web UI shows encrypted payloads",
        description="Serve Temporal's remote codec protocol (POST /encode, /decode) with the "
                    "keys in TOWER_CODEC_KEYS (id=base64key,...; the first encrypts). Start "
                    "the dev server with `tower dev --ui-codec-endpoint http://127.0.0.1:PORT` "
                    "so the Web UI decodes through it.")
    p.add_argument("--port", type=int, default=8081, help="port (default 8081)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--origin", action="append", default=None,
                   help="a Web UI origin allowed by CORS (repeatable; default "
                        f"{' and '.join(DEFAULT_ORIGINS)})")
    p.add_argument("--new-key", action="store_true",
                   help="print a fresh random key for TOWER_CODEC_KEYS and exit")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.new_key:
        print(new_key())
        return 0
    try:
        codec = codec_from_env()
    except CodecError as exc:
        raise CliError(str(exc)) from None
    if codec is None:
        raise CliError("TOWER_CODEC_KEYS is not set; make a key with "
                       "`tower codec-server --new-key` and set TOWER_CODEC_KEYS=k1=<key>")
    server = build_server(codec, host=args.host, port=args.port,
                          origins=args.origin or DEFAULT_ORIGINS)
    ring: KeyRing = codec.ring
    print(f"codec server on http://{args.host}:{server.server_address[1]} "
          f"(encrypting with key {ring.current!r}; keys: {', '.join(ring.keys)})", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0
