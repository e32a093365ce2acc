"""A throwaway PostgreSQL cluster, shared by the cluster soak (scripts/soak_cluster.py) and the
Python tests (tests/py/test_postgres.py): the Python twin of the Go tests' internal/pgtest
(internal/pgtest/pgtest.go). initdb and pg_ctl in a temporary folder, on a free 127.0.0.1 port
(three ports tried: one free when picked may be taken before the server binds it), as the
``postgres`` user when run as root, with fsync and full-page writes off and trust
authentication; the folder is removed when the cluster cannot be started. A reaper of its own
session stops the server and removes the folder once the process that started it is gone, even
when it is killed; it first SIGKILLs the process groups handed to ``adopt`` (the soak's engines
and workers) that were not ``release``d. ``query`` reads the database with ``psql`` (one JSON
document per query); ``session`` keeps one ``psql`` open for samplers that ask many times a
second (scripts/bench_resources.py, the cluster soak's resource sampler).

Keep the two in agreement: how the binaries are found (``bin_dir``/findBin), the initdb
arguments, the server options (``SERVER_OPTIONS``/serverOptions), the port retries, the reaper,
and how the server is stopped. A difference is a drift, not a choice (the adopted process groups
are the soak's own: pgtest has none)."""

import glob
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, List, Optional, Set


class NoServer(Exception):
    """No PostgreSQL server binaries (initdb, pg_ctl, psql) on this machine."""


# The pg_ctl -o options of the server, as pgtest's serverOptions: port and socket folder, then
# these (max_connections 300: three engines and two workers with their pools, the soak's psql
# reads, a test's many databases).
SERVER_OPTIONS = ("-c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off -c max_connections=300 "
                  "-c shared_buffers=64MB")
PORT_ATTEMPTS = 3  # pgtest.Start: attempt 0..2


def _version(bin_folder: str) -> int:
    """15 for /usr/lib/postgresql/15/bin (0 when not a number, as pgtest's version)."""
    try:
        return int(os.path.basename(os.path.dirname(bin_folder)))
    except ValueError:
        return 0


def bin_dir() -> Optional[str]:
    """The folder of initdb and pg_ctl: DCC_FLOW_PG_BIN, else initdb and pg_ctl on PATH, else the
    newest /usr/lib/postgresql/N/bin; None when there is none (or not on Linux or macOS). A
    DCC_FLOW_PG_BIN without initdb is an error (RuntimeError), as in pgtest: the folder was
    named, so skipping would hide a broken setup."""
    if not sys.platform.startswith(("linux", "darwin")):
        return None
    env = os.environ.get("DCC_FLOW_PG_BIN")
    if env:
        if not os.path.exists(os.path.join(env, "initdb")):
            raise RuntimeError("DCC_FLOW_PG_BIN=%s has no initdb" % env)
        return env
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return os.path.dirname(os.path.realpath(found))  # /usr/local/bin may link initdb and pg_ctl only
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version, reverse=True)
    for d in dirs:
        if os.path.exists(os.path.join(d, "initdb")):
            return d
    return None


