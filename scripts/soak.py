#!/usr/bin/env python3
"""Soak test of dcc-flow (issue #16): the real `dcc-flow serve` under a bounded, seeded load, with
SIGKILLs at random moments, then checks from the database and the tools' own call logs.

    python scripts/soak.py [--duration SECONDS] [--seed N] [--workdir DIR] [--keep] [--verbose]

What it does
------------
It starts `python -m dcc_flow serve` on a fresh SQLite database with MCP over HTTP, webhooks, the
interval schedule and the signed webhook of scripts/soak/schedules, and the tools of
scripts/soak/soak_tools.py: `soak__main` (main lane) and `soak__worker` (worker lane), slow (0-500
ms), flaky (transient errors, retried), failing, cancel-aware (they poll
`current_call().cancelled`) and logging every call start and end to an append-only log. For
`--duration` seconds it drives the server, from seeded random sources, with:

- MCP `workflows_run` of scripts/soak/workflows/soak_pipeline.yaml (both lanes, retries, a
  foreach with concurrency whose items may time out once, idempotency keys of both scopes, an
  approval gate, a step that always fails), about one per second, and of the small soak_ping
  workflow, about 14 per second (so that memory kept per run shows);
- MCP `workflows_cancel` of some pipeline runs, `workflows_approve` (grant or deny) of every
  approval, `workflows_resume` of some failed and cancelled runs and of every interrupted run;
- webhook deliveries, about 5 per second: new ones signed with HMAC-SHA256, redeliveries of
  earlier ones (same delivery id, body and signature), resends of deliveries that got no answer,
  and bad signatures (a wrong secret, a bare hex digest, no header, a body that was not signed);
- the interval schedule (every 2 s, with catch-up after a restart) fires by itself.

During the first 60% of the soak it SIGKILLs the server at random moments and starts it again on
the same database (which marks the runs it left `interrupted`; the driver resumes them). At 60% it
kills it one last time; the final generation runs the last 40% without kills, and its RSS is
measured after a warm-up. Then the driver stops, answers what is still waiting, lets the runs end,
sends nothing for 5 s, reads the database (read-only, sqlite3), stops the server with SIGTERM and
checks.

The checks (any failure is a violation: exit status 1)
------------------------------------------------------
- hung: after the server has been idle for 5 s, every run is terminal (completed, failed,
  cancelled, or interrupted = resumable). A run still `running` with nothing written for 5 s is
  hung, one still `waiting` holds an approval the driver did not answer (it answers them all);
  each is printed with its unfinished steps and what their last call did. Every run the driver
  resumed ended terminal.
- duplicates: no completed step was executed twice. Per step instance (run id, step key), from the
  call log and the step_exit events (scripts/soak/soak_checks.py, classify_calls, has the rule in
  full): a success (a call that returned ok) is *recorded* by the completed step_exit of its
  generation and attempt; an unrecorded success is *dropped* when its attempt had ended otherwise
  (a timeout or cancel: retries of failed attempts and runs resumed after failure are not
  duplicates), else in the *kill window* when its generation was SIGKILLed (the tool returned,
  the process died before the step's completion could be committed: counted and reported
  separately, not a violation), else *lost* (a violation). An instance is a duplicate when a call
  of it started after its completion was committed, or when two of its successes are neither
  dropped nor in the kill window.
- no call of a run started after a `workflows_cancel` of it had returned (until it was resumed).
- webhooks: no delivery id started two runs; a bad signature was answered 401 and started none;
  every answer names the run the database has for its delivery id.
- memory: the RSS of the final generation grows by less than 10 MB from the end of its warm-up to
  the end of the soak, and so does the projection of that growth, per run, over every run of the
  whole soak (kills replace the process, so no one process lives through the soak).
- the database: `PRAGMA integrity_check` is `ok`; a terminal run's stored progress is the
  progress of its last event; no commit of a soak tool step without a call that returned ok.
- the call log reads back whole; no server exited by itself or ignored SIGTERM; the soak did what
  it claims (runs of every kind completed, kills happened, bad signatures were refused).

Warm-up: a fresh server's RSS grows for reasons that are not leaks: the Go heap grows to its
steady GC target, SQLite's page caches (up to 2 MB per connection) fill as the database is read
and written, Python's allocator and the HTTP servers' buffers reach their working size. So the
measure starts after 35% of the final, kill-free phase (at least 8 s; 84 s in the 10-minute
soak) and compares medians of 5 samples (one every 0.5 s) at both ends. A server that keeps
1.6 KB per finished run (--leak-per-run 1600) fails the 10-minute soak: 4.8 MB in the measure,
19 MB projected over its ~11,000 runs; a healthy one is flat some 30 s after a cold start (+0.2 MB
in the measure, +1.0 MB projected).

Output: one line per server generation (pid, life, how it ended, runs, RSS), the kill-window
re-executions, the violations grouped by kind (all of them in violations.txt of the work folder),
and last one summary line (docs/operations/running.md explains it):

    soak 600s seed 1: runs 11444 (cancelled 17, completed 11362, failed 65), steps 39154, tool calls
    28270, kills 19, hung 0, duplicates 0 (kill window 1), webhooks 3004 (redelivered 438, bad
    signatures 451), cancels 66, resumes 52, rss +0.2 MB (gen 20 after warm-up, projected +1.0 MB
    over 11141 runs), integrity ok: ok

Everything is bounded: every request has a timeout, the settling waits at most 90 s, a watchdog
kills the server and exits with status 3 if the soak overruns by 5 minutes, and every process the
soak started is killed on the way out.
"""

