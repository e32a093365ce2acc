"""A throwaway PostgreSQL cluster, shared by the cluster soak (scripts/soak_cluster.py) and the
Python tests (tests/py/test_postgres.py), as the Go tests' internal/pgtest: initdb and pg_ctl in a
temporary folder, on a free 127.0.0.1 port, as the ``postgres`` user when run as root, fsync off,
trust authentication; a reaper of its own session stops the server and removes the folder once
the process that started it is gone, even when it is killed. ``query`` reads the database with
``psql`` (one JSON document per query)."""

import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from typing import Any, List, Optional


class NoServer(Exception):
    """No PostgreSQL server binaries (initdb, pg_ctl, psql) on this machine."""


def bin_dir() -> Optional[str]:
    if not sys.platform.startswith(("linux", "darwin")):
        return None
    env = os.environ.get("DCC_FLOW_PG_BIN")
    if env:
        return env if os.path.exists(os.path.join(env, "initdb")) else None
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return os.path.dirname(os.path.realpath(found))
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(d.split("/")[-2]), reverse=True)
    for d in dirs:
        if os.path.exists(os.path.join(d, "initdb")):
            return d
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """A running throwaway cluster: ``url`` names its database ``soak``."""

    def __init__(self) -> None:
        found = bin_dir()
        if found is None:
            raise NoServer("no PostgreSQL server binaries (initdb): install postgresql-15")
        self.bin = found
        self.psql = os.path.join(found, "psql") if os.path.exists(os.path.join(found, "psql")) else "psql"
        self.folder = tempfile.mkdtemp(prefix="dcc-flow-pg-soak-")
        self.prefix: List[str] = []
        if os.geteuid() == 0:  # initdb refuses root
            import pwd

            pw = pwd.getpwnam("postgres")
            os.chown(self.folder, pw.pw_uid, pw.pw_gid)
            self.prefix = ["runuser", "-u", "postgres", "--"]
        self.data = os.path.join(self.folder, "data")
        self.sock = os.path.join(self.folder, "sock")
        self.log = os.path.join(self.folder, "log")
        self.port = free_port()
        self._run("mkdir", self.sock)
        self._run(os.path.join(self.bin, "initdb"), "-D", self.data, "-U", "postgres", "--auth=trust",
                  "--encoding=UTF8", "--locale=C", "--no-sync")
        self.pg_ctl("start")
        reaper = ('while kill -0 %d 2>/dev/null; do sleep 1; done; '
                  'pid=$(head -n 1 "%s/postmaster.pid" 2>/dev/null) && kill -QUIT "$pid"; sleep 2; rm -rf "%s"'
                  % (os.getpid(), self.data, self.folder))
        subprocess.run(["sh", "-c", "(%s) >/dev/null 2>&1 &" % reaper], start_new_session=True, check=True,
                       timeout=30)
        subprocess.run([os.path.join(self.bin, "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U",
                        "postgres", "soak"], check=True, capture_output=True, timeout=60)
        self.url = "postgresql://postgres@127.0.0.1:%d/soak?sslmode=disable" % self.port

    def _run(self, *args: str) -> None:
        subprocess.run(self.prefix + list(args), check=True, capture_output=True, timeout=120)

    def pg_ctl(self, action: str) -> None:
        """``pg_ctl start`` or ``restart`` (fast shutdown: the connections are ended), waiting."""
        self._run(os.path.join(self.bin, "pg_ctl"), "-D", self.data, "-l", self.log, "-w", "-m", "fast", "-o",
                  "-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
                  % (self.port, self.sock), action)

    def query(self, sql: str) -> Any:
        """The rows of ``sql`` as a list of JSON objects (``json_agg`` of the query), read by psql."""
        wrapped = "WITH soak_row AS (%s) SELECT coalesce(json_agg(soak_row), '[]'::json) FROM soak_row" % sql
        out = subprocess.run([self.psql, "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", "soak",
                              "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-c", wrapped],
                             check=True, capture_output=True, timeout=60, text=True)
        return json.loads(out.stdout)

    def stop(self) -> None:
        subprocess.run(self.prefix + [os.path.join(self.bin, "pg_ctl"), "-D", self.data, "-m", "immediate", "-w",
                                      "stop"], capture_output=True, timeout=120)
        shutil.rmtree(self.folder, ignore_errors=True)
