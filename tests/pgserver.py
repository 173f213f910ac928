"""A private PostgreSQL for the cluster tier: Debian's server binaries, its own data
directory and a free port, stopped at the end. PostgreSQL refuses to run as root, so as
root (CI) every command runs as the `postgres` user the Debian package creates."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

from procs import free_port

USER = "temporal"


def bindir() -> Path:
    """The newest installed server's bin directory; a clear error if there is none."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                   key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit()
                   else 0)
    if not found:
        raise RuntimeError("PostgreSQL is not installed: `apt-get install postgresql` "
                           "(.ci/run does it)")
    return found[-1].parent


class Postgres:
    def __init__(self) -> None:
        self.bin = bindir()
        self.port = free_port()
        self.password = secrets.token_urlsafe(12)
        # Not under pytest's 0700 tmp dir: the `postgres` user must reach it.
        self.root = Path(tempfile.mkdtemp(prefix="tower-pg-"))
        self.data = self.root / "data"
        # runuser lives in /usr/sbin, which a PATH such as `env -i`'s may lack.
        runuser = shutil.which("runuser") or "/usr/sbin/runuser"
        self._as = [runuser, "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def _run(self, *args: str) -> None:
        subprocess.run([*self._as, *args], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, timeout=120)

    def start(self) -> Postgres:
        pwfile = self.root / "pw"
        pwfile.write_text(self.password)
        if self._as:
            shutil.chown(self.root, "postgres")
            shutil.chown(pwfile, "postgres")
        self.root.chmod(0o755)
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", USER,
                  "--auth=scram-sha-256", f"--pwfile={pwfile}", "-E", "UTF8")
        # A test database: durability across power loss is not what is being tested.
        options = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
                   "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
                   "-c max_connections=300")
        self.options = options
        self.resume()
        return self

    def resume(self) -> None:
        """Start the server (again) on its data directory."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", self.options,
                  "-l", str(self.root / "postgres.log"), "-w", "start")

    def pause(self) -> None:
        """Stop the server, keeping its data: unreachable until ``resume``."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def database(self, prefix: str) -> str:
        """A new, empty database of its own on this server: its URL."""
        import psycopg

        name = f"{prefix}_{uuid.uuid4().hex[:10]}"
        base = f"postgresql://{USER}:{self.password}@127.0.0.1:{self.port}"
        with psycopg.connect(f"{base}/postgres", autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {name}")
        return f"{base}/{name}"

    def env(self) -> dict[str, str]:
        """How the Temporal server and its SQL tool reach this database."""
        return {"POSTGRES_SEEDS": "127.0.0.1", "DB_PORT": str(self.port),
                "POSTGRES_USER": USER, "POSTGRES_PWD": self.password}

    def stop(self) -> None:
        if self.data.exists():
            subprocess.run([*self._as, str(self.bin / "pg_ctl"), "-D", str(self.data),
                            "-m", "immediate", "stop"], check=False, timeout=60,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(self.root, ignore_errors=True)