def free_port() -> int:
    """A 127.0.0.1 port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """A running throwaway cluster: ``url`` names its database ``soak``. Stop it when done."""

    def __init__(self) -> None:
        found = bin_dir()
        if found is None:
            raise NoServer("no PostgreSQL server binaries (initdb): install postgresql-15")
        self.bin = found
        self.psql = os.path.join(found, "psql") if os.path.exists(os.path.join(found, "psql")) else "psql"
        self.prefix: List[str] = []
        self._lock = threading.Lock()
        self._groups: Set[int] = set()
        self._stopped = False
        self.folder = tempfile.mkdtemp(prefix="dcc-flow-pg-soak-")
        self.data = os.path.join(self.folder, "data")
        self.sock = os.path.join(self.folder, "sock")
        self.log = os.path.join(self.folder, "log")
        self.groups_file = os.path.join(self.folder, "groups")  # the adopted process groups, for the reaper
        self.port = 0
        started = False
        try:
            if os.geteuid() == 0:  # initdb refuses root
                import pwd

                try:
                    pw = pwd.getpwnam("postgres")
                except KeyError:
                    raise RuntimeError("running as root, and initdb refuses root: need the OS user postgres "
                                       "(Debian's postgresql package creates it)") from None
                os.chown(self.folder, pw.pw_uid, pw.pw_gid)
                self.prefix = ["runuser", "-u", "postgres", "--"]
            self._run("mkdir", self.sock)
            self._run(os.path.join(self.bin, "initdb"), "-D", self.data, "-U", "postgres", "--auth=trust",
                      "--encoding=UTF8", "--locale=C", "--no-sync")
            for attempt in range(PORT_ATTEMPTS):  # a port free now may be taken before the server binds it
                self.port = free_port()
                try:
                    self.pg_ctl("start")
                    break
                except subprocess.CalledProcessError:
                    if attempt == PORT_ATTEMPTS - 1:
                        raise RuntimeError("pg_ctl start failed on %d ports; server log:\n%s"
                                           % (PORT_ATTEMPTS, self._server_log())) from None
            started = True
            self._start_reaper()
            subprocess.run([os.path.join(self.bin, "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U",
                            "postgres", "soak"], check=True, capture_output=True, timeout=60)
        except BaseException:  # nothing left behind: not the folder, not a server (SystemExit of a signal too)
            if started:
                self.stop()
            else:
                shutil.rmtree(self.folder, ignore_errors=True)
            raise
        self.url = "postgresql://postgres@127.0.0.1:%d/soak?sslmode=disable" % self.port

    def _server_log(self) -> str:
        try:
            with open(self.log, errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return "(none)"

    def _start_reaper(self) -> None:
        """A shell in a session of its own (a signal to the driver's group does not reach it) that
        waits for this process to end, then SIGKILLs the adopted process groups still listed,
        stops the server (SIGQUIT to the postmaster: an immediate shutdown) and removes the
        folder. After a normal stop it finds nothing left to do."""
        script = ('while kill -0 %d 2>/dev/null; do sleep 1; done\n'
                  'for g in $(cat "%s" 2>/dev/null); do kill -KILL "-$g" 2>/dev/null; done\n'
                  'pid=$(head -n 1 "%s/postmaster.pid" 2>/dev/null) && kill -QUIT "$pid" 2>/dev/null && sleep 2\n'
                  'rm -rf "%s"' % (os.getpid(), self.groups_file, self.data, self.folder))
        subprocess.run(["sh", "-c", "(%s) >/dev/null 2>&1 &" % script], start_new_session=True, check=True,
                       timeout=30)  # the subshell outlives this process: nobody here waits for it

    def _write_groups(self) -> None:
        tmp = self.groups_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("".join("%d\n" % g for g in sorted(self._groups)))
        os.replace(tmp, self.groups_file)

    def adopt(self, pgid: int) -> None:
        """Have the reaper SIGKILL process group ``pgid`` if this process ends while it is listed
        (a process started with start_new_session=True: its pid)."""
        with self._lock:
            self._groups.add(pgid)
            self._write_groups()

    def release(self, pgid: int) -> None:
        """Take ``pgid`` off the reaper's list: its leader was waited for (its id may be reused)."""
        with self._lock:
            self._groups.discard(pgid)
            self._write_groups()

    def _run(self, *args: str) -> None:
        subprocess.run(self.prefix + list(args), check=True, capture_output=True, timeout=120)

    def pg_ctl(self, action: str) -> None:
        """``pg_ctl start`` or ``restart`` (fast shutdown: the connections are ended), waiting at most
        60 s, with the options of pgtest."""
        self._run(os.path.join(self.bin, "pg_ctl"), "-D", self.data, "-l", self.log, "-w", "-t", "60", "-m", "fast",
                  "-o", "-p %d -k %s %s" % (self.port, self.sock, SERVER_OPTIONS), action)

    def query(self, sql: str) -> Any:
        """The rows of ``sql`` as a list of JSON objects (``json_agg`` of the query), read by psql.
        Raises subprocess.CalledProcessError (psql failed: its stderr says why),
        subprocess.TimeoutExpired or ValueError (not JSON)."""
        wrapped = "WITH soak_row AS (%s) SELECT coalesce(json_agg(soak_row), '[]'::json) FROM soak_row" % sql
        out = subprocess.run([self.psql, "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", "soak",
                              "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-c", wrapped],
                             check=True, capture_output=True, timeout=60, text=True)
        return json.loads(out.stdout)

    def session(self) -> "Session":
        """A ``psql`` kept open on the database (close it when done)."""
        return Session([self.psql, "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", "soak", "-X",
                        "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1"])

    def stop(self) -> None:
        """Stop the server (immediate) and remove its folder. Stopping twice is not an error."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        try:
            subprocess.run(self.prefix + [os.path.join(self.bin, "pg_ctl"), "-D", self.data, "-m", "immediate", "-w",
                                          "stop"], capture_output=True, timeout=60)
        except subprocess.TimeoutExpired:
            pass
        shutil.rmtree(self.folder, ignore_errors=True)


class Session:
    """One ``psql`` process kept open (Cluster.session): ``ask`` writes a query to its standard
    input and reads the one line it prints back — a round trip of about a millisecond, where
    starting psql for each query takes tens. For queries of one row of one column (build the
    line in SQL). psql stops at the first error (a lost connection too: a server restart):
    ``ask`` then raises, and the session is done; open another."""

    def __init__(self, argv: List[str]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     bufsize=0, start_new_session=True)
        self._buf = b""

    def ask(self, sql: str, timeout: float = 10.0) -> str:
        """The line ``sql`` (one statement, ending with ``;``) prints. Raises RuntimeError when psql
        exits (its error, e.g. a lost connection) or gives no answer within ``timeout`` s."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(sql.encode() + b"\n")
        except OSError as exc:  # psql is gone
            raise RuntimeError("psql: %s%s" % (exc, self._stderr())) from None
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError("psql gave no answer within %.0f s" % timeout)
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk:
                    self.proc.wait(timeout=5)
                    raise RuntimeError("psql exited %s%s" % (self.proc.returncode, self._stderr()))
                self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode("utf-8", "replace")

    def _stderr(self) -> str:
        if self.proc.poll() is None or self.proc.stderr is None:
            return ""
        err = self.proc.stderr.read().decode("utf-8", "replace").strip()
        return ": " + err.splitlines()[-1] if err else ""

    def close(self) -> None:
        """Stop psql. Closing twice is not an error."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f is not None:
                f.close()
