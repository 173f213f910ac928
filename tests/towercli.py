"""Run the `tower` command as a user would, without paying its start-up on every call.

A command run as `tower ...` spends most of its time importing (the SDK, openai, every
command module): seconds per call on a loaded 2-core machine, and the CLI tests make
dozens of calls. Here a fork server, started once, imports the CLI; each call forks a
child from it that takes its own argv, environment, working directory and standard
input, runs the console entry point and exits with its own code, writing its own stdout
and stderr. So a call is still a separate process, as a user's is; only the interpreter
start-up is shared. The server is single-threaded (forking is safe) and serves one call
at a time. Tests that need the installed script itself, or a live pipe, run `TOWER`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pkgutil
import signal
import sys
import tempfile
import traceback
from importlib import import_module
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

TOWER = str(Path(sys.executable).parent / "tower")


async def tower_cli(args: list[str], *, env: dict[str, str], cwd: str | Path | None = None,
                    stdin: str | None = None, timeout: float = 60) -> tuple[int, str, str]:
    """``tower *args`` in a child process: (exit code, stdout, stderr)."""
    return await _server().call(list(args), env, str(cwd or os.getcwd()), stdin, timeout)


class _ForkServer:
    def __init__(self) -> None:
        self.proc: asyncio.subprocess.Process | None = None
        self.lock = asyncio.Lock()

    async def _start(self) -> asyncio.subprocess.Process:
        if self.proc is None or self.proc.returncode is not None:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, __file__, stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE)
        return self.proc

    async def _reply(self, proc: asyncio.subprocess.Process) -> dict[str, Any]:
        assert proc.stdout is not None
        line = await proc.stdout.readline()
        if not line:
            raise RuntimeError("the tower fork server died")
        reply: dict[str, Any] = json.loads(line)
        return reply

    async def call(self, argv: list[str], env: dict[str, str], cwd: str, stdin: str | None,
                   timeout: float) -> tuple[int, str, str]:
        async with self.lock:
            proc = await self._start()
            assert proc.stdin is not None
            with tempfile.TemporaryDirectory(prefix="tower-cli-") as tmp:
                files = {name: os.path.join(tmp, name) for name in ("in", "out", "err")}
                Path(files["in"]).write_text(stdin or "", encoding="utf-8")
                request = {"argv": argv, "env": env, "cwd": cwd, **files}
                proc.stdin.write(json.dumps(request).encode() + b"\n")
                await proc.stdin.drain()
                pid = (await self._reply(proc))["pid"]
                try:
                    code = (await asyncio.wait_for(self._reply(proc), timeout))["code"]
                except TimeoutError:
                    os.kill(pid, signal.SIGKILL)
                    await self._reply(proc)
                    raise
                return (code, Path(files["out"]).read_text(encoding="utf-8", errors="replace"),
                        Path(files["err"]).read_text(encoding="utf-8", errors="replace"))

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()  # end of requests: the server exits
            try:
                await asyncio.wait_for(self.proc.wait(), 10)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()


_SERVER: _ForkServer | None = None


def _server() -> _ForkServer:
    global _SERVER
    if _SERVER is None:
        _SERVER = _ForkServer()
    return _SERVER


def example_project(folder: Path) -> Path:
    """Make ``folder`` a Tower project whose code is this repository's example application
    (as a checkout is): the docs' commands run there with a fresh .tower/ of their own."""
    root = Path(__file__).resolve().parents[1]
    for name in ("workflows", "activities", "worker.py"):
        link = folder / name
        if not link.exists():
            link.symlink_to(root / name)
    return folder


async def stop_server() -> None:
    if _SERVER is not None:
        await _SERVER.stop()


def connected(pid: int, port: int) -> bool:
    """Whether process ``pid`` has an established TCP connection to ``port`` (Linux /proc):
    how a test knows a command it started is talking to the server yet."""
    prefix = "socket:["
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            link = os.readlink(fd)
            if link.startswith(prefix):
                inodes.add(link[len(prefix):-1])
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as rows:
            for row in list(rows)[1:]:
                fields = row.split()  # sl local remote state ... inode
                remote_port = int(fields[2].rsplit(":", 1)[1], 16)
                if remote_port == port and fields[3] == "01" and fields[9] in inodes:
                    return True
    return False


async def until_connected(pid: int, port: int, seconds: float = 60) -> None:
    async with asyncio.timeout(seconds):
        while not connected(pid, port):
            await asyncio.sleep(0.05)


# ---- the server side (this file run as a script) -------------------------------------

def _preload() -> None:
    """Import everything a command may import, so that no call has to."""
    import tower.cli

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this repository's project
    for module in pkgutil.iter_modules(tower.cli.__path__):
        import_module(f"tower.cli.{module.name}")
    import_module("worker")  # this repository's example project (the server runs in it)
    [script] = entry_points(group="console_scripts", name="tower")
    script.load()


def _child(request: dict[str, Any]) -> None:
    """In the forked child: become `tower ARGV` and never return."""
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        _forget_other_projects(Path(request["cwd"]))
        for fd, path, flags in ((0, request["in"], os.O_RDONLY),
                                (1, request["out"], os.O_WRONLY | os.O_TRUNC),
                                (2, request["err"], os.O_WRONLY | os.O_TRUNC)):
            opened = os.open(path, flags | (os.O_CREAT if fd else 0), 0o600)
            os.dup2(opened, fd)
            os.close(opened)
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.argv = ["tower", *request["argv"]]
        [script] = entry_points(group="console_scripts", name="tower")
        script.load()()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _forget_other_projects(cwd: Path) -> None:
    """A call made in another project must not see this repository's preloaded example
    (its `workflows`, `activities`, `worker`), just as a fresh `tower` process would not."""
    from tower.cli import project
    from tower.cli.agents import agents

    agents.cache_clear()  # the agents come from this call's project, not the server's
    if project.find(cwd) == Path(__file__).resolve().parents[1]:
        return
    for name in list(sys.modules):
        if name.split(".")[0] in ("workflows", "activities", "worker"):
            del sys.modules[name]
    here = str(Path(__file__).resolve().parents[1])
    sys.path[:] = [p for p in sys.path if p not in ("", ".", here)]


def _serve() -> None:
    _preload()
    for line in sys.stdin.buffer:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        os.write(1, json.dumps({"pid": pid}).encode() + b"\n")
        _, status = os.waitpid(pid, 0)
        os.write(1, json.dumps({"code": os.waitstatus_to_exitcode(status)}).encode() + b"\n")


if __name__ == "__main__":
    _serve()
