#!/usr/bin/env python3
"""Soak test of dcc-flow's multi-engine mode (docs/operations/cluster.md) on PostgreSQL, with faults.

Usage:
    python scripts/soak_cluster.py [--duration SECONDS] [--seed N] [--workdir DIR] [--keep] [--verbose]

It starts a throwaway PostgreSQL cluster (scripts/soak/soak_pg.py), three `dcc-flow serve --db URL`
engines (the soak's tools, the workflow scripts/soak/cluster/soak_cluster.yaml beside soak_hook and
soak_tick, the soak's schedules: an interval every 2 s and a signed webhook, each engine on its own
webhook and MCP port, `--lease-secs 2`) and two `dcc-flow worker --db URL` processes hosting
`soak__queue` (scripts/soak/soak_cluster_tools.py), which the serve engines do not host, so its
calls go through the tool-call queue. For `--duration` seconds it drives them, from seeded random
sources:

- soak_cluster runs (~2/s) on random engines over MCP; 10% cancelled, from an engine that does
  not own the run; every approval answered (85% granted) from an engine that does not own it;
- soak_licensed runs (~0.5/s, scripts/soak/cluster/soak_licensed.yaml) on random engines over
  MCP: steps holding units of ``soak_lic``, which every serve engine declares with a limit of 2
  (docs/guide/resources.md); a sampler from outside the engines (a psql of its own, every
  20 ms) counts the units of live engines in ``resource_slots``;
- signed webhook deliveries (~2/s) to random engines, a quarter of them sent to two engines at
  once with the same delivery id, plus bad signatures and malformed JSON;
- faults during the first 75%: a SIGKILL of a serve engine (never the first, whose RSS is
  measured) or a worker every 10-20 s (a new one takes its place), `pg_ctl restart` of the server
  (once in a short soak, twice from 180 s), one SIGSTOP of a serve engine for 3 leases, then
  SIGCONT (it is made a holder of soak_lic first: a soak_licensed run of 2 s calls on it), and
  one SIGTERM of a serve engine under load: it closes and hands its runs to the other engines
  (docs/operations/cluster.md, "Closing an engine"); a new one takes its place.

Then it stops the load, answers what still waits, waits for the runs to end, stays idle for 3
leases, reads the database and checks (docs/operations/running.md, "Cluster soak"): no run left
unfinished, no completed step's tool called again outside a fault window, one run per delivery
id, one fire per schedule slot, no queued call left claimed or queued, the RSS of the engines that
lived through the soak flat, and never more than the limit of ``soak_lic`` held by live engines
at any sample — nor a unit of a SIGKILLed or SIGSTOPped engine counted once its lease + 1 s
passed. One summary line; exit status 1 on any violation, 3 on overrun.
"""

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KIT = os.path.join(ROOT, "scripts", "soak")
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, KIT)

import soak_checks as checks  # noqa: E402
import soak_pg  # noqa: E402
from soak_mcp import OPENER, McpClient, RpcError, Unavailable  # noqa: E402

import dcc_flow  # noqa: E402

SCHEDULES = os.path.join(KIT, "schedules")
TOOLS = os.path.join(KIT, "soak_tools.py")
QUEUE_TOOLS = os.path.join(KIT, "soak_cluster_tools.py")
SECRET = "soak-secret-16"
HOOK_PATH = "/hooks/soak"
LEASE = 2.0
SERVES, WORKERS = 3, 2
CHAOS_FRACTION = 0.75
WARMUP_SECS = 25.0
RSS_LIMIT_KB = 10 * 1024
SETTLE_MAX = 60.0
STOP_SECS = 20.0  # the stop phase: every process SIGTERMed at once, one deadline for them all
OVERRUN = 100.0
TERMINAL = ("completed", "failed", "cancelled")
RESOURCE, RES_LIMIT = "soak_lic", 2  # declared by every serve engine (--resource soak_lic=2)
RES_SAMPLE_EVERY = 0.02
# One sample of the resource sampler: the units of soak_lic each live engine holds (a row counts
# while its engine's heartbeat is at most its lease old: migrations/0014_resource_slots.sql), as
# "pid:units:engine,…" — one round trip, one line.
RES_SAMPLE_SQL = (
    "SELECT coalesce(string_agg(e.pid || ':' || x.n || ':' || e.id, ','), '') FROM (SELECT s.engine_id, "
    "sum(s.amount) AS n FROM resource_slots s WHERE s.resource = '%s' GROUP BY s.engine_id) x JOIN engines e ON "
    "e.id = x.engine_id WHERE e.heartbeat_at + make_interval(secs => e.lease_secs) >= now();" % RESOURCE)


@dataclass
class Proc:
    """One engine process: a `dcc-flow serve` (kind "serve") or `dcc-flow worker` ("worker")."""

    num: int  # unique over the soak: SOAK_GEN of its tools' call log lines
    kind: str
    slot: int
    proc: "subprocess.Popen[bytes]"
    log_path: str
    start: int  # ns
    start_t: float  # soak seconds
    end: Optional[int] = None
    how: str = "running"  # killed, died, stopped
    mcp_url: str = ""
    hook_url: str = ""
    stopped: List[Tuple[int, int]] = field(default_factory=list)  # SIGSTOP .. SIGCONT, ns

    @property
    def pid(self) -> int:
        return int(self.proc.pid)


def now_ns() -> int:
    return time.time_ns()


class Signals:
    """SIGTERM, SIGHUP and SIGINT (a CI timeout, a closed terminal, ^C) raise SystemExit in the
    main thread, so that main's cleanup runs: Python's default for SIGTERM and SIGHUP ends the
    driver at once, skipping it, and the engines and workers (each in a session of its own) run
    on. A signal that arrives while a process is being started (``hold``) is raised once that
    process is recorded; one that arrives during the cleanup (``closing``) does not cut it short.
    A SIGKILL of the driver is soak_pg's reaper's: it kills the adopted process groups."""

    def __init__(self) -> None:
        self.got = 0  # the signal that stopped the soak
        self.held = 0
        self.pending = 0
        self.closing = False

    def install(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, self.handler)

    def handler(self, signum: int, frame: Optional[FrameType]) -> None:
        if self.got or self.closing:
            self.got = self.got or signum
            return
        if self.held:
            self.pending = signum
            return
        self.got = signum
        raise SystemExit(128 + signum)

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        self.held += 1
        try:
            yield
        finally:
            self.held -= 1
            if not self.held and self.pending and not self.closing:
                self.got, self.pending = self.pending, 0
                raise SystemExit(128 + self.got)

    def name(self) -> str:
        return signal.Signals(self.got).name if self.got else ""


SIGNALS = Signals()


