"""`tower model-server`: the loopback OpenAI-compatible server, for demos and fault drills."""

from __future__ import annotations

import argparse
import contextlib
import threading

from starter.common import CliError
from starter.model_server import LoopbackModelServer


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "model-server", help="serve the scripted model over OpenAI-compatible HTTP",
        description="Serve /v1/chat/completions on 127.0.0.1 with the built-in scripts, "
                    "optionally injecting faults at random (429 with Retry-After, 500, slow "
                    "replies, malformed JSON, schema-violating output, unknown tools). Point "
                    "a worker at it with OPENAI_BASE_URL=http://127.0.0.1:PORT/v1 "
                    "OPENAI_API_KEY=loopback. Ctrl-C stops it.")
    p.add_argument("--port", type=int, default=8700, help="port (default 8700; 0: any free)")
    p.add_argument("--fault-rate", type=float, default=0.0,
                   help="share of requests answered with a random fault, 0..1 (default 0)")
    p.add_argument("--seed", type=int, default=0, help="seed of the fault picker")
    p.add_argument("--slow-seconds", type=float, default=5.0,
                   help="how long a 'slow' fault holds the reply (default 5)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if not 0.0 <= args.fault_rate <= 1.0:
        raise CliError(f"--fault-rate must be between 0 and 1, not {args.fault_rate}")
    if not 0 <= args.port <= 65535:
        raise CliError(f"--port must be between 0 and 65535, not {args.port}")
    try:
        server = LoopbackModelServer(args.port, fault_rate=args.fault_rate, seed=args.seed,
                                     slow_seconds=args.slow_seconds)
    except OSError as exc:
        raise CliError(f"cannot listen on 127.0.0.1:{args.port}: {exc.strerror}") from None
    with server:
        print(f"loopback model server on {server.base_url} (fault rate {args.fault_rate:g})")
        print(f"  OPENAI_BASE_URL={server.base_url} OPENAI_API_KEY=loopback python worker.py",
              flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
    return 0
