"""Carry TCP between a worker host's own network namespace and the machine's loopback.

A host in a network namespace of its own (tests/netns.py) has a loopback of its own and
nothing else. The services it is given (Temporal, PostgreSQL, the model) reach it through
two relays joined by Unix sockets, which a network namespace does not separate:

    python netrelay.py inside DIR PORT...    # in the host's namespace: 127.0.0.1:PORT -> DIR/PORT
    python netrelay.py outside DIR PORT...   # on the machine: DIR/PORT -> 127.0.0.1:PORT

Each prints "relaying" once it listens.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def main(side: str, folder: Path, ports: list[int]) -> None:
    async def join(port: int, reader: asyncio.StreamReader,
                   writer: asyncio.StreamWriter) -> None:
        try:
            if side == "inside":
                far_reader, far_writer = await asyncio.open_unix_connection(
                    str(folder / str(port)))
            else:
                far_reader, far_writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:  # nothing there (yet): the caller sees the connection close
            writer.close()
            return
        await asyncio.gather(pipe(reader, far_writer), pipe(far_reader, writer))

    servers = []
    for port in ports:
        def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, port: int = port
                    ) -> asyncio.Future[None]:
            return asyncio.ensure_future(join(port, r, w))
        if side == "inside":
            servers.append(await asyncio.start_server(handler, "127.0.0.1", port))
        else:
            servers.append(await asyncio.start_unix_server(handler, str(folder / str(port))))
    print("relaying", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


if __name__ == "__main__":
    side, folder, *ports = sys.argv[1:]
    assert side in ("inside", "outside"), side
    asyncio.run(main(side, Path(folder), [int(p) for p in ports]))