def rss_kb(pid: int) -> Optional[int]:
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class ClusterSoak:
    def __init__(self, args: argparse.Namespace, pg: soak_pg.Cluster, workdir: str) -> None:
        self.args, self.pg, self.workdir = args, pg, workdir
        self.duration = float(args.duration)
        self.seed = int(args.seed)
        self.rng = random.Random("chaos:%d" % self.seed)
        self.t0 = time.monotonic()
        self.lock = threading.Lock()
        self.procs: List[Proc] = []
        self.live: Dict[Tuple[str, int], Proc] = {}
        self.stop_load = threading.Event()
        self.stop_all = threading.Event()
        self.counts: Dict[str, int] = {}
        self.violations: List[Tuple[str, str]] = []
        self.faults: List[Tuple[int, int, str]] = []  # (from ns, to ns, what): kills, stops, restarts
        self.deliveries: List[Dict[str, Any]] = []
        self.runs_started = 0
        self.samples: List[checks.RssSample] = []
        self.call_log = os.path.join(workdir, "calls.jsonl")
        self.workflows = os.path.join(workdir, "workflows")
        os.makedirs(self.workflows, exist_ok=True)
        for src in (os.path.join(KIT, "workflows", "soak_hook.yaml"), os.path.join(KIT, "workflows", "soak_tick.yaml"),
                    os.path.join(KIT, "cluster", "soak_cluster.yaml"),
                    os.path.join(KIT, "cluster", "soak_licensed.yaml")):
            shutil.copy(src, self.workflows)
        self.threads: List[threading.Thread] = []
        self.slots_lost = 0
        self.res_samples = 0
        self.res_max = 0
        self.res_reconnects = 0
        self.res_over = 0
        self.res_gone = 0  # the most units seen counted of an engine SIGKILLed, closed or SIGSTOPped
        self.res_stopped = 0  # the most units seen counted of the SIGSTOPped engine while stopped
        self.res_last: Dict[int, int] = {}  # the units of each pid in the last sample
        self.licensed_started = 0

    # -- bookkeeping ------------------------------------------------------------------------------

    def t(self) -> float:
        return time.monotonic() - self.t0

    def log(self, msg: str) -> None:
        if self.args.verbose:
            print("[%7.2f] %s" % (self.t(), msg), flush=True)

    def count(self, name: str, n: int = 1) -> None:
        with self.lock:
            self.counts[name] = self.counts.get(name, 0) + n

    def violation(self, kind: str, msg: str) -> None:
        with self.lock:
            self.violations.append((kind, msg))
        self.log("VIOLATION %s: %s" % (kind, msg))

    # -- processes --------------------------------------------------------------------------------

    def start_proc(self, kind: str, slot: int) -> Proc:
        num = len(self.procs) + 1
        log_path = os.path.join(self.workdir, "%s-%d-%02d.log" % (kind, slot, num))
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), SOAK_CALL_LOG=self.call_log,
                   SOAK_GEN=str(num), SOAK_WEBHOOK_SECRET=SECRET, PYTHONUNBUFFERED="1",
                   SOAK_LEAK_BYTES=str(self.args.leak_per_run))
        env.pop("DCC_FLOW_DB", None)
        if kind == "serve":
            cmd = [sys.executable, "-m", "dcc_flow", "serve", "--workflows", self.workflows, "--schedules", SCHEDULES,
                   "--webhooks", "127.0.0.1:0", "--mcp", "http://127.0.0.1:0", "--tools", TOOLS,
                   "--worker-threads", "4", "--lease-secs", str(LEASE), "--resource", "%s=%d" % (RESOURCE, RES_LIMIT),
                   "--db", self.pg.url]
            ready = "serving "
        else:
            cmd = [sys.executable, "-m", "dcc_flow", "worker", "--db", self.pg.url, "--tools", QUEUE_TOOLS,
                   "--worker-threads", "4", "--lease-secs", str(LEASE)]
            ready = "worker serving "  # "worker serving 1 tool(s) to the engines on the database: soak__queue"
        with SIGNALS.hold(), open(log_path, "wb") as out:  # recorded before a SIGTERM can stop the driver
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                    cwd=self.workdir, start_new_session=True)
            p = Proc(num, kind, slot, proc, log_path, now_ns(), self.t())
            with self.lock:
                self.procs.append(p)
            self.pg.adopt(proc.pid)  # its group is SIGKILLed by the reaper should the driver die
        deadline = time.monotonic() + 40
        text = ""
        line: Optional[str] = None
        while time.monotonic() < deadline:
            with open(log_path, errors="replace") as f:
                text = f.read()
            line = next((ln.rstrip("\n") for ln in text.splitlines(True) if ln.startswith(ready) and ln.endswith("\n")),
                        None)  # a whole line: a worker's names the tools it serves
            if line is not None:
                if kind == "serve":
                    hook = line.split("webhooks on ")[1].split(";")[0].strip() if "webhooks on " in line else ""
                    mcp = line.split("MCP on ")[1].split(";")[0].strip() if "MCP on " in line else ""
                    p.hook_url, p.mcp_url = hook + HOOK_PATH, mcp
                break
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        if (proc.poll() is not None or line is None or (kind == "serve" and not p.mcp_url)
                or (kind == "worker" and not line.rstrip().endswith("soak__queue"))):
            tail = " | ".join(text.strip().splitlines()[-5:])
            self.kill(p, "stopped")
            raise RuntimeError("%s %d did not get ready (print its ready line%s) within 40 s; its output: %s" % (
                kind, num, " serving soak__queue" if kind == "worker" else " naming its MCP URL", tail or "-"))
        with self.lock:
            self.live[(kind, slot)] = p
        self.log("%s %d (slot %d) ready: pid %d %s" % (kind, num, slot, p.pid, p.mcp_url))
        return p

    def kill(self, p: Proc, how: str = "killed", wait: float = 20.0) -> None:
        t = now_ns()
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            p.proc.wait(timeout=wait)
            self.pg.release(p.pid)
        except subprocess.TimeoutExpired:
            self.violation("process", "%s %d (pid %d) did not die within %.0f s of SIGKILL" % (
                p.kind, p.num, p.pid, wait))
        p.end, p.how = now_ns(), how
        if how == "killed":
            with self.lock:
                self.faults.append((t, t + int(3 * LEASE * 1e9), "SIGKILL %s %d" % (p.kind, p.num)))

    def serves(self) -> List[Proc]:
        with self.lock:
            return [p for (k, _), p in sorted(self.live.items()) if k == "serve"]

    def engine_of(self, rng: random.Random, not_pid: int = 0) -> Optional[Proc]:
        cands = [p for p in self.serves() if p.pid != not_pid and not self.stopped(p)]
        return rng.choice(cands) if cands else None

    def check_alive(self) -> None:
        with self.lock:
            items = list(self.live.items())
        for key, p in items:
            if p.proc.poll() is not None and p.how == "running":
                p.end, p.how = now_ns(), "died"
                self.pg.release(p.pid)
                self.violation("process", "%s %d (pid %d) exited by itself with status %s (see %s)" % (
                    p.kind, p.num, p.pid, p.proc.returncode, p.log_path))
                self.start_proc(key[0], key[1])

    # -- MCP --------------------------------------------------------------------------------------

    def mcp(self, p: Proc, tool: str, arguments: Dict[str, Any]) -> Tuple[Optional[Dict[str, Any]], bool]:
        c = McpClient(p.mcp_url, timeout=15.0, name="soak-cluster")
        try:
            return c.call_tool(tool, arguments)
        except (Unavailable, RpcError) as exc:
            self.count("mcp_unanswered")
            self.log("mcp %s on %s %d: %s" % (tool, p.kind, p.num, exc))
            return None, False
        finally:
            c.close()

    def owner_pid(self, run_id: str) -> int:
        rows = self.pg_query("SELECT e.pid FROM workflows w JOIN engines e ON e.id = w.owner WHERE w.id = '%s'"
                             % run_id.replace("'", ""))
        return int(rows[0]["pid"]) if rows else 0

    def pg_query(self, sql: str) -> List[Dict[str, Any]]:
        """A read under load: a failure (the server is being restarted) is logged and reads as no
        rows. Never for a check: see read_db."""
        try:
            return list(self.pg.query(sql))
        except (subprocess.SubprocessError, ValueError) as exc:
            self.log("query failed (%s): %s" % (exc, sql[:80]))
            return []

    def read_db(self, sql: str) -> List[Dict[str, Any]]:
        """A read of the final checks (and of the --fault injections): a failure is a "driver"
        violation, so that a check whose query fails (an unreadable database, a broken query)
        can never pass on no rows."""
        try:
            return list(self.pg.query(sql))
        except (subprocess.SubprocessError, ValueError) as exc:
            why = "psql: %s" % exc
            if isinstance(exc, subprocess.CalledProcessError) and str(exc.stderr or "").strip():
                why = "psql: %s" % str(exc.stderr).strip().splitlines()[0]
            elif isinstance(exc, subprocess.TimeoutExpired):
                why = "psql: no answer in %.0f s" % exc.timeout
            self.violation("driver", "query failed (%s): %s" % (why, " ".join(sql.split())[:120]))
            return []

    # -- load -------------------------------------------------------------------------------------

    def loop(self, name: str, fn: Callable[[], None]) -> None:
        def body() -> None:
            try:
                fn()
            except Exception as exc:  # a driver bug must not pass for a clean soak
                self.violation("driver", "%s thread died: %r" % (name, exc))
        th = threading.Thread(target=body, name=name, daemon=True)
        th.start()
        self.threads.append(th)

    def pace(self, rng: random.Random, rate: float) -> None:
        self.stop_load.wait(rng.expovariate(rate))

    def submit_loop(self) -> None:
        rng = random.Random("submit:%d" % self.seed)
        n = 0
        while not self.stop_load.is_set():
            self.pace(rng, 2.0)
            if self.stop_load.is_set():
                break
            p = self.engine_of(rng)
            if p is None:
                continue
            n += 1
            inputs = {"tag": "c%d-%d" % (self.seed, n), "ms": [rng.choice((0, 50, 300, 800, 1500)) for _ in range(4)],
                      "flaky_n": rng.choice((0, 0, 0, 1, 2)), "ask": rng.random() < 0.25, "doom": rng.random() < 0.08}
            res, err = self.mcp(p, "workflows_run", {"workflow": "soak_cluster", "inputs": inputs})
            if res is None or err:
                self.count("submit_refused")
                continue
            rid = str(res.get("workflow_id"))
            with self.lock:
                self.runs_started += 1
            self.count("submitted")
            if rng.random() < 0.10:
                delay = rng.uniform(0.05, 2.0)
                threading.Timer(delay, self.cancel, args=(rid, rng.random())).start()

    def licensed_loop(self) -> None:
        """soak_licensed runs (~0.5/s) on random engines: each wants 4 units of soak_lic at once
        (its limit is 2 across the engines), then 2 for one step."""
        rng = random.Random("licensed:%d" % self.seed)
        n = 0
        while not self.stop_load.is_set():
            self.pace(rng, 0.5)
            if self.stop_load.is_set():
                break
            p = self.engine_of(rng)
            if p is None:
                continue
            n += 1
            inputs = {"tag": "l%d-%d" % (self.seed, n), "ms": [rng.choice((20, 60, 150, 300)) for _ in range(4)]}
            res, err = self.mcp(p, "workflows_run", {"workflow": "soak_licensed", "inputs": inputs})
            if res is None or err:
                self.count("licensed_refused")
                continue
            with self.lock:
                self.runs_started += 1
                self.licensed_started += 1

    def resource_loop(self) -> None:
        """Sample the units of soak_lic held by live engines every RES_SAMPLE_EVERY s from a psql
        of its own (soak_pg's session; a new one after a server restart), and check each sample:
        never more than RES_LIMIT, and no unit of an engine SIGKILLed (or closed) or SIGSTOPped
        more than its lease + 1 s before the sample was asked for."""
        session: Optional[soak_pg.Session] = None
        try:
            while not self.stop_all.is_set():
                if session is None:
                    session = self.pg.session()
                asked = now_ns()
                try:
                    line = session.ask(RES_SAMPLE_SQL)
                except RuntimeError as exc:  # the server restarts: its connection is gone
                    self.log("resource sampler: %s" % exc)
                    session.close()
                    session = None
                    self.res_reconnects += 1
                    self.stop_all.wait(0.2)
                    continue
                self.check_resource_sample(asked, line)
                self.stop_all.wait(RES_SAMPLE_EVERY)
        finally:
            if session is not None:
                session.close()

    def check_resource_sample(self, asked: int, line: str) -> None:
        """One sample ("pid:units:engine,…", asked at ``asked`` ns): over the limit, or units of an
        engine dead or stopped past its lease + 1 s, are violations."""
        held: List[Tuple[int, int, str]] = []
        for part in line.split(","):
            if part:
                f = part.split(":", 2)
                held.append((int(f[0]), int(f[1]), f[2]))
        total = sum(n for _, n, _ in held)
        with self.lock:
            self.res_samples += 1
            self.res_max = max(self.res_max, total)
            self.res_last = {pid: n for pid, n, _ in held}
            by_pid = {p.pid: p for p in self.procs if p.kind == "serve"}
        if total > RES_LIMIT:
            self.res_over += 1
            self.violation("resource", "%d units of %s held by live engines at once, over its limit %d (%s)" % (
                total, RESOURCE, RES_LIMIT, ", ".join("pid %d: %d" % (pid, n) for pid, n, _ in held)))
        grace = int((LEASE + 1.0) * 1e9)
        for pid, n, eng in held:
            p = by_pid.get(pid)
            if p is None:
                continue
            if p.end is not None or (p.stopped and p.stopped[-1][1] == 0):
                with self.lock:  # within its grace: the rule below is exercised
                    self.res_gone = max(self.res_gone, n)
                    if p.end is None:
                        self.res_stopped = max(self.res_stopped, n)
            if p.end is not None and asked > p.end + grace:
                self.violation("resource", "serve %d (pid %d, %s) is %s since %.1f s, yet %d unit(s) of it count" % (
                    p.num, pid, eng, p.how, (asked - p.end) / 1e9, n))
            elif p.stopped and p.stopped[-1][1] == 0 and asked > p.stopped[-1][0] + grace:
                self.violation("resource", "serve %d (pid %d, %s) is SIGSTOPped since %.1f s, past its lease of %.0f "
                               "s, yet %d unit(s) of it count" % (p.num, pid, eng, (asked - p.stopped[-1][0]) / 1e9,
                                                                  LEASE, n))

    def cancel(self, rid: str, u: float) -> None:
        if self.stop_all.is_set():
            return
        owner = self.owner_pid(rid)
        p = self.engine_of(random.Random(u), not_pid=owner)
        if p is None:
            return
        res, err = self.mcp(p, "workflows_cancel", {"workflow_id": rid})
        self.count("cancels" if res is not None and not err else "cancels_refused")
        if owner and owner != p.pid:
            self.count("cancels_remote")

    def approver_loop(self) -> None:
        """Answer every open approval from an engine that does not own its run. The open
        approvals are read from the database (workflow_steps of kind approve, waiting): one read
        finds those of every run, whichever engine runs it. Any engine's MCP status of a run lists
        them too (those of a run another engine runs from its records, since 6ffb519: the cluster
        soak found that status on another engine listed none), but that is one call per run."""
        rng = random.Random("approve:%d" % self.seed)
        while not self.stop_all.is_set():
            self.stop_all.wait(0.5)
            rows = self.pg_query("SELECT s.run_id, s.key, e.pid FROM workflow_steps s JOIN workflows w "
                                 "ON w.id = s.run_id LEFT JOIN engines e ON e.id = w.owner WHERE w.status = 'waiting' "
                                 "AND s.kind = 'approve' AND s.status = 'waiting_approval'")
            for r in rows:
                owner = int(r.get("pid") or 0)
                p = self.engine_of(rng, not_pid=owner)
                if p is None:
                    continue
                grant = rng.random() >= 0.15
                res, err = self.mcp(p, "workflows_approve", {"workflow_id": r["run_id"], "step": r["key"],
                                                             "approved": grant, "by": "soak-cluster"})
                if res is not None and not err:
                    self.count("approved" if grant else "denied")
                    if owner and owner != p.pid:
                        self.count("approved_remote")
                elif res is not None:
                    self.count("approve_refused")
                    self.log("approve %s on serve %d refused: %s" % (r["run_id"], p.num, res.get("message")))

    def post_hook(self, p: Proc, body: bytes, headers: Dict[str, str], d: Dict[str, Any]) -> None:
        req = urllib.request.Request(p.hook_url, data=body, method="POST",
                                     headers=dict(headers, **{"Content-Type": "application/json"}))
        status: Optional[int] = None
        text = ""
        try:
            with OPENER.open(req, timeout=10) as resp:
                status = resp.status
                text = resp.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            status = exc.code
            text = exc.read().decode("utf-8", "replace")
        except (urllib.error.URLError, OSError):
            self.count("hook_unanswered")
        try:
            answer = json.loads(text) if text.strip() else {}
        except ValueError:
            answer = {}
        with self.lock:
            d["answers"].append((p.num, status, str(answer.get("run_id") or "") if isinstance(answer, dict) else ""))

    def hook_loop(self) -> None:
        rng = random.Random("hook:%d" % self.seed)
        n = 0
        while not self.stop_load.is_set():
            self.pace(rng, 2.0)
            if self.stop_load.is_set():
                break
            engines = self.serves()
            if not engines:
                continue
            n += 1
            did = "cd-%d-%d" % (self.seed, n)
            body = json.dumps({"tag": "h%d" % n, "ms": rng.randint(0, 150)}).encode()
            sig = "sha256=" + dcc_flow.hmac_sha256_hex(SECRET, body)
            u = rng.random()
            kind = "good"
            if u < 0.10:
                kind, sig = "bad_signature", "sha256=" + dcc_flow.hmac_sha256_hex("not-the-secret", body)
            elif u < 0.15:
                kind, body = "malformed", b'{"tag": "m%d", "ms": ' % n
                sig = "sha256=" + dcc_flow.hmac_sha256_hex(SECRET, body)
            headers = {"X-GitHub-Delivery": did, "X-Hub-Signature-256": sig}
            d: Dict[str, Any] = {"id": did, "kind": kind, "answers": []}
            self.deliveries.append(d)
            self.count("hook_" + kind)
            if kind == "good" and rng.random() < 0.25 and len(engines) > 1:
                a, b = rng.sample(engines, 2)
                ths = [threading.Thread(target=self.post_hook, args=(q, body, headers, d)) for q in (a, b)]
                for th in ths:
                    th.start()
                for th in ths:
                    th.join()
                self.count("hook_pairs")
            else:
                self.post_hook(rng.choice(engines), body, headers, d)
            if kind == "good" and not any(s in (200, 202) for _, s, _ in d["answers"]):
                self.post_hook(rng.choice(self.serves() or engines), body, headers, d)  # the sender retries once
                self.count("hook_resent")

    def rss_loop(self) -> None:
        while not self.stop_all.is_set():
            with self.lock:
                live = list(self.live.values())
                runs = self.runs_started
            t = self.t()
            for p in live:
                kb = rss_kb(p.pid)
                if kb is not None and p.how == "running" and not self.stopped(p):
                    self.samples.append(checks.RssSample(t=t, gen=p.num, rss_kb=kb, runs=runs))
            self.stop_all.wait(0.5)

    def stopped(self, p: Proc) -> bool:
        return bool(p.stopped) and p.stopped[-1][1] == 0

    # -- faults -----------------------------------------------------------------------------------

    def chaos(self) -> None:
        chaos_end = self.duration * CHAOS_FRACTION
        restarts = [self.duration * 0.4] if self.duration < 180 else [self.duration * 0.3, self.duration * 0.6]
        stop_at = self.duration * 0.5
        close_at = self.duration * 0.3
        nxt = self.rng.uniform(8.0, 14.0)
        while not self.stop_load.is_set() and self.t() < chaos_end:
            self.stop_load.wait(0.2)
            self.check_alive()
            t = self.t()
            if restarts and t >= restarts[0]:
                restarts.pop(0)
                self.restart_db()
            if stop_at and t >= stop_at:
                stop_at = 0.0
                self.suspend()
            if close_at and t >= close_at:
                close_at = 0.0
                self.close_one()
            if t >= nxt:
                nxt = t + self.rng.uniform(10.0, 20.0) * min(1.0, self.duration / 300.0 + 0.5)
                self.kill_one()

    def kill_one(self) -> None:
        with self.lock:
            cands = [(k, p) for k, p in self.live.items() if k != ("serve", 0) and not self.stopped(p)]
        if not cands:
            return
        (kind, slot), p = self.rng.choice(sorted(cands, key=lambda kp: kp[0]))
        self.kill(p)
        self.count("kills_" + kind)
        self.log("SIGKILL %s %d (pid %d)" % (kind, p.num, p.pid))
        self.start_proc(kind, slot)

    def close_one(self, wait: float = 20.0) -> None:
        """SIGTERM a serve engine (never the first): it closes, handing its runs over."""
        with self.lock:
            cands = [(s, p) for (k, s), p in sorted(self.live.items())
                     if k == "serve" and s != 0 and not self.stopped(p)]
        if not cands:
            return
        slot, p = self.rng.choice(cands)
        t0 = now_ns()
        p.how = "closed"  # before the exit, so that check_alive does not call it a death
        os.kill(p.pid, signal.SIGTERM)
        try:
            p.proc.wait(timeout=wait)
            self.pg.release(p.pid)
        except subprocess.TimeoutExpired:
            self.violation("process", "serve %d (pid %d) did not close within %.0f s of SIGTERM" % (p.num, p.pid, wait))
            self.kill(p, "closed")
        t1 = now_ns()
        p.end = t1
        with self.lock:
            # A step whose call ran on the closing engine's own host is called again by the
            # engine the run is handed to (the close cancelled the call).
            self.faults.append((t0, t1 + int(3 * LEASE * 1e9), "SIGTERM serve %d" % p.num))
        self.count("closes")
        self.log("SIGTERM serve %d (pid %d): closed in %.2f s" % (p.num, p.pid, (t1 - t0) / 1e9))
        self.start_proc("serve", slot)

    def restart_db(self) -> None:
        t0 = now_ns()
        m0 = time.monotonic()
        self.pg.pg_ctl("restart")
        t1 = now_ns()
        with self.lock:
            self.faults.append((t0, t1 + int(3 * LEASE * 1e9), "pg_ctl restart"))
        self.count("db_restarts")
        self.log("pg_ctl restart took %.2f s" % (time.monotonic() - m0))

    def suspend(self) -> None:
        with self.lock:
            cands = [p for (k, s), p in sorted(self.live.items()) if k == "serve" and s != 0]
        if not cands:
            return
        p = self.rng.choice(cands)
        self.make_holder(p)
        t0 = now_ns()
        p.stopped.append((t0, 0))
        os.kill(p.pid, signal.SIGSTOP)
        self.log("SIGSTOP serve %d (pid %d) for %.0f s" % (p.num, p.pid, 3 * LEASE))
        self.stop_load.wait(3 * LEASE)
        os.kill(p.pid, signal.SIGCONT)
        t1 = now_ns()
        p.stopped[-1] = (t0, t1)
        with self.lock:
            self.faults.append((t0, t1 + int(3 * LEASE * 1e9), "SIGSTOP serve %d" % p.num))
        self.count("stops")
        self.log("SIGCONT serve %d" % p.num)

    def make_holder(self, p: Proc, within: float = 15.0) -> None:
        """Before the SIGSTOP: start a soak_licensed run of 2 s calls on ``p`` and wait (at most
        ``within`` s) until a sample shows it holding units of soak_lic, so that the stop is a
        holder's stop past its lease (the sampler's rule is exercised: ``stopped_holder``)."""
        res, err = self.mcp(p, "workflows_run", {"workflow": "soak_licensed",
                                                 "inputs": {"tag": "hold-%d" % self.seed, "ms": [2000] * 4}})
        if res is None or err:
            self.log("the run to make serve %d a holder was refused" % p.num)
            return
        with self.lock:
            self.runs_started += 1
            self.licensed_started += 1
        deadline = time.monotonic() + within
        while time.monotonic() < deadline and not self.stop_load.is_set():
            with self.lock:
                if self.res_last.get(p.pid, 0) > 0:
                    self.log("serve %d holds %d unit(s) of %s" % (p.num, self.res_last[p.pid], RESOURCE))
                    return
            time.sleep(0.02)
        self.log("serve %d held no unit of %s within %.0f s" % (p.num, RESOURCE, within))

    # -- phases -----------------------------------------------------------------------------------

    def drive(self) -> None:
        for slot in range(SERVES):
            self.start_proc("serve", slot)
        for slot in range(WORKERS):
            self.start_proc("worker", slot)
        self.load_start = self.t()
        self.loop("rss", self.rss_loop)
        self.loop("submit", self.submit_loop)
        self.loop("hooks", self.hook_loop)
        self.loop("approver", self.approver_loop)
        self.loop("licensed", self.licensed_loop)
        self.loop("resources", self.resource_loop)
        self.chaos()
        while self.t() < self.duration:
            self.stop_load.wait(0.2)
            self.check_alive()
        self.stop_load.set()
        self.load_end = self.t()

    def settle(self) -> None:
        """Wait until no run is pending, running or waiting (the approver answers what waits), at
        most SETTLE_MAX; then stay idle for 3 leases so that expired leases are taken over."""
        deadline = time.monotonic() + SETTLE_MAX
        while time.monotonic() < deadline:
            self.check_alive()
            rows = self.pg_query("SELECT count(*) AS n FROM workflows "
                                 "WHERE status IN ('pending', 'running', 'waiting')")
            if rows and int(rows[0]["n"]) == 0:
                break
            time.sleep(1.0)
        self.rest_start = self.t()
        time.sleep(3 * LEASE)
        self.stop_all.set()
        self.rest_end = self.t()

    # -- checks -----------------------------------------------------------------------------------

    def in_fault(self, a: int, b: int) -> Optional[str]:
        for f0, f1, what in self.faults:
            if f0 <= b and a <= f1:
                return what
        return None

    def inject(self) -> None:
        """--fault: break what one check looks at, so that the check is seen to fail."""
        faults = set(self.args.fault)
        if "duplicate" in faults:  # a call of a completed step that starts after its commit
            row = self.read_db("SELECT run_id, step_key, max(time) AS t FROM workflow_events WHERE type = "
                               "'step_exit' AND status = 'completed' AND step_key = 'prepare' GROUP BY 1, 2 LIMIT 1")
            if row:
                rec = {"gen": 9999, "pid": 1, "call": 1, "tool": "soak__main", "run": row[0]["run_id"],
                       "step": "prepare", "att": 1}
                with open(self.call_log, "a") as f:
                    f.write(json.dumps(dict(rec, ev="start", t=int(row[0]["t"]) + 1000, c0=False)) + "\n")
                    f.write(json.dumps(dict(rec, ev="end", t=int(row[0]["t"]) + 2000, out="ok", c1=False)) + "\n")
            else:
                self.violation("driver", "--fault duplicate broke nothing: no completed prepare step")
        if "hung" in faults:  # a run left running under an hour's lease of an engine that is gone (one with
            # no lease is taken over and finished by a live engine within a lease: that is not a fault)
            rows = self.read_db("UPDATE workflows SET status = 'running', owner = 'gone-1-x', lease_until = now() + "
                                "interval '1 hour' WHERE id = (SELECT id FROM workflows WHERE status = 'completed' "
                                "LIMIT 1) RETURNING id")
            if not rows:
                self.violation("driver", "--fault hung broke nothing: no completed run")
        if "queue" in faults:  # a call claimed by an engine that is gone
            rows = self.read_db("INSERT INTO tool_calls (run_id, step_key, tool, status, claimed_by, lease_until) "
                                "VALUES ('r-fault', 'x', 'soak__queue', 'claimed', 'gone-1-x', now() + interval "
                                "'1 hour') RETURNING id")
            if not rows:
                self.violation("driver", "--fault queue broke nothing")
        if "schedule" in faults:  # a slot fired twice
            rows = self.read_db("INSERT INTO schedule_fires (schedule_id, kind, run_id, scheduled_at, fired_at) "
                                "SELECT schedule_id, kind, run_id, scheduled_at, fired_at FROM schedule_fires WHERE "
                                "schedule_id = 'soak_tick' AND kind = 'fired' LIMIT 1 RETURNING id")
            if not rows:
                self.violation("driver", "--fault schedule broke nothing: no soak_tick fire")
        if "resource" in faults:  # units of soak_lic held by a live engine beyond the limit: one more sample
            live = self.read_db("SELECT id FROM engines WHERE heartbeat_at + make_interval(secs => lease_secs) >= "
                                "now() LIMIT 1")
            if live:
                self.read_db("INSERT INTO resource_slots (holder, resource, amount, taken_limit, engine_id) VALUES "
                             "('fault-holder', '%s', %d, %d, '%s') RETURNING holder" % (
                                 RESOURCE, RES_LIMIT + 1, RES_LIMIT, live[0]["id"]))
                session = self.pg.session()
                try:
                    self.check_resource_sample(now_ns(), session.ask(RES_SAMPLE_SQL))
                finally:
                    session.close()
            else:
                self.violation("driver", "--fault resource broke nothing: no live engine")
        if "webhook" in faults:  # a delivery answered with another run by a second engine
            good = [d for d in self.deliveries if d["kind"] == "good" and d["answers"]]
            if good:
                good[0]["answers"].append((0, 202, "r-another-run"))
            else:
                self.violation("driver", "--fault webhook broke nothing: no answered delivery")

    def finish(self) -> int:
        if self.args.fault:
            self.inject()
        runs = self.read_db("SELECT w.id, w.name, w.status, w.owner, "
                            "(w.lease_until IS NOT NULL AND w.lease_until > now()) AS leased, "
                            "(e.id IS NOT NULL) AS owner_alive FROM workflows w LEFT JOIN engines e ON e.id = w.owner")
        by_status: Dict[str, int] = {}
        for r in runs:
            by_status[r["status"]] = by_status.get(r["status"], 0) + 1
        hung = [r for r in runs if r["status"] not in TERMINAL]
        if hung:  # a schedule fire may be in flight as the driver reads: hung is what is still unfinished 3 s on
            time.sleep(3.0)
            again = {r["id"]: r for r in self.read_db(
                "SELECT w.id, w.name, w.status, w.owner, (w.lease_until IS NOT NULL AND w.lease_until > now()) AS "
                "leased, (e.id IS NOT NULL) AS owner_alive FROM workflows w LEFT JOIN engines e ON e.id = w.owner "
                "WHERE w.status NOT IN ('completed', 'failed', 'cancelled')")}
            hung = [again[r["id"]] for r in hung if r["id"] in again]
        for r in hung:
            self.violation("hung", "run %s (%s) is %s %.0f s after the load stopped (lease live: %s, owner %s "
                           "alive: %s)"
                           % (r["id"], r["name"], r["status"], self.t() - self.load_end, r["leased"], r["owner"],
                              r["owner_alive"]))
        # Duplicates: a completed step instance whose tool returned ok twice, the second call not
        # excused by a fault (a kill, a stop, a database restart) between the first call's end
        # and the second's start; or any call of it that started after its completion was
        # committed (no fault excuses that: a completed step never runs again).
        steps = self.read_db("SELECT run_id, key FROM workflow_steps WHERE status = 'completed' AND NOT cached "
                             "AND kind = 'tool'")
        done = {(s["run_id"], s["key"]) for s in steps}
        exits = self.read_db("SELECT run_id, step_key, min(time) AS t FROM workflow_events WHERE type = 'step_exit' "
                             "AND status = 'completed' GROUP BY run_id, step_key")
        committed = {(e["run_id"], e["step_key"]): int(e["t"]) for e in exits}
        with open(self.call_log, errors="replace") as f:
            calls, problems = checks.parse_call_log(f)
        for prob in problems:
            self.violation("call log", prob)
        by_step: Dict[Tuple[str, str], List[checks.Call]] = {}
        for c in calls:
            by_step.setdefault((c.run, c.step), []).append(c)
        duplicates, excused = 0, 0
        for key, cs in by_step.items():
            if key not in done:
                continue
            cs.sort(key=lambda c: c.start)
            t_commit = committed.get(key)
            late = [c for c in cs if t_commit is not None and c.start > t_commit]
            if late:
                duplicates += 1
                self.violation("duplicate", "%s %s: called again (%s, pid %d) %.3f s after its completion was "
                               "committed" % (key[0], key[1], late[0].where(), late[0].pid,
                                              (late[0].start - (t_commit or 0)) / 1e9))
                continue
            oks = [c for c in cs if c.ok]
            for a, b in zip(oks, oks[1:]):
                why = self.in_fault(a.end or a.start, b.start)
                if why:
                    excused += 1
                    self.log("fault window: %s %s ran twice (%s)" % (key[0], key[1], why))
                else:
                    duplicates += 1
                    self.violation("duplicate", "%s %s: the tool returned ok twice (pid %d then pid %d) with no fault "
                                   "between" % (key[0], key[1], a.pid, b.pid))
        # Webhooks (soak_checks.check_webhooks): one run per delivery id, every answer that accepted it
        # names that run; a bad signature (a malformed body) was answered 401 (400) and started none.
        hook_runs = self.read_db("SELECT convert_from(inputs, 'UTF8')::json->>'delivery' AS d, id FROM workflows "
                                 "WHERE name = 'soak_hook'")
        runs_by_delivery: Dict[str, List[str]] = {}
        for r in hook_runs:
            runs_by_delivery.setdefault(str(r["d"]), []).append(str(r["id"]))
        posts = [checks.Delivery(delivery_id=d["id"], signed=d["kind"] != "bad_signature", sent=0, status=status,
                                 run_id=rid, gen=num, malformed=d["kind"] == "malformed")
                 for d in self.deliveries for num, status, rid in d["answers"]]
        for v in checks.check_webhooks(posts, runs_by_delivery):
            self.violation("webhook", v)
        # Schedules: one fire per slot, each fire one run.
        dup_slots = self.read_db("SELECT scheduled_at, count(*) AS n FROM schedule_fires WHERE schedule_id = "
                                 "'soak_tick' AND kind = 'fired' GROUP BY scheduled_at HAVING count(*) > 1")
        for r in dup_slots:
            self.violation("schedule", "soak_tick slot %s fired %d times" % (r["scheduled_at"], r["n"]))
        # The schedule keeps firing while the driver reads, so what is compared is what ended
        # more than 3 s ago, read in one statement.
        cutoff = now_ns() - 3_000_000_000
        fires = self.read_db(
            "SELECT count(*) AS n, count(DISTINCT run_id) AS runs, count(*) FILTER (WHERE NOT EXISTS "
            "(SELECT 1 FROM workflows w WHERE w.id = f.run_id)) AS orphans, (SELECT count(*) FROM workflows w "
            "WHERE w.name = 'soak_tick' AND w.created_at < %d AND NOT EXISTS (SELECT 1 FROM schedule_fires g "
            "WHERE g.run_id = w.id)) AS unrecorded FROM schedule_fires f WHERE f.schedule_id = 'soak_tick' "
            "AND f.kind = 'fired' AND f.fired_at < %d" % (cutoff, cutoff))
        n_fires = int(fires[0]["n"]) if fires else 0
        if fires and (int(fires[0]["runs"]) != n_fires or fires[0]["orphans"] or fires[0]["unrecorded"]):
            self.violation("schedule", "soak_tick: %d fires recorded, %d distinct runs, %d naming no run in the "
                           "database, %d runs with no fire" % (n_fires, int(fires[0]["runs"]), fires[0]["orphans"],
                                                                fires[0]["unrecorded"]))
        # Slots claimed with no fire recorded (skipped fires are recorded too): a figure, not a
        # violation — an engine SIGKILLed between its claim of a slot and the fire loses that slot.
        lost = self.read_db("SELECT s.slot, s.engine_id FROM schedule_slots s WHERE s.schedule_id = 'soak_tick' "
                            "AND s.claimed_at < now() - interval '3 seconds' AND NOT EXISTS (SELECT 1 FROM "
                            "schedule_fires f WHERE f.schedule_id = s.schedule_id AND f.scheduled_at = s.slot)")
        for r in lost:
            self.log("soak_tick slot %s claimed by %s has no fire" % (r["slot"], r["engine_id"]))
        self.slots_lost = len(lost)
        # The queue: nothing claimed by a dead engine, nothing left queued or claimed at rest.
        stale = self.read_db("SELECT c.id, c.run_id, c.step_key, c.status, c.claimed_by, (e.id IS NOT NULL) AS alive "
                             "FROM tool_calls c LEFT JOIN engines e ON e.id = c.claimed_by "
                             "WHERE c.status IN ('queued', 'claimed')")
        for r in stale:
            self.violation("queue", "call %s (%s %s) is still %s at rest (claimed by %s, alive %s)" % (
                r["id"], r["run_id"], r["step_key"], r["status"], r["claimed_by"], r["alive"]))
        queue = self.read_db("SELECT status, coalesce(error_kind, '') AS kind, count(*) AS n FROM tool_calls "
                             "GROUP BY 1, 2")
        q_total = sum(int(r["n"]) for r in queue)
        q_lost = sum(int(r["n"]) for r in queue if r["kind"] == "worker_lost")
        takeovers = self.read_db("SELECT count(*) AS n FROM workflow_events WHERE type = 'interrupted' AND "
                                 "convert_from(detail, 'UTF8') LIKE '%taken_over_by%'")
        n_takeovers = int(takeovers[0]["n"]) if takeovers else 0
        # RSS: every engine that lived from the warm-up to the rest: the median of its first 5 samples
        # after the warm-up against that of its last 5 (soak_checks.rss_growth), which are at rest
        # when at least 5 were taken at rest (the rest lasts 3 leases: a dozen samples).
        rss_lines, rss_worst = [], 0
        for p in self.procs:
            if p.how != "running" or p.start_t > 1.0 + (self.load_start if hasattr(self, "load_start") else 0):
                continue
            rss = checks.rss_growth(self.samples, p.num, WARMUP_SECS, self.rest_end, self.runs_started, window=5)
            at_rest = sum(1 for s in self.samples if s.gen == p.num and self.rest_start <= s.t <= self.rest_end)
            if rss.note.startswith("too few") or at_rest < 5:
                rss_lines.append("%s %d: too few samples" % (p.kind, p.num))
                continue
            rss_worst = max(rss_worst, rss.growth_kb)
            rss_lines.append("%s %d %.1f -> %.1f MB" % (p.kind, p.num, rss.warm_kb / 1024.0, rss.last_kb / 1024.0))
            if rss.growth_kb > RSS_LIMIT_KB:
                self.violation("rss", "%s %d (pid %d) grew %.1f MB from after warm-up (%.0f s) to rest" % (
                    p.kind, p.num, p.pid, rss.growth_kb / 1024.0, WARMUP_SECS))
        # Resources: every sample was checked as it came (resource_loop); nothing may be held at rest.
        lic_done = sum(1 for r in runs if r["name"] == "soak_licensed" and r["status"] == "completed")
        left = self.read_db("SELECT s.holder, s.engine_id, s.amount, EXISTS (SELECT 1 FROM engines e WHERE e.id = "
                            "s.engine_id AND e.heartbeat_at + make_interval(secs => e.lease_secs) >= now()) AS live "
                            "FROM resource_slots s WHERE s.resource = '%s'" % RESOURCE)
        for r in left:
            if r["live"] and r["holder"] != "fault-holder":
                self.violation("resource", "holder %s of engine %s still holds %d unit(s) of %s at rest" % (
                    r["holder"], r["engine_id"], r["amount"], RESOURCE))
        # Sanity: the soak did what it claims.
        kills = sum(v for k, v in self.counts.items() if k.startswith("kills_"))
        need = [("completed runs", by_status.get("completed", 0), 10), ("kills", kills, 2),
                ("takeovers", n_takeovers, 1), ("database restarts", self.counts.get("db_restarts", 0), 1),
                ("closes", self.counts.get("closes", 0), 1),
                ("queued calls", q_total, 10), ("webhook pairs", self.counts.get("hook_pairs", 0), 1),
                ("schedule fires", n_fires, 5), ("completed soak_licensed runs", lic_done, 5),
                ("resource samples", self.res_samples, 200),
                ("most units of %s held at once (its limit reached)" % RESOURCE, self.res_max, RES_LIMIT),
                ("units of %s counted of the SIGSTOPped engine while stopped (a holder stopped)" % RESOURCE,
                 self.res_stopped, 1)]
        for what, got, least in need:
            if got < least:
                self.violation("sanity", "%s: %d, fewer than %d" % (what, got, least))
        # The verdict is printed and saved before the processes are stopped: the watchdog may end
        # the driver while they stop. "running" in the table: alive at the checks, stopped next.
        for p in self.procs:
            print("%-6s %2d slot %d pid %-7d %6.1f s %-8s" % (p.kind, p.num, p.slot, p.pid,
                                                             ((p.end or now_ns()) - p.start) / 1e9, p.how))
        print("rss (after warm-up -> at rest): " + ("; ".join(rss_lines) or "no engine lived through the soak"))
        self.print_violations(self.violations)
        self.save_violations()
        status_txt = ", ".join("%s %d" % kv for kv in sorted(by_status.items()))
        verdict = "ok" if not self.violations else "FAILED (%d violations)" % len(self.violations)
        good = sum(1 for d in self.deliveries if d["kind"] == "good")
        print("soak-cluster %.0fs seed %d: runs %d (%s), kills %d (serve %d, worker %d), takeovers %d, db restarts %d, "
              "stops %d, closes %d, queue calls %d (worker_lost %d), duplicates %d (fault window %d), hung %d, "
              "webhooks %d (pairs %d, bad %d), tick fires %d (slots lost %d), cancels %d, approvals %d, "
              "licensed runs %d (completed %d), %s held at most %d of %d (%d samples, %d over, %d reconnects; up to %d "
              "of an engine killed or stopped, %d of the stopped one), "
              "rss max +%.1f MB: %s" % (
                  self.duration, self.seed, len(runs), status_txt, kills, self.counts.get("kills_serve", 0),
                  self.counts.get("kills_worker", 0), n_takeovers, self.counts.get("db_restarts", 0),
                  self.counts.get("stops", 0), self.counts.get("closes", 0), q_total, q_lost, duplicates, excused,
                  len(hung), good,
                  self.counts.get("hook_pairs", 0),
                  self.counts.get("hook_bad_signature", 0) + self.counts.get("hook_malformed", 0), n_fires,
                  self.slots_lost,
                  self.counts.get("cancels", 0), self.counts.get("approved", 0) + self.counts.get("denied", 0),
                  self.licensed_started, lic_done, RESOURCE, self.res_max, RES_LIMIT, self.res_samples, self.res_over,
                  self.res_reconnects, self.res_gone, self.res_stopped, rss_worst / 1024.0, verdict), flush=True)
        found = len(self.violations)
        self.stop_procs()
        stopping = self.violations[found:]
        if stopping:
            self.print_violations(stopping)
            self.save_violations()
            print("soak-cluster %.0fs seed %d: FAILED (%d more violation(s) stopping the processes)" % (
                self.duration, self.seed, len(stopping)), flush=True)
        return 0 if not self.violations else 1

    def print_violations(self, violations: List[Tuple[str, str]]) -> None:
        by_kind: Dict[str, List[str]] = {}
        for kind, msg in violations:
            by_kind.setdefault(kind, []).append(msg)
        for kind, msgs in sorted(by_kind.items()):
            print("%s: %d" % (kind, len(msgs)))
            for m in msgs[:5]:
                print("  " + m)

    def stop_procs(self) -> None:
        """SIGTERM every process still running, all at once, and wait for them until one shared
        deadline, STOP_SECS after the first SIGTERM: one still running then is a violation, and
        SIGKILLed. One that exited before is a violation too (it died by itself)."""
        for p in self.procs:
            if p.how == "running" and p.proc.poll() is not None:
                p.end, p.how = now_ns(), "died"
                self.pg.release(p.pid)
                self.violation("process", "%s %d (pid %d) exited by itself with status %s (see %s)" % (
                    p.kind, p.num, p.pid, p.proc.returncode, p.log_path))
        running = [p for p in self.procs if p.how == "running"]
        for p in running:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except OSError:
                pass
        deadline = time.monotonic() + STOP_SECS
        for p in running:
            try:
                p.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.violation("process", "%s %d (pid %d) did not stop within %.0f s of SIGTERM" % (
                    p.kind, p.num, p.pid, STOP_SECS))
                self.kill(p, "stopped", wait=5.0)
                continue
            self.pg.release(p.pid)
            p.end, p.how = now_ns(), "stopped"

    def save_violations(self) -> None:
        """Write every violation so far to violations.txt in the work folder."""
        with self.lock:
            found = list(self.violations)
        with open(os.path.join(self.workdir, "violations.txt"), "w") as f:
            for kind, msg in found:
                f.write("%s: %s\n" % (kind, msg))

    def shutdown(self) -> None:
        """SIGKILL every process group still running and wait for them (a few seconds): the end of
        main, after a signal or an error too, and the watchdog's."""
        self.stop_load.set()
        self.stop_all.set()
        left = [p for p in list(self.procs) if p.proc.poll() is None]
        for p in left:
            try:
                os.killpg(p.pid, signal.SIGCONT)
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
        deadline = time.monotonic() + 5
        for p in left:
            try:
                p.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                continue  # the reaper SIGKILLs its group again once the driver is gone
            self.pg.release(p.pid)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="Soak test of dcc-flow's engines on one PostgreSQL database.")
    parser.add_argument("--duration", type=float, default=600.0, metavar="SECONDS",
                        help="how long to drive the engines (default 600; at least 40)")
    parser.add_argument("--seed", type=int, default=1, help="seed of every random choice (default 1)")
    parser.add_argument("--workdir", metavar="DIR", help="where the logs and the call log go (default: a new "
                        "temporary folder, removed when the soak passes)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder even when the soak passes")
    parser.add_argument("--verbose", "-v", action="store_true", help="print what the driver does as it goes")
    parser.add_argument("--fault", action="append", default=[],
                        choices=("duplicate", "hung", "queue", "resource", "schedule", "webhook"),
                        help="to check the checks: break what one of them looks at before the end (the soak "
                             "must then fail with that violation; repeatable)")
    parser.add_argument("--leak-per-run", type=int, default=0, metavar="BYTES",
                        help="to check the RSS check: the engines' tools keep BYTES for good per run (default 0)")
    args = parser.parse_args(argv)
    if args.duration < 40:
        parser.error("--duration must be at least 40 seconds")
    SIGNALS.install()  # from here a SIGTERM stops everything this driver started, the cluster's initdb too
    try:
        found = soak_pg.bin_dir()
        if found is not None and not os.path.exists(os.path.join(found, "psql")) and not shutil.which("psql"):
            raise soak_pg.NoServer("no psql (the soak reads the database with it): install postgresql-client-15")
        pg = soak_pg.Cluster()
    except soak_pg.NoServer as exc:
        if os.environ.get("CI") == "true":
            print("soak-cluster: FAILED: %s" % exc, file=sys.stderr)
            return 1
        print("\n!!! SKIPPING the cluster soak: %s !!!\n" % exc, file=sys.stderr)
        return 0
    except (RuntimeError, subprocess.SubprocessError) as exc:  # a bad DCC_FLOW_PG_BIN, initdb or pg_ctl failed
        err = getattr(exc, "stderr", None)
        print("soak-cluster: FAILED: no PostgreSQL cluster: %s%s" % (exc, "\n" + err.decode("utf-8", "replace")
                                                                      if isinstance(err, bytes) else ""),
              file=sys.stderr)
        return 1
    workdir = args.workdir or ""
    soak: Optional[ClusterSoak] = None
    watchdog: Optional[threading.Timer] = None
    status = 1
    try:
        try:
            workdir = workdir or tempfile.mkdtemp(prefix="dcc-flow-soak-cluster-")
            os.makedirs(workdir, exist_ok=True)
            soak = ClusterSoak(args, pg, workdir)
            the_soak = soak

            def overrun() -> None:
                the_soak.violation("overrun", "hard deadline passed (%.0f s)" % (the_soak.duration + OVERRUN))
                the_soak.save_violations()
                print("soak-cluster: hard deadline passed (%.0f s); killing everything; work folder: %s" % (
                    the_soak.duration + OVERRUN, workdir), flush=True)
                the_soak.shutdown()
                pg.stop()
                os._exit(3)

            watchdog = threading.Timer(soak.duration + OVERRUN, overrun)
            watchdog.daemon = True
            watchdog.start()
            soak.drive()
            soak.settle()
            status = soak.finish()
        finally:  # also after a signal (SystemExit) or a driver error
            SIGNALS.closing = True
            if watchdog is not None:
                watchdog.cancel()
            if soak is not None:
                soak.shutdown()
            pg.stop()
    except BaseException as exc:
        why = "stopped by %s" % SIGNALS.name() if SIGNALS.got else "the driver failed: %r" % exc
        if soak is not None:
            soak.violation("driver", why)
            soak.save_violations()
        print("soak-cluster: %s: FAILED; its processes and database are stopped; work folder: %s" % (
            why, workdir or "-"), file=sys.stderr, flush=True)
        raise
    if status == 0 and not args.keep and not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print("work folder: %s" % workdir)
    return status


if __name__ == "__main__":
    sys.exit(main())
