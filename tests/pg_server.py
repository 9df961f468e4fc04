"""A throwaway PostgreSQL server for the store tests: initdb into a fresh folder, listen on
loopback at a free port, trust local connections, and remove it all when stopped.

The tests start one themselves when PostgreSQL's binaries are installed (on PATH or in
Debian's /usr/lib/postgresql/*/bin); CI starts one with this file as a script and hands
its URL to the tests in COSTMODEL_TEST_POSTGRES_URL:

    python tests/pg_server.py start /tmp/costmodel-pg    # prints the URL
    python tests/pg_server.py stop /tmp/costmodel-pg

PostgreSQL refuses to run as root; as root the server runs as the `postgres` user.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
from pathlib import Path

USER = "costmodel"  # the superuser initdb creates; trusted, on loopback only
SETTINGS = {
    "listen_addresses": "127.0.0.1",
    # Tests build many stores, each with a small pool.
    "max_connections": "300",
    # Throwaway data: durability buys nothing here and costs seconds.
    "fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
}


def bin_dir() -> Path | None:
    """The folder holding initdb and pg_ctl, or None when PostgreSQL is not installed."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    installed = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                       key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    return Path(installed[-1]).parent if installed else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _run(args: list[str], as_user: str | None, check: bool = True) -> None:
    command = ["runuser", "-u", as_user, "--", *args] if as_user else args
    done = subprocess.run(command, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}): "
                           f"{done.stdout[-2000:]}{done.stderr[-2000:]}")


def _owner() -> str | None:
    """The user to run PostgreSQL as: ourselves, or `postgres` when we are root."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise RuntimeError("running as root and there is no postgres user to run "
                           "PostgreSQL as") from None
    return "postgres"


def start(folder: Path) -> str:
    """Create and start a server under `folder` (created; must not exist); its URL."""
    binaries = bin_dir()
    if binaries is None:
        raise RuntimeError("PostgreSQL is not installed (no initdb on PATH or in "
                           "/usr/lib/postgresql/*/bin)")
    folder = Path(folder)
    folder.mkdir(mode=0o700, parents=True)
    owner = _owner()
    if owner is not None:
        shutil.chown(folder, owner, owner)
    data, port = folder / "data", _free_port()
    # --locale=C: a bare CI image may name a locale in LANG that is not installed.
    _run([str(binaries / "initdb"), "-D", str(data), "-U", USER, "-A", "trust", "-E", "UTF8",
          "--locale=C", "--no-sync", "--no-instructions"], owner)
    options = " ".join(f"-c {key}={value}" for key, value in {
        **SETTINGS, "port": port, "unix_socket_directories": folder}.items())
    _run([str(binaries / "pg_ctl"), "-D", str(data), "-l", str(folder / "server.log"), "-w",
          "-t", "60", "-o", options, "start"], owner)
    url = f"postgresql+psycopg://{USER}@127.0.0.1:{port}/postgres"
    (folder / "url").write_text(url)
    return url


def stop(folder: Path) -> None:
    """Stop the server under `folder`, if one runs there, and remove the folder."""
    folder = Path(folder)
    binaries = bin_dir()
    if binaries is not None and (folder / "data" / "postmaster.pid").exists():
        # check=False: a pid file left by a server that is gone (a rebooted machine) is fine
        _run([str(binaries / "pg_ctl"), "-D", str(folder / "data"), "-m", "immediate", "-w",
              "stop"], _owner(), check=False)
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    action, where = sys.argv[1:3]
    if action == "start":
        print(start(Path(where)))
    elif action == "stop":
        stop(Path(where))
    else:
        sys.exit(f"usage: {sys.argv[0]} start|stop FOLDER")
