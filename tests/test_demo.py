"""The README's first command: `tower demo`, run the way a user runs it. A process of its own
with a user's environment (no TOWER_* variable: not the suite's trust directory or keys; an
empty home), in an empty folder or in a project, and nothing answering at the address: it
starts the embedded dev server, prepares the development trust as `tower dev` does, runs a
worker on the offline scripted model, every demo agent and the two gated runs, prints what
happened and stops the server it started. Twice in a row, from the same data (the soak
tier: two whole demos); and Ctrl-C stops it all."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
from pathlib import Path

import pytest
from towercli import TOWER, example_project

from tower.cli.demo import RUNS
from tower.cli.devserver import free_port, port_free, temporal_binary, wait_for_server

pytestmark = pytest.mark.long


def interruptible() -> None:
    """In the child, before exec: Ctrl-C acts as at a terminal even when this test runs
    with SIGINT ignored (started in the background by a script): ignoring is inherited."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def user_env(home: Path, address: str) -> dict[str, str]:
    """A user's shell: none of the suite's TOWER_* settings, no model or Temporal settings
    but the address, a home with nothing in it."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TOWER_", "OPENAI_", "TEMPORAL_", "XDG_"))}
    return {**env, "HOME": str(home), "TEMPORAL_ADDRESS": address}


async def demo(cwd: Path, env: dict[str, str], *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        TOWER, "demo", *args, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 300)
    return proc.returncode or 0, out.decode(), err.decode()


def folders(tmp_path: Path) -> tuple[Path, Path]:
    home, here = tmp_path / "home", tmp_path / "here"
    home.mkdir()
    here.mkdir()
    return home, here


def assert_whole_demo(code: int, text: str, err: str, address: str) -> None:
    assert code == 0, text[-3000:] + err[-3000:]
    assert f"no server at {address}: started the embedded dev server (pid " in text
    assert "model: scripted" in text
    # Every demo input ran, plus the refund and the migration that stop at their gates.
    assert text.count("\n== ") == len(RUNS) + 2
    assert {agent for agent, _, _ in RUNS} <= {line.split()[1].rstrip(":")
                                              for line in text.splitlines()
                                              if line.startswith("== ")}
    # All but the two that fail end DONE, and so do the two gated ones once decided.
    assert text.count("status: DONE") == len(RUNS)
    assert text.count("status: FAILED") == 2  # the unknown account, the declined card
    assert text.count("status: AWAITING_APPROVAL") == 2
    assert "outcome: gate refund_review approved" in text
    assert "Your refund of $1,000.00 has been issued" in text
    assert "outcome: gate dba_review rejected" in text
    assert "DROP TABLE customers (renamed to legacy_notes at statement 2)" in text
    assert text.count("/namespaces/default/workflows/demo-") == len(RUNS) + 2  # UI links
    assert "The dev server this demo started is stopped now" in text
    # The SDK's own logs (a failed activity's traceback, the core's warnings) are in the
    # demo's log file, not on the terminal.
    assert "Traceback" not in text + err and "sdk_core" not in text + err, err[-3000:]


def data_folder(text: str) -> str:
    found = re.search(r"^demo data: (\S+) ", text, re.M)
    assert found, text[:2000]
    return found.group(1)


async def demo_in_an_empty_folder(tmp_path: Path) -> tuple[Path, dict[str, str], str]:
    """One demo in an empty folder, nothing answering at its address: the folder, the
    environment and the data folder the demo used."""
    home, here = folders(tmp_path)
    address = f"127.0.0.1:{free_port()}"  # nothing answers there: the demo starts a server
    env = user_env(home, address)
    code, text, err = await demo(here, env)
    assert "no Tower project here: the demo runs Tower's example application" in text, err
    # The development trust `tower dev` makes (no run may start without it).
    assert ("created tenant 'default''s roster and policy in .tower/trust/default"
            in text), (code, text[-2000:], err[-3000:])
    assert_whole_demo(code, text, err, address)
    # Its state stays where the README says, for `tower dev` to serve again.
    assert (here / ".tower" / "temporal.sqlite").exists()
    first = data_folder(text)
    assert (here / first / "tools.sqlite").exists() and (here / first / "demo.log").exists()
    return here, env, first


# The whole demo in an empty folder is the soak tier's (twice, below); the default tier runs
# the whole demo once, in a project, and its start in an empty folder (the Ctrl-C test).
@pytest.mark.soak  # two whole demos: a minute of CPU
@pytest.mark.timeout(600)
async def test_tower_demo_twice_in_an_empty_folder(tmp_path: Path) -> None:
    here, env, first = await demo_in_an_empty_folder(tmp_path)
    # Again, the same story from fresh data: the refund is paid again, onboarding
    # provisions the same customer again.
    code, again, err = await demo(here, env)
    assert_whole_demo(code, again, err, env["TEMPORAL_ADDRESS"])
    assert data_folder(again) != first
    assert "created tenant" not in again  # the trust stays as the first demo left it


async def test_tower_demo_in_a_project(tmp_path: Path) -> None:
    home, here = folders(tmp_path)
    address = f"127.0.0.1:{free_port()}"
    code, text, err = await demo(example_project(here), user_env(home, address))
    assert "no Tower project here" not in text
    assert_whole_demo(code, text, err, address)


async def test_ctrl_c_stops_the_demo_in_an_empty_folder_and_its_server(tmp_path: Path) -> None:
    """Up to Ctrl-C, a demo in an empty folder (nothing answering at its address) is as the
    README says: it runs Tower's example, prepares the development trust, keeps its state
    in the folder. (The whole demo there: the soak tier; in a project: the default tier.)"""
    home, here = folders(tmp_path)
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        TOWER, "demo", env=user_env(home, f"127.0.0.1:{port}"), cwd=here,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=interruptible)
    assert proc.stdout is not None and proc.stderr is not None
    seen = ""
    server = None
    async with asyncio.timeout(240):
        # Mid-run: the server is up, the worker polls, the first agents have run.
        while "\n== support" not in seen:
            line = (await proc.stdout.readline()).decode()
            assert line, seen
            seen += line
            if server is None and (found := re.search(r"dev server \(pid (\d+)", line)):
                server = int(found.group(1))
        assert server is not None and not port_free(port)
        proc.send_signal(signal.SIGINT)
        rest, err = await proc.communicate()
    text = seen + rest.decode() + err.decode()
    assert proc.returncode == 130, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    assert f"no server at 127.0.0.1:{port}: started the embedded dev server (pid " in text
    assert "no Tower project here: the demo runs Tower's example application" in text
    # The development trust `tower dev` makes (no run may start without it).
    assert "created tenant 'default''s roster and policy in .tower/trust/default" in text
    assert "model: scripted" in text and "\n== support" in text
    # Its state stays where the README says, for `tower dev` to serve again.
    assert (here / ".tower" / "temporal.sqlite").exists()
    first = data_folder(text)
    assert (here / first / "tools.sqlite").exists() and (here / first / "demo.log").exists()
    # What it started is gone: the server's process (reaped by the demo) and its port.
    assert not Path(f"/proc/{server}").exists()
    assert port_free(port)


async def test_the_demo_names_a_server_it_did_not_start_and_stays_quiet_when_it_goes(
    tmp_path: Path,
) -> None:
    home, here = folders(tmp_path)
    port = free_port()
    env = user_env(home, f"127.0.0.1:{port}")
    dev = await asyncio.create_subprocess_exec(
        TOWER, "dev", "--port", str(port), "--headless", "--db", str(tmp_path / "dev.sqlite"),
        env=env, cwd=here, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    proc = None
    try:
        assert dev.stdout is not None
        async with asyncio.timeout(120):
            while b"Workers and commands connect" not in await dev.stdout.readline():
                pass
        proc = await asyncio.create_subprocess_exec(
            TOWER, "demo", env=env, cwd=here, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None
        seen = ""
        async with asyncio.timeout(240):
            while "\n== support" not in seen:
                line = (await proc.stdout.readline()).decode()
                assert line, seen
                seen += line
            assert f"using the Temporal server already running at 127.0.0.1:{port}" in seen
            dev.terminate()  # the server goes away mid-demo
            await dev.wait()
            rest, err = await proc.communicate()
    finally:
        for child in (dev, proc):
            if child is not None and child.returncode is None:
                child.kill()
    text, complaint = seen + rest.decode(), err.decode()
    # One line says what happened; the core's retry warnings are in the demo's log only.
    assert proc.returncode == 2, text[-2000:] + complaint
    assert complaint.startswith("error: the Temporal server stopped answering")
    assert complaint.count("\n") == 1, complaint
    assert "sdk_core" not in text and "Traceback" not in text
    assert "sdk_core" in (here / data_folder(seen) / "demo.log").read_text()


async def test_the_demo_says_when_a_server_it_did_not_start_is_not_set_up(
    tmp_path: Path,
) -> None:
    home, here = folders(tmp_path)
    port = free_port()
    bare = subprocess.Popen(  # a plain Temporal dev server: none of Tower's search attributes
        [temporal_binary(), "server", "start-dev", "--ip", "127.0.0.1", "--port", str(port),
         "--headless", "--db-filename", str(tmp_path / "bare.sqlite"), "--log-level", "error"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        await wait_for_server(bare, f"127.0.0.1:{port}")
        code, text, err = await demo(here, user_env(home, f"127.0.0.1:{port}"))
    finally:
        bare.terminate()
        bare.wait(timeout=30)
    assert code == 2, text[-2000:] + err
    assert f"using the Temporal server already running at 127.0.0.1:{port}" in text
    assert err.startswith(f"error: the Temporal server at 127.0.0.1:{port} is not set up for "
                          "Tower: namespace default lacks the search attributes Agent")
    assert "`tower setup` registers them" in err and err.count("\n") == 1
    assert "\n== " not in text  # nothing started


async def test_a_ui_port_taken_between_the_check_and_the_start_does_not_stop_the_demo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two demos started at once both saw :8233 free; the second's server could not take it,
    exited, and that demo ended after "started the embedded dev server". Here another
    program holds the UI's port although the check said it was free."""
    from tower.cli import devserver

    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken = free_port()
        holder.bind(("127.0.0.1", taken))
        holder.listen()
        checked: list[int] = []

        def free_once(port: int) -> bool:  # the check, before the other program took it
            if not checked:
                checked.append(port)
                return True
            return port_free(port)

        monkeypatch.setattr(devserver, "port_free", free_once)
        monkeypatch.setattr(devserver, "UI_PORT", taken)
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("TEMPORAL_ADDRESS", f"127.0.0.1:{free_port()}")
        async with devserver.server_if_needed() as server:
            assert server.started_here and server.ui_port not in (None, taken)
            assert checked == [taken]
            await server.client.count_workflows()  # it answers