import argparse
import datetime
import hashlib
import heapq
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KIT = os.path.join(ROOT, "scripts", "soak")
for _p in (KIT, os.path.join(ROOT, "python")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import soak_checks as checks  # noqa: E402
from soak_mcp import OPENER, McpClient, RpcError, Unavailable  # noqa: E402

import dcc_flow  # noqa: E402

WORKFLOWS = os.path.join(KIT, "workflows")
SCHEDULES = os.path.join(KIT, "schedules")
TOOLS = os.path.join(KIT, "soak_tools.py")
SECRET = "soak-secret-16"
HOOK_PATH = "/hooks/soak"
IDLE_SECS = 5.0
SETTLE_MAX = 90.0
RSS_LIMIT_KB = 10 * 1024
CHAOS_FRACTION = 0.6
WARMUP_FRACTION = 0.35
OVERRUN = 300.0


def cpu_seconds(pid: int) -> Optional[float]:
    """User + system CPU time of process pid so far (Linux /proc), or None when unreadable."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / float(os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def now_ns() -> int:
    return time.time_ns()


class Stop(Exception):
    """The soak is over for this thread."""


class Generation:
    """One server process."""

    def __init__(self, gen: int, proc: "subprocess.Popen[bytes]", log_path: str, start: int) -> None:
        self.gen = gen
        self.proc = proc
        self.pid = proc.pid
        self.log_path = log_path
        self.start = start
        self.started_mono = time.monotonic()
        self.end: Optional[int] = None
        self.how = "running"
        self.mcp_url = ""
        self.hook_url = ""
        self.runs_at_start = 0
        self.runs_at_end = 0


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.duration = float(args.duration)
        self.seed = int(args.seed)
        self.workdir = args.workdir
        self.db = os.path.join(self.workdir, "flow.db")
        self.call_log = os.path.join(self.workdir, "calls.log")
        self.driver_log = open(os.path.join(self.workdir, "driver.log"), "a", buffering=1)  # noqa: SIM115 - main closes it
        self.t0 = time.monotonic()
        self.lock = threading.Lock()
        self.up = threading.Event()  # a server is ready
        self.stop_load = threading.Event()  # no new work
        self.stop_all = threading.Event()  # the approver and the actions stop too
        self.stop_rss = threading.Event()
        self.server: Optional[Generation] = None
        self.gens: List[Generation] = []
        self.kills = 0
        self.violations: List[Tuple[str, str]] = []
        self.counts: Dict[str, int] = {}
        self.runs_started = 0
        self.pipeline_tags: Dict[str, str] = {}  # run id -> tag
        self.cancels: List[checks.Cancel] = []
        self.resumes: Dict[str, List[int]] = {}
        self.deliveries: List[checks.Delivery] = []
        self.rss: List[checks.RssSample] = []
        self.actions: List[Tuple[float, int, str, str]] = []  # (due, n, kind, run id) heap
        self.action_n = 0
        self.considered: Set[str] = set()
        self.answers: Dict[str, int] = {}
        self.ro: Optional[Any] = None  # read-only dcc_flow.Engine
        self.ro_lock = threading.Lock()
        self.threads: List[threading.Thread] = []
        self.final_gen = 0
        self.final_start = 0.0

    # -- bookkeeping ----------------------------------------------------------------------------

    def t(self) -> float:
        return time.monotonic() - self.t0

    def log(self, msg: str, loud: bool = False) -> None:
        line = "%7.2f %s" % (self.t(), msg)
        self.driver_log.write(line + "\n")
        if loud or self.args.verbose:
            print(line, flush=True)

    def count(self, name: str, n: int = 1) -> None:
        with self.lock:
            self.counts[name] = self.counts.get(name, 0) + n

    def violation(self, kind: str, msg: str) -> None:
        """Record a violation of one kind (hung, duplicate, webhook, rss, ...)."""
        with self.lock:
            self.violations.append((kind, msg))
        self.log("VIOLATION %s: %s" % (kind, msg), loud=self.args.verbose)

    def decide(self, *key: Any) -> float:
        """A number in [0, 1) fixed by the seed and key (decisions that do not depend on timing)."""
        h = hashlib.sha256(("%d:" % self.seed + ":".join(str(k) for k in key)).encode()).hexdigest()
        return int(h[:8], 16) / float(1 << 32)

    def schedule(self, delay: float, kind: str, run_id: str) -> None:
        with self.lock:
            self.action_n += 1
            heapq.heappush(self.actions, (time.monotonic() + delay, self.action_n, kind, run_id))

    # -- servers --------------------------------------------------------------------------------

    def start_server(self) -> Generation:
        gen = len(self.gens) + 1
        log_path = os.path.join(self.workdir, "server-%02d.log" % gen)
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), SOAK_CALL_LOG=self.call_log,
                   SOAK_GEN=str(gen), SOAK_WEBHOOK_SECRET=SECRET, PYTHONUNBUFFERED="1",
                   SOAK_LEAK_BYTES=str(self.args.leak_per_run))
        env.pop("DCC_FLOW_DB", None)
        cmd = [sys.executable, "-m", "dcc_flow", "serve", "--workflows", WORKFLOWS, "--schedules", SCHEDULES,
               "--webhooks", "127.0.0.1:0", "--mcp", "http://127.0.0.1:0", "--tools", TOOLS,
               "--worker-threads", "4", "--db", self.db]
        with open(log_path, "wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                    cwd=self.workdir, start_new_session=True)
        g = Generation(gen, proc, log_path, now_ns())
        g.runs_at_start = self.runs_started
        self.gens.append(g)
        deadline = time.monotonic() + 30
        text = ""
        while time.monotonic() < deadline:
            with open(log_path, errors="replace") as f:
                text = f.read()
            m = re.search(r"^serving .*$", text, re.M)
            if m:
                line = m.group(0)
                hook = re.search(r"webhooks on (http://[0-9.:]+)", line)
                mcp = re.search(r"MCP on (http://\S+)", line)
                if hook and mcp:
                    g.hook_url, g.mcp_url = hook.group(1) + HOOK_PATH, mcp.group(1)
                    break
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        if not g.mcp_url:
            state = "exited with %s" % proc.returncode if proc.poll() is not None else "still running"
            self.kill(g, "stopped")
            tail = " | ".join(text.strip().splitlines()[-5:])
            raise RuntimeError("server gen %d did not get ready within 30 s (%s); its output: %s" % (
                gen, state, tail or "(nothing)"))
        self.server = g
        self.up.set()
        self.log("gen %d ready: pid %d, %s, %s (%.2f s)" % (gen, g.pid, g.mcp_url, g.hook_url,
                                                              time.monotonic() - g.started_mono))
        return g

    def kill(self, g: Generation, how: str = "killed") -> None:
        """SIGKILL g and reap it."""
        if g is self.server:
            self.up.clear()
        if g.proc.poll() is None:
            try:
                os.kill(g.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            g.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.violation("server", "gen %d (pid %d) did not die within 20 s of SIGKILL" % (g.gen, g.pid))
        if g.end is None:
            g.end, g.how = now_ns(), how
            g.runs_at_end = self.runs_started

    def stop_server(self, g: Generation) -> None:
        """SIGTERM g (a graceful stop) and wait; a server that does not stop is killed."""
        self.up.clear()
        if g.proc.poll() is None:
            g.proc.send_signal(signal.SIGTERM)
            try:
                g.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.violation("server", "gen %d (pid %d) did not stop within 20 s of SIGTERM" % (g.gen, g.pid))
                self.kill(g, "stopped")
        if g.end is None:
            g.end, g.how = now_ns(), "stopped"
            g.runs_at_end = self.runs_started
        if g.proc.returncode not in (0, -signal.SIGKILL):
            self.violation("server", "gen %d exited with status %s on SIGTERM (see %s)" % (
                g.gen, g.proc.returncode, g.log_path))

    def check_alive(self) -> None:
        """A server that exited by itself is a violation; start the next one."""
        g = self.server
        if g is None or g.proc.poll() is None:
            return
        self.up.clear()
        g.end, g.how = now_ns(), "died"
        g.runs_at_end = self.runs_started
        self.violation("server", "gen %d (pid %d) exited by itself with status %s (see %s)" % (
            g.gen, g.pid, g.proc.returncode, g.log_path))
        self.restart()

    def restart(self) -> None:
        g = self.start_server()
        self.schedule(0.0, "resume_interrupted", "")
        self.log("gen %d started after %d kill(s)" % (g.gen, self.kills))

    def kill_and_restart(self) -> None:
        g = self.server
        if g is None:
            return
        self.kills += 1
        self.log("SIGKILL gen %d (pid %d)" % (g.gen, g.pid))
        self.kill(g)
        time.sleep(random.Random(self.seed * 1000 + self.kills).uniform(0.0, 0.5))
        self.restart()

    # -- the read-only view -----------------------------------------------------------------------

    def ro_runs(self, status: Any, name: Optional[str] = None, limit: Optional[int] = None) -> List[Any]:
        with self.ro_lock:
            if self.ro is None:
                self.ro = dcc_flow.Engine(self.db, read_only=True)
            runs: List[Any] = self.ro.runs(status=status, name=name, limit=limit)
            return runs

    # -- load -----------------------------------------------------------------------------------

    def client(self, name: str) -> McpClient:
        return McpClient("", timeout=15.0, name=name)

    def call(self, c: McpClient, tool: str, arguments: Dict[str, Any]) -> Tuple[Optional[Dict[str, Any]], bool]:
        """Call an MCP tool on the current server. (None, False) when there was no answer."""
        if not self.up.wait(timeout=1.0):
            return None, False
        g = self.server
        if g is None:
            return None, False
        if c.url != g.mcp_url:
            c.url, c.session = g.mcp_url, None
        try:
            res, err = c.call_tool(tool, arguments)
        except Unavailable as exc:
            self.count("mcp_unanswered")
            self.log("mcp %s: no answer: %s" % (tool, exc))
            time.sleep(0.1)
            return None, False
        except RpcError as exc:
            self.count("mcp_errors")
            self.log("mcp %s: %s" % (tool, exc))
            time.sleep(0.1)
            return None, False
        if err:
            self.count("mcp_tool_errors:%s" % res.get("code"))
            if res.get("code") == "rate_limited":
                time.sleep(0.2)
        return res, err

    def pace(self, rng: random.Random, rate: float, nxt: float) -> float:
        """Sleep until nxt, return the next due time (rate per second, ±50% jitter)."""
        delay = nxt - time.monotonic()
        if delay > 0:
            self.stop_load.wait(delay)
        return max(nxt, time.monotonic() - 1.0) + rng.uniform(0.5, 1.5) / rate

    def loop(self, name: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Stop:
            pass
        except Exception as exc:  # noqa: BLE001 - a driver bug must show, not hang the soak
            import traceback

            self.violation("driver", "thread %s crashed: %s: %s" % (name, type(exc).__name__, exc))
            self.log(traceback.format_exc(), loud=True)

    def spawn(self, name: str, fn: Callable[[], None]) -> None:
        th = threading.Thread(target=self.loop, args=(name, fn), name=name, daemon=True)
        self.threads.append(th)
        th.start()

    @staticmethod
    def duration_ms(rng: random.Random) -> int:
        u = rng.random()
        if u < 0.7:
            return rng.randint(0, 30)
        if u < 0.9:
            return rng.randint(30, 150)
        return rng.randint(150, 500)

    def pipeline_inputs(self, rng: random.Random, n: int) -> Dict[str, Any]:
        items = []
        for i in range(rng.randint(1, 5)):
            slow = rng.random() < 0.15  # over the 0.4 s timeout once; the retry is quick
            items.append({"i": i, "ms": rng.randint(420, 500) if slow else rng.randint(0, 250),
                          "retry_ms": rng.randint(0, 40), "flaky_n": 1 if rng.random() < 0.2 else 0,
                          "ms2": self.duration_ms(rng)})
        return {"tag": "p%d-%d" % (self.seed, n), "asset": "asset%d" % rng.randint(0, 40),
                "ms": [self.duration_ms(rng) for _ in range(5)], "flaky_n": rng.choice([0, 0, 1, 2]),
                "items": items, "ask": rng.random() < 0.25, "doom": rng.random() < 0.08}

    def pipeline_loop(self) -> None:
        rng = random.Random("pipeline:%d" % self.seed)
        c = self.client("soak-pipeline")
        n, nxt = 0, time.monotonic()
        while not self.stop_load.is_set():
            nxt = self.pace(rng, 1.0, nxt)
            if self.stop_load.is_set():
                break
            n += 1
            inputs = self.pipeline_inputs(rng, n)
            res, err = self.call(c, "workflows_run", {"workflow": "soak_pipeline", "inputs": inputs})
            if res is None or err:
                continue
            rid = str(res.get("workflow_id"))
            with self.lock:
                self.runs_started += 1
                self.pipeline_tags[rid] = inputs["tag"]
            self.count("pipeline_runs")
            if self.decide("cancel", inputs["tag"]) < 0.10:
                self.schedule(rng.uniform(0.05, 2.0), "cancel", rid)
        c.close()

    def ping_loop(self) -> None:
        rng = random.Random("ping:%d" % self.seed)
        clients = [self.client("soak-ping-a"), self.client("soak-ping-b")]  # 10 runs/s per session at most
        n, nxt = 0, time.monotonic()
        while not self.stop_load.is_set():
            nxt = self.pace(rng, 14.0, nxt)
            if self.stop_load.is_set():
                break
            n += 1
            res, err = self.call(clients[n % 2], "workflows_run",
                                 {"workflow": "soak_ping", "inputs": {"tag": "g%d-%d" % (self.seed, n)}})
            if res is not None and not err:
                with self.lock:
                    self.runs_started += 1
                self.count("ping_runs")
        for c in clients:
            c.close()

    def post_hook(self, d: checks.Delivery, body: bytes, headers: Dict[str, str]) -> None:
        g = self.server if self.up.wait(timeout=1.0) else None
        if g is None:
            return
        d.gen = g.gen
        req = urllib.request.Request(g.hook_url, data=body, method="POST",
                                     headers=dict(headers, **{"Content-Type": "application/json"}))
        try:
            with OPENER.open(req, timeout=10) as resp:
                d.status = resp.status
                text = resp.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            d.status = exc.code
            text = exc.read().decode("utf-8", "replace")
        except (urllib.error.URLError, OSError) as exc:
            self.count("hook_unanswered")
            self.log("webhook %s: no answer: %s" % (d.delivery_id, exc))
            return
        try:
            answer = json.loads(text) if text.strip() else {}
        except ValueError:
            answer = {}
        d.run_id = str(answer.get("run_id") or "")
        d.duplicate = bool(answer.get("duplicate"))

    def hook_loop(self) -> None:
        rng = random.Random("hook:%d" % self.seed)
        sent: List[Tuple[str, bytes, Dict[str, str]]] = []  # good deliveries: id, body, headers
        retry: List[Tuple[str, bytes, Dict[str, str]]] = []  # good deliveries that got no answer
        n, nxt = 0, time.monotonic()
        while not self.stop_load.is_set():
            nxt = self.pace(rng, 5.0, nxt)
            if self.stop_load.is_set():
                break
            n += 1
            u = rng.random()
            if retry and self.up.is_set():
                did, body, headers = retry.pop(0)
                kind = "resend"
            elif u < 0.15 and sent:
                did, body, headers = sent[rng.randrange(len(sent))]
                kind = "redelivery"
            elif u < 0.30:
                did = "bad-%d-%d" % (self.seed, n)
                body = json.dumps({"tag": "bad%d" % n, "ms": 1}).encode()
                variant = n % 4
                if variant == 0:
                    sig = "sha256=" + dcc_flow.hmac_sha256_hex("not-the-secret", body)
                elif variant == 1:
                    sig = dcc_flow.hmac_sha256_hex(SECRET, body)  # bare hex: refused
                elif variant == 2:
                    sig = ""
                else:
                    sig = "sha256=" + dcc_flow.hmac_sha256_hex(SECRET, body + b" ")  # another body
                headers = {"X-GitHub-Delivery": did}
                if sig:
                    headers["X-Hub-Signature-256"] = sig
                d = checks.Delivery(did, signed=False, sent=now_ns())
                self.post_hook(d, body, headers)
                self.deliveries.append(d)
                self.count("hook_bad")
                continue
            else:
                did = "d-%d-%d" % (self.seed, n)
                body = json.dumps({"tag": "h%d-%d" % (self.seed, n), "ms": rng.randint(0, 200)}).encode()
                header = "X-GitHub-Delivery" if n % 3 else "Idempotency-Key"
                headers = {header: did, "X-Hub-Signature-256": "sha256=" + dcc_flow.hmac_sha256_hex(SECRET, body)}
                sent.append((did, body, headers))
                kind = "new"
            d = checks.Delivery(did, signed=True, sent=now_ns())
            self.post_hook(d, body, headers)
            self.deliveries.append(d)
            self.count("hook_" + kind)
            if d.status is None:
                retry.append((did, body, headers))
            elif d.status == 202:
                with self.lock:
                    self.runs_started += 1

    def approver_loop(self) -> None:
        c = self.client("soak-approver")
        while not self.stop_all.is_set():
            self.stop_all.wait(0.3)
            if not self.up.is_set():
                continue
            try:
                waiting = self.ro_runs("waiting")
            except dcc_flow.DccFlowError as exc:
                self.log("listing waiting runs: %s" % exc)
                continue
            for r in waiting:
                st, err = self.call(c, "workflows_get_status", {"workflow_id": r.run_id})
                if st is None or err:
                    continue
                for a in st.get("approvals") or []:
                    step = a.get("step_key") or ""
                    key = self.pipeline_tags.get(r.run_id, r.run_id)
                    n = self.answers.get(r.run_id, 0)
                    grant = self.decide("approve", key, n) >= 0.15
                    res, err = self.call(c, "workflows_approve", {"workflow_id": r.run_id, "step": step,
                                                                   "approved": grant, "by": "soak",
                                                                   "reason": "soak round %d" % n})
                    if res is not None and not err:
                        self.answers[r.run_id] = n + 1
                        self.count("approved" if grant else "denied")
        c.close()

    def actions_loop(self) -> None:
        c = self.client("soak-actions")
        last_scan = 0.0
        while not self.stop_all.is_set():
            self.stop_all.wait(0.05)
            if not self.up.is_set():
                continue
            due: List[Tuple[str, str]] = []
            with self.lock:
                while self.actions and self.actions[0][0] <= time.monotonic():
                    _, _, kind, rid = heapq.heappop(self.actions)
                    due.append((kind, rid))
            if time.monotonic() - last_scan > 2.0:
                last_scan = time.monotonic()
                due.append(("resume_interrupted", ""))
                if not self.stop_load.is_set():
                    due.append(("scan_failed", ""))
            for kind, rid in due:
                if kind == "cancel":
                    res, err = self.call(c, "workflows_cancel", {"workflow_id": rid, "reason": "soak cancel"})
                    if res is not None and not err:
                        with self.lock:
                            self.cancels.append(checks.Cancel(rid, now_ns(), str(res.get("status"))))
                        self.count("cancels")
                elif kind == "resume":
                    self.resume(c, rid, "chosen")
                elif kind == "resume_interrupted":
                    try:
                        runs = self.ro_runs("interrupted")
                    except dcc_flow.DccFlowError as exc:
                        self.log("listing interrupted runs: %s" % exc)
                        continue
                    for r in runs:
                        if self.up.is_set():
                            self.resume(c, r.run_id, "interrupted")
                elif kind == "scan_failed":
                    try:
                        runs = self.ro_runs(["failed", "cancelled"], name="soak_pipeline", limit=50)
                    except dcc_flow.DccFlowError as exc:
                        self.log("listing failed runs: %s" % exc)
                        continue
                    for r in runs:
                        if r.run_id in self.considered:
                            continue
                        self.considered.add(r.run_id)
                        key = self.pipeline_tags.get(r.run_id, r.run_id)
                        if self.decide("resume", key) < 0.4:
                            self.schedule(0.2, "resume", r.run_id)
        c.close()

    def resume(self, c: McpClient, rid: str, why: str) -> None:
        with self.lock:
            self.resumes.setdefault(rid, []).append(now_ns())
        res, err = self.call(c, "workflows_resume", {"workflow_id": rid})
        if res is not None and not err:
            self.count("resumes_" + why)
            self.log("resumed %s (%s): %s" % (rid, why, res.get("status")))
        elif res is not None:
            self.log("resume %s (%s) refused: %s" % (rid, why, res.get("message")))

    def rss_loop(self) -> None:
        while not self.stop_rss.is_set():
            g = self.server
            if g is not None and g.end is None:
                try:
                    with open("/proc/%d/status" % g.pid) as f:
                        for line in f:
                            if line.startswith("VmRSS:"):
                                self.rss.append(checks.RssSample(self.t(), g.gen, int(line.split()[1]),
                                                                 self.runs_started))
                                break
                except OSError:
                    pass
            self.stop_rss.wait(0.5)

    # -- phases ---------------------------------------------------------------------------------

    def drive(self) -> None:
        """Start the server and the load, kill at random moments for the chaos phase, then one
        last kill and a kill-free final phase."""
        self.start_server()
        for name, fn in (("pipeline", self.pipeline_loop), ("ping", self.ping_loop), ("hook", self.hook_loop),
                         ("approver", self.approver_loop), ("actions", self.actions_loop), ("rss", self.rss_loop)):
            self.spawn(name, fn)
        rng = random.Random("kills:%d" % self.seed)
        gap = max(5.0, min(20.0, self.duration / 30.0))
        chaos_end = self.duration * CHAOS_FRACTION
        next_kill = rng.uniform(0.5, 1.5) * gap
        while self.t() < chaos_end:
            time.sleep(0.05)
            self.check_alive()
            if self.t() >= next_kill and self.t() < chaos_end - 1.0:
                self.kill_and_restart()
                next_kill = self.t() + rng.uniform(0.5, 1.5) * gap
        self.kill_and_restart()  # the final generation starts here, cold
        assert self.server is not None
        self.final_gen, self.final_start = self.server.gen, self.t()
        self.log("final phase: gen %d, no kills until %.0f s" % (self.final_gen, self.duration), loud=True)
        while self.t() < self.duration:
            time.sleep(0.05)
            self.check_alive()

    def settle(self) -> None:
        """Stop the load; answer approvals and resume interrupted runs until every run has ended
        (soak_tick runs younger than 3 s aside: the schedule keeps firing), nothing moved for 15 s,
        or SETTLE_MAX."""
        self.stop_load.set()
        for th in self.threads:
            if th.name in ("pipeline", "ping", "hook"):
                th.join(timeout=30)
        start = time.monotonic()
        last_state: Any = None
        last_move = time.monotonic()
        while time.monotonic() - start < SETTLE_MAX:
            self.check_alive()
            try:
                active = self.ro_runs(["running", "waiting", "pending", "interrupted"])
            except dcc_flow.DccFlowError as exc:
                self.log("listing active runs: %s" % exc)
                active = []
            busy = [r for r in active if r.name != "soak_tick" or age_secs(r.raw.get("created_at")) > 3.0]
            if not busy:
                break
            state = sorted((r.run_id, str(r.status), r.progress) for r in busy)
            if state != last_state:
                last_state, last_move = state, time.monotonic()
            elif time.monotonic() - last_move > 15.0:
                self.log("settling: nothing moved for 15 s; %d runs not ended" % len(busy), loud=True)
                break
            time.sleep(0.5)
        self.log("settled in %.1f s" % (time.monotonic() - start), loud=True)
        self.stop_all.set()
        for th in self.threads:
            if th.name in ("approver", "actions"):
                th.join(timeout=30)

    # -- the end --------------------------------------------------------------------------------

    def read_db(self) -> Dict[str, Any]:
        con = sqlite3.connect("file:%s?mode=ro" % self.db, uri=True, timeout=30)
        try:
            runs: Dict[str, Dict[str, Any]] = {}
            for rid, name, status, completed, total, trigger, updated in con.execute(
                    "SELECT id, name, status, completed, total, trigger, updated_at FROM workflows"):
                trig = json.loads(trigger) if trigger else {}
                runs[rid] = {"name": name, "status": status, "completed": completed, "total": total,
                             "trigger": trig, "updated_at": updated}
            steps: Dict[str, List[Dict[str, Any]]] = {}
            for rid, key, step_id, kind, status, attempt in con.execute(
                    "SELECT run_id, key, step_id, kind, status, attempt FROM workflow_steps ORDER BY ord"):
                steps.setdefault(rid, []).append({"key": key, "step_id": step_id, "kind": kind, "status": status,
                                                  "attempt": attempt})
            events = []
            for seq, rid, t, typ, key, status, attempt, completed, total, detail in con.execute(
                    "SELECT seq, run_id, time, type, step_key, status, attempt, completed, total, detail "
                    "FROM workflow_events ORDER BY seq"):
                try:
                    d = json.loads(detail) if detail else {}
                except ValueError:
                    d = {}
                events.append(checks.Event(seq, rid, t, typ, key, status, attempt, d if isinstance(d, dict) else {},
                                           completed, total))
            fires = con.execute("SELECT schedule_id, kind, run_id, delivery_id FROM schedule_fires").fetchall()
            return {"runs": runs, "steps": steps, "events": events, "fires": fires}
        finally:
            con.close()

    def integrity(self) -> str:
        con = sqlite3.connect("file:%s?mode=ro" % self.db, uri=True, timeout=30)
        try:
            rows = con.execute("PRAGMA integrity_check").fetchall()
        finally:
            con.close()
        return "; ".join(str(r[0]) for r in rows)

    def finish(self) -> int:
        """Idle, snapshot, stop the server, check, print. Returns the exit status."""
        self.log("idle for %.0f s" % IDLE_SECS)
        g = self.server
        assert g is not None
        cpu0, t0 = cpu_seconds(g.pid), time.monotonic()
        time.sleep(IDLE_SECS)
        cpu1, t1 = cpu_seconds(g.pid), time.monotonic()
        if cpu0 is not None and cpu1 is not None:
            # A figure, not a check (a loaded machine skews it): the interval schedule still fires.
            idle = "server cpu while idle: %.1f%% of a core over %.0f s" % (100.0 * (cpu1 - cpu0) / (t1 - t0), t1 - t0)
            self.log(idle)
            print(idle, flush=True)
        snap_at = now_ns()
        snap = self.read_db()
        self.stop_server(g)
        self.stop_rss.set()
        db = self.read_db()
        integrity = self.integrity()

        with open(self.call_log, errors="replace") as f:
            calls, problems = checks.parse_call_log(f)
        for p in problems:
            self.violation("call log", p)
        gens = [checks.Generation(x.gen, x.pid, x.start, x.end, x.how) for x in self.gens]
        tool_steps = set()
        for name in sorted(os.listdir(WORKFLOWS)):
            for st in dcc_flow.WorkflowSpec.from_file(os.path.join(WORKFLOWS, name)).walk():
                if (st.tool or "").startswith("soak__"):
                    tool_steps.add(st.id)

        # Hung and waiting runs, from the snapshot taken while the server was alive and idle (its
        # SIGTERM turns what is left into `interrupted`). The interval schedule keeps firing, so a
        # run counts only once nothing was written about it for IDLE_SECS.
        last_activity: Dict[str, int] = {}
        for e in snap["events"]:
            last_activity[e.run] = max(last_activity.get(e.run, 0), e.time)
        stale = {rid: r for rid, r in snap["runs"].items()
                 if r["status"] not in checks.TERMINAL
                 and snap_at - max(last_activity.get(rid, 0), r["updated_at"]) >= IDLE_SECS * checks.NS}
        for v in checks.check_idle_runs(stale, snap["steps"], calls, g.gen, IDLE_SECS):
            self.violation("hung" if v.startswith("hung") else "waiting", v)
        for v in checks.check_resumed(self.resumes, snap["runs"]):
            self.violation("resume", v)

        dup = checks.classify_calls(calls, db["events"], gens, tool_steps)
        for v in dup.duplicates:
            self.violation("duplicate", v)
        for v in dup.lost:
            self.violation("lost result", v)
        for v in dup.phantoms:
            self.violation("phantom commit", v)
        for v in checks.check_cancels(calls, self.cancels, self.resumes):
            self.violation("call after cancel", v)

        runs_by_delivery: Dict[str, List[str]] = {}
        for rid, r in db["runs"].items():
            did = (r["trigger"] or {}).get("delivery_id")
            if did and (r["trigger"] or {}).get("schedule_id") == "soak_hook":
                runs_by_delivery.setdefault(str(did), []).append(rid)
        for sched, kind, rid, did in db["fires"]:
            if sched == "soak_hook" and kind == "fired" and did and rid not in runs_by_delivery.get(did, []):
                runs_by_delivery.setdefault(did, []).append(rid)
        for v in checks.check_webhooks(self.deliveries, runs_by_delivery):
            self.violation("webhook", v)

        last_events: Dict[str, checks.Event] = {}
        for e in db["events"]:
            last_events[e.run] = e
        for v in checks.check_progress(db["runs"], db["steps"], last_events):
            self.violation("progress", v)
        if integrity != "ok":
            self.violation("integrity", "PRAGMA integrity_check: %s" % integrity)

        # Memory: the final generation, from the end of its warm-up to the end of the load.
        warm_at = self.final_start + max(8.0, WARMUP_FRACTION * (self.duration - self.final_start))
        rss = checks.rss_growth(self.rss, self.final_gen, warm_at, self.duration, self.runs_started)
        if rss.growth_kb >= RSS_LIMIT_KB:
            self.violation("rss", "gen %d grew %.1f MB after warm-up (%.0f s to %.0f s, %d runs), over 10 MB" % (
                rss.gen, rss.growth_kb / 1024.0, rss.start, rss.end, rss.runs))
        if rss.projected_kb is not None and rss.projected_kb >= RSS_LIMIT_KB:
            self.violation("rss", "gen %d grew %.0f bytes per run after warm-up (%.1f MB over %d runs, %.0f s to "
                           "%.0f s): %.1f MB over the %d runs of the soak, over 10 MB" % (
                               rss.gen, rss.per_run_bytes, rss.growth_kb / 1024.0, rss.runs, rss.start, rss.end,
                               rss.projected_kb / 1024.0, rss.total_runs))

        self.sanity(db, dup)
        self.save(calls, dup, rss)
        self.print_generations()
        if dup.kill_window:
            print("kill window (the tool returned, the server was killed before the commit; ran again after resume, "
                  "not a violation):")
            for k in dup.kill_window[:10]:
                print("  " + k)
        with self.lock:
            violations = list(self.violations)
        self.print_violations(violations)

        by_status: Dict[str, int] = {}
        for r in snap["runs"].values():
            by_status[r["status"]] = by_status.get(r["status"], 0) + 1
        hung = sum(1 for r in stale.values() if r["status"] in ("running", "pending"))
        nsteps = sum(len(v) for v in snap["steps"].values())
        projected = ("projected %+.1f MB over %d runs" % (rss.projected_kb / 1024.0, rss.total_runs)
                     if rss.projected_kb is not None else rss.note)
        summary = ("soak %.0fs seed %d: runs %d (%s), steps %d, tool calls %d, kills %d, hung %d, duplicates %d "
                   "(kill window %d), webhooks %d (redelivered %d, bad signatures %d), cancels %d, resumes %d, "
                   "rss %+.1f MB (gen %d after warm-up, %s), integrity %s: %s" % (
                       self.duration, self.seed, len(snap["runs"]),
                       ", ".join("%s %d" % kv for kv in sorted(by_status.items())), nsteps, dup.calls, self.kills,
                       hung, len(dup.duplicates), len(dup.kill_window), len(self.deliveries),
                       self.counts.get("hook_redelivery", 0) + self.counts.get("hook_resend", 0),
                       sum(1 for d in self.deliveries if not d.signed), len(self.cancels),
                       sum(len(v) for v in self.resumes.values()), rss.growth_kb / 1024.0, rss.gen, projected,
                       integrity, "FAILED (%d violation%s)" % (len(violations), "" if len(violations) == 1 else "s")
                       if violations else "ok"))
        self.log(summary)
        print(summary, flush=True)
        return 1 if violations else 0

    def print_violations(self, violations: List[Tuple[str, str]]) -> None:
        """Every violation goes to violations.txt; the first few of each kind to stdout."""
        if not violations:
            return
        path = os.path.join(self.workdir, "violations.txt")
        with open(path, "w") as f:
            for kind, msg in violations:
                f.write("%s: %s\n" % (kind, msg))
        kinds: Dict[str, List[str]] = {}
        for kind, msg in violations:
            kinds.setdefault(kind, []).append(msg)
        print("%d violation(s): %s (all in %s)" % (
            len(violations), ", ".join("%s %d" % (k, len(v)) for k, v in kinds.items()), path))
        for kind, msgs in kinds.items():
            for msg in msgs[:5]:
                print("  %s: %s" % (kind, msg))
            if len(msgs) > 5:
                print("  %s: ... %d more" % (kind, len(msgs) - 5))

    def save(self, calls: List[checks.Call], dup: checks.DuplicateReport, rss: checks.RssReport) -> None:
        """What the driver saw, for a second look at a failed soak (driver.json)."""
        record = {
            "duration": self.duration, "seed": self.seed, "final_gen": self.final_gen, "final_start": self.final_start,
            "generations": [{"gen": g.gen, "pid": g.pid, "start": g.start, "end": g.end, "how": g.how,
                             "runs_started": g.runs_at_end - g.runs_at_start} for g in self.gens],
            "cancels": [vars(c) for c in self.cancels], "resumes": self.resumes,
            "deliveries": [vars(d) for d in self.deliveries], "rss": [vars(x) for x in self.rss],
            "counts": self.counts, "kill_window": dup.kill_window,
            "classified": {"instances": dup.instances, "calls": dup.calls, "successes": dup.successes,
                           "committed": dup.committed, "dropped": dup.dropped,
                           "kill_window_unrepeated": dup.kill_window_unrepeated,
                           "started_cancelled": sum(1 for c in calls if c.c0)},
            "rss_report": vars(rss),
        }
        with open(os.path.join(self.workdir, "driver.json"), "w") as f:
            json.dump(record, f, indent=1)

    def sanity(self, db: Dict[str, Any], dup: checks.DuplicateReport) -> None:
        """The soak did what it claims, so that a pass is not vacuous."""
        done: Dict[str, int] = {}
        for r in db["runs"].values():
            if r["status"] == "completed":
                done[r["name"]] = done.get(r["name"], 0) + 1
        for name in ("soak_pipeline", "soak_ping", "soak_hook", "soak_tick"):
            if not done.get(name):
                self.violation("sanity", "no %s run completed" % name)
        if self.kills < 2:
            self.violation("sanity", "only %d kill(s)" % self.kills)
        refused = sum(1 for d in self.deliveries if not d.signed and d.status == 401)
        if not refused:
            self.violation("sanity", "no bad signature was refused with 401")
        if not dup.calls:
            self.violation("sanity", "the call log is empty")

    def print_generations(self) -> None:
        for g in self.gens:
            xs = [s.rss_kb for s in self.rss if s.gen == g.gen]
            life = ((g.end or now_ns()) - g.start) / 1e9
            rss = ("rss %.1f -> %.1f MB (max %.1f)" % (xs[0] / 1024.0, xs[-1] / 1024.0, max(xs) / 1024.0)
                   if xs else "rss -")
            print("gen %2d pid %-7d %6.1f s %-8s runs started %5d  %s" % (
                g.gen, g.pid, life, g.how, g.runs_at_end - g.runs_at_start, rss))

    def shutdown(self) -> None:
        """Kill every server still alive and close the read-only engine."""
        self.stop_load.set()
        self.stop_all.set()
        self.stop_rss.set()
        for g in self.gens:
            if g.proc.poll() is None:
                try:
                    os.kill(g.pid, signal.SIGKILL)
                    g.proc.wait(timeout=10)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    pass
        with self.ro_lock:
            if self.ro is not None:
                self.ro.close()
                self.ro = None


def age_secs(created_at: Any) -> float:
    """Seconds since an RFC 3339 UTC time (``2026-11-25T01:51:55.123Z``); large when unknown."""
    try:
        t = datetime.datetime.strptime(str(created_at)[:19], "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return 1e9
    return time.time() - t.replace(tzinfo=datetime.timezone.utc).timestamp()


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="Soak test of dcc-flow serve (issue #16).")
    parser.add_argument("--duration", type=float, default=600.0, metavar="SECONDS",
                        help="how long to drive the server (default 600)")
    parser.add_argument("--seed", type=int, default=1, help="seed of every random choice (default 1)")
    parser.add_argument("--workdir", metavar="DIR",
                        help="where the database, logs and call log go (default: a new temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder even when the soak passes")
    parser.add_argument("--verbose", "-v", action="store_true", help="print what the driver does as it goes")
    parser.add_argument("--leak-per-run", type=int, default=0, metavar="BYTES",
                        help="to check the memory check itself: the server's tools keep BYTES for good per run "
                             "(default 0)")
    args = parser.parse_args(argv)
    if args.duration < 20:
        parser.error("--duration must be at least 20 seconds")
    made = args.workdir is None
    args.workdir = os.path.abspath(args.workdir or tempfile.mkdtemp(prefix="dcc-flow-soak-"))
    os.makedirs(args.workdir, exist_ok=True)
    if os.path.exists(os.path.join(args.workdir, "flow.db")):
        parser.error("%s already holds a soak database; give an empty --workdir" % args.workdir)
    soak = Soak(args)

    def overrun() -> None:
        print("soak: hard deadline passed (%.0f s); killing the server" % (soak.duration + OVERRUN), flush=True)
        soak.shutdown()
        os._exit(3)

    watchdog = threading.Timer(soak.duration + OVERRUN, overrun)
    watchdog.daemon = True
    watchdog.start()
    print("soak: %.0f s, seed %d, work folder %s" % (soak.duration, soak.seed, args.workdir), flush=True)
    status = 2
    try:
        soak.drive()
        soak.settle()
        status = soak.finish()
    except RuntimeError as exc:
        print("soak: FAILED: %s" % exc, flush=True)
        status = 1
    except Exception as exc:  # noqa: BLE001 - a bug of the soak itself: say so, clean up, exit 2
        import traceback

        soak.log(traceback.format_exc())
        print("soak: FAILED: the soak itself broke: %s: %s (traceback in %s)" % (
            type(exc).__name__, exc, soak.driver_log.name), flush=True)
        status = 2
    except KeyboardInterrupt:
        print("soak: interrupted", flush=True)
        status = 130
    finally:
        watchdog.cancel()
        soak.shutdown()
        soak.driver_log.close()
    if status == 0 and made and not args.keep:
        shutil.rmtree(args.workdir, ignore_errors=True)
    elif status != 0 or args.keep:
        print("soak: logs, call log and database kept in %s" % args.workdir, flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
