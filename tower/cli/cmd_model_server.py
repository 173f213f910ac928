"""`tower model-server`: the loopback OpenAI-compatible server, for demos and fault drills."""

from __future__ import annotations

import contextlib
import threading

import click

from tower.cli.errors import CliError
from tower.cli.output import json_option, print_json
from tower.testing.model_server import STREAMING


@click.command("model-server", help=(
    "Serve /v1/chat/completions on 127.0.0.1 with the built-in scripts, optionally injecting "
    "faults at random (429 with Retry-After, 500, slow replies, malformed JSON, "
    "schema-violating output, unknown tools). Point a worker at it with "
    "OPENAI_BASE_URL=http://127.0.0.1:PORT/v1 OPENAI_API_KEY=loopback. Ctrl-C stops it."))
@click.option("--port", type=click.IntRange(0, 65535), default=8700, show_default=True,
              help="port (0: any free)")
@click.option("--fault-rate", type=click.FloatRange(0, 1), default=0.0, show_default=True,
              help="share of requests answered with a random fault, 0..1")
@click.option("--seed", type=int, default=0, show_default=True, help="seed of the fault picker")
@click.option("--slow-seconds", type=float, default=5.0, show_default=True,
              help="how long a 'slow' fault holds the reply")
@click.option("--streaming", type=click.Choice(STREAMING),
              default="sse", show_default=True,
              help="how a streaming request is answered: server-sent events, one whole JSON "
                   "completion, a 400 to stream_options, a 400 to any streaming request")
@json_option("print the server's address as one JSON line, then serve")
def command(port: int, fault_rate: float, seed: int, slow_seconds: float, streaming: str,
            as_json: bool) -> int:
    from tower.cli.agents import scripted_reply
    from tower.testing.model_server import LoopbackModelServer

    try:
        server = LoopbackModelServer(port, replies=scripted_reply, fault_rate=fault_rate, seed=seed,
                                     slow_seconds=slow_seconds)
    except OSError as exc:
        raise CliError(f"cannot listen on 127.0.0.1:{port}: {exc.strerror}") from None
    server.set_streaming(streaming)
    with server:
        if as_json:
            print_json({"base_url": server.base_url, "fault_rate": fault_rate}, line=True)
        else:
            print(f"loopback model server on {server.base_url} (fault rate {fault_rate:g})")
            print(f"  OPENAI_BASE_URL={server.base_url} OPENAI_API_KEY=loopback "
                  "python worker.py", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
    return 0
